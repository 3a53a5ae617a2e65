"""flax.optim's state layout, read from and written to this package's states.

Code written for flax.optim reads and writes the optimizer state as
``OptimizerState(step, param_states)``: one per-parameter state object per
leaf of the params (``AdamParamState(grad_ema, grad_sq_ema)``...), and its
checkpoints hold ``{'target': params, 'state': {'step': ..., 'param_states':
...}}`` keyed by those field names. The transforms of this package keep the
same values the Optax way, one params-shaped tree per field
(``LegacyAdamState(count, grad_ema, grad_sq_ema)``). This module converts
between the two, so migrated code keeps resetting moments of some params,
reading old checkpoints and writing checkpoints old code reads, without
``flax.optim``:

  state = flax_optim_rules.optimizer_state(train_state)   # the legacy view
  train_state = flax_optim_rules.replace_optimizer_state(train_state, state)
  flax_optim_rules.state_dict(train_state)          # flax.optim's layout
  flax_optim_rules.restore_state(train_state, state_dict)

``train_state`` is anything with ``step``, ``params``, ``opt_state`` and
``replace(**fields)`` (``flax.training.train_state.TrainState``). The Optax
state may be wrapped by ``inject_learning_rate`` (``optax.inject_hyperparams``),
and a ``multi_optimizer`` of such transforms has flax.optim's MultiOptimizer
layout (None for the params no traversal selects).

``LAYOUTS`` is the one table saying which Optax states hold which
per-parameter class and under which attribute each legacy field lives;
``legacy_optim``'s classes derive from it.

Needs nothing but jax and optax.
"""

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _adabelief
from flax_optim_rules import _adadelta
from flax_optim_rules import _adafactor
from flax_optim_rules import _adagrad
from flax_optim_rules import _adam
from flax_optim_rules import _lars
from flax_optim_rules import _multi
from flax_optim_rules import _rmsprop
from flax_optim_rules import _rule_def

# flax.optim's ``OptimizerState(step, param_states)``; the same class a kept
# user rule's methods receive.
OptimizerState = _rule_def.RuleState


def _param_state(cls):
  """A frozen dataclass registered as a pytree, with flax.optim's
  ``replace``: a per-parameter state as flax.optim laid it out."""
  cls = dataclasses.dataclass(frozen=True)(cls)
  cls.replace = lambda self, **changes: dataclasses.replace(self, **changes)
  return jax.tree_util.register_dataclass(
      cls, data_fields=[f.name for f in dataclasses.fields(cls)],
      meta_fields=[])


@_param_state
class AdamParamState:
  """Adam's (and LAMB's) per-parameter state."""
  grad_ema: Any  # moving average of the gradient.
  grad_sq_ema: Any  # moving average of the squared gradient.


# LAMB keeps Adam's moments in Adam's Optax state: one class, two names.
LAMBParamState = AdamParamState


@_param_state
class AdaBeliefParamState:
  grad_ema: Any  # moving average of the gradient.
  grad_sq_ema: Any  # moving average of the squared deviation from it.


@_param_state
class AdadeltaParamState:
  sq_avg: Any  # moving average of the squared gradient.
  acc_delta: Any  # moving average of the squared update.


@_param_state
class AdagradParamState:
  G: Any  # sum of the squared gradients.  # noqa: N815 (flax.optim's name)


@_param_state
class AdafactorParamState:
  v_row: Any  # factored leaves: row means of g**2; else zeros of shape (1,).
  v_col: Any  # factored leaves: column means of g**2; else zeros (1,).
  v: Any  # other leaves: means of g**2; else zeros of shape (1,).
  m: Any  # with beta1: momentum; else zeros of shape (1,).


@_param_state
class LARSParamState:
  momentum: Any


@_param_state
class MomentumParamState:
  momentum: Any


@_param_state
class RMSPropParamState:
  v: Any  # moving average of the squared gradient.
  mg: Any  # centered: moving average of the gradient; else None.


class Layout(NamedTuple):
  """Where one algorithm's per-parameter state lives in its Optax state."""
  # The Optax state classes of its transform, besides those holding only
  # the step (``STEP_ONLY``); stock Optax's spelling where it is exact.
  state_types: frozenset
  # The per-parameter class; None: the empty tuple ``()`` (GradientDescent).
  param_state: Optional[type]
  # Legacy field -> the Optax state attribute holding it, where they differ.
  optax_names: Mapping[str, str]


LAYOUTS = (
    Layout(frozenset(), None, {}),
    Layout(frozenset({optax.TraceState}), MomentumParamState,
           {'momentum': 'trace'}),
    Layout(frozenset({optax.TraceState, _lars.ScaleByLegacyLarsState}),
           LARSParamState, {'momentum': 'trace'}),
    Layout(frozenset({_adam.LegacyAdamState}), AdamParamState, {}),
    Layout(frozenset({_adabelief.LegacyAdaBeliefState}), AdaBeliefParamState,
           {}),
    Layout(frozenset({_adadelta.LegacyAdadeltaState}), AdadeltaParamState,
           {}),
    Layout(frozenset({_adagrad.LegacyAdagradState}), AdagradParamState, {}),
    Layout(frozenset({_adafactor.LegacyAdafactorState}), AdafactorParamState,
           {}),
    Layout(frozenset({_rmsprop.LegacyRMSPropState}), RMSPropParamState, {}),
)
# Optax states that hold no per-parameter value (at most the step).
STEP_ONLY = frozenset({optax.EmptyState, optax.ScaleByScheduleState})
# Wrappers whose ``inner_state`` is the wrapped transform's state.
_INJECTED = (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)


def layout_of(param_state_cls: Optional[type]) -> Layout:
  """The layout of a per-parameter class or a subclass of it
  (``legacy_optim``'s flax dataclasses derive from this module's)."""
  for layout in LAYOUTS:
    if layout.param_state is param_state_cls or (
        layout.param_state is not None and param_state_cls is not None and
        issubclass(param_state_cls, layout.param_state)):
      return layout
  raise KeyError(f'{param_state_cls!r} is no per-parameter state class of '
                 'flax_optim_rules')


def field_names(layout: Layout) -> tuple[str, ...]:
  """The legacy per-parameter fields, in flax.optim's order."""
  if layout.param_state is None:
    return ()
  return tuple(f.name for f in dataclasses.fields(layout.param_state))


# ----------------------------------------------------------------------------
# Per-leaf objects <-> one tree per field (a transpose over the params'
# structure: references move, no array is copied).

def is_named_tuple(node) -> bool:
  """True for a NamedTuple instance (an Optax state), not a plain tuple."""
  return isinstance(node, tuple) and hasattr(node, '_fields')


def optax_state_values(opt_state) -> dict[str, Any]:
  """Attribute -> value of every NamedTuple in an Optax state or a chain's
  tuple of them (``count``, ``trace``, ``grad_ema``...)."""
  if is_named_tuple(opt_state):
    return opt_state._asdict()
  values = {}
  if isinstance(opt_state, tuple):
    for inner in opt_state:
      values.update(optax_state_values(inner))
  return values


def fill_optax_state(template, values: Mapping[str, Any]):
  """``template`` with every NamedTuple attribute named in ``values``
  replaced by its value (the inverse of ``optax_state_values``)."""
  if is_named_tuple(template):
    return template._replace(**{name: values[name] for name in template._fields
                                if name in values})
  if isinstance(template, tuple):
    return tuple(fill_optax_state(inner, values) for inner in template)
  return template


def split_param_states(
    param_states: Any, params: Any, fields: Sequence[str]) -> dict[str, Any]:
  """Per-leaf state objects -> one params-shaped tree per field."""
  treedef = jax.tree_util.tree_structure(params)
  flat_states = treedef.flatten_up_to(param_states)
  return {
      name: treedef.unflatten([getattr(s, name) for s in flat_states])
      for name in fields
  }


def merge_param_states(
    field_trees: Mapping[str, Any], params: Any,
    make_state: Callable[..., Any]) -> Any:
  """One params-shaped tree per field -> per-leaf state objects."""
  treedef = jax.tree_util.tree_structure(params)
  columns = {name: treedef.flatten_up_to(tree)
             for name, tree in field_trees.items()}
  flat_states = [
      make_state(**{name: column[i] for name, column in columns.items()})
      for i in range(treedef.num_leaves)
  ]
  return treedef.unflatten(flat_states)


# ----------------------------------------------------------------------------
# The legacy view of an Optax state.

def _uninjected(opt_state):
  """The state inside ``inject_learning_rate``/``inject_hyperparams``."""
  while isinstance(opt_state, _INJECTED):
    opt_state = opt_state.inner_state
  return opt_state


def _state_types(opt_state) -> frozenset:
  """The NamedTuple classes of a chain's states, step-only ones left out."""
  if is_named_tuple(opt_state):
    return frozenset() if type(opt_state) in STEP_ONLY else frozenset(
        {type(opt_state)})
  if isinstance(opt_state, tuple):
    return frozenset().union(*(_state_types(s) for s in opt_state))
  raise TypeError(
      f'{type(opt_state).__name__} is not an Optax state of a chain of '
      'NamedTuples: flax.optim\'s layout covers the states of '
      'flax_optim_rules\' transforms (and stock optax.sgd)')


def _layout_of_state(opt_state) -> Optional[Layout]:
  """The layout of ``opt_state``; None for a kept user rule's state."""
  if isinstance(opt_state, _rule_def.LegacyRuleState):
    return None
  found = _state_types(opt_state)
  for layout in LAYOUTS:
    if layout.state_types == found:
      return layout
  names = ', '.join(sorted(t.__name__ for t in found))
  raise TypeError(
      f'no flax.optim layout for an Optax state holding {names}: the legacy '
      'view covers one flax_optim_rules transform (or stock optax.sgd), '
      'optionally inside inject_learning_rate, or a multi_optimizer of '
      'them; weight_norm and stock Optax rules other than sgd are not '
      'supported')


def to_legacy_state(step, params, opt_state) -> OptimizerState:
  """flax.optim's ``OptimizerState(step, param_states)`` of ``opt_state``.

  ``params``: the params ``opt_state`` belongs to (the param states take
  their tree structure); ``step``: flax.optim's step (a TrainState's
  ``step``; stock ``optax.sgd`` holds no count of its own).
  """
  inner = _uninjected(opt_state)
  if isinstance(inner, optax.PartitionState):
    return _multi_to_legacy_state(step, params, inner)
  layout = _layout_of_state(inner)
  if layout is None:
    return OptimizerState(step, inner.param_states)
  if layout.param_state is None:
    return OptimizerState(step, jax.tree_util.tree_map(lambda _: (), params))
  values = optax_state_values(inner)
  fields = {name: values[layout.optax_names.get(name, name)]
            for name in field_names(layout)}
  return OptimizerState(
      step, merge_param_states(fields, params, layout.param_state))


def _with_counts(opt_state, step):
  """``opt_state`` with every ``count`` (wrappers' too) set to ``step``."""
  if is_named_tuple(opt_state):
    replaced = {}
    if 'count' in opt_state._fields:
      count = opt_state.count
      replaced['count'] = jnp.asarray(step, getattr(count, 'dtype', None))
    if isinstance(opt_state, _INJECTED):
      replaced['inner_state'] = _with_counts(opt_state.inner_state, step)
    return opt_state._replace(**replaced)
  if isinstance(opt_state, tuple):
    return tuple(_with_counts(s, step) for s in opt_state)
  return opt_state


def _replace_inner(opt_state, inner):
  if isinstance(opt_state, _INJECTED):
    return opt_state._replace(
        inner_state=_replace_inner(opt_state.inner_state, inner))
  return inner


def from_legacy_state(state: OptimizerState, params, opt_state):
  """``opt_state`` holding the values of ``state`` (the inverse of
  ``to_legacy_state``): its per-parameter fields, and its step in every
  ``count`` (flax.optim had one step; Optax keeps one per state)."""
  inner = _uninjected(opt_state)
  if isinstance(inner, optax.PartitionState):
    return _replace_inner(opt_state,
                          _multi_from_legacy_state(state, params, inner))
  layout = _layout_of_state(inner)
  if layout is None:
    new_inner = inner._replace(param_states=state.param_states)
  else:
    fields = split_param_states(state.param_states, params,
                                field_names(layout))
    new_inner = fill_optax_state(inner, {
        layout.optax_names.get(name, name): tree
        for name, tree in fields.items()})
  return _with_counts(_replace_inner(opt_state, new_inner), state.step)


# ----------------------------------------------------------------------------
# multi_optimizer: flax.optim's MultiOptimizer kept each leaf's state in the
# one ``param_states`` tree (None for a leaf no traversal selects); the
# ``optax.partition`` state keeps one masked state per sub-optimizer, with
# ``optax.MaskedNode()`` where another one (or none) steps the params (one
# MaskedNode may hide a whole subtree: a list flax.optim's traversals saw as
# one leaf).

def _is_masked(node) -> bool:
  return isinstance(node, optax.MaskedNode)


def _sub_states(state) -> list[tuple[str, Any]]:
  """(label, state) of each sub-optimizer of a ``multi_optimizer`` state,
  in the order of its traversals."""
  labels = set(state.inner_states) - {_multi.FROZEN_LABEL}
  if not all(label.isdigit() for label in labels):
    raise TypeError(
        'no flax.optim layout for an optax.partition state labelled '
        f'{sorted(labels)}: only multi_optimizer\'s (one label per '
        'traversal) is flax.optim\'s MultiOptimizer')
  return [(label, state.inner_states[label].inner_state)
          for label in sorted(labels, key=int)]


class _Mask(NamedTuple):
  """Which params one sub-optimizer steps, as its state's trees say."""
  treedef: Any  # params' structure down to the MaskedNodes.
  hidden: list  # per leaf of ``treedef``: a MaskedNode there.

  def apply(self, tree):
    """``tree`` (params-shaped) with the hidden parts MaskedNodes."""
    return self.treedef.unflatten([
        optax.MaskedNode() if hidden else value
        for hidden, value in zip(self.hidden, self.treedef.flatten_up_to(tree))
    ])

  def expand(self, masked, params, fill):
    """``masked`` (shaped as ``apply`` makes it) with ``fill`` at every
    param leaf a MaskedNode hides: params' structure down to its leaves."""
    return self.treedef.unflatten([
        jax.tree_util.tree_map(lambda _: fill, part) if hidden else value
        for hidden, value, part in zip(
            self.hidden, self.treedef.flatten_up_to(masked),
            self.treedef.flatten_up_to(params))])


def _is_leaf_of(tree) -> bool:
  return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(tree))


def _mask_of(sub_state, params) -> Optional[_Mask]:
  """The mask of a sub-optimizer's per-parameter trees; None where it keeps
  no per-parameter value (plain SGD)."""
  for value in optax_state_values(_uninjected(sub_state)).values():
    treedef = jax.tree_util.tree_structure(value, is_leaf=_is_masked)
    try:
      parts = treedef.flatten_up_to(params)
    except (ValueError, TypeError):
      continue
    hidden = [_is_masked(v) for v in treedef.flatten_up_to(value)]
    # A count is no per-parameter tree: the whole params sit at its leaf.
    if all(is_hidden or _is_leaf_of(part)
           for is_hidden, part in zip(hidden, parts)):
      return _Mask(treedef, hidden)
  return None


# Where a sub-optimizer does not step a param.
_NOT_STEPPED = object()


def _masks(state, params) -> list[tuple[str, Any, Optional[_Mask]]]:
  """(label, state, mask) of each sub-optimizer.

  Raises:
    TypeError: a sub-optimizer without per-parameter state leaves open which
      params it steps and which none does.
  """
  subs = [(label, sub_state, _mask_of(sub_state, params))
          for label, sub_state in _sub_states(state)]
  stateless = [label for label, _, mask in subs if mask is None]
  stepped = [mask.expand(mask.apply(params), params, _NOT_STEPPED)
             for _, _, mask in subs if mask is not None]
  unclaimed = any(all(leaf is _NOT_STEPPED for leaf in leaves)
                  for leaves in zip(*map(jax.tree_util.tree_leaves, stepped)))
  if stateless and (unclaimed or not stepped):
    raise TypeError(
        f'no flax.optim layout for this multi_optimizer state: sub-optimizer '
        f'{", ".join(stateless)} keeps no per-parameter state, so the state '
        'does not say which params it steps and which none does')
  return subs


def _multi_to_legacy_state(step, params, state) -> OptimizerState:
  treedef = jax.tree_util.tree_structure(params)
  flat_states = [None] * treedef.num_leaves
  for _, sub_state, mask in _masks(state, params):
    if mask is None:
      continue  # it steps no param (_masks says so).
    sub = to_legacy_state(step, mask.apply(params), sub_state)
    per_leaf = treedef.flatten_up_to(
        mask.expand(sub.param_states, params, _NOT_STEPPED))
    for i, value in enumerate(per_leaf):
      if value is not _NOT_STEPPED:
        flat_states[i] = value
  return OptimizerState(step, treedef.unflatten(flat_states))


def _multi_from_legacy_state(state: OptimizerState, params, partition):
  inner_states = dict(partition.inner_states)
  for label, sub_state, mask in _masks(partition, params):
    if mask is None:
      new_sub = _with_counts(sub_state, state.step)
    else:
      new_sub = from_legacy_state(
          OptimizerState(state.step, mask.apply(state.param_states)),
          mask.apply(params), sub_state)
    inner_states[label] = inner_states[label]._replace(inner_state=new_sub)
  return partition._replace(inner_states=inner_states)


# ----------------------------------------------------------------------------
# A TrainState (or any object with step, params, opt_state and replace).

def optimizer_state(train_state) -> OptimizerState:
  """What flax.optim's ``optimizer.state`` was: ``OptimizerState(step,
  param_states)`` of ``train_state``'s step, params and Optax state."""
  return to_legacy_state(train_state.step, train_state.params,
                         train_state.opt_state)


def replace_optimizer_state(train_state, state: OptimizerState):
  """What flax.optim's ``optimizer.replace(state=state)`` was:
  ``train_state`` with ``state``'s step (as ``step`` and in the Optax
  state's counts) and per-parameter states."""
  return train_state.replace(
      step=state.step,
      opt_state=from_legacy_state(state, train_state.params,
                                  train_state.opt_state))


def state_dict(train_state) -> dict:
  """flax.optim's ``optimizer.state_dict()``: ``{'target': params, 'state':
  {'step': step, 'param_states': ...}}``, nested dicts with string keys as
  ``flax.serialization.to_state_dict`` writes them, so checkpoints keep the
  layout code written for flax.optim reads."""
  state = optimizer_state(train_state)
  # flax.optim's step was an int32 array (a TrainState's starts as an int).
  return optimizer_state_dict(
      train_state.params, state.replace(step=jnp.asarray(state.step,
                                                          jnp.int32)))


def optimizer_state_dict(target, state: OptimizerState) -> dict:
  """flax.optim's ``Optimizer`` state dict of ``target`` and ``state``, keys
  in the order flax 0.5.3 wrote them (the same msgpack bytes)."""
  return {'target': to_state_dict(target),
          'state': {'step': state.step,
                    'param_states': to_state_dict(state.param_states)}}


# A TrainState's own state dict (what ``flax.serialization`` writes of it)
# and flax.optim's Optimizer's: the keys at their top.
TRAIN_STATE_KEYS = ('step', 'params', 'opt_state')
OPTIMIZER_KEYS = ('target', 'state')


def is_train_state(node) -> bool:
  """An optax TrainState: ``flax.training.train_state.TrainState``, a
  subclass, or anything with its ``step``, ``params`` and ``opt_state``."""
  return all(hasattr(node, name) for name in TRAIN_STATE_KEYS)


def restore_state(train_state, state_dict: Mapping):
  """What flax.optim's ``optimizer.restore_state(state_dict)`` was:
  ``train_state`` holding the params, step and per-parameter states of a
  state dict in flax.optim's layout (``state_dict(...)``, or a checkpoint
  flax.optim wrote).

  A TrainState's own layout (``{'step', 'params', 'opt_state'}``, what a
  checkpoint of the migrated program holds) is restored as it is, so code
  reading checkpoints keeps reading both the old program's and the new
  one's. ``train_state`` is the template: its structure is kept, and a
  missing or unexpected key raises ``ValueError`` naming it.
  """
  if isinstance(state_dict, Mapping) and set(state_dict) == set(
      TRAIN_STATE_KEYS):
    return train_state.replace(
        step=state_dict['step'],
        params=from_state_dict(train_state.params, state_dict['params'],
                                'params'),
        opt_state=from_state_dict(train_state.opt_state,
                                   state_dict['opt_state'], 'opt_state'))
  template = optimizer_state(train_state)
  _require_keys(state_dict, OPTIMIZER_KEYS, '')
  _require_keys(state_dict['state'], ('step', 'param_states'), 'state/')
  params = from_state_dict(train_state.params, state_dict['target'],
                            'target')
  param_states = from_state_dict(
      template.param_states, state_dict['state']['param_states'],
      'state/param_states')
  restored = OptimizerState(state_dict['state']['step'], param_states)
  return replace_optimizer_state(train_state.replace(params=params),
                                 restored)


def _require_keys(mapping, keys: Sequence[str], path: str):
  if not isinstance(mapping, Mapping):
    raise ValueError(f'{path or "the state dict"}: expected a dict with keys '
                     f'{list(keys)}, got {type(mapping).__name__}')
  missing = [k for k in keys if k not in mapping]
  extra = [k for k in mapping if k not in keys]
  if missing or extra:
    raise ValueError(
        f'{path or "the state dict"}: expected the keys {list(keys)} of '
        f"flax.optim's layout; missing {missing}, unexpected {extra}")


def _children(node):
  """``(key, child)`` of a container as flax's state dicts key it, or None
  for a leaf."""
  if isinstance(node, Mapping):
    return [(str(k), v) for k, v in node.items()]
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    return [(f.name, getattr(node, f.name)) for f in dataclasses.fields(node)]
  if is_named_tuple(node):
    return list(zip(node._fields, node))
  if isinstance(node, (list, tuple)):
    return [(str(i), v) for i, v in enumerate(node)]
  return None


def to_state_dict(tree):
  """``tree`` as nested dicts with string keys (flax's state dict)."""
  children = _children(tree)
  if children is None:
    return tree
  return {key: to_state_dict(child) for key, child in children}


def from_state_dict(template, values, path: str = ''):
  """``template``'s structure holding the leaves of ``values``."""
  children = _children(template)
  if children is None:
    return values
  keys = [key for key, _ in children]
  _require_keys(values, keys, path + '/')
  restored = [from_state_dict(child, values[key], f'{path}/{key}')
              for key, child in children]
  if isinstance(template, Mapping):
    return type(template)(zip(template.keys(), restored))
  if dataclasses.is_dataclass(template):
    return dataclasses.replace(template, **dict(zip(keys, restored)))
  if is_named_tuple(template):
    return type(template)(*restored)
  return type(template)(restored)
