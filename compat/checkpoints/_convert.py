"""The Orbax side of ``compat.convert_checkpoint`` (see compat.checkpoints).

Legacy -> modern goes through the bridges (``compat.to_optax``,
``compat.to_train_state``, ``compat.to_nnx_optimizer``), so a converted
checkpoint holds exactly the state those produce in memory. Modern -> legacy
restores the Orbax state without a template, puts it back into the shape of
``optimizer_def.to_optax().init(params)`` and goes through
``compat.from_optax``.

``compat.checkpoints`` calls into this module (never the other way round):
what both need, the Orbax item names and the ``ConversionReport``, is here.
"""

import contextlib
import dataclasses
import logging
import pathlib
from typing import Any
import warnings

import jax
import numpy as np

from compat import _atomic
from compat.bridges import optax_bridge
from compat.checkpoints import _file_skeleton
from compat.checkpoints import _safe_msgpack
from compat.checkpoints import _spec

_VALUE = 'value'  # How an nnx Variable's array is stored by Orbax.
# The Orbax items of a converted checkpoint (see compat.checkpoints).
STATE_ITEM, EXTRAS_ITEM, META_ITEM = 'state', 'extras', 'conversion'


class NonFiniteStateWarning(UserWarning):
  """A converted checkpoint's state holds NaN or Inf (a diverged run, or
  bytes flipped inside array data): converted as it is, but said."""


_ARRAYS = (np.ndarray, np.generic, float, complex, jax.Array)


def nonfinite_leaves(state_dict, path: str = '') -> list:
  """``(path, count)`` of each array leaf of ``state_dict`` (nested dicts,
  lists and tuples) holding NaN or Inf, in the tree's order."""
  if isinstance(state_dict, dict):
    items = state_dict.items()
  elif isinstance(state_dict, (list, tuple)):
    items = enumerate(state_dict)
  else:
    if not isinstance(state_dict, _ARRAYS):
      return []
    array = np.asarray(state_dict)
    if array.dtype.kind in 'biuOSUM':  # no NaN: bools, ints, strings...
      return []
    try:
      finite = np.isfinite(array)
    except TypeError:  # a record dtype: no number to be NaN
      return []
    count = int(np.size(array) - np.count_nonzero(finite))
    return [(path or '/', count)] if count else []
  return [found for key, value in items
          for found in nonfinite_leaves(value, f'{path}/{key}')]


def warn_nonfinite(state_dict, source) -> None:
  """A ``NonFiniteStateWarning`` naming each leaf with NaN or Inf."""
  found = nonfinite_leaves(state_dict)
  if found:
    total = sum(count for _, count in found)
    leaves = ', '.join(f'{path} ({count})' for path, count in found)
    warnings.warn(
        f'{source}: the converted state holds {total} NaN or Inf value(s) in '
        f'{len(found)} leaf(s): {leaves}. A diverged run or corrupted array '
        'data (a msgpack file has no checksum); it was converted as it is.',
        NonFiniteStateWarning, stacklevel=2)


@dataclasses.dataclass(frozen=True)
class ConversionReport:
  """What ``convert_checkpoint`` did (also printed by the CLI)."""
  src: str
  dst: str
  to: str
  optimizer: str
  step: int
  num_params: int
  num_values: int
  bytes_read: int
  bytes_written: int
  steps: tuple = ()  # a CheckpointManager tree: every step converted
  # The stock exit (stock=True): what continues the run and how far it
  # measured from flax 0.5.3 (a compat.bridges.stock_exit.StockReport).
  stock: Any = None

  def __str__(self):
    text = (f'Converted {self.src} -> {self.dst} ({self.to}): optimizer '
            f'{self.optimizer}, step {self.step}, {self.num_params} params '
            f'({self.num_values} values), read {self.bytes_read} bytes, wrote '
            f'{self.bytes_written} bytes.')
    if self.steps:
      text += f' Steps: {", ".join(map(str, self.steps))}.'
    return text if self.stock is None else f'{text}\n{self.stock}'


@contextlib.contextmanager
def quiet_orbax():
  """Silences Orbax's absl warnings (missing optional metadata files of
  older checkpoints...) for the duration: the CLI reports what matters."""
  logger = logging.getLogger('absl')
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def disk_size(path: pathlib.Path) -> int:
  if path.is_file():
    return path.stat().st_size
  return sum(p.stat().st_size for p in path.rglob('*') if p.is_file())


def _mirror_module(params):
  """An nnx module whose params have exactly the legacy params' paths."""
  from flax import nnx

  class LegacyParams(nnx.Module):
    """nnx.Param leaves laid out like a legacy params dict."""

    def __init__(self, tree):
      for key, value in tree.items():
        setattr(self, key, LegacyParams(value) if isinstance(value, dict)
                else nnx.Param(np.asarray(value)))

  if not isinstance(params, dict):
    raise TypeError('to="nnx" needs a dict of params; pass model= for other '
                    'targets.')
  return LegacyParams(params)


def _learning_rate_not_stored(count):
  raise ValueError(
      'This transform only lays out a converted checkpoint\'s state: the '
      'legacy optimizer passed its learning rate at every apply_gradient and '
      'checkpoints do not store it. Build your own transform to train.')


def _state_only_overrides(optimizer) -> dict[str, Any]:
  """Overrides letting the bridges lay out the state of a rate-less def.

  A checkpoint holds state, never the transform, and no state layout
  depends on the learning rate; the bridges refuse a def without one (its
  loop passed it per step), so a placeholder schedule that raises if it is
  ever evaluated stands in for it.
  """
  opt_def = optimizer.optimizer_def
  if optax_bridge.lacks_learning_rate(opt_def.hyper_params):
    return {'learning_rate': _learning_rate_not_stored}
  return {}


def _stock_item(to: str, optimizer, closest: bool):
  """(the stock exit's state item, its StockReport)."""
  from compat.bridges import stock_exit
  overrides = {}
  if optax_bridge.lacks_learning_rate(optimizer.optimizer_def.hyper_params):
    # Only the state is written, and a constant rate lays it out like any
    # constant the user's stock transform will have.
    overrides['learning_rate'] = 1.0
  tx, opt_state, report = stock_exit.to_stock_optax(
      optimizer, closest=closest, **overrides)
  if to == 'optax':
    return {'params': optimizer.target, 'opt_state': opt_state}, report
  if to != 'train_state':
    raise ValueError(f'--stock writes optax or train_state, not {to!r}.')
  from flax.training import train_state
  return train_state.TrainState(
      step=np.asarray(report.step, np.int32), apply_fn=None,
      params=optimizer.target, tx=tx, opt_state=opt_state), report


def _modern_item(to: str, optimizer, model, path_map) -> Any:
  """The in-memory modern state continuing ``optimizer``."""
  overrides = _state_only_overrides(optimizer)
  if to == 'optax':
    _, opt_state = optax_bridge.to_optax(optimizer, **overrides)
    return {'params': optimizer.target, 'opt_state': opt_state}
  if to == 'train_state':
    from compat.bridges import train_state
    return train_state.to_train_state(optimizer, apply_fn=None,
                                      overrides=overrides)
  from flax import nnx

  from compat.bridges import nnx as nnx_bridge
  if model is None:
    model = _mirror_module(optimizer.target)
  nnx_optimizer = nnx_bridge.to_nnx_optimizer(optimizer, model,
                                              path_map=path_map, **overrides)
  return _as_stored({'model': nnx.state(model),
                     'optimizer': nnx.state(nnx_optimizer)})


def _as_stored(tree):
  """An nnx state as the plain dicts Orbax stores it as.

  ``nnx.State`` mappings become dicts and each Variable the dict of its
  pytree children (``{'value': array}``): the same paths, leaves and files
  as saving the state itself, without Orbax flattening nnx's pytrees
  (about a tenth of the write at thousands of leaves).
  """
  from flax import nnx
  if isinstance(tree, nnx.Variable):
    children, _ = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda node: node is not tree)
    if all(len(path) == 1 and isinstance(path[0], jax.tree_util.GetAttrKey)
           for path, _ in children):
      return {path[0].name: child for path, child in children}
    return tree
  if isinstance(tree, (dict, nnx.State)):
    return {key: _as_stored(value) for key, value in tree.items()}
  return tree


def write_modern(tmp: pathlib.Path, to: str, optimizer, meta: dict, extras,
                 model=None, path_map=None, *, stock: bool = False,
                 closest: bool = False):
  """Writes the Orbax items of a converted checkpoint at ``tmp``; returns
  the stock exit's StockReport (None without ``stock``)."""
  import orbax.checkpoint as ocp
  if to != 'nnx' and (model is not None or path_map is not None):
    raise ValueError('model= only applies to to="nnx".')
  stock_report = None
  if stock:
    item, stock_report = _stock_item(to, optimizer, closest)
    meta = dict(meta, stock=stock_report.as_json())
  elif to == 'params':
    item = optimizer.target
  else:
    item = _modern_item(to, optimizer, model, path_map)
  items = {
      STATE_ITEM: ocp.args.StandardSave(item),
      META_ITEM: ocp.args.JsonSave(meta),
  }
  if extras is not None:
    items[EXTRAS_ITEM] = ocp.args.StandardSave(extras)
  with quiet_orbax():
    checkpointer = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
    checkpointer.save(tmp, ocp.args.Composite(**items))
  return stock_report


# ------------------------------------------------------ modern -> legacy


def _read_modern(src: pathlib.Path):
  """(state tree, extras or None, conversion record or None), no template."""
  import orbax.checkpoint as ocp
  try:
    with quiet_orbax():
      if (src / STATE_ITEM).is_dir():
        restored = ocp.Checkpointer(
            ocp.CompositeCheckpointHandler()).restore(src)
        return (restored[STATE_ITEM],
                restored.get(EXTRAS_ITEM),
                restored.get(META_ITEM))
      return ocp.StandardCheckpointer().restore(src), None, None
  except (FileNotFoundError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'{src} is not a readable Orbax checkpoint: {e}') from e


def _unwrap(tree):
  """nnx's stored ``{'value': array}`` Variables -> arrays."""
  if isinstance(tree, dict):
    if set(tree) == {_VALUE} and not isinstance(tree[_VALUE], dict):
      return tree[_VALUE]
    return {k: _unwrap(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_unwrap(v) for v in tree]
  return tree


def _split_state(kind: str, tree) -> tuple[Any, Any, Any]:
  """(params, raw opt_state, stored step or None) of a modern state tree."""
  tree = _unwrap(tree)
  if not isinstance(tree, dict):
    raise ValueError(f'Expected a {kind} state (a dict), found '
                     f'{type(tree).__name__}.')
  needed = {'train_state': ('step', 'params', 'opt_state'),
            'optax': ('params', 'opt_state'),
            'nnx': ('model', 'optimizer')}[kind]
  missing = [k for k in needed if k not in tree]
  if missing:
    raise ValueError(f'The {kind} state has no {", ".join(missing)} (it has '
                     f'{", ".join(sorted(tree))}).')
  if kind == 'nnx':
    opt = tree['optimizer']
    if not isinstance(opt, dict) or 'opt_state' not in opt:
      raise ValueError('The nnx optimizer state has no opt_state.')
    return tree['model'], opt['opt_state'], opt.get('step')
  return tree['params'], tree['opt_state'], tree.get('step')


def _detect_kind(tree) -> str:
  keys = set(tree) if isinstance(tree, dict) else set()
  if {'model', 'optimizer'} <= keys:
    return 'nnx'
  if {'step', 'params', 'opt_state'} <= keys:
    return 'train_state'
  if {'params', 'opt_state'} <= keys:
    return 'optax'
  raise ValueError(
      'Cannot tell the layout of this Orbax checkpoint: expected a TrainState '
      "(step, params, opt_state), {'params', 'opt_state'} or nnx "
      f"{{'model', 'optimizer'}}; found keys {sorted(keys)}.")


def _child(node, key, shown: str):
  import jax
  tree_util = jax.tree_util
  if isinstance(key, tree_util.SequenceKey):
    name = key.idx
  elif isinstance(key, tree_util.GetAttrKey):
    name = key.name
  elif isinstance(key, tree_util.DictKey):
    name = key.key
  else:
    name = getattr(key, 'key', key)
  if isinstance(node, (list, tuple)) and isinstance(name, int):
    if name < len(node):
      return node[name]
  elif isinstance(node, dict):
    for candidate in (name, str(name)):
      if candidate in node:
        return node[candidate]
  raise ValueError(f'opt_state has nothing at {shown} (the optimizer spec '
                   'does not match the checkpoint?).')


def _array_leaves(tree) -> int:
  if isinstance(tree, dict):
    return sum(_array_leaves(v) for v in tree.values())
  if isinstance(tree, (list, tuple)):
    return sum(_array_leaves(v) for v in tree)
  return 0 if tree is None else 1


def fill_template(template, raw):
  """``raw`` (Orbax's template-free restore) in ``template``'s structure.

  Raises ValueError naming the path when ``raw`` lacks a leaf, has one of
  another shape or dtype, or holds leaves the template has no place for.
  """
  import jax
  with_path, treedef = jax.tree_util.tree_flatten_with_path(template)
  leaves = []
  for path, want in with_path:
    shown = jax.tree_util.keystr(path)
    node = raw
    for key in path:
      node = _child(node, key, shown)
    if np.shape(node) != tuple(want.shape) or np.dtype(
        node.dtype) != np.dtype(want.dtype):
      raise ValueError(
          f'opt_state{shown}: expected {np.dtype(want.dtype).name}'
          f'{list(want.shape)}, found {np.dtype(node.dtype).name}'
          f'{list(np.shape(node))}.')
    leaves.append(node)
  extra = _array_leaves(raw) - len(leaves)
  if extra:
    raise ValueError(
        f'opt_state holds {extra} array(s) the optimizer spec has no place for '
        '(a different optimizer wrote it?); converting would lose them.')
  return treedef.unflatten(leaves)


def to_legacy(src: pathlib.Path, dst: pathlib.Path, dst_is_dir: bool,
              optimizer, force: bool,
              progress=None) -> ConversionReport:
  """An Orbax TrainState/optax/nnx checkpoint -> a legacy msgpack file."""
  bar = _atomic.Progress(disk_size(src), 'restore', progress)
  try:
    bar.phase('restore')
    return _to_legacy(src, dst, dst_is_dir, optimizer, force, bar)
  finally:
    bar.close()


def _to_legacy(src, dst, dst_is_dir, optimizer, force, bar):
  from flax import serialization
  import jax

  import legacy_optim
  tree, extras, meta = _read_modern(src)
  bar.complete()
  kind = meta['to'] if meta else _detect_kind(tree)
  if meta and (meta.get('stock') or kind == 'params'):
    held = 'a stock Optax state' if meta.get('stock') else 'params only'
    raise ValueError(
        f'{src} holds {held}'
        ', not the legacy optimizer\'s state: convert the original legacy '
        f'checkpoint ({meta.get("source", {}).get("path", "?")}) instead.')
  if optimizer is None:
    optimizer = meta.get('optimizer') if meta else None
    if optimizer is None:
      raise ValueError(
          f'{src} does not record its optimizer; pass it, e.g. --optimizer '
          '"Adam(learning_rate=1e-3)" (Python: optimizer=...).')
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', legacy_optim.LegacyOptimDeprecationWarning)
    opt_def = (optimizer if isinstance(optimizer, legacy_optim.OptimizerDef)
               else _spec.parse(optimizer).build(legacy_optim))
    params, raw_opt_state, stored_step = _split_state(kind, tree)
    params = jax.tree_util.tree_map(np.asarray, params)
    template = jax.eval_shape(opt_def.to_optax().init, params)
    opt_state = fill_template(template, raw_opt_state)
    restored = optax_bridge.from_optax(opt_def, params, opt_state)
  step = int(restored.state.step)
  if stored_step is not None and int(np.asarray(stored_step)) != step:
    raise ValueError(
        f'The {kind} step ({int(np.asarray(stored_step))}) differs from the '
        f"optimizer state's count ({step}); the legacy format has one step.")
  # In the legacy key order ('target' first): tree_map would sort the keys.
  opt_sd = serialization.to_state_dict(restored)
  if meta and meta.get('layout'):
    state_dict = _file_skeleton.rebuild(meta['layout'], opt_sd, extras)
  else:
    state_dict = opt_sd
  warn_nonfinite(state_dict, src)
  data = _safe_msgpack.encode(state_dict)
  bar.phase('write', len(data))
  dst_file = dst / f'checkpoint_{step}' if dst_is_dir else dst
  with _atomic.atomic_destination(dst_file, force) as tmp:
    _atomic.write_bytes(tmp, data)
  bar.complete()
  leaves = jax.tree_util.tree_leaves(params)
  return ConversionReport(
      str(src), str(dst_file), 'legacy',
      str(optimizer) if not isinstance(optimizer, legacy_optim.OptimizerDef)
      else type(optimizer).__name__, step, len(leaves),
      sum(int(np.size(x)) for x in leaves), disk_size(src),
      len(data))
