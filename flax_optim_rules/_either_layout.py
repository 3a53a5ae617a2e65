"""Restores a migrated program's state from checkpoints of either layout.

A program migrated off flax.optim keeps an optax ``TrainState`` where its
original kept an ``Optimizer``, so the checkpoints the original wrote hold
flax.optim's layout (``{'target': params, 'state': {'step', 'param_states'}}``)
where the migrated program's own hold the TrainState's (``{'step', 'params',
'opt_state'}``). flax's ``restore_checkpoint(dir, target)`` and
``serialization.from_state_dict`` ignore what the target lacks and keep the
target's value for what the checkpoint lacks, so an old file restores into
the new target as the target itself: step 0, zero moments, no error. Read
the checkpoint raw and give it to ``from_either_layout`` instead::

  state = flax_optim_rules.from_either_layout(
      state, checkpoints.restore_checkpoint(workdir, None))

Needs nothing but jax and optax; the state dicts are flax's
(``flax.serialization``, used where the caller has loaded flax).
"""

import sys
from typing import Mapping

import jax

from flax_optim_rules import _legacy_layout
from flax_optim_rules import _legacy_tree

# What a TrainState's checkpoint may hold at its place, as the errors say.
_AS_OWN = (f" of a TrainState (or {sorted(_legacy_layout.OPTIMIZER_KEYS)} of "
           "flax.optim's Optimizer)")
_AS_OPTIMIZER = (f" of flax.optim's Optimizer (or "
                 f'{sorted(_legacy_layout.TRAIN_STATE_KEYS)} of a TrainState)')


class _TrainStateSlot:
  """Stands for one TrainState of the template in its state dict (a leaf
  to flax and jax), so the walk below knows where a layout may differ."""

  def __init__(self, train_state):
    self.train_state = train_state


def _serialization():
  """``flax.serialization`` where the caller loaded flax, else this
  package's plain-container state dicts (no flax object to serialize)."""
  return sys.modules.get('flax.serialization') or _legacy_layout


def from_either_layout(template, restored):
  """``template`` holding every value of a raw restore, in either layout.

  Args:
    template: the state the migrated program restores into: any pytree
      flax serializes (dicts, lists, tuples, ``flax.struct`` dataclasses,
      ``legacy_tree`` nodes) that may hold optax TrainStates at any depth,
      or a TrainState itself.
    restored: a raw restore of a checkpoint, a state dict of nested dicts
      (or lists) of arrays: ``flax.training.checkpoints.restore_checkpoint(
      dir, None)``, ``flax.serialization.msgpack_restore(data)``,
      ``to_state_dict(...)``. It may be written by the original program (a
      flax.optim ``Optimizer`` where ``template`` has a TrainState) or by the
      migrated one (the TrainState's own layout), node by node. None (no
      checkpoint found) gives ``template`` back, as flax's restore does.

  Returns:
    ``template``'s structure with every leaf from ``restored``: params,
    step and every optimizer moment of each TrainState (one restored from
    flax.optim's layout has its step also in the Optax state's counts). A
    container the checkpoint stores as a list, or an empty node (an empty
    optax state, None) that Orbax dropped or stored as None, is read as
    flax's state dict has it. A ``None`` in ``template`` takes whatever the
    checkpoint holds there, as flax's restore does.

  Raises:
    ValueError: ``restored`` fits neither layout somewhere: the message
      names the path, the keys expected there and the missing and
      unexpected ones. Or it holds flax.optim's layout where the template's
      TrainState has none (the state of one ``flax_optim_rules`` transform,
      or stock ``optax.sgd``, optionally injected, or a ``multi_optimizer``
      of them has it; ``weight_norm`` and other stock rules have not): the
      message names the path and why. Nothing is restored partially.
  """
  if restored is None:
    return template
  _legacy_tree._register_with_flax()  # a template may hold its trees.
  serialization = _serialization()
  is_train_state = _legacy_layout.is_train_state
  skeleton = jax.tree_util.tree_map(
      lambda node: _TrainStateSlot(node) if is_train_state(node) else node,
      template, is_leaf=is_train_state)
  values = _matched(serialization.to_state_dict(skeleton), restored, ())
  return serialization.from_state_dict(template, values)


def _path_text(path: tuple) -> str:
  return '/'.join(path) or '<root>'


def _as_mapping(node):
  """A list or tuple (as Orbax may restore a container) keyed as flax's
  state dicts key it; anything else as it is."""
  if isinstance(node, (list, tuple)):
    return {str(i): value for i, value in enumerate(node)}
  return node


def _holds_nothing(expected) -> bool:
  """A container of nothing in a template's state dict (an empty optax
  state, ``()``): what Orbax drops or restores as None."""
  expected = _as_mapping(expected)
  return isinstance(expected, Mapping) and all(
      map(_holds_nothing, expected.values()))


def _is_empty(found) -> bool:
  """What a checkpoint holds for a container of nothing."""
  found = _as_mapping(found)
  return found is None or (isinstance(found, Mapping) and
                           all(map(_is_empty, found.values())))


def _matched(expected, found, path: tuple):
  """``found`` in the shape of the state dict ``expected``, each
  TrainState (a slot) converted to its own layout."""
  if isinstance(expected, _TrainStateSlot):
    return _train_state_values(expected.train_state, found, path)
  if expected is None:
    return found  # flax restores anything into None.
  found = _as_mapping(found)
  if _holds_nothing(expected):
    if not _is_empty(found):
      raise ValueError(f'{_path_text(path)}: expected an empty node, the '
                       f'checkpoint holds {_describe(found)}')
    return expected
  if isinstance(expected, Mapping):
    _check_keys(expected, found, path)
    return {key: _matched(value, found.get(key), path + (key,))
            for key, value in expected.items()}
  if found is None or isinstance(found, Mapping):
    raise ValueError(f'{_path_text(path)}: expected a value like '
                     f'{_describe(expected)}, the checkpoint holds '
                     f'{_describe(found)}')
  return found


def _describe(node) -> str:
  if isinstance(node, Mapping):
    return f'a dict with keys {sorted(node)}'
  if node is None:
    return 'nothing'
  shape = getattr(node, 'shape', None)
  return type(node).__name__ + ('' if shape is None else f' of shape {shape}')


def _check_keys(expected: Mapping, found, path: tuple, what: str = ''):
  if not isinstance(found, Mapping):
    raise ValueError(f'{_path_text(path)}: expected a dict with keys '
                     f'{sorted(expected)}{what}, the checkpoint holds '
                     f'{_describe(found)}')
  # Orbax drops empty nodes: their absence is no difference.
  missing = sorted(key for key, value in expected.items()
                   if key not in found and not (value is None or
                                                _holds_nothing(value)))
  extra = sorted(key for key in found if key not in expected)
  if missing or extra:
    raise ValueError(f'{_path_text(path)}: expected the keys '
                     f'{sorted(expected)}{what}; missing {missing}, '
                     f'unexpected {extra}')


def _is_legacy_layout(found) -> bool:
  return isinstance(found, Mapping) and 'params' not in found and any(
      key in found for key in _legacy_layout.OPTIMIZER_KEYS)


def _train_state_values(train_state, found, path: tuple):
  """The TrainState's own state dict holding ``found``'s values, read in
  flax.optim's layout or the TrainState's."""
  found = _as_mapping(found)
  if not _is_legacy_layout(found):
    own = _serialization().to_state_dict(train_state)
    _check_keys(own, found, path, what=_AS_OWN)
    return _matched(own, found, path)
  try:
    legacy = _legacy_layout.state_dict(train_state)
  except TypeError as e:
    raise ValueError(
        f"{_path_text(path)}: the checkpoint holds flax.optim's Optimizer "
        f'layout, which this TrainState has none of: {e}') from None
  _check_keys(legacy, found, path, what=_AS_OPTIMIZER)
  values = _matched(legacy, found, path)
  return _serialization().to_state_dict(
      _legacy_layout.restore_state(train_state, values))
