"""Any Optax transform as a flax.optim ``OptimizerDef`` (the reverse adapter).

Code whose own API is the legacy ``Optimizer`` (a framework that hands
``Optimizer`` objects to its users, reads ``optimizer.optimizer_def`` back
and configures definitions elsewhere) cannot be rewritten mechanically.
``OptaxOptimizerDef(tx)`` lets such code run any Optax algorithm without
changing its API::

  opt_def = legacy_optim.OptaxOptimizerDef(optax.adamw(1e-3))
  optimizer = opt_def.create(params)
  optimizer = optimizer.apply_gradient(grads)   # tx.update + apply_updates

State layout (also what ``flax.serialization`` and checkpoints hold):
``OptimizerState(step, param_states)`` with ``step`` the number of
``apply_gradient`` calls (int32) and ``param_states`` the transform's own
state, unchanged: ``tx.init(params)`` after creation and the state
``tx.update`` returned after each step. Its state dict is
``{'step': ..., 'param_states': to_state_dict(<the Optax state>)}``, in which a
NamedTuple state is a dict of its fields (``{'count', 'mu', 'nu'}`` for
``optax.adam``'s ``ScaleByAdamState``), a tuple (``optax.chain``'s state) a
dict keyed ``'0'``, ``'1'``, ... and a state without fields
(``optax.EmptyState``) an empty dict.

Hyper-parameter overrides (``apply_gradient(grads, learning_rate=lr)``) need
a transform built with ``optax.inject_hyperparams`` (alone or inside a chain,
once): its state holds the hyper-parameters, and an override sets one there
for that step only (the state keeps the value it had, as flax.optim's
overrides applied to one step).
A hyper-parameter the transform computes from a schedule cannot be
overridden; any other name is refused naming the ones that can.
"""

from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from legacy_optim import base
from legacy_optim import deprecation


def _is_injected(node) -> bool:
  """An ``optax.inject_hyperparams`` state (a NamedTuple with hyperparams)."""
  return (isinstance(node, tuple) and
          isinstance(getattr(node, 'hyperparams', None), dict))


def _injected_states(opt_state) -> list[Any]:
  """The ``optax.inject_hyperparams`` states anywhere in ``opt_state``."""
  return [node for node in jax.tree_util.tree_leaves(
      opt_state, is_leaf=_is_injected) if _is_injected(node)]


def _overridable_names(tx) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
  """(number of injected states, names an override may set, names a
  schedule sets) in ``tx``'s state, read from the state ``tx`` builds for no
  params (a transform that cannot build one has nothing to override). Only
  a single injected state can be overridden: names in two are ambiguous.
  """
  try:
    with jax.ensure_compile_time_eval():
      state = tx.init({})
  except Exception:  # pylint: disable=broad-except  # Any transform's error.
    return 0, (), ()
  injected = _injected_states(state)
  if len(injected) != 1:
    return len(injected), (), ()
  scheduled = tuple(sorted(getattr(injected[0], 'hyperparams_states', {})))
  settable = tuple(sorted(set(injected[0].hyperparams) - set(scheduled)))
  return 1, settable, scheduled


def _with_hyperparams(opt_state, values: Mapping[str, Any]):
  """``opt_state`` with ``values`` in its injected hyper-parameters."""
  def replaced(node):
    if not _is_injected(node):
      return node
    return node._replace(hyperparams={**node.hyperparams, **values})
  return jax.tree_util.tree_map(replaced, opt_state, is_leaf=_is_injected)


def _counted(tx, overrides: Mapping[str, Any]) -> optax.GradientTransformation:
  """``tx`` with the step counted next to its state: its state is the legacy
  ``OptimizerState(step, <tx's state>)``, the layout of ``Optimizer.state``.

  ``overrides`` are set in the injected hyper-parameters for each update and
  reset to their previous values in the state it returns.
  """

  def init_fn(params):
    return base.OptimizerState(jnp.asarray(0, jnp.int32), tx.init(params))

  def update_fn(grads, state, params=None):
    inner = state.param_states
    if overrides:
      inner = _with_hyperparams(inner, overrides)
    updates, new_inner = tx.update(grads, inner, params)
    if overrides:
      held = _injected_states(state.param_states)[0].hyperparams
      new_inner = _with_hyperparams(
          new_inner, {name: held[name] for name in overrides})
    return updates, base.OptimizerState(state.step + 1, new_inner)

  return optax.GradientTransformation(init_fn, update_fn)


def _counts(opt_state) -> list[Any]:
  """Every ``count`` leaf of an Optax state (NamedTuple fields, dict keys)."""
  found = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]:
    last = path[-1] if path else None
    name = getattr(last, 'name', getattr(last, 'key', None))
    if name == 'count':
      found.append(leaf)
  return found


class OptaxOptimizerDef(base.OptimizerDef):
  """An ``optax.GradientTransformation`` as a legacy ``OptimizerDef``.

  ``create(params)`` gives an ``Optimizer`` whose ``state`` is
  ``OptimizerState(step, <tx's state>)`` (see the module docstring);
  ``apply_gradient(grads)`` runs ``tx.update`` then ``optax.apply_updates``.
  ``to_optax()`` returns ``tx`` itself and ``to_optax_state`` its state.

  ``hyper_params`` maps each hyper-parameter an override may set (those of
  an ``optax.inject_hyperparams`` transform that no schedule computes) to
  None, "as the state holds it".
  """

  # The state is the transform's, not one object per parameter: a step
  # compiles as one program (see _eager), and MultiOptimizer and WeightNorm,
  # which split the state per parameter, refuse it.
  _whole_tree_state = True
  empty_nodes_as_none = True
  # optax.apply_updates casts every new param to its param's dtype.
  _keeps_integer_params = True

  def __init__(self, tx: optax.GradientTransformation):
    """Args:
      tx: any Optax transform (``optax.adamw(1e-3)``, an ``optax.chain``...).
    """
    if not isinstance(tx, optax.GradientTransformation):
      raise TypeError(
          'OptaxOptimizerDef(tx): tx must be an optax.GradientTransformation '
          f'(e.g. optax.adam(1e-3)), got {type(tx).__name__}.')
    self.tx = tx
    self._injected, settable, self._scheduled = _overridable_names(tx)
    # Not base.OptimizerDef.__init__: its deprecation warning would tell the
    # user to replace this definition by to_optax(), which it already is.
    self.hyper_params = {name: None for name in settable}

  # ------------------------------------------------------ hyper-params
  def update_hyper_params(self, **hyper_param_overrides):
    """Hyper-params of one step: ``{name: value}``, None where the state's
    value applies; refuses a name the transform's state cannot take."""
    hyper_params = dict(hyper_param_overrides.pop('hyper_params',
                                                  self.hyper_params))
    hyper_params.update(hyper_param_overrides)
    unknown = sorted(set(hyper_params) - set(self.hyper_params))
    if unknown:
      raise ValueError(self._refusal(unknown[0]))
    return hyper_params

  def _refusal(self, name: str) -> str:
    head = f'{self._name}: cannot override the hyper-parameter {name!r}'
    if name in self._scheduled:
      return (f'{head}: the transform computes it from a schedule at every '
              'step (an override would be ignored).')
    if self.hyper_params:
      return f'{head}; expected one of {", ".join(self.hyper_params)}.'
    if self._injected > 1:
      return (f'{head}: the transform keeps {self._injected} '
              'optax.inject_hyperparams states, and an override cannot say '
              'which one it sets (set it in optimizer.state.param_states).')
    return (f'{head}: the transform keeps no hyper-parameters in its state. '
            'Build it with optax.inject_hyperparams, e.g. '
            f'optax.inject_hyperparams(optax.adam)({name}=1e-3), to set '
            f'{name} at each apply_gradient.')

  # ------------------------------------------------- the transform run
  def _native_transform(self, hyper_params):
    overrides = {name: value for name, value in hyper_params.items()
                 if value is not None}
    return _counted(self.tx, overrides)

  def _to_native_state(self, state, params):
    del params
    return state

  def _from_native_state(self, opt_state, params):
    del params
    return opt_state

  # What a wrapper (ReplicatedOptimizer) runs: the step counted alongside.
  _transform_state = _to_native_state
  _state_from_transform = _from_native_state

  # ---------------------------------------------------------- Optax API
  def to_optax(self, **hyper_param_overrides) -> optax.GradientTransformation:
    """The transform given to the constructor (overrides: none; set
    injected hyper-parameters in its state instead)."""
    if hyper_param_overrides:
      raise TypeError(
          f'{self._name}.to_optax() returns the transform it was built from '
          f'and takes no overrides (got {", ".join(hyper_param_overrides)}); '
          'set an injected hyper-parameter in its state instead: '
          'opt_state.hyperparams[name] = value.')
    return self.tx

  def to_optax_state(self, state: base.OptimizerState, params) -> Any:
    """The transform's state (``state.param_states``)."""
    del params
    return state.param_states

  def from_optax_state(self, opt_state, params,
                       step: Optional[Any] = None) -> base.OptimizerState:
    """``OptimizerState(step, opt_state)``.

    Args:
      opt_state: a state of ``to_optax()``'s transform.
      params: unused (the state does not depend on them).
      step: the legacy step; by default the transform's own count (every
        ``count`` in ``opt_state`` must agree), which equals the number of
        ``apply_gradient`` calls for transforms that count each update.

    Raises:
      ValueError: ``step`` is not given and the state has no count, or
        counts that differ.
    """
    del params
    if step is None:
      step = self._step_from_counts(opt_state)
    return base.OptimizerState(jnp.asarray(step, jnp.int32), opt_state)

  def _step_from_counts(self, opt_state):
    counts = _counts(opt_state)
    concrete = [np.asarray(c) for c in counts
                if not isinstance(c, jax.core.Tracer)]
    if not counts or any(not np.array_equal(c, concrete[0])
                         for c in concrete):
      found = ', '.join(str(c.tolist()) for c in concrete) or 'none'
      raise ValueError(
          f'{self._name}.from_optax_state: the Optax state holds no single '
          f'step count (counts found: {found}); pass step= (the number of '
          'apply_gradient calls).')
    return counts[0]

  # ------------------------------------------------------------ create
  def create(self, target, focus: Optional[Any] = None) -> base.Optimizer:
    """An ``Optimizer`` for ``target``; ``focus`` is refused (see below)."""
    if focus is not None:
      raise ValueError(
          f'{self._name}.create(target, focus=...): an Optax transform '
          'selects its params itself; build it with optax.masked(tx, mask) '
          'or optax.partition(...) and create(target) without focus.')
    deprecation.warn_legacy_use('create', self)
    return base.Optimizer(self, self.init_state(target), target)
