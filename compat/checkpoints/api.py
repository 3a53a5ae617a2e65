"""flax.optim checkpoints: read them without a template, convert them both ways.

Old checkpoints restore through the ordinary APIs once ``legacy_optim`` is
installed (``flax.training.checkpoints.restore_checkpoint(dir, target=opt)``,
``flax.serialization.from_bytes(opt, data)``). This module adds:

* ``load_legacy_checkpoint(path)``: reads a checkpoint file (or the latest
  ``checkpoint_<step>`` in a directory) with a strict decoder
  (``compat.checkpoints._safe_msgpack``; nothing is ever unpickled) and
  reports what it can infer: the step, each param's state fields, the
  candidate algorithms and a layout-equivalent optimizer spec.
* ``convert_checkpoint(src, dst, to=...)`` and ``flax-optim-compat convert``:
  legacy msgpack -> an Orbax checkpoint that modern code restores directly
  (``to='train_state'``, ``'optax'`` or ``'nnx'``), and such an Orbax
  checkpoint -> a legacy file flax 0.5.3 itself restores (``to='legacy'``).

An Orbax destination is a directory of Orbax items (like one step of an
``ocp.CheckpointManager``)::

  dst/state       the modern state: a TrainState (step, params, opt_state),
                  {'params', 'opt_state'} (optax) or {'model': nnx.state(model),
                  'optimizer': nnx.state(nnx_optimizer)} (nnx)
  dst/extras      only for containers: everything else the legacy file held
                  (an EMA, a DynamicScale, an epoch counter...)
  dst/conversion  JSON: optimizer spec, step, source, and the legacy file's
                  layout (so converting back reproduces it byte for byte)

Restore the state with e.g.
``ocp.StandardCheckpointer().restore(dst / 'state', abstract_train_state)``.
"""

import argparse
import dataclasses
import hashlib
import os
import pathlib
import re
import sys
from typing import Any, Optional, Union
import warnings

from flax import serialization
import jax
import numpy as np

from compat import _atomic
from compat.bridges import _paths
from compat.checkpoints import _convert
from compat.checkpoints import _file_skeleton
from compat.checkpoints import _infer
from compat.checkpoints import _safe_msgpack
from compat.checkpoints import _spec
from flax_optim_rules import _either_layout
from flax_optim_rules import _legacy_layout
from legacy_optim import _restore
from legacy_optim.deprecation import LegacyOptimDeprecationWarning

FORMAT = 'flax-optim-compat/converted-checkpoint/1'
MODERN = ('train_state', 'optax', 'nnx')
TARGETS = MODERN + ('params', 'legacy')
# What convert_checkpoint returns, and a helper its callers use.
ConversionReport = _convert.ConversionReport
NonFiniteStateWarning = _convert.NonFiniteStateWarning
disk_size = _convert.disk_size
_READ_CHUNK = 8 << 20

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass(frozen=True)
class LegacyCheckpoint:
  """A flax.optim checkpoint read without a template.

  Attributes:
    path: the file read.
    nbytes: its size.
    state_dict: the whole file as a state dict (numpy leaves).
    optimizer_path: where the Optimizer sits in ``state_dict`` (``()`` for a
      bare optimizer, ``('0',)`` for ``(optimizer, ema)``...).
    step: the optimizer's step.
    leaf_fields: param path -> its per-parameter state field names (None for
      a param no sub-optimizer owns).
    leaf_algorithms: param path -> algorithms with those state fields.
    algorithms: candidate algorithms for the whole optimizer.
    spec: an optimizer spec with exactly this state layout (hyper-params at
      their defaults: checkpoints do not store them), or None if ambiguous.
    notes: why ``spec`` is None, and anything suspicious (non-finite values).
  """
  path: str
  nbytes: int
  state_dict: Any
  optimizer_path: tuple
  step: int
  leaf_fields: dict
  leaf_algorithms: dict
  algorithms: tuple
  spec: Optional[str]
  notes: tuple

  @property
  def optimizer_state_dict(self) -> dict:
    return _infer.lookup(self.state_dict, self.optimizer_path)

  @property
  def num_params(self) -> int:
    return len(self.leaf_fields)

  @property
  def num_values(self) -> int:
    return sum(int(np.size(v)) for _, v in _infer.param_leaves(
        self.optimizer_state_dict['target']))

  def optimizer_def(self, optimizer=None):
    """The OptimizerDef to restore with: ``optimizer`` (a spec or def) or the
    inferred spec. A plain spec for a checkpoint with unowned params is
    wrapped in a MultiOptimizer owning exactly the params that have state."""
    return _resolve_def(self, optimizer)[0]

  def optimizer(self, optimizer=None):
    """The checkpoint's Optimizer as a ``legacy_optim.Optimizer``."""
    return _restore_optimizer(self, self.optimizer_def(optimizer))


def _is_optimizer_node(node) -> bool:
  return (isinstance(node, dict) and set(node) == {'target', 'state'} and
          isinstance(node['state'], dict) and
          set(node['state']) == {'step', 'param_states'})


def _find_optimizers(tree, path=()) -> list[tuple]:
  if _is_optimizer_node(tree):
    return [path]
  if isinstance(tree, dict):
    return [found for k, v in tree.items()
            for found in _find_optimizers(v, path + (k,))]
  return []


def _latest(path: pathlib.Path, prefix: str, accept, what: str) -> pathlib.Path:
  """The ``<prefix><step>`` entry of directory ``path`` with the largest
  step, among the entries ``accept`` takes."""
  steps = []
  for child in path.iterdir():
    match = re.fullmatch(re.escape(prefix) + r'([-+]?\d+(?:\.\d*)?)',
                         child.name)
    if match and accept(child):
      steps.append((float(match.group(1)), child))
  if not steps:
    raise FileNotFoundError(f'No {prefix}<step> {what} in {path}.')
  return max(steps)[1]


def _top_level_keys(state_dict) -> str:
  return repr(sorted(state_dict) if isinstance(state_dict, dict)
              else state_dict)


def checkpoint_file(path: PathLike,
                    prefix: str = 'checkpoint_') -> pathlib.Path:
  """``path`` itself, or the latest ``<prefix><step>`` file in directory."""
  path = pathlib.Path(path)
  if not path.is_dir():
    if not path.exists():
      raise FileNotFoundError(f'No checkpoint at {path}.')
    return path
  return _latest(path, prefix, pathlib.Path.is_file,
                 'file (is it an Orbax checkpoint? Convert it with --to '
                 'legacy)')


def _read(path: pathlib.Path, progress: _atomic.Progress) -> bytearray:
  size = path.stat().st_size
  progress.phase('read', size)
  data = bytearray(size)
  view = memoryview(data)
  done = 0
  with open(path, 'rb') as f:
    while done < size and (n := f.readinto(view[done:done + _READ_CHUNK])):
      done += n
      progress.advance(n)
  if done != size:
    raise OSError(f'{path} changed size while being read.')
  return data


def load_legacy_checkpoint(path: PathLike, *,
                           progress: Optional[bool] = None) -> LegacyCheckpoint:
  """Reads a flax.optim checkpoint without a template (see LegacyCheckpoint).

  Args:
    path: a checkpoint file or Orbax checkpoint directory, or a directory of
      ``checkpoint_<step>`` entries (the latest is read), as written by
      flax's ``save_checkpoint`` (msgpack with flax <= 0.5.3, Orbax today;
      flax.optim's per-leaf state or the column-wise one of an earlier
      flax-optim-compat), or one step of an ``ocp.CheckpointManager``.
    progress: show a progress bar (None: only for large files on a terminal).

  Raises:
    FileNotFoundError: no checkpoint there.
    CheckpointFormatError (a ValueError): the file is corrupted or not a
      flax checkpoint.
    ValueError: it holds no (or several) flax.optim Optimizers, or their
      state is inconsistent with their target.
  """
  file = _legacy_entry(pathlib.Path(path))
  nbytes = _convert.disk_size(file)
  if file.is_dir():
    state_dict = _with_per_leaf_states(_read_orbax_tree(file), None)
  else:
    bar = _atomic.Progress(nbytes, 'read', progress)
    try:
      data = _read(file, bar)
      bar.phase('decode', len(data))
      state_dict = _safe_msgpack.decode(data, progress=bar.advance)
      del data
      bar.complete()
    finally:
      bar.close()
  found = _find_optimizers(state_dict)
  if not found:
    raise ValueError(
        f'{file} holds no flax.optim Optimizer (no {{"target", "state": '
        '{"step", "param_states"}} entry); top-level keys: '
        f'{_top_level_keys(state_dict)}.')
  if len(found) > 1:
    raise ValueError(
        f'{file} holds {len(found)} Optimizers, at '
        f'{", ".join("/".join(p) or "<root>" for p in found)}; load_legacy_'
        'checkpoint supports one per file.')
  opt_sd = _infer.lookup(state_dict, found[0])
  step = opt_sd['state']['step']
  if not (_infer.is_array(step) and step.shape == () and
          step.dtype.kind in 'iu') or int(step) < 0:
    raise ValueError(f'{file}: the optimizer step must be a non-negative '
                     f'integer scalar, found {step!r}.')
  inference = _infer.infer(opt_sd)
  return LegacyCheckpoint(
      path=str(file), nbytes=nbytes, state_dict=state_dict,
      optimizer_path=found[0], step=int(step),
      leaf_fields=inference.leaf_fields,
      leaf_algorithms=inference.leaf_algorithms,
      algorithms=inference.algorithms, spec=inference.spec,
      notes=inference.notes)


def _resolve_def(ckpt: LegacyCheckpoint, optimizer):
  """(OptimizerDef, spec text or None, inferred?) for ``ckpt``."""
  import legacy_optim
  if isinstance(optimizer, legacy_optim.OptimizerDef):
    return optimizer, None, False
  inferred = optimizer is None
  if inferred:
    if ckpt.spec is None:
      why = '; '.join(ckpt.notes) or 'ambiguous state layout'
      raise ValueError(
          f'Cannot infer the optimizer of {ckpt.path} ({why}). Candidates: '
          f'{", ".join(ckpt.algorithms) or "none"}. Pass it explicitly, e.g. '
          f'--optimizer "{(ckpt.algorithms or ("Adam",))[0]}(learning_rate='
          '...)" (Python: optimizer=...).')
    optimizer = ckpt.spec
  spec = _spec.parse(optimizer) if isinstance(optimizer, str) else None
  if spec is None:
    raise TypeError('optimizer must be an OptimizerDef or a spec string, got '
                    f'{type(optimizer).__name__}.')
  owned = [tuple(p.split('/')) for p, f in ckpt.leaf_fields.items()
           if f is not None]
  if spec.name != 'MultiOptimizer' and len(owned) < len(ckpt.leaf_fields):
    spec = _spec.parse(
        f'MultiOptimizer(({_infer.owned_regex(owned)!r}, {spec}))')
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', LegacyOptimDeprecationWarning)
    return spec.build(legacy_optim), str(spec), inferred


def _restore_optimizer(ckpt: LegacyCheckpoint, opt_def):
  from flax import serialization
  import jax
  opt_sd = ckpt.optimizer_state_dict
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', LegacyOptimDeprecationWarning)
    template = opt_def.create(jax.tree_util.tree_map(np.asarray,
                                                     opt_sd['target']))
    return serialization.from_state_dict(template, opt_sd)


# ------------------------------------------------------ strict restoring


def is_orbax_checkpoint(path: pathlib.Path) -> bool:
  """True for a directory Orbax wrote one checkpoint (item) into."""
  return path.is_dir() and any(
      (path / name).is_file()
      for name in ('_CHECKPOINT_METADATA', '_METADATA', 'checkpoint'))


def _checkpoint_entry(path: PathLike, step, prefix: str) -> pathlib.Path:
  """The msgpack file or Orbax directory flax's restore_checkpoint reads."""
  path = pathlib.Path(path)
  if not path.exists():
    raise FileNotFoundError(f'No checkpoint at {path}.')
  if step is not None:
    entry = path / f'{prefix}{step}'
    if not entry.exists():
      raise FileNotFoundError(f'No checkpoint at {entry}.')
    return entry
  if path.is_file() or is_orbax_checkpoint(path):
    return path
  return _latest(path, prefix,
                 lambda p: p.is_file() or is_orbax_checkpoint(p),
                 'file or Orbax checkpoint')


def is_converted_checkpoint(path: pathlib.Path) -> bool:
  """True for a checkpoint ``convert_checkpoint`` wrote (its record says so)."""
  record = path / _convert.META_ITEM
  files = [record] if record.is_file() else (
      sorted(record.glob('*')) if record.is_dir() else [])
  for file in files:
    try:
      if FORMAT in file.read_text(encoding='utf-8', errors='replace'):
        return True
    except OSError:
      continue
  return False


def _items(path: pathlib.Path) -> list[pathlib.Path]:
  """The item directories of a multi-item Orbax checkpoint (a
  CheckpointManager step), or [] for a single-item one."""
  if (path / '_METADATA').is_file() or not path.is_dir():
    return []
  return sorted(child for child in path.iterdir()
                if child.is_dir() and not child.name.startswith(('.', '_'))
                and (child / '_METADATA').is_file())


def _read_orbax_tree(path: pathlib.Path):
  """An Orbax checkpoint (one item, or every item of a CheckpointManager
  step as ``{item: tree}``) as a state dict of numpy arrays."""
  path = path.absolute()
  items = _items(path)
  with _convert.quiet_orbax():
    if not items:
      return _read_orbax(path)
    return {item.name: _read_orbax(item) for item in items}


def _legacy_entry(path: pathlib.Path) -> pathlib.Path:
  """The msgpack file or Orbax directory holding a legacy Optimizer."""
  if is_converted_checkpoint(path):
    raise ValueError(
        f'{path} is a checkpoint flax-optim-compat converted; convert it back '
        'with --to legacy (Python: to="legacy").')
  if path.is_dir() and not is_orbax_checkpoint(path) and _manager_steps(path):
    raise ValueError(
        f'{path} is an orbax.checkpoint.CheckpointManager directory (steps '
        f'{", ".join(str(s) for s, _ in _manager_steps(path))}); convert it '
        'whole (convert SRC DST) or name one step directory.')
  return _checkpoint_entry(path, None, 'checkpoint_')


def _manager_steps(path: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
  """(step, directory) of a CheckpointManager root's steps, by step."""
  if not path.is_dir():
    return []
  return sorted((int(child.name), child) for child in path.iterdir()
                if child.name.isdigit() and is_orbax_checkpoint(child))


def _read_orbax(path: pathlib.Path):
  """An Orbax checkpoint as a state dict of numpy arrays, no template."""
  import orbax.checkpoint as ocp
  path = path.absolute()  # Orbax reads arrays by absolute paths only
  checkpointer = ocp.PyTreeCheckpointer()
  on_disk = checkpointer.metadata(path)
  on_disk = getattr(on_disk, 'item_metadata', on_disk)
  on_disk = getattr(on_disk, 'tree', on_disk)
  # Read as numpy: no device placement taken from the file's shardings.
  as_numpy = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), on_disk)
  restored = checkpointer.restore(
      path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))
  return _restore.as_state_dict(restored)


def read_checkpoint(path: PathLike, *, step=None,
                    prefix: str = 'checkpoint_'):
  """Any checkpoint flax's ``save_checkpoint`` wrote, as a state dict.

  Reads without a template: a msgpack file (decoded strictly, nothing is
  unpickled) or an Orbax checkpoint directory, or the latest (or ``step``'s)
  ``<prefix><step>`` entry of a directory of them. Leaves are numpy arrays.
  """
  entry = _checkpoint_entry(path, step, prefix)
  if entry.is_dir():
    return _read_orbax(entry)
  return _safe_msgpack.decode(entry.read_bytes())


def _optimizer_paths(template, path=()):
  """Where a legacy Optimizer sits in a state dict (its key set)."""
  found = [path] if _is_optimizer_node(template) else []
  if isinstance(template, dict):
    for key, value in template.items():
      found += _optimizer_paths(value, path + (key,))
  return found


def _with_per_leaf_states(tree, template):
  """``tree`` with every column-wise Optimizer state (an earlier
  flax-optim-compat's Orbax checkpoints) put in flax.optim's layout; the
  Optimizers are where ``template`` has them (None: anywhere in ``tree``)."""
  paths = (_optimizer_paths(template) if template is not None else
           _target_and_state_paths(tree))
  for path in paths:
    node = _infer.lookup(tree, path)
    if not (isinstance(node, dict) and isinstance(node.get('target'), dict) and
            _restore.column_fields(node.get('state'))):
      continue
    converted = dict(node, state=_restore.param_states_from_columns(
        node['state'], node['target']))
    if not path:
      return converted
    tree = _replaced(tree, path, converted)
  return tree


def _target_and_state_paths(tree, path=()):
  """Paths of ``{'target', 'state'}`` nodes: Optimizers in either layout."""
  if not isinstance(tree, dict):
    return []
  if set(tree) == {'target', 'state'}:
    return [path]
  return [p for k, v in tree.items()
          for p in _target_and_state_paths(v, path + (k,))]


def _replaced(tree, path, value):
  if not path:
    return value
  return dict(tree, **{path[0]: _replaced(tree[path[0]], path[1:], value)})


def restore_checkpoint(path: PathLike, target, *, step=None,
                       prefix: str = 'checkpoint_'):
  """``flax.training.checkpoints.restore_checkpoint``, checked strictly.

  Reads the checkpoint without a template (``read_checkpoint``), compares
  every path, shape and dtype with ``target`` and restores only an exact
  match; Orbax checkpoints of an earlier flax-optim-compat, which held the
  optimizer state column-wise, are converted to flax.optim's layout first,
  and where ``target`` holds an optax TrainState the checkpoint may hold
  it in flax.optim's Optimizer layout (the original program's checkpoint of
  a program moved to TrainState: ``flax_optim_rules.from_either_layout``).
  Use it instead of flax's ``restore_checkpoint``, whose Orbax backend fills
  what the checkpoint lacks from the target and casts dtypes to the target's.

  Args:
    path: a checkpoint file or Orbax checkpoint directory, or a directory of
      ``<prefix><step>`` entries (the latest is read unless ``step`` is given).
    target: the template: a legacy ``Optimizer``, or any flax-serializable
      tree holding one (or none).
    step: read ``<prefix><step>`` in directory ``path``.
    prefix: the entries' name prefix.

  Returns:
    ``target`` with the checkpoint's values (numpy arrays).

  Raises:
    FileNotFoundError: no checkpoint there.
    RestoreMismatchError (a ValueError): the checkpoint's structure, shapes or
      dtypes differ from ``target``'s; every differing path is listed.
  """
  expected = serialization.to_state_dict(target)
  found = _with_per_leaf_states(
      read_checkpoint(path, step=step, prefix=prefix), expected)
  found, layout_hint = _in_train_state_layout(target, found)
  # Orbax cannot hold an empty dict: it writes an empty state node as None.
  from_orbax = _checkpoint_entry(path, step, prefix).is_dir()
  listed = _restore.find_differences(expected, found, exact_dtypes=True,
                                     empty_as_none=from_orbax)
  if listed:
    name = type(getattr(target, 'optimizer_def', target)).__name__
    raise _restore.RestoreMismatchError(listed, name, '\n'.join(filter(None, (
        *(_restore.mismatch_hint(_infer.lookup(expected, p + ('state',)),
                                 _infer.lookup(found, p + ('state',)), name)
          for p in _optimizer_paths(expected)), layout_hint))))
  return serialization.from_state_dict(target, found)


def _in_train_state_layout(target, found):
  """(``found`` with each TrainState of ``target`` in its own layout, a
  hint saying why that failed or '').

  A program moved off flax.optim keeps a TrainState where its original
  kept an Optimizer, so its original's checkpoints hold flax.optim's
  layout there (``flax_optim_rules.from_either_layout`` reads both).
  Where neither layout fits, ``found`` is compared as it is, and the hint
  names the first path that fits neither.
  """
  if not any(map(_legacy_layout.is_train_state, jax.tree_util.tree_leaves(
      target, is_leaf=_legacy_layout.is_train_state))):
    return found, ''
  try:
    return serialization.to_state_dict(
        _either_layout.from_either_layout(target, found)), ''
  except ValueError as e:
    return found, (
        'Read as a TrainState in its own layout or in flax.optim\'s '
        f'Optimizer layout (a checkpoint its original program wrote): {e}')


# ----------------------------------------------------------- conversions


def convert_checkpoint(src: PathLike, dst: PathLike, to: str = 'train_state',
                       *, optimizer=None, force: bool = False, model=None,
                       path_map=None, stock: bool = False,
                       closest: bool = False,
                       progress: Optional[bool] = None) -> ConversionReport:
  """Converts a flax.optim checkpoint to an Orbax one, or back.

  Args:
    src: a legacy checkpoint: a msgpack file or an Orbax directory
      (``save_checkpoint(dir, optimizer_or_container, step)`` of any flax),
      or a directory of ``checkpoint_<step>`` entries (the latest is read),
      or an ``ocp.CheckpointManager`` root (every step is converted into
      ``dst/<step>``); for ``to='legacy'``, a converted (or any
      TrainState/optax/nnx) Orbax checkpoint directory.
    dst: the destination: an Orbax checkpoint directory, or for
      ``to='legacy'`` a file (an existing directory gets
      ``checkpoint_<step>`` inside it).
    to: ``'train_state'``, ``'optax'``, ``'nnx'``, ``'params'`` (the params
      alone) or ``'legacy'``.
    optimizer: the optimizer definition (an ``OptimizerDef`` or a spec
      string such as ``"Adam(learning_rate=1e-3)"``). Only its state layout
      matters (with ``stock``, also the hyper-params that pick the stock
      variant); by default it is inferred from the checkpoint (legacy ->
      Orbax) or read from the conversion record (-> legacy).
    force: replace an existing ``dst`` this function wrote (its conversion
      record says so); anything else (a file, a link, another directory)
      is never replaced.
    model: ``to='nnx'`` only: the nnx model whose params receive the target
      (default: a module mirroring the legacy params' paths).
    path_map: renames legacy param paths (see ``compat.to_nnx_optimizer``):
      for ``to='nnx'`` to the model's, otherwise in the written tree.
    stock: ``to='optax'`` or ``'train_state'``: write the state of the
      nearest stock Optax transform (``compat.to_stock_optax``), which
      restores where this library is not installed; the report gives the
      transform and its measured deviation from flax 0.5.3.
    closest: with ``stock``, accept the closest stock transform where Optax
      has no counterpart.
    progress: show a progress bar (None: for large files on a terminal).

  Returns:
    A ConversionReport (for a CheckpointManager tree, of its last step, with
    ``steps`` listing all). ``src`` is only read; ``dst`` appears complete or
    not at all.
  """
  if to not in TARGETS:
    raise ValueError(f'to must be one of {", ".join(TARGETS)}, got {to!r}.')
  if stock and to not in ('optax', 'train_state'):
    raise ValueError(f'stock=True (--stock) writes optax or train_state, '
                     f'not {to!r}.')
  src, dst = pathlib.Path(src).absolute(), pathlib.Path(dst).absolute()
  dst_is_dir = (to == 'legacy' and dst.is_dir() and
                not (dst / _convert.STATE_ITEM).exists())
  _check_paths(src, dst)
  if not dst_is_dir:  # before any work (checked again when written)
    _atomic.refuse_existing(dst, force, None if to == 'legacy' else _ours)
  if to == 'legacy':
    if path_map is not None:
      raise ValueError('path_map renames legacy params on the way out; '
                       'converting back keeps the checkpoint\'s paths.')
    return _convert.to_legacy(src, dst, dst_is_dir, optimizer, force,
                              progress)
  options = dict(to=to, optimizer=optimizer, model=model, path_map=path_map,
                 stock=stock, closest=closest, progress=progress)
  steps = [] if is_orbax_checkpoint(src) else _manager_steps(src)
  with _atomic.atomic_destination(dst, force, _ours) as tmp:
    if not steps:
      report = _convert_one(src, tmp, **options)
    else:
      tmp.mkdir()
      for step, step_dir in steps:
        report = _convert_one(step_dir, tmp / str(step), **options)
  return dataclasses.replace(
      report, src=str(src), dst=str(dst), bytes_written=disk_size(dst),
      steps=tuple(step for step, _ in steps))


def _convert_one(src, dst, *, to, optimizer, model, path_map, stock, closest,
                 progress) -> ConversionReport:
  """Writes the conversion of the legacy checkpoint ``src`` at ``dst``."""
  ckpt = load_legacy_checkpoint(src, progress=progress)
  _convert.warn_nonfinite(ckpt.state_dict, src)
  if path_map is not None and to != 'nnx':
    ckpt = _renamed(ckpt, path_map)
    path_map = None
  opt_def, spec, inferred = _resolve_def(ckpt, optimizer)
  optimizer_obj = _restore_optimizer(ckpt, opt_def)
  meta = {
      'format': FORMAT,
      'to': to,
      'optimizer': spec,
      'optimizer_inferred': inferred,
      'algorithms': list(ckpt.algorithms),
      'step': ckpt.step,
      'optimizer_path': list(ckpt.optimizer_path),
      'layout': _file_skeleton.record(ckpt.state_dict, ckpt.optimizer_path),
      'source': {'path': ckpt.path, 'bytes': ckpt.nbytes,
                 'sha256': _sha256(pathlib.Path(ckpt.path))},
  }
  extras = _file_skeleton.extras(ckpt.state_dict, ckpt.optimizer_path)
  bar = _atomic.Progress(ckpt.nbytes, 'write', progress)
  try:
    bar.phase('write')
    stock_report = _convert.write_modern(
        dst, to, optimizer_obj, meta, extras, model, path_map,
        stock=stock, closest=closest)
    bar.complete()
  finally:
    bar.close()
  return ConversionReport(
      str(src), str(dst), to,
      (spec or type(opt_def).__name__) + (' [inferred]' if inferred else ''),
      ckpt.step, ckpt.num_params, ckpt.num_values, ckpt.nbytes, disk_size(dst),
      stock=stock_report)


def _ours(dst: pathlib.Path) -> bool:
  """Whether ``dst`` holds the conversion record this tool writes: a
  converted checkpoint, or a CheckpointManager tree of them (what
  ``--force`` may replace)."""
  return is_converted_checkpoint(dst) or (
      any(dst.iterdir()) and all(
          child.name.isdigit() and is_converted_checkpoint(child)
          for child in dst.iterdir() if not child.name.startswith('.')))


def _renamed(ckpt: LegacyCheckpoint, path_map) -> LegacyCheckpoint:
  """``ckpt`` with its params (and their states) renamed by ``path_map``."""
  rename = _paths.PathRenamer(path_map)
  opt_sd = ckpt.optimizer_state_dict
  param_states = opt_sd['state']['param_states']
  target: dict[str, Any] = {}
  states: dict[str, Any] = {}
  problems: list[str] = []
  for path, value in _infer.param_leaves(opt_sd['target']):
    new = rename(path)
    shown = f'{"/".join(path)} -> {_paths.show(new)}'
    if not new or _infer.lookup(target, new) is not _infer.MISSING or any(
        not isinstance(_infer.lookup(target, new[:n]), (dict, type(
            _infer.MISSING))) for n in range(len(new))):
      problems.append(f'{shown}: that path is empty or already taken')
      continue
    for tree, leaf in ((target, value),
                       (states, _infer.lookup(param_states, path))):
      node = tree
      for key in new[:-1]:
        node = node.setdefault(key, {})
      node[new[-1]] = leaf
  problems += [f'path_map entry {"/".join(p)!r} matches no legacy param'
               for p in rename.unused()]
  if problems:
    raise ValueError(f'path_map does not fit {ckpt.path}:\n  ' +
                     '\n  '.join(problems))
  renamed = dict(opt_sd, target=target,
                 state=dict(opt_sd['state'], param_states=states))
  inference = _infer.infer(renamed)
  return dataclasses.replace(
      ckpt, state_dict=_replaced(ckpt.state_dict, ckpt.optimizer_path,
                                 renamed),
      leaf_fields=inference.leaf_fields,
      leaf_algorithms=inference.leaf_algorithms,
      algorithms=inference.algorithms, spec=inference.spec,
      notes=inference.notes)


def _check_paths(src: pathlib.Path, dst: pathlib.Path) -> None:
  if not src.exists():
    raise FileNotFoundError(f'No checkpoint at {src}.')
  s, d = src.resolve(), dst.resolve()
  if s == d or s in d.parents or d in s.parents:
    raise ValueError(
        f'The destination {dst} overlaps the source {src}; the source is '
        'never modified: choose another destination.')


def _sha256(path: pathlib.Path) -> str:
  """Of a file, or of a directory's files (relative names and contents)."""
  digest = hashlib.sha256()
  files = ([(path, '')] if path.is_file() else
           [(f, str(f.relative_to(path))) for f in sorted(path.rglob('*'))
            if f.is_file()])
  for file, name in files:
    digest.update(name.encode())
    with open(file, 'rb') as f:
      while chunk := f.read(_READ_CHUNK):
        digest.update(chunk)
  return digest.hexdigest()


# ------------------------------------------------------------------ CLI


def main(argv=None) -> int:
  """``flax-optim-compat convert``; stopped by SIGTERM or SIGHUP as by
  SIGINT, it removes what it was writing and returns 130
  (``_atomic.run_stoppable``)."""
  return _atomic.run_stoppable(_main, argv)


def _main(argv=None) -> int:
  """``flax-optim-compat convert SRC DST --to ...``."""
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat convert',
      description='Convert a flax.optim checkpoint to an Orbax checkpoint '
      '(TrainState, Optax or nnx layout), or such a checkpoint back to a '
      'legacy file flax <= 0.5.3 restores. The source is never modified; the '
      'destination is written atomically.')
  parser.add_argument('src', help='legacy checkpoint file or directory '
                      '(latest checkpoint_<step>); Orbax directory for '
                      '--to legacy')
  parser.add_argument('dst', nargs='?', help='destination (not needed with '
                      '--info)')
  parser.add_argument('--to', choices=TARGETS, default=None,
                      help='output layout (default: train_state, or legacy '
                      'when SRC is an Orbax checkpoint)')
  parser.add_argument('--optimizer', metavar='SPEC', help='the optimizer, '
                      "e.g. 'Adam(learning_rate=1e-3)', 'WeightNorm(Momentum("
                      "0.1))', \"MultiOptimizer(('kernel', Adam(1e-3)), "
                      "('bias', Momentum(0.1)))\" (regexes over '/a/b' param "
                      'paths). Default: inferred from the state layout.')
  parser.add_argument('--force', action='store_true',
                      help='replace an existing destination, only a '
                      'checkpoint directory this tool converted (its record '
                      'says so); never a file, a link or another directory')
  parser.add_argument('--stock', action='store_true',
                      help='--to optax|train_state: write the state of the '
                      'nearest stock Optax transform (restores without this '
                      'library); prints its measured deviation')
  parser.add_argument('--closest', action='store_true',
                      help='with --stock: accept the closest stock transform '
                      'where Optax has no counterpart')
  parser.add_argument('--path-map', metavar='OLD=NEW', action='append',
                      help='rename a legacy param path prefix (repeatable; '
                      "'params=' drops a level)")
  parser.add_argument('--info', action='store_true',
                      help='only print what the legacy checkpoint holds')
  bar = parser.add_mutually_exclusive_group()
  bar.add_argument('--progress', dest='progress', action='store_const',
                   const=True, default=None, help='always show progress')
  bar.add_argument('--no-progress', dest='progress', action='store_const',
                   const=False, help='never show progress')
  args = parser.parse_args(argv)
  try:
    if args.info:
      print(describe(load_legacy_checkpoint(args.src, progress=args.progress)))
      return 0
    if args.dst is None:
      parser.error('DST is required (or use --info).')
    path_map = None
    if args.path_map:
      if not all('=' in entry for entry in args.path_map):
        parser.error('--path-map takes OLD=NEW.')
      path_map = dict(entry.split('=', 1) for entry in args.path_map)
    to = args.to or _default_target(pathlib.Path(args.src))
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always', NonFiniteStateWarning)
      report = convert_checkpoint(args.src, args.dst, to,
                                  optimizer=args.optimizer, force=args.force,
                                  path_map=path_map, stock=args.stock,
                                  closest=args.closest, progress=args.progress)
  except (OSError, ValueError, TypeError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  for warning in caught:
    if issubclass(warning.category, NonFiniteStateWarning):
      print(f'warning: {warning.message}', file=sys.stderr)
    else:  # as they would have been shown without the recording
      warnings.showwarning(warning.message, warning.category,
                           warning.filename, warning.lineno)
  print(report)
  return 0


def _default_target(src: pathlib.Path) -> str:
  """'legacy' for a modern (converted) Orbax checkpoint, else 'train_state'."""
  if is_converted_checkpoint(src):
    return 'legacy'
  if is_orbax_checkpoint(src) and not _items(src):
    import orbax.checkpoint as ocp
    tree = _restore.orbax_metadata(ocp.PyTreeCheckpointer(), src.absolute())
    if not _target_and_state_paths(tree):
      return 'legacy'
  return 'train_state'


def describe(ckpt: LegacyCheckpoint) -> str:
  """A human-readable summary of a legacy checkpoint."""
  lines = [
      f'{ckpt.path}: {ckpt.nbytes} bytes, step {ckpt.step}, '
      f'{ckpt.num_params} params ({ckpt.num_values} values)',
      f'optimizer at: {"/".join(ckpt.optimizer_path) or "<root>"}',
      f'algorithms: {", ".join(ckpt.algorithms) or "?"}',
      f'inferred spec: {ckpt.spec or "(ambiguous: pass --optimizer)"}',
  ]
  for path, fields in ckpt.leaf_fields.items():
    algos = ', '.join(ckpt.leaf_algorithms[path]) or 'not optimized'
    lines.append(f'  {path}: {list(fields) if fields is not None else None} '
                 f'({algos})')
  lines += [f'note: {n}' for n in ckpt.notes]
  return '\n'.join(lines)

