"""Trajectory files: the params of a training run, written and read back.

This module must keep running under the oracle environment (jax 0.4.13,
flax 0.5.3, numpy < 2) as well as today's stack, because trajectories are
recorded where the old code still runs. It therefore uses only the standard
library, numpy, ``jax.tree_util`` (``tree_flatten_with_path``/``keystr``,
both in jax >= 0.4.6) and msgpack, and imports nothing else from this project
except the equally portable ``compat.testing._kinds``.

File format (version 1)
-----------------------
A trajectory file is one msgpack map, the *envelope*::

  {'format': 'compat.testing/trajectory', 'version': 1,
   'sha256': <hex digest of payload>, 'payload': <bytes>}

``payload`` is itself a msgpack map::

  {'steps': N,                          # updates recorded
   'batch_digests': [str] * N,           # digest of the batch of update k
   'paths': [str] * L,                   # params leaf paths (jax keystr)
   'dtypes': [str] * L,                  # numpy dtype names ('float32', ...)
   'shapes': [[int, ...]] * L,
   'records': [                          # k = 0 (initial params) ... N
       {'step': k, 'digests': [str] * L,
        'values': [bytes] * L or None}], # raw little-endian C-order data
   'created_by': {'python': ..., 'numpy': ..., 'jax': ..., 'jaxlib': ...},
   'metadata': {str: str}}               # free-form, from the caller

A digest is the SHA-256 (hex) of the dtype name, the shape and the raw
little-endian bytes, so equal digests mean bit-identical leaves. Batches are
digested the same way over their (path, leaf) list. Steps whose ``values``
are ``None`` can only be checked for bit-identity. No pickle anywhere: a file
holds only msgpack maps, lists, strings, integers and byte strings.

Reading checks, in this order: the envelope decodes, ``format`` matches,
``version`` is one this reader knows, the checksum matches, and the payload
is self-consistent; each failure raises ``TrajectoryFileError`` saying which.
"""

import collections.abc
import hashlib
import platform
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional

import jax
import msgpack
import numpy as np

from compat.testing import _kinds

FORMAT = 'compat.testing/trajectory'
VERSION = 1


class TrajectoryFileError(ValueError):
  """A trajectory file is unreadable, corrupted or of another version."""


TrajectoryFileError.__module__ = 'compat.testing'  # Its public home.


# ------------------------------------------------------------ canonical trees


def _is_other_mapping(x) -> bool:
  return isinstance(x, collections.abc.Mapping) and type(x) is not dict


def plain(tree: Any) -> Any:
  """``tree`` with every non-dict Mapping (FrozenDict, nnx State) as a dict.

  Container types vary between library versions (flax 0.5.3 flattens a
  FrozenDict without key names), so leaf paths are taken on this form.
  """
  def to_dict(x):
    return {k: plain(v) for k, v in x.items()} if _is_other_mapping(x) else x
  return jax.tree_util.tree_map(to_dict, tree, is_leaf=_is_other_mapping)


def canonical_leaves(tree: Any) -> list[tuple[str, np.ndarray]]:
  """``(path, numpy array)`` for every leaf, in jax's flattening order."""
  flat, _ = jax.tree_util.tree_flatten_with_path(plain(tree))
  return [(jax.tree_util.keystr(tuple(path)) or '<root>', np.asarray(leaf))
          for path, leaf in flat]


def dtype_from_name(name: str) -> np.dtype:
  try:
    return np.dtype(name)
  except TypeError:
    import jax.numpy as jnp
    return np.dtype(jnp.dtype(name))  # bfloat16 and other ml_dtypes.


def leaf_bytes(array: np.ndarray) -> bytes:
  """Raw little-endian, C-order bytes of ``array``."""
  little = array.dtype.newbyteorder('<')
  return np.ascontiguousarray(array, dtype=little).tobytes()


def leaf_digest(array: np.ndarray) -> str:
  h = hashlib.sha256()
  h.update(f'{array.dtype.name}{list(array.shape)}'.encode())
  h.update(leaf_bytes(array))
  return h.hexdigest()


def tree_digest(tree: Any) -> str:
  """One digest of a whole tree: its leaf paths, dtypes, shapes and bytes."""
  h = hashlib.sha256()
  for path, leaf in canonical_leaves(tree):
    h.update(path.encode())
    h.update(leaf_digest(leaf).encode())
  return h.hexdigest()


# --------------------------------------------------------------- running


def batch_stream(batches: Iterable[Any],
                 steps: Optional[int]) -> Iterator[tuple[int, Any]]:
  """Yields ``(k, batch)`` for updates k = 1..steps (all batches if None)."""
  if steps is not None and (not isinstance(steps, int) or steps < 0):
    raise ValueError(f'steps must be a non-negative int or None, got {steps!r}')
  iterator = iter(batches)
  k = 0
  while steps is None or k < steps:
    try:
      batch = next(iterator)
    except StopIteration:
      if steps is None:
        return
      raise ValueError(
          f'batches ran out after {k} batches but steps={steps}; pass at '
          f'least {steps} batches (or steps=None to use them all).') from None
    k += 1
    yield k, batch


def advance(step_fn: Callable, state: Any, batch: Any, has_aux: bool) -> Any:
  """One training step; returns the new state (see ``_kinds`` for kinds)."""
  out = step_fn(state, batch)
  if _kinds.is_stateful(state):
    return state  # Updated in place; whatever step_fn returned is ignored.
  if has_aux:
    if not (isinstance(out, tuple) and len(out) == 2):
      raise TypeError(
          'has_aux=True: step_fn must return (new_state, aux), got '
          f'{type(out).__name__}.')
    return out[0]
  return out


def params_snapshot(state: Any, params_fn: Optional[Callable]) -> list:
  """The params of ``state`` as host numpy leaves, ``(path, array)``."""
  params = params_fn(state) if params_fn is not None else _kinds.params_of(
      state)
  return canonical_leaves(jax.device_get(params))


# --------------------------------------------------------------- recording


def _wants_values(values_at, k: int, last: Optional[int]) -> bool:
  if isinstance(values_at, str):
    if values_at == 'all':
      return True
    if values_at == 'none':
      return False
    if values_at == 'ends':
      return k == 0 or k == last
    raise ValueError(
        "values_at must be 'all', 'ends', 'none' or a collection of step "
        f'numbers, got {values_at!r}')
  return k in values_at


def _created_by() -> dict[str, str]:
  import jaxlib
  return {'python': platform.python_version(), 'numpy': np.__version__,
          'jax': jax.__version__,
          'jaxlib': getattr(jaxlib, '__version__', 'unknown')}


def record_trajectory(step_fn: Callable, init: Any, batches: Iterable[Any],
                      steps: Optional[int], path: str, *,
                      values_at: Any = 'all', has_aux: bool = False,
                      params_fn: Optional[Callable] = None,
                      metadata: Optional[dict[str, str]] = None) -> dict:
  """Runs ``steps`` updates from ``init`` and writes their params to ``path``.

  Args:
    step_fn: ``step_fn(state, batch)`` -> new state (``(new_state, aux)``
      with ``has_aux=True``; the return value is ignored for in-place nnx
      states).
    init: the initial state (any kind ``compat.testing`` knows, or anything
      with ``params_fn``).
    batches: an iterable of batches, fed in order.
    steps: how many updates to run (``None``: until batches run out).
    path: the file to write (overwritten).
    values_at: at which steps to store full leaf values besides digests:
      ``'all'`` (default), ``'ends'`` (step 0 and the last), ``'none'``, or a
      collection of step numbers. Only stored values allow a tolerance or a
      detailed report on replay.
    has_aux: whether ``step_fn`` returns ``(new_state, aux)``.
    params_fn: ``state -> params``, for states of other kinds.
    metadata: short string notes stored in the file.

  Returns:
    The payload written (see the module docstring).
  """
  _wants_values(values_at, 0, None)  # Validates it before training.
  snapshots = [(0, params_snapshot(init, params_fn))]
  batch_digests = []
  state = init
  for k, batch in batch_stream(batches, steps):
    batch_digests.append(tree_digest(batch))
    state = advance(step_fn, state, batch, has_aux)
    snapshots.append((k, params_snapshot(state, params_fn)))
  first = snapshots[0][1]
  paths = [p for p, _ in first]
  records = []
  for k, leaves in snapshots:
    if [p for p, _ in leaves] != paths:
      raise ValueError(f'the params tree changed structure at step {k}: '
                       f'{paths} became {[p for p, _ in leaves]}')
    keep = _wants_values(values_at, k, len(snapshots) - 1)
    records.append({
        'step': k,
        'digests': [leaf_digest(a) for _, a in leaves],
        'values': [leaf_bytes(a) for _, a in leaves] if keep else None})
  payload = {
      'steps': len(snapshots) - 1,
      'batch_digests': batch_digests,
      'paths': paths,
      'dtypes': [a.dtype.name for _, a in first],
      'shapes': [list(a.shape) for _, a in first],
      'records': records,
      'created_by': _created_by(),
      'metadata': {str(k): str(v) for k, v in (metadata or {}).items()},
  }
  write_payload(path, payload)
  return payload


def write_payload(path: str, payload: dict) -> None:
  body = msgpack.packb(payload, use_bin_type=True)
  envelope = {'format': FORMAT, 'version': VERSION,
              'sha256': hashlib.sha256(body).hexdigest(), 'payload': body}
  with open(path, 'wb') as f:
    f.write(msgpack.packb(envelope, use_bin_type=True))


# ----------------------------------------------------------------- reading


def is_trajectory_file(path: str) -> bool:
  """Whether ``path`` begins as ``write_payload`` begins a file: the
  envelope's ``format`` entry comes first, so its first bytes tell a
  trajectory from any other file without reading the rest."""
  tag = msgpack.packb(FORMAT, use_bin_type=True)
  try:
    with open(path, 'rb') as f:
      return tag in f.read(len(tag) + 16)
  except OSError:
    return False


class Trajectory(NamedTuple):
  """A decoded trajectory file."""
  steps: int
  batch_digests: list  # [str] * steps.
  paths: list  # [str] * leaves.
  dtypes: list  # [np.dtype] * leaves.
  shapes: list  # [tuple] * leaves.
  digests: list  # [[str] * leaves] * (steps + 1).
  values: list  # [[np.ndarray] * leaves or None] * (steps + 1).
  created_by: dict
  metadata: dict


def _unpack(data: bytes, what: str, path: str) -> Any:
  try:
    return msgpack.unpackb(data, raw=False)
  except Exception as e:  # msgpack raises several unrelated types.
    raise TrajectoryFileError(
        f'{path}: corrupted or not a compat.testing trajectory file (the '
        f'{what} does not decode as msgpack: {type(e).__name__}: {e}).'
    ) from None


def _check(condition: bool, path: str, problem: str) -> None:
  if not condition:
    raise TrajectoryFileError(f'{path}: corrupted trajectory file: {problem}.')


def read_trajectory(path: str) -> Trajectory:
  """Reads and validates a trajectory file; raises TrajectoryFileError."""
  with open(path, 'rb') as f:
    envelope = _unpack(f.read(), 'file', path)
  if not isinstance(envelope, dict) or envelope.get('format') != FORMAT:
    raise TrajectoryFileError(
        f'{path}: not a compat.testing trajectory file (expected a msgpack '
        f"map with format={FORMAT!r}).")
  version = envelope.get('version')
  if version != VERSION:
    newer = isinstance(version, int) and version > VERSION
    raise TrajectoryFileError(
        f'{path}: trajectory format version {version!r} is not supported; '
        f'this compat.testing reads version {VERSION}. '
        + ('The file was written by a newer release: upgrade '
           'flax-optim-compat.' if newer else
           'Re-record it with this release (pytest --record-trajectories).'))
  body = envelope.get('payload')
  _check(isinstance(body, bytes), path, 'no payload')
  _check(hashlib.sha256(body).hexdigest() == envelope.get('sha256'), path,
         'checksum mismatch (the payload was modified or truncated)')
  return _decode_payload(_unpack(body, 'payload', path), path)


def _decode_payload(p: Any, path: str) -> Trajectory:
  keys = ('steps', 'batch_digests', 'paths', 'dtypes', 'shapes', 'records')
  _check(isinstance(p, dict) and all(k in p for k in keys), path,
         f'the payload must be a map with keys {", ".join(keys)}')
  steps, paths, records = p['steps'], p['paths'], p['records']
  n = len(paths)
  _check(isinstance(steps, int) and len(p['batch_digests']) == steps
         and len(records) == steps + 1, path,
         'step count, batch digests and records disagree')
  _check(len(p['dtypes']) == n and len(p['shapes']) == n, path,
         'paths, dtypes and shapes have different lengths')
  try:
    dtypes = [dtype_from_name(d) for d in p['dtypes']]
  except TypeError as e:
    raise TrajectoryFileError(f'{path}: unknown dtype in file: {e}') from None
  shapes = [tuple(s) for s in p['shapes']]
  digests, values = [], []
  for k, rec in enumerate(records):
    _check(isinstance(rec, dict) and rec.get('step') == k
           and len(rec.get('digests', ())) == n, path,
           f'record {k} is malformed')
    raw = rec.get('values')
    if raw is None:
      values.append(None)
    else:
      _check(len(raw) == n, path, f'record {k} has {len(raw)} values for '
             f'{n} leaves')
      leaves = []
      for i, data in enumerate(raw):
        expected = int(np.prod(shapes[i], dtype=np.int64)) * dtypes[i].itemsize
        _check(isinstance(data, bytes) and len(data) == expected, path,
               f'step {k}, leaf {paths[i]}: {len(data)} bytes of data, '
               f'expected {expected}')
        little = np.frombuffer(data, dtype=dtypes[i].newbyteorder('<'))
        leaves.append(little.astype(dtypes[i]).reshape(shapes[i]))
      values.append(leaves)
    digests.append(list(rec['digests']))
  return Trajectory(steps, list(p['batch_digests']), list(paths), dtypes,
                    shapes, digests, values, dict(p.get('created_by', {})),
                    dict(p.get('metadata', {})))
