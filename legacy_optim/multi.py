"""MultiOptimizer: different optimizers for subsets of the params.

Each ``(traversal, optimizer_def)`` pair selects leaves; on the Optax side this
is ``optax.partition`` with one label per sub-optimizer and ``set_to_zero`` for
leaves no traversal selects (their legacy state is ``None``; they never change).
"""

from typing import Any, Sequence

import jax
import optax

from legacy_optim import _hyper
from legacy_optim import base
from legacy_optim import traverse_util

ModelParamTraversal = traverse_util.ModelParamTraversal

FROZEN_LABEL = 'frozen'


def sub_label(index: int) -> str:
  """The partition label of the ``index``-th sub-optimizer."""
  return str(index)


class _LeafProbe:
  """Stands in for a leaf while traversals run; remembers its position.

  Attribute access goes to the real value, so filters like
  ``lambda path, value: value.ndim > 1`` keep working.
  """

  __slots__ = ('index', 'value')

  def __init__(self, index, value):
    self.index = index
    self.value = value

  def __getattr__(self, name):
    return getattr(self.value, name)

  def __repr__(self):
    return f'_LeafProbe({self.index})'


def _selected_indices(traversal, params) -> list[int]:
  flat, treedef = jax.tree_util.tree_flatten(params)
  probes = treedef.unflatten([_LeafProbe(i, v) for i, v in enumerate(flat)])
  picked = []
  for item in traversal.iterate(probes):
    if not isinstance(item, _LeafProbe):
      raise TypeError(
          f'{type(traversal).__name__} selected a {type(item).__name__} '
          'instead of a parameter leaf; MultiOptimizer traversals must select '
          'leaves (e.g. end a traversal over containers with .tree()).')
    picked.append(item.index)
  return picked


def traversal_labels(params: Any, traversals: Sequence[Any]) -> Any:
  """A params-shaped tree of partition labels from legacy traversals.

  Leaf ``i`` gets ``sub_label(k)`` when ``traversals[k]`` selects it and
  ``FROZEN_LABEL`` when none does. Raises ``ValueError`` naming every leaf
  that more than one traversal selects.
  """
  flat_with_path, treedef = jax.tree_util.tree_flatten_with_path(params)
  owners: list[list[int]] = [[] for _ in flat_with_path]
  for k, traversal in enumerate(traversals):
    for i in _selected_indices(traversal, params):
      owners[i].append(k)
  overlaps = [(jax.tree_util.keystr(path), owners[i])
              for i, (path, _) in enumerate(flat_with_path)
              if len(owners[i]) > 1]
  if overlaps:
    listed = '; '.join(f'{path} (optimizers {ks})' for path, ks in overlaps)
    raise ValueError(f'Multiple optimizers match the same leaves: {listed}')
  return treedef.unflatten(
      [sub_label(o[0]) if o else FROZEN_LABEL for o in owners])


def _mask(labels, label):
  return jax.tree_util.tree_map(lambda l: l == label, labels)


def _masked(tree, params, mask):
  """``tree`` (params-shaped up to its leaves) with unmasked leaves hidden."""
  treedef = jax.tree_util.tree_structure(params)
  return treedef.unflatten([
      value if keep else optax.MaskedNode()
      for value, keep in zip(treedef.flatten_up_to(tree),
                             treedef.flatten_up_to(mask))
  ])


class MultiOptimizer(base.OptimizerDef):
  """Applies a separate optimizer to each traversal's subset of the params.

  Example::

    kernels = traverse_util.ModelParamTraversal(lambda p, _: 'kernel' in p)
    biases = traverse_util.ModelParamTraversal(lambda p, _: 'bias' in p)
    opt_def = MultiOptimizer((kernels, Momentum(0.01)), (biases, Momentum(0.1)))

  Overrides at ``apply_gradient`` apply to every sub-optimizer; per
  sub-optimizer values go through ``hyper_params=[hp0, hp1, ...]``. Traversals
  may be this package's or today's ``flax.traverse_util`` ones.
  """

  def __init__(self, *traversals_and_optimizers):
    if not traversals_and_optimizers:
      raise ValueError('MultiOptimizer needs at least one (traversal, '
                       'optimizer_def) pair.')
    for i, pair in enumerate(traversals_and_optimizers):
      if (not isinstance(pair, tuple) or len(pair) != 2 or
          not isinstance(pair[1], base.OptimizerDef)):
        raise TypeError(
            f'MultiOptimizer argument {i} must be a (traversal, OptimizerDef) '
            f'pair, got {pair!r}.')
    traversals, sub_optimizers = zip(*traversals_and_optimizers)
    self.traversals = traversals
    self.sub_optimizers = sub_optimizers
    super().__init__([opt.hyper_params for opt in sub_optimizers])

  def update_hyper_params(self, **hyper_param_overrides):
    hps = hyper_param_overrides.pop('hyper_params', self.hyper_params)
    if len(hps) != len(self.sub_optimizers):
      raise ValueError(
          f'MultiOptimizer has {len(self.sub_optimizers)} sub-optimizers but '
          f'hyper_params has {len(hps)} entries.')
    return [
        _hyper.apply_overrides(hp, dict(hyper_param_overrides), opt._name)
        for hp, opt in zip(hps, self.sub_optimizers)
    ]

  def labels(self, params):
    return traversal_labels(params, self.traversals)

  def _native_transform(self, hyper_params):
    transforms = {
        sub_label(k): opt.transform_for(hp)
        for k, (opt, hp) in enumerate(zip(self.sub_optimizers, hyper_params))
    }
    transforms[FROZEN_LABEL] = optax.set_to_zero()
    return optax.partition(transforms, self.labels)

  def to_optax_state(self, state, params):
    labels = self.labels(params)
    inner = {}
    for k, opt in enumerate(self.sub_optimizers):
      mask = _mask(labels, sub_label(k))
      sub_params = _masked(params, params, mask)
      sub_states = _masked(state.param_states, params, mask)
      inner[sub_label(k)] = optax.MaskedState(opt.to_optax_state(
          base.OptimizerState(state.step, sub_states), sub_params))
    inner[FROZEN_LABEL] = optax.MaskedState(optax.EmptyState())
    return optax.PartitionState(inner)

  def from_optax_state(self, opt_state, params):
    labels = self.labels(params)
    treedef = jax.tree_util.tree_structure(params)
    flat_states = [None] * treedef.num_leaves
    step = None
    for k, opt in enumerate(self.sub_optimizers):
      mask = _mask(labels, sub_label(k))
      sub_params = _masked(params, params, mask)
      sub = opt.from_optax_state(
          opt_state.inner_states[sub_label(k)].inner_state, sub_params)
      step = sub.step if step is None else step
      kept = iter(jax.tree_util.tree_structure(sub_params).flatten_up_to(
          sub.param_states))
      for i, keep in enumerate(treedef.flatten_up_to(mask)):
        if keep:
          flat_states[i] = next(kept)
    return base.OptimizerState(step, treedef.unflatten(flat_states))
