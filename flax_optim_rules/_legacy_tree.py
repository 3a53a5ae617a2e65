"""A TrainState as the pytree flax.optim's ``Optimizer`` was.

Research code saved flax.optim Optimizers as pytrees of its own making: it
flattened ``{'opt': optimizer, 'extra': ...}`` into ``.npz`` files (leaves in
jax's flatten order, named by ``flax.serialization.to_state_dict``'s keys)
and read files back by unflattening their leaves into a template built the
same way. Such a file is positional: a TrainState in the template's place
has other leaves in another order, so old files would load into the wrong
leaves. ``legacy_tree`` gives the tree the Optimizer was, over a TrainState's
values, and ``from_legacy_tree`` turns such a tree (or a state dict in
flax.optim's layout) back into a TrainState:

  tree = flax_optim_rules.legacy_tree(train_state)
  tree.target, tree.state.step, tree.state.param_states   # as before
  jax.tree_util.tree_leaves(tree)     # flax.optim's leaves, in its order
  train_state = flax_optim_rules.from_legacy_tree(train_state, tree)

The tree is data only: ``target``, ``state`` (``OptimizerState(step,
param_states)``) and ``replace``; the Optimizer's methods are the
TrainState's. Its state dict is flax.optim's (``{'state': {'step',
'param_states'}, 'target'}``), registered with ``flax.serialization`` once
flax is loaded (a TrainState means it is). Needs nothing but jax and optax.
"""

import dataclasses
import sys
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from flax_optim_rules import _legacy_layout


@dataclasses.dataclass(frozen=True, eq=False)
class LegacyOptimizerTree:
  """flax.optim's ``Optimizer`` as a pytree: its fields, in its order."""
  state: Any  # OptimizerState(step, param_states), flax.optim's layout.
  target: Any  # the params.

  def replace(self, **changes) -> 'LegacyOptimizerTree':
    """A copy with ``changes`` (flax.optim's ``Optimizer.replace``, for the
    fields; a TrainState's is ``from_legacy_tree(...).replace``)."""
    return dataclasses.replace(self, **changes)


jax.tree_util.register_dataclass(
    LegacyOptimizerTree, data_fields=['state', 'target'], meta_fields=[])


def _state_dict(tree: LegacyOptimizerTree) -> dict:
  return _legacy_layout.optimizer_state_dict(tree.target, tree.state)


def _register_with_flax() -> None:
  """Gives ``flax.serialization`` flax.optim's state dict of the tree.

  Done only where flax is already loaded: this package needs no flax, and
  code that serializes the tree with flax has loaded it (its TrainState
  did) before it calls ``legacy_tree``.
  """
  serialization = sys.modules.get('flax.serialization')
  if serialization is None or not hasattr(serialization,
                                          'register_serialization_state'):
    return
  if LegacyOptimizerTree in getattr(serialization, '_STATE_DICT_REGISTRY',
                                    {}):
    return
  serialization.register_serialization_state(
      LegacyOptimizerTree, _state_dict, _legacy_layout.from_state_dict,
      override=True)


_register_with_flax()


def legacy_tree(train_state) -> LegacyOptimizerTree:
  """The pytree flax.optim's ``Optimizer`` was, over ``train_state``.

  Same leaves in the same order (``state.step``, then each parameter's
  per-parameter state fields, then ``target``), the same field names and
  state dict, so a tree of it saves and loads as the Optimizer's did: files
  the old program wrote load into it, and the old program loads the files
  it gives. The step is an int32 array, as flax.optim's was.

  ``train_state``: anything with ``step``, ``params`` and ``opt_state`` of one
  ``flax_optim_rules`` transform (or stock ``optax.sgd``), optionally inside
  ``inject_learning_rate``, or of a ``multi_optimizer`` of them.
  """
  _register_with_flax()
  state = _legacy_layout.optimizer_state(train_state)
  step = state.step
  if not hasattr(step, 'dtype'):
    step = jnp.asarray(step, jnp.int32)
  return LegacyOptimizerTree(state=state.replace(step=step),
                             target=train_state.params)


def from_legacy_tree(train_state, tree):
  """``train_state`` holding the values of ``tree``.

  ``tree``: a ``LegacyOptimizerTree`` (``legacy_tree``'s, or one a loader
  unflattened from a file into its structure), or a state dict in
  flax.optim's layout or the TrainState's own (``restore_state``). A
  TrainState is returned as it is: code that loads a tree back keeps working
  where its file held the TrainState itself.

  Raises:
    ValueError: ``tree`` is none of these.
  """
  if isinstance(tree, LegacyOptimizerTree):
    return _legacy_layout.replace_optimizer_state(
        train_state.replace(params=tree.target), tree.state)
  if isinstance(tree, Mapping):
    return _legacy_layout.restore_state(train_state, tree)
  if _legacy_layout.is_train_state(tree):
    return tree
  raise ValueError(
      f'from_legacy_tree: expected a LegacyOptimizerTree, a state dict in '
      f"flax.optim's layout or a TrainState, got {type(tree).__name__}")
