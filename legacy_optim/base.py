"""The flax.optim object model, running every update through Optax.

``OptimizerDef`` is the recipe (hyper-parameters and update rule),
``Optimizer`` the pytree that holds the target and the optimizer state in the
legacy layout (``OptimizerState(step, param_states)``), exactly as flax <= 0.5.3
laid it out (same pytree key paths, leaf order and node types), so old code
and old checkpoints keep working. Optax's column-wise layout (one tree per
state field) exists only inside the transforms.

Every update goes through an ``optax.GradientTransformation``:
``OptimizerDef.to_optax()``. Built-in algorithms build a native transform
(``_native_transform``) and map their legacy per-parameter state to the
transform's state; a user subclass that only implements the legacy per-leaf
API (``init_param_state``/``apply_param_gradient``) gets a generic transform
that calls that API leaf by leaf. Which of the two runs is decided in one
place: ``OptimizerDef._user_hooks()``.

``MultiOptimizer`` and ``ReplicatedOptimizer`` (which ``create(focus=...)``
and ``Optimizer.replicate`` build) live in modules that import this one; they
register here when imported (``register_wrapper``), so this module never
imports them and the import graph has no cycle.
"""

import functools
from typing import Any, Mapping, Optional

from flax import jax_utils
from flax import serialization
from flax import struct
import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _legacy_layout
from flax_optim_rules import _rule_def
from legacy_optim import _eager
from legacy_optim import _hyper
from legacy_optim import _inputs
from legacy_optim import _restore
from legacy_optim import deprecation
from legacy_optim import traverse_util

# flax.optim.base exported it.
ModelParamTraversal = traverse_util.ModelParamTraversal


@struct.dataclass
class OptimizerState:
  """Legacy optimizer state: the step count and per-parameter states."""
  step: jax.Array
  param_states: Any


# The hooks flax.optim let subclasses override that decide how a step runs:
# what one leaf sees, what the whole tree sees, and the hyper-param merge.
PER_LEAF_HOOKS = frozenset({'init_param_state', 'apply_param_gradient'})
TREE_HOOKS = frozenset({'init_state', 'apply_gradient'})
STEP_HOOKS = PER_LEAF_HOOKS | TREE_HOOKS | {'update_hyper_params'}
# A user's code in one of these makes ``to_optax()`` wrap the def's methods.
_OWN_RULE_HOOKS = PER_LEAF_HOOKS | TREE_HOOKS

_WRAPPERS: dict[str, type] = {}


def register_wrapper(cls: type) -> type:
  """Makes ``cls`` (MultiOptimizer, ReplicatedOptimizer) known to this module.

  Their modules import this one and call this when imported;
  ``legacy_optim/__init__`` imports them, so they are registered before any
  ``Optimizer`` exists.
  """
  _WRAPPERS[cls.__name__] = cls
  return cls


def require_per_parameter_state(opt_def, wrapper: str) -> None:
  """Raises TypeError if ``wrapper`` cannot split ``opt_def``'s state."""
  if opt_def._whole_tree_state:
    raise TypeError(
        f'{wrapper} needs one state per parameter, but {opt_def._name} keeps '
        'one Optax state for all params: build the split into the transform '
        '(optax.partition, optax.masked) instead.')


def _library_class(cls) -> type:
  """The nearest class of ``cls``'s MRO defined in this package."""
  package = __name__.partition('.')[0]
  return next(c for c in cls.__mro__
              if c.__module__.partition('.')[0] == package)


@functools.lru_cache(maxsize=None)
def _class_user_hooks(cls) -> frozenset[str]:
  """The step hooks of ``cls`` whose code a user wrote (see ``_user_hooks``)."""
  library = _library_class(cls)
  hooks = {name for name in STEP_HOOKS
           if getattr(cls, name) is not getattr(library, name)}
  if cls._native_transform is OptimizerDef._native_transform:
    # No built-in rule: the per-leaf rule is the user's to write.
    hooks |= PER_LEAF_HOOKS
  return frozenset(hooks)


def _wrapped_defs(opt_def):
  """``(attribute, def)`` for each OptimizerDef that ``opt_def`` holds."""
  for attribute, value in vars(opt_def).items():
    if isinstance(value, OptimizerDef):
      yield attribute, value
    elif isinstance(value, (list, tuple)):
      for i, item in enumerate(value):
        if isinstance(item, OptimizerDef):
          yield f'{attribute}[{i}]', item


class OptimizerDef:
  """Base class of an optimizer definition: hyper-params and update rule.

  Hooks a subclass may override, as in flax.optim (flax <= 0.5.3), with the
  arguments it passed:

  * ``init_param_state(param)``: one parameter's initial state.
  * ``apply_param_gradient(step, hyper_params, param, state, grad)``: one
    parameter's update; returns ``(new_param, new_state)``.
  * ``init_state(params)``: the ``OptimizerState`` of the whole tree
    (default: ``init_param_state`` on every leaf).
  * ``apply_gradient(hyper_params, params, state, grads)``: the whole
    tree's update; returns ``(new_params, new_state)`` (default:
    ``apply_param_gradient`` on every leaf).
  * ``update_hyper_params(**overrides)``: the hyper-params one step uses.
  * ``state_dict(target, state)`` / ``restore_state(target, state,
    state_dict)``: serialization (checkpoints).
  * ``create(target, focus=None)``: the ``Optimizer``.

  A subclass that implements the two per-leaf hooks is a complete optimizer
  and gets a working ``to_optax()``. Built-in algorithms instead build an
  Optax transform (``_native_transform``; with the state mapping
  ``_pack_optax_state``/``_unpack_optax_state``/``_make_param_state``), and
  their per-leaf hooks are derived from it, so a subclass of a built-in may
  override a per-leaf hook and call ``super()``.

  Which code runs is decided in one place, ``_user_hooks()``: the built-in
  transform runs as long as no per-leaf or tree hook is a user's; otherwise
  the tree methods run leaf by leaf as in flax.optim (per-leaf hooks) or the
  user's own way (tree hooks), and ``to_optax()`` wraps them.

  Built-in algorithms implement ``_native_transform(hyper_params)`` and name
  their per-parameter state dataclass (``_param_state_cls``); their per-leaf
  API is then derived from the transform. The transform's state holds the
  step as ``count`` and each legacy field as an attribute of the same name
  (or of the name flax_optim_rules' layout table gives), in a NamedTuple or
  a chain of them; ``_pack_optax_state``/``_unpack_optax_state`` map between
  the two.
  """

  # The legacy per-parameter state dataclass; None: the empty tuple ``()``.
  # A built-in's derives from flax_optim_rules' class of the same fields,
  # whose ``_legacy_layout.LAYOUTS`` entry says where the Optax state holds
  # each field.
  _param_state_cls: Optional[type] = None
  # flax.optim's rule used only + - * / on the leaves, so Python numbers and
  # NumPy arrays stayed Python/NumPy (float64) there; see ``_inputs``.
  _host_arithmetic: bool = False
  # flax.optim's rule cast new params back to their dtype (integers too);
  # other rules promoted integer params to float.
  _keeps_integer_params: bool = False
  # True: the state is one tree for all params (an Optax transform's), not
  # one state per parameter; wrappers that split it per parameter refuse it.
  _whole_tree_state: bool = False
  # An empty node of the state (an Optax ``EmptyState``) may come back from
  # Orbax as None; a legacy state dict has none there, so elsewhere a None is
  # a mismatch, as flax 0.5.3's restore found it.
  empty_nodes_as_none: bool = False

  def __init__(self, hyper_params):
    self.hyper_params = hyper_params
    deprecation.warn_legacy_use('OptimizerDef', self)

  # ---------------------------------------------------------------- naming
  @property
  def _name(self) -> str:
    return type(self).__name__

  # --------------------------------------------------- which code runs
  def _inner_defs(self) -> list['OptimizerDef']:
    """The OptimizerDefs this one wraps (MultiOptimizer, WeightNorm...)."""
    return [inner for _, inner in _wrapped_defs(self)]

  def _user_hooks(self) -> frozenset[str]:
    """The step hooks whose user-written code runs when this def steps.

    Plain names (``'apply_param_gradient'``) are this def's own hooks: its
    class overrides the library class it derives from, or, without a
    built-in rule, the per-leaf hooks (the user's to write). A wrapped def's
    hooks appear under its attribute (``'sub_optimizers[0].init_state'``).
    Computed per class, plus the wrapped defs; it decides every path:

    * a per-leaf hook here: the tree methods run it leaf by leaf;
    * a per-leaf or tree hook here: ``to_optax()`` wraps the def's own tree
      methods (``LegacyRuleState``) instead of the built-in transform;
    * anything at all: eager steps run inline, never from a compiled cache
      (user code may have side effects at every step; see ``_eager``).
    """
    hooks = set(_class_user_hooks(type(self)))  # type: ignore[arg-type]
    for attribute, inner in _wrapped_defs(self):
      hooks.update(f'{attribute}.{name}' for name in inner._user_hooks())
    return frozenset(hooks)

  # ------------------------------------------------- native transform hooks
  def _native_transform(self, hyper_params) -> optax.GradientTransformation:
    """The Optax transform of the built-in rule (what built-ins override)."""
    raise NotImplementedError(
        f'{self._name} must implement init_param_state(param) and '
        'apply_param_gradient(step, hyper_params, param, state, grad).')

  @property
  def _param_state_fields(self) -> tuple[str, ...]:
    """The legacy per-parameter state fields, in layout order."""
    cls = self._param_state_cls
    return () if cls is None else _hyper.field_names(cls)

  @property
  def _optax_field_names(self) -> Mapping[str, str]:
    """Legacy field -> the Optax state attribute holding it, where they
    differ (flax_optim_rules' layout table)."""
    if self._param_state_cls is None:
      return {}
    return _legacy_layout.layout_of(self._param_state_cls).optax_names

  def _pack_optax_state(self, tx, step, fields: dict[str, Any]) -> Any:
    """(step, one params-shaped tree per state field) -> ``tx``'s state."""
    values = {self._optax_field_names.get(name, name): tree
              for name, tree in fields.items()}
    values['count'] = jnp.asarray(step, jnp.int32)
    # The transform's state for no params: its structure, with empty trees.
    return _legacy_layout.fill_optax_state(tx.init({}), values)

  def _unpack_optax_state(self, opt_state) -> tuple[Any, dict[str, Any]]:
    """Optax state -> (step, one params-shaped tree per state field)."""
    values = _legacy_layout.optax_state_values(opt_state)
    return values['count'], {
        name: values[self._optax_field_names.get(name, name)]
        for name in self._param_state_fields}

  def _make_param_state(self, **fields):
    """Builds the legacy per-parameter state object from its fields."""
    if self._param_state_cls is None:
      return ()
    return self._param_state_cls(**fields)

  # ------------------------------------------------------- per-leaf API
  def init_param_state(self, param):
    """Returns the initial legacy state for one parameter."""
    tx = self._native_transform(self.hyper_params)
    _, fields = self._unpack_optax_state(tx.init(param))
    return self._make_param_state(**fields)

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    """Applies one parameter's gradient; returns (new_param, new_state)."""
    tx = self._native_transform(hyper_params)
    fields = {name: getattr(state, name) for name in self._param_state_fields}
    opt_state = self._pack_optax_state(tx, step, fields)
    updates, new_opt_state = tx.update(grad, opt_state, param)
    _, new_fields = self._unpack_optax_state(new_opt_state)
    new_param = _inputs.add_updates(param, updates,
                                    self._keeps_integer_params)
    return new_param, self._make_param_state(**new_fields)

  # ------------------------------------------------------------ Optax API
  def _transform(self, hyper_params) -> optax.GradientTransformation:
    """``to_optax()`` for given hyper-params (wrappers call it on the defs
    they wrap); not to be overridden: override ``_native_transform``."""
    if self._user_hooks() & _OWN_RULE_HOOKS:
      return _legacy_rule_transform(self, hyper_params)
    return self._native_transform(hyper_params)

  def to_optax(self, **hyper_param_overrides) -> optax.GradientTransformation:
    """This optimizer as an ``optax.GradientTransformation``.

    Args:
      **hyper_param_overrides: replace hyper-params, as in ``apply_gradient``.
        A value may also be a schedule (a callable of the step count), e.g.
        ``to_optax(learning_rate=optax.cosine_decay_schedule(0.1, 1000))``.

    Returns:
      A transform whose ``update`` is this def's update rule. Its state can be
      converted to and from the legacy layout with ``to_optax_state`` and
      ``from_optax_state``.
    """
    return self._transform(self.update_hyper_params(**hyper_param_overrides))

  def to_optax_state(self, state: OptimizerState, params) -> Any:
    """Legacy ``OptimizerState`` -> the state of ``to_optax()``'s transform."""
    if self._user_hooks() & _OWN_RULE_HOOKS:
      return LegacyRuleState(
          count=jnp.asarray(state.step, jnp.int32),
          param_states=state.param_states)
    return self._to_native_state(state, params)

  def from_optax_state(self, opt_state, params) -> OptimizerState:
    """The state of ``to_optax()``'s transform -> legacy ``OptimizerState``."""
    if self._user_hooks() & _OWN_RULE_HOOKS:
      return OptimizerState(opt_state.count, opt_state.param_states)
    return self._from_native_state(opt_state, params)

  # The state of ``_transform``'s transform, which wrappers
  # (ReplicatedOptimizer) compose: ``to_optax()``'s, except for a def whose
  # ``to_optax()`` is a transform given to it (OptaxOptimizerDef).
  def _transform_state(self, state: OptimizerState, params) -> Any:
    return self.to_optax_state(state, params)

  def _state_from_transform(self, opt_state, params) -> OptimizerState:
    return self.from_optax_state(opt_state, params)

  def _to_native_state(self, state: OptimizerState, params) -> Any:
    """Legacy ``OptimizerState`` -> the state of ``_native_transform``."""
    fields = _legacy_layout.split_param_states(
        state.param_states, params, self._param_state_fields)
    return self._pack_optax_state(
        self._native_transform(self.hyper_params), state.step, fields)

  def _from_native_state(self, opt_state, params) -> OptimizerState:
    """The state of ``_native_transform`` -> legacy ``OptimizerState``."""
    step, fields = self._unpack_optax_state(opt_state)
    param_states = _legacy_layout.merge_param_states(
        fields, params, self._make_param_state)
    return OptimizerState(step, param_states)

  # ---------------------------------------------------------- tree API
  # flax.optim's tree methods run this class's own rule. They never go
  # through ``_transform``: a user's override of them calling ``super()``
  # (as flax.optim allowed) would otherwise be called back by the generic
  # transform.
  def init_state(self, params) -> OptimizerState:
    if self._user_hooks() & PER_LEAF_HOOKS:
      return _legacy_init_state(self, params)
    tx = self._native_transform(self.hyper_params)
    return self._from_native_state(tx.init(params), params)

  def apply_gradient(self, hyper_params, params, state, grads):
    """Applies ``grads``; returns ``(new_params, new_state)``.

    Built-in rules run their Optax transform: ``update`` then
    ``optax.apply_updates``, converting the legacy state on the way in and
    out. A user's per-leaf rule runs leaf by leaf, as in flax.optim. Eager
    calls also take what flax.optim took besides arrays (Python numbers,
    NumPy arrays, an ``int`` step) and give back what it gave (``_inputs``).
    """
    _inputs.check_same_structure(params, grads, 'target', 'grads')
    if self._user_hooks() & PER_LEAF_HOOKS:
      return _legacy_apply_per_leaf(self, hyper_params, params, state, grads)
    if _eager.under_a_trace((params, state, grads)):
      return self._apply_native(hyper_params, params, state, grads)
    return _inputs.apply_eagerly(self._apply_native, self._host_arithmetic,
                                 hyper_params, params, state, grads)

  def _apply_native(self, hyper_params, params, state, grads):
    """One step of ``_native_transform``, in the legacy state layout."""
    tx = self._native_transform(hyper_params)
    opt_state = self._to_native_state(state, params)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = _inputs.add_updates(params, updates,
                                     self._keeps_integer_params)
    return new_params, self._from_native_state(new_opt_state, params)

  def update_hyper_params(self, **hyper_param_overrides):
    """Hyper-params with overrides applied (``hyper_params=`` replaces all)."""
    hp = hyper_param_overrides.pop('hyper_params', self.hyper_params)
    return _hyper.apply_overrides(hp, hyper_param_overrides, self._name)

  def create(self, target, focus: Optional[Any] = None) -> 'Optimizer':
    """Creates an ``Optimizer`` for ``target`` (optionally only ``focus``)."""
    deprecation.warn_legacy_use('create', self, focus=focus)
    opt_def = self
    if focus:
      opt_def = _WRAPPERS['MultiOptimizer']((focus, opt_def))
    return Optimizer(opt_def, opt_def.init_state(target), target)

  def state_dict(self, target, state):
    return serialization.to_state_dict({
        'target': serialization.to_state_dict(target),
        'state': serialization.to_state_dict(state),
    })

  def restore_state(self, opt_target, opt_state, state_dict):
    """Restores (target, state) from ``state_dict`` using the given template.

    Raises ``_restore.RestoreMismatchError`` naming every path whose
    structure, shape or dtype differs from the template.
    """
    _restore.check_state_dict(opt_target, opt_state, state_dict,
                              template=self._name,
                              empty_as_none=self.empty_nodes_as_none)
    opt_target = serialization.from_state_dict(opt_target, state_dict['target'])
    found_state = state_dict['state']
    if self.empty_nodes_as_none:
      found_state = _restore.with_empty_nodes(
          serialization.to_state_dict(opt_state), found_state)
    opt_state = serialization.from_state_dict(opt_state, found_state)
    return opt_target, opt_state


# ----------------------------------------------------------------------------
# The generic transform around a legacy per-leaf rule: flax_optim_rules'
# (what migrated code keeps a user's rule on), with this module's state class.

LegacyRuleState = _rule_def.LegacyRuleState


def _legacy_init_state(opt_def: OptimizerDef, params) -> OptimizerState:
  return _rule_def.init_per_leaf(opt_def.init_param_state, params,
                                 OptimizerState)


def _legacy_apply_per_leaf(opt_def, hyper_params, params, state, grads):
  """flax.optim's tree-level rule: the per-leaf rule on every leaf."""
  return _rule_def.apply_per_leaf(opt_def.apply_param_gradient, hyper_params,
                                  params, state, grads, OptimizerState)


def _legacy_rule_transform(
    opt_def: OptimizerDef, hyper_params) -> optax.GradientTransformation:
  """An Optax transform running ``opt_def``'s own (legacy) methods."""
  return _rule_def.rule_transform(opt_def._name, hyper_params,
                                  opt_def.init_state, opt_def.apply_gradient,
                                  OptimizerState)


# ----------------------------------------------------------------------------
# Optimizer: the pytree users hold.


class Optimizer(struct.PyTreeNode):
  """An optimizer definition together with its target and state.

  ``optimizer_def`` is static pytree metadata; ``state`` (an
  ``OptimizerState``) and ``target`` are the leaves.
  """

  optimizer_def: OptimizerDef = struct.field(pytree_node=False)
  state: Any = struct.field(pytree_node=True)
  target: Any = struct.field(pytree_node=True)

  def apply_gradient(self, grads, **hyper_param_overrides) -> 'Optimizer':
    """Applies ``grads`` to the target; overrides replace hyper-params."""
    if hyper_param_overrides:
      deprecation.warn_legacy_use(
          'apply_gradient_overrides', self.optimizer_def,
          overrides=hyper_param_overrides)
    hyper_params = self.optimizer_def.update_hyper_params(
        **hyper_param_overrides)
    # Eager calls (nothing traced) run one cached compiled step instead of
    # dispatching op by op; None means "run inline" (see _eager.py).
    stepped = _eager.apply_gradient(self.optimizer_def, self.target,
                                    self.state, grads, hyper_param_overrides)
    if stepped is None:
      stepped = self.optimizer_def.apply_gradient(
          hyper_params, self.target, self.state, grads)
    new_target, new_state = stepped
    return self.replace(target=new_target, state=new_state)

  def compute_gradient(self, loss_fn):
    """Deprecated: ``(loss, [aux,] grad)`` of ``loss_fn`` at the target."""
    deprecation.warn_legacy_use('compute_gradient', self.optimizer_def)
    # As in flax.optim: a tuple result is (loss, aux), anything else the loss.
    returned_aux = []

    def loss_and_aux(target):
      out = loss_fn(target)
      returned_aux.append(isinstance(out, tuple))
      return out if returned_aux[-1] else (out, None)

    (loss, aux), grad = jax.value_and_grad(loss_and_aux, has_aux=True)(
        self.target)
    return (loss, aux, grad) if returned_aux[-1] else (loss, grad)

  compute_gradients = compute_gradient

  def optimize(self, loss_fn, **hyper_param_overrides):
    """Deprecated: one gradient step on ``loss_fn``."""
    deprecation.warn_legacy_use('optimize', self.optimizer_def)
    *outputs, grad = self.compute_gradient(loss_fn)
    optimizer = self.apply_gradient(grad, **hyper_param_overrides)
    return (optimizer, *outputs)

  def replicate(self, devices=None, axis_name='batch') -> 'Optimizer':
    """Deprecated: replicates for pmap; gradients get averaged over devices."""
    deprecation.warn_legacy_use('replicate', self.optimizer_def)
    if devices is None:
      devices = jax.local_devices()
    opt_def = _WRAPPERS['ReplicatedOptimizer'](
        self.optimizer_def, devices, axis_name)
    return jax_utils.replicate(self, devices=devices).replace(
        optimizer_def=opt_def)

  def unreplicate(self) -> 'Optimizer':
    """Deprecated: the first replica's copy, with the inner definition."""
    if not isinstance(self.optimizer_def, _WRAPPERS['ReplicatedOptimizer']):
      raise ValueError(
          'Cannot unreplicate an optimizer that is not replicated (its '
          f'optimizer_def is {type(self.optimizer_def).__name__}, not '
          'ReplicatedOptimizer).')
    replicated: Any = self.optimizer_def
    return jax_utils.unreplicate(self).replace(
        optimizer_def=replicated.optimizer_def)

  def state_dict(self):
    return self.optimizer_def.state_dict(self.target, self.state)

  def restore_state(self, state):
    target, state = self.optimizer_def.restore_state(
        self.target, self.state, state)
    return self.replace(target=target, state=state)


serialization.register_serialization_state(
    Optimizer, Optimizer.state_dict, Optimizer.restore_state, override=True)


def _register_layout_classes():
  """flax_optim_rules' per-parameter classes (what migrated code builds by
  hand) serialize as this package's flax dataclasses do: a dict of their
  fields, so one that reaches an ``Optimizer`` checkpoints alike."""
  def to_dict(state):
    return {name: serialization.to_state_dict(value)
            for name, value in vars(state).items()}

  def from_dict(state, state_dict):
    return state.replace(**{
        name: serialization.from_state_dict(value, state_dict[name])
        for name, value in vars(state).items()})

  for layout in _legacy_layout.LAYOUTS:
    if layout.param_state is not None:
      serialization.register_serialization_state(
          layout.param_state, to_dict, from_dict, override=True)


_register_layout_classes()


def __getattr__(name):
  # flax.optim.base exported these too; they register when imported.
  if name in _WRAPPERS:
    return _WRAPPERS[name]
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
