"""The skeleton of a legacy checkpoint file, recorded so it can be rebuilt.

Converting a legacy file to Orbax keeps everything it held: the Optimizer
becomes the modern state, the container's other arrays (an EMA, a
DynamicScale...) an ``extras`` item, and ``record`` describes the rest as
JSON: every dict's key order, every non-array value (Python numbers,
strings, None) and which arrays were numpy scalars. ``rebuild`` puts a state
dict back together from that record, so converting back writes the original
bytes.
"""

import numpy as np

from compat.checkpoints import _infer

_OPTIMIZER = '__optimizer__'
_LEAF = '__leaf__'


def record(tree, optimizer_path, path=()):
  """The state dict's layout as JSON: key order and every non-array value.

  Arrays become ``{"__leaf__": "array"|"scalar"}`` (stored in the Orbax
  items); the Optimizer becomes ``{"__optimizer__": <its key order>}``.
  """
  if path == optimizer_path:
    return {_OPTIMIZER: _key_order(tree)}
  if isinstance(tree, dict):
    return {k: record(v, optimizer_path, path + (k,)) for k, v in tree.items()}
  if isinstance(tree, np.ndarray):
    return {_LEAF: 'array'}
  if isinstance(tree, np.generic):
    return {_LEAF: 'scalar'}
  if isinstance(tree, complex):
    return {_LEAF: 'complex', 'value': [tree.real, tree.imag]}
  if tree is None or isinstance(tree, (bool, int, float, str)):
    return {_LEAF: 'value', 'value': tree}
  raise ValueError(f'Cannot convert the {type(tree).__name__} at '
                   f'{"/".join(path)}: only arrays, numbers, strings and None '
                   'are supported next to the Optimizer.')


def _key_order(tree):
  if isinstance(tree, dict):
    return {k: _key_order(v) for k, v in tree.items()}
  return None


def extras(tree, optimizer_path, path=()):
  """The container's arrays other than the Optimizer's, for the Orbax item."""
  if path == optimizer_path:
    return None
  if isinstance(tree, dict):
    out = {k: extras(v, optimizer_path, path + (k,)) for k, v in tree.items()}
    return {k: v for k, v in out.items() if v is not None} or None
  return np.asarray(tree) if _infer.is_array(tree) else None


def _reorder(tree, order):
  if isinstance(tree, dict) and isinstance(order, dict) and set(tree) == set(
      order):
    return {k: _reorder(tree[k], order[k]) for k in order}
  return tree


def rebuild(skeleton, optimizer_sd, arrays, path=()):
  """The legacy state dict from its skeleton, Optimizer and extras."""
  if _OPTIMIZER in skeleton:
    return _reorder(optimizer_sd, skeleton[_OPTIMIZER])
  if _LEAF not in skeleton:
    return {k: rebuild(v, optimizer_sd, arrays, path + (k,))
            for k, v in skeleton.items()}
  kind = skeleton[_LEAF]
  if kind == 'value':
    return skeleton['value']
  if kind == 'complex':
    return complex(*skeleton['value'])
  value = _infer.lookup(arrays, path)
  if value is _infer.MISSING:
    raise ValueError(f'The extras item has no array at {"/".join(path)}.')
  value = np.asarray(value)
  return value[()] if kind == 'scalar' else value
