"""Shardings for optimizer state: replicated, ZeRO-1, or following the params.

A legacy ``Optimizer`` (and the Optax state ``compat.to_optax`` returns) is an
ordinary pytree, so ``jax.jit`` places it with ``NamedSharding``s like any
other input. ``state_shardings`` builds that tree of shardings, e.g. for
ZeRO-1 (params replicated, optimizer state split over the data axis)::

  mesh = jax.make_mesh((8,), ('data',))
  shardings = compat.state_shardings(optimizer, mesh, 'zero1')
  optimizer = jax.device_put(optimizer, shardings)
  step = jax.jit(lambda opt, g: opt.apply_gradient(g),
                 in_shardings=(shardings, None), out_shardings=shardings,
                 donate_argnums=0)

XLA inserts the collectives the placement needs (for ZeRO-1: each device
updates its slice of the state, then the params are all-gathered), so the
update rule itself does not change.
"""

from typing import Any, Callable, Optional, Sequence, Union

import jax
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
from jax.sharding import Sharding
import numpy as np
import optax

from legacy_optim import base

Rule = Union[str, Callable[[tuple, Any], Any], Any]

PRESETS = ('replicated', 'zero1')


def _is_spec(x) -> bool:
  return x is None or isinstance(x, (PartitionSpec, Sharding))


def _axis_names(mesh: Mesh, axis) -> tuple[str, ...]:
  names = tuple(mesh.axis_names) if axis is None else (
      (axis,) if isinstance(axis, str) else tuple(axis))
  unknown = [a for a in names if a not in mesh.shape]
  if unknown:
    raise ValueError(
        f'axis {unknown[0]!r} is not an axis of the mesh; the mesh axes are '
        f'{tuple(mesh.axis_names)}.')
  return names


def zero1_spec(shape: Sequence[int], axes: tuple[str, ...],
               axis_size: int) -> PartitionSpec:
  """Splits the largest dimension divisible by ``axis_size`` over ``axes``.

  Leaves without such a dimension (scalars, odd sizes) stay replicated.
  """
  candidates = [d for d, n in enumerate(shape) if n and n % axis_size == 0]
  if axis_size == 1 or not candidates:
    return PartitionSpec()
  dim = max(candidates, key=lambda d: (shape[d], -d))
  entries: list[Any] = [None] * len(shape)
  entries[dim] = axes[0] if len(axes) == 1 else axes
  return _canonical(entries)


def _entries(spec: PartitionSpec, ndim: int) -> list:
  return list(spec) + [None] * (ndim - len(spec))


def _canonical(entries) -> PartitionSpec:
  """A spec without trailing Nones (``P('x', None)`` is ``P('x')``)."""
  entries = list(entries)
  while entries and entries[-1] is None:
    entries.pop()
  return PartitionSpec(*entries)


def mirrored_spec(param_shape: Sequence[int], param_spec: PartitionSpec,
                  shape: Sequence[int]) -> PartitionSpec:
  """The spec of a state leaf from its param's spec.

  Same shape: the param's spec. One axis fewer (factored second moments such
  as Adafactor's row/column averages): the param's spec without that axis,
  when only one axis can have been dropped. Anything else: replicated.
  """
  param_shape, shape = tuple(param_shape), tuple(shape)
  if shape == param_shape:
    return param_spec
  if len(shape) == len(param_shape) - 1:
    entries = _entries(param_spec, len(param_shape))
    dropped = [d for d in range(len(param_shape))
               if param_shape[:d] + param_shape[d + 1:] == shape]
    kept = {tuple(entries[:d] + entries[d + 1:]) for d in dropped}
    if len(kept) == 1:
      return _canonical(kept.pop())
  return PartitionSpec()


def _as_sharding(value, mesh: Mesh, where: str) -> Sharding:
  if value is None:
    return NamedSharding(mesh, PartitionSpec())
  if isinstance(value, Sharding):
    return value
  if isinstance(value, PartitionSpec):
    return NamedSharding(mesh, value)
  raise TypeError(
      f'{where}: expected a PartitionSpec, a Sharding or None, got '
      f'{type(value).__name__} ({value!r}).')


def _shape(leaf) -> tuple[int, ...]:
  return tuple(np.shape(leaf))


def _key(name: str):
  return (jax.tree_util.GetAttrKey(name),)


class _Planner:
  """Decides one sharding per leaf for a given rule."""

  def __init__(self, mesh: Mesh, rule: Rule, axis):
    self.mesh = mesh
    self.rule = rule
    self.param_specs = None
    if isinstance(rule, str):
      if rule not in PRESETS:
        raise ValueError(
            f'Unknown sharding rule {rule!r}; expected one of {PRESETS}, a '
            'callable (path, leaf) -> PartitionSpec, or a params-shaped tree '
            'of PartitionSpecs/Shardings.')
      if rule == 'zero1':
        self.axes = _axis_names(mesh, axis)
        self.axis_size = int(np.prod([mesh.shape[a] for a in self.axes]))
    elif not callable(rule):
      self.param_specs = rule

  def _replicated(self) -> NamedSharding:
    return NamedSharding(self.mesh, PartitionSpec())

  def _custom(self, path, leaf) -> Sharding:
    where = jax.tree_util.keystr(path) or '<root>'
    rule: Any = self.rule  # a callable here (see __init__)
    return _as_sharding(rule(path, leaf), self.mesh, where)

  def param(self, path, leaf, spec) -> Sharding:
    if callable(self.rule):
      return self._custom(path, leaf)
    if self.param_specs is not None:
      return _as_sharding(spec, self.mesh, jax.tree_util.keystr(path))
    return self._replicated()  # 'replicated' and 'zero1'.

  def state(self, path, leaf, param_leaf=None, param_spec=None) -> Sharding:
    if callable(self.rule):
      return self._custom(path, leaf)
    if self.rule == 'zero1':
      return NamedSharding(
          self.mesh, zero1_spec(_shape(leaf), self.axes, self.axis_size))
    if self.param_specs is None or param_leaf is None:
      return self._replicated()
    spec = _as_sharding(param_spec, self.mesh, jax.tree_util.keystr(path))
    if not isinstance(spec, NamedSharding):
      # Only a NamedSharding's spec can be carried over to other shapes.
      same = _shape(leaf) == _shape(param_leaf)
      return spec if same else self._replicated()
    return NamedSharding(spec.mesh, mirrored_spec(
        _shape(param_leaf), spec.spec, _shape(leaf)))


class _Params:
  """The params with their key paths and (rule-given) specs."""

  treedef: Any  # jax's PyTreeDef (untyped for mypy)

  def __init__(self, planner: _Planner, params):
    flat, self.treedef = jax.tree_util.tree_flatten_with_path(params)
    self.paths = [path for path, _ in flat]
    self.leaves = [leaf for _, leaf in flat]
    self.specs = [None] * len(flat)
    if planner.param_specs is not None:
      try:
        self.specs = self.treedef.flatten_up_to(planner.param_specs)
      except (ValueError, TypeError) as e:
        raise TypeError(
            'The sharding rule must be a tree of PartitionSpecs/Shardings '
            f'shaped like the params.\n  params: {self.treedef}\n  rule: '
            + str(jax.tree_util.tree_structure(planner.param_specs,
                                               is_leaf=_is_spec))) from e

  def shardings(self, planner: _Planner, prefix):
    return self.treedef.unflatten([
        planner.param(prefix + path, leaf, spec)
        for path, leaf, spec in zip(self.paths, self.leaves, self.specs)])

  def laid_out_like_params(self, node) -> bool:
    """A subtree holding one entry per param, as in Optax states."""
    structure: Any = jax.tree_util.tree_structure(
        node, is_leaf=lambda x: isinstance(x, optax.MaskedNode))
    return structure == self.treedef

  def paired(self, planner: _Planner, prefix, per_param):
    """Shardings for a subtree with one (sub)tree per param."""
    items = self.treedef.flatten_up_to(per_param)
    return self.treedef.unflatten([
        jax.tree_util.tree_map_with_path(
            lambda q, x, k=k, p=p, s=s: planner.state(prefix + k + q, x, p, s),
            item)
        for item, k, p, s in zip(items, self.paths, self.leaves, self.specs)])


def _state_shardings(planner: _Planner, prefix, state,
                     params: Optional[_Params]):
  if params is None:
    return jax.tree_util.tree_map_with_path(
        lambda p, x: planner.state(prefix + p, x), state)
  if isinstance(state, base.OptimizerState):
    # Legacy layout: param_states is params-shaped down to per-param states.
    return base.OptimizerState(  # a tree of shardings shaped like the state
        planner.state(prefix + _key('step'), state.step),  # type: ignore[arg-type]
        params.paired(planner, prefix + _key('param_states'),
                      state.param_states))
  treedef: Any
  flat, treedef = jax.tree_util.tree_flatten_with_path(
      state, is_leaf=params.laid_out_like_params)
  return treedef.unflatten([
      params.paired(planner, prefix + path, node)
      if params.laid_out_like_params(node)
      else planner.state(prefix + path, node)
      for path, node in flat])


def state_shardings(tree: Any, mesh: Mesh, rule: Rule = 'replicated', *,
                    params: Optional[Any] = None,
                    axis: Optional[Union[str, Sequence[str]]] = None) -> Any:
  """A tree of shardings for ``tree``, for ``jax.jit`` and ``device_put``.

  Args:
    tree: a legacy ``Optimizer`` (its ``target`` is the params), a flax
      ``TrainState`` (its ``params``), or optimizer state alone: a legacy
      ``OptimizerState`` or an Optax state (pass ``params`` to pair state
      leaves with params). Leaves may be arrays or ``jax.ShapeDtypeStruct``s
      (e.g. from ``jax.eval_shape``).
    mesh: the device mesh.
    rule: how to place each leaf:

      * ``'replicated'``: every leaf on every device.
      * ``'zero1'``: params replicated; every optimizer-state leaf split over
        ``axis`` along its largest dimension divisible by the axis size
        (others, e.g. step counts, replicated). ZeRO stage 1.
      * a params-shaped tree of ``PartitionSpec``s or ``Sharding``s: params
        get them; each state leaf follows its param (the same spec for the
        same shape, the spec minus the dropped axis for factored moments,
        replicated otherwise).
      * a callable ``(path, leaf) -> PartitionSpec | Sharding | None``,
        called for every leaf (``None`` = replicated); ``path`` is the leaf's
        key path in ``tree``, e.g. ``.state.param_states['w'].grad_ema``.
    params: the params, when ``tree`` is optimizer state alone.
    axis: the mesh axis (or axes) ``'zero1'`` splits over; default: all.

  Returns:
    A tree with ``tree``'s structure whose leaves are ``NamedSharding``s (or
    the ``Sharding``s the rule gave).
  """
  planner = _Planner(mesh, rule, axis)
  if isinstance(tree, base.Optimizer):
    pinfo = _Params(planner, tree.target)
    return tree.replace(
        target=pinfo.shardings(planner, _key('target')),
        state=_state_shardings(planner, _key('state'), tree.state, pinfo))
  if hasattr(tree, 'params') and hasattr(tree, 'opt_state'):  # TrainState.
    pinfo = _Params(planner, tree.params)
    rest = jax.tree_util.tree_map_with_path(
        lambda p, x: planner.state(p, x),
        tree.replace(params=None, opt_state=None))
    return rest.replace(
        params=pinfo.shardings(planner, _key('params')),
        opt_state=_state_shardings(planner, _key('opt_state'),
                                   tree.opt_state, pinfo))
  if params is None and planner.param_specs is not None:
    raise ValueError(
        'A params-shaped sharding rule needs the params to pair optimizer '
        'state with: pass params=..., or pass the Optimizer/TrainState.')
  return _state_shardings(planner, (), tree,
                          None if params is None else _Params(planner, params))
