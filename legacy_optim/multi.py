"""MultiOptimizer: different optimizers for subsets of the params.

Each ``(traversal, optimizer_def)`` pair selects leaves; on the Optax side this
is ``optax.partition`` with one label per sub-optimizer and ``set_to_zero`` for
leaves no traversal selects (their legacy state is ``None``; they never change).
"""

import collections.abc
import dataclasses
from typing import Any, Callable, Optional, Sequence

from flax import core
import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _multi as _rules_multi
from legacy_optim import _hyper
from legacy_optim import base
from legacy_optim import traverse_util

ModelParamTraversal = traverse_util.ModelParamTraversal
# The labels migrated code's flax_optim_rules.multi_optimizer gives too.
FROZEN_LABEL = _rules_multi.FROZEN_LABEL
sub_label = _rules_multi.sub_label


@dataclasses.dataclass
class _ShapeDtype:
  """Stands in for a leaf while traversals select leaves, as in flax.optim.

  flax.optim's MultiOptimizer showed traversals (and their filters) this very
  object: ``shape``, ``dtype``, the leaf as ``_value`` and ``_indices``, the
  sub-optimizers that selected it. Other attributes read the leaf, so filters
  like ``lambda path, value: value.ndim > 1`` work too.
  """
  shape: Any
  dtype: Any
  _value: Any
  _indices: list[int]

  @classmethod
  def create(cls, value) -> '_ShapeDtype':
    value = jnp.asarray(value)
    return cls(shape=value.shape, dtype=value.dtype, _value=value, _indices=[])

  def __getattr__(self, name):
    if name.startswith('_'):  # fields not set yet (copy, pickle)
      raise AttributeError(name)
    return getattr(self._value, name)


def _unselected_to_none(tree):
  """Leaves no traversal selected (still ``_ShapeDtype``) become ``None``."""
  return jax.tree_util.tree_map(
      lambda x: None if isinstance(x, _ShapeDtype) else x, tree)


def _leaf_predicate(params) -> Optional[Callable[[Any], bool]]:
  """What traversals see as a leaf of ``params``.

  Plain and frozen dicts: the pytree leaves, exactly as in flax.optim. Any
  other mapping (an ``nnx.State``, whose keys may be ints and whose leaves
  may be ``nnx.Variable``s): every node that is not a mapping, so a Variable
  is one leaf and the labels are a prefix of the params' tree.
  """
  if isinstance(params, collections.abc.Mapping) and not isinstance(
      params, (dict, core.FrozenDict)):
    return lambda node: not isinstance(node, collections.abc.Mapping)
  return None


def _as_nested_dict(tree):
  """A mapping as nested plain dicts with ``str`` keys (paths like
  ``'/layers/0/kernel'``, as traversals of nested dicts expect)."""
  if isinstance(tree, collections.abc.Mapping):
    return {str(key): _as_nested_dict(value) for key, value in tree.items()}
  return tree


def _has_non_str_keys(tree) -> bool:
  return isinstance(tree, collections.abc.Mapping) and any(
      not isinstance(key, str) or _has_non_str_keys(value)
      for key, value in tree.items())


def _match_leaves(params, traversals, any_keys: bool = False):
  """``params`` as ``_ShapeDtype`` leaves, each listing the traversals that
  select it; raises ``ValueError`` naming every leaf selected more than once.

  With ``any_keys``, dicts with non-string keys (``nnx.to_pure_dict`` of an
  ``nnx.Sequential``) are walked with their keys as strings, as an
  ``nnx.State`` is; flax.optim's MultiOptimizer raised ``TypeError`` there,
  and still does.
  """
  is_leaf = _leaf_predicate(params)
  shapes = jax.tree_util.tree_map(_ShapeDtype.create, params, is_leaf=is_leaf)
  walked = shapes
  if is_leaf is not None or (any_keys and _has_non_str_keys(shapes)):
    walked = _as_nested_dict(shapes)
  for k, traversal in enumerate(traversals):
    for item in traversal.iterate(walked):
      if not isinstance(item, _ShapeDtype):
        raise TypeError(
            f'{type(traversal).__name__} selected a {type(item).__name__} '
            'instead of a parameter leaf; MultiOptimizer traversals must '
            'select leaves (e.g. end a traversal over containers with '
            '.tree()).')
      item._indices.append(k)
  flat_with_path, structure = jax.tree_util.tree_flatten_with_path(
      params, is_leaf=is_leaf)
  # jaxlib's PyTreeDef has no type stubs mypy can read.
  treedef: Any = structure
  owners = [s._indices for s in treedef.flatten_up_to(shapes)]
  _rules_multi.raise_on_overlaps(
      treedef, [jax.tree_util.keystr(path) for path, _ in flat_with_path],
      owners)
  return shapes


def traversal_labels(params: Any, traversals: Sequence[Any]) -> Any:
  """A params-shaped tree of partition labels from legacy traversals.

  Leaf ``i`` gets ``sub_label(k)`` when ``traversals[k]`` selects it and
  ``FROZEN_LABEL`` when none does. Raises ``ValueError`` naming every leaf
  that more than one traversal selects. ``params`` may be an ``nnx.State``:
  its Variables are leaves, and traversals see its int keys as strings, as
  they do a dict's non-string keys.
  """
  shapes = _match_leaves(params, traversals, any_keys=True)
  treedef: Any = jax.tree_util.tree_structure(
      params, is_leaf=_leaf_predicate(params))
  return treedef.unflatten([
      sub_label(s._indices[0]) if s._indices else FROZEN_LABEL
      for s in treedef.flatten_up_to(shapes)
  ])


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


@base.register_wrapper
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

  # Eager steps (``_eager``) run each leaf with the rule ``labels`` names.
  _eager_rule_by_label = True

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
    for sub_optimizer in sub_optimizers:
      base.require_per_parameter_state(sub_optimizer, 'MultiOptimizer')
    self.traversals = traversals
    self.sub_optimizers = sub_optimizers
    super().__init__([opt.hyper_params for opt in sub_optimizers])

  def update_hyper_params(self, **hyper_param_overrides):
    hps = hyper_param_overrides.pop('hyper_params', self.hyper_params)
    if len(hps) != len(self.sub_optimizers):
      raise ValueError(
          f'MultiOptimizer has {len(self.sub_optimizers)} sub-optimizers but '
          f'hyper_params has {len(hps)} entries.')
    if not hyper_param_overrides:
      return hps
    return [
        _hyper.apply_overrides(hp, dict(hyper_param_overrides), opt._name)
        for hp, opt in zip(hps, self.sub_optimizers)
    ]

  def labels(self, params):
    return traversal_labels(params, self.traversals)

  # ------------------------------------------------------------ tree API
  def _walks_traversals(self) -> bool:
    """True when user code could tell the Optax partition from flax.optim's
    walk: a traversal of the user's own class (it sees every ``iterate`` and
    ``update`` call) or a sub-optimizer whose tree methods the user wrote
    (flax.optim gave them tuples of the selected leaves)."""
    return (not all(map(traverse_util.is_builtin, self.traversals)) or
            any(opt._user_hooks() & base.TREE_HOOKS
                for opt in self.sub_optimizers))

  def _user_hooks(self) -> frozenset[str]:
    # Walking the traversals, the tree methods run the user's code.
    if self._walks_traversals():
      return super()._user_hooks() | base.TREE_HOOKS
    return super()._user_hooks()

  def init_state(self, params):
    if not self._walks_traversals():
      return super().init_state(params)
    # flax.optim's walk: each sub-optimizer initialises the leaves it selects.
    states = _match_leaves(params, self.traversals)
    for traversal, opt in zip(self.traversals, self.sub_optimizers):
      states = traversal.update(
          lambda leaf, opt=opt: opt.init_param_state(leaf._value), states)
    return base.OptimizerState(
        jnp.asarray(0, dtype=jnp.int32), _unselected_to_none(states))

  def apply_gradient(self, hyper_params, params, state, grads):
    if not self._walks_traversals():
      return super().apply_gradient(hyper_params, params, state, grads)
    # flax.optim's walk: each sub-optimizer steps the tuple of its leaves.
    new_params = params
    new_states = jax.tree_util.tree_map(_ShapeDtype.create, params)
    for traversal, opt, hp in zip(self.traversals, self.sub_optimizers,
                                  hyper_params):
      # In flax.optim's order: user traversals may record their calls.
      sub_params = tuple(traversal.iterate(params))
      sub_grads = tuple(traversal.iterate(grads))
      sub_state = base.OptimizerState(
          state.step, tuple(traversal.iterate(state.param_states)))
      sub_params, sub_state = opt.apply_gradient(hp, sub_params, sub_state,
                                                 sub_grads)
      new_params = traversal.set(list(sub_params), new_params)
      new_states = traversal.set(list(sub_state.param_states), new_states)
    return new_params, base.OptimizerState(state.step + 1,
                                           _unselected_to_none(new_states))

  def _native_transform(self, hyper_params):
    transforms = {
        sub_label(k): opt._transform(hp)
        for k, (opt, hp) in enumerate(zip(self.sub_optimizers, hyper_params))
    }
    transforms[FROZEN_LABEL] = optax.set_to_zero()
    return optax.partition(transforms, self.labels)

  def _to_native_state(self, state, params):
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

  def _from_native_state(self, opt_state, params):
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
