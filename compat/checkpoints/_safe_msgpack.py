"""A strict reader for flax's msgpack checkpoint format (no template needed).

``flax.serialization.msgpack_restore`` trusts its input. This reader decodes
the same format (maps with string keys; ext type 1 = ndarray, 2 = complex,
3 = numpy scalar; ``__msgpack_chunked_array__`` maps for arrays over 1 GiB)
but checks every step, so a truncated, corrupted or hostile file raises
``CheckpointFormatError`` naming where it went wrong instead of producing a
garbage tree or exhausting memory:

* only plain numeric/bool dtypes (never ``object``: nothing is unpickled);
* an array's byte count must match its shape and dtype exactly;
* keys must be strings, nesting depth is bounded, trailing bytes rejected;
* chunked arrays must reassemble to exactly their declared shape.

Writing uses flax's own ``msgpack_serialize`` (byte-for-byte the format
flax 0.5.3 wrote).
"""

import math
from typing import Any, Callable, Optional

import msgpack
import numpy as np

try:
  import ml_dtypes
  _BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes ships with jax.
  _BFLOAT16 = None

EXT_NDARRAY = 1
EXT_COMPLEX = 2
EXT_NPSCALAR = 3
CHUNKED_MARKER = '__msgpack_chunked_array__'

MAX_DEPTH = 64
MAX_NDIM = 32

_DTYPES = {
    name: np.dtype(name) for name in (
        'bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32',
        'uint64', 'float16', 'float32', 'float64', 'complex64', 'complex128')
}
if _BFLOAT16 is not None:
  _DTYPES['bfloat16'] = _BFLOAT16


class CheckpointFormatError(ValueError):
  """The bytes are not a well-formed flax msgpack checkpoint."""


def _array_from_payload(payload: bytes, where: str) -> np.ndarray:
  """Decodes ext type 1/3: msgpack (shape, dtype name, C-order bytes)."""
  try:
    fields = msgpack.unpackb(payload, raw=True, use_list=True)
  except (ValueError, msgpack.UnpackException) as e:
    raise CheckpointFormatError(
        f'{where}: corrupted array header ({e}).') from None
  if not (isinstance(fields, list) and len(fields) == 3):
    raise CheckpointFormatError(
        f'{where}: an array must be encoded as (shape, dtype, bytes), found '
        f'{type(fields).__name__}.')
  shape, dtype_name, buffer = fields
  if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(
      isinstance(d, int) and not isinstance(d, bool) and d >= 0
      for d in shape):
    raise CheckpointFormatError(
        f'{where}: invalid array shape {shape!r} (expected at most '
        f'{MAX_NDIM} non-negative integers).')
  if not isinstance(dtype_name, bytes):
    raise CheckpointFormatError(f'{where}: invalid dtype name {dtype_name!r}.')
  dtype = _DTYPES.get(dtype_name.decode('ascii', 'replace'))
  if dtype is None:
    raise CheckpointFormatError(
        f'{where}: unsupported dtype {dtype_name!r}; expected one of '
        f'{", ".join(sorted(_DTYPES))}.')
  if not isinstance(buffer, bytes):
    raise CheckpointFormatError(f'{where}: array data is not a byte string.')
  expected = math.prod(shape) * dtype.itemsize
  if len(buffer) != expected:
    raise CheckpointFormatError(
        f'{where}: array of shape {tuple(shape)} and dtype {dtype.name} needs '
        f'{expected} bytes, found {len(buffer)}.')
  return np.frombuffer(buffer, dtype=dtype).reshape(shape)


class _Decoder:
  """One decode: the ext hook plus progress accounting."""

  def __init__(self, progress: Optional[Callable[[int], None]]):
    self.progress = progress
    self.arrays = 0

  def ext_hook(self, code: int, payload: bytes):
    where = f'array #{self.arrays}'
    self.arrays += 1
    if self.progress is not None:
      self.progress(len(payload))
    if code == EXT_NDARRAY:
      return _array_from_payload(payload, where)
    if code == EXT_NPSCALAR:
      array = _array_from_payload(payload, where)
      if array.shape:
        raise CheckpointFormatError(
            f'{where}: a numpy scalar must have shape (), found {array.shape}.')
      return array[()]
    if code == EXT_COMPLEX:
      try:
        parts = msgpack.unpackb(payload)
      except (ValueError, msgpack.UnpackException) as e:
        raise CheckpointFormatError(
            f'{where}: corrupted complex ({e}).') from None
      if not (isinstance(parts, list) and len(parts) == 2 and all(
          isinstance(p, (int, float)) for p in parts)):
        raise CheckpointFormatError(f'{where}: invalid complex {parts!r}.')
      return complex(parts[0], parts[1])
    raise CheckpointFormatError(f'{where}: unknown msgpack ext type {code}.')


def _check_tree(node: Any, path: str, depth: int) -> Any:
  """Validates keys/depth and reassembles chunked arrays, recursively."""
  if depth > MAX_DEPTH:
    raise CheckpointFormatError(
        f'{path or "<root>"}: nesting deeper than {MAX_DEPTH} levels.')
  if isinstance(node, dict):
    if CHUNKED_MARKER in node:
      return _unchunk(node, path)
    for key in node:
      if not isinstance(key, str):
        raise CheckpointFormatError(
            f'{path or "<root>"}: map key {key!r} is not a string.')
    return {key: _check_tree(value, f'{path}/{key}', depth + 1)
            for key, value in node.items()}
  if isinstance(node, list):
    return [_check_tree(v, f'{path}/{i}', depth + 1)
            for i, v in enumerate(node)]
  return node


def _indexed(node: Any, path: str, what: str) -> list:
  """A {'0': x, '1': y, ...} map (a serialized tuple) as a list."""
  if not isinstance(node, dict) or set(node) != {
      str(i) for i in range(len(node))}:
    raise CheckpointFormatError(
        f'{path}: chunked array {what} must be a map with keys "0".."n-1".')
  return [node[str(i)] for i in range(len(node))]


def _unchunk(node: dict, path: str) -> np.ndarray:
  if set(node) != {CHUNKED_MARKER, 'shape', 'chunks'} or node[
      CHUNKED_MARKER] is not True:
    raise CheckpointFormatError(
        f'{path}: malformed chunked array {sorted(node)}.')
  shape = _indexed(node['shape'], path, 'shape')
  if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
             for d in shape) or len(shape) > MAX_NDIM:
    raise CheckpointFormatError(f'{path}: invalid chunked shape {shape!r}.')
  chunks = _indexed(node['chunks'], path, 'chunks')
  if not chunks or not all(
      isinstance(c, np.ndarray) and c.ndim == 1 for c in chunks):
    raise CheckpointFormatError(f'{path}: chunks must be 1-D arrays.')
  if len({c.dtype for c in chunks}) != 1:
    raise CheckpointFormatError(f'{path}: chunks have different dtypes.')
  if sum(c.size for c in chunks) != math.prod(shape):
    raise CheckpointFormatError(
        f'{path}: chunks hold {sum(c.size for c in chunks)} values but the '
        f'declared shape {tuple(shape)} needs {math.prod(shape)}.')
  return np.concatenate(chunks).reshape(shape)


def decode(data: bytes | bytearray,
           progress: Optional[Callable[[int], None]] = None) -> Any:
  """Decodes flax msgpack bytes into a state dict of numpy arrays.

  Args:
    data: the file's bytes.
    progress: called with the byte size of each array payload as it is
      decoded (for progress bars).

  Returns:
    The state dict: nested dicts with string keys whose leaves are numpy
    arrays, numpy scalars, Python scalars, strings or None.

  Raises:
    CheckpointFormatError: the bytes are not a well-formed checkpoint.
  """
  if not isinstance(data, (bytes, bytearray, memoryview)):
    raise TypeError(f'decode() needs bytes, got {type(data).__name__}.')
  if not data:
    raise CheckpointFormatError('The checkpoint is empty (0 bytes).')
  decoder = _Decoder(progress)
  try:
    tree = msgpack.unpackb(
        data, ext_hook=decoder.ext_hook, raw=False, strict_map_key=False,
        use_list=True)
  except CheckpointFormatError:
    raise
  except msgpack.ExtraData as e:
    raise CheckpointFormatError(
        f'Trailing bytes after the checkpoint data ({len(e.extra)} bytes): '
        'the file is corrupted or is not a single flax checkpoint.') from None
  except (ValueError, msgpack.UnpackException, RecursionError) as e:
    # Truncation ("incomplete input"), invalid type bytes, bad UTF-8 keys...
    raise CheckpointFormatError(
        f'Not a valid flax msgpack checkpoint ({len(data)} bytes): '
        f'{type(e).__name__}: {e}.') from None
  except TypeError as e:  # e.g. an unhashable map key (a list).
    raise CheckpointFormatError(
        f'Not a valid flax msgpack checkpoint: {e}.') from None
  return _check_tree(tree, '', 0)


def encode(state_dict: Any) -> bytes:
  """Encodes a state dict exactly as ``flax.serialization.to_bytes`` does.

  Keys keep their order (``msgpack_serialize`` without ``in_place`` would
  copy the tree with ``tree_map``, which sorts them). ``state_dict`` may be
  modified: large arrays are replaced by their chunked form.
  """
  from flax import serialization
  return serialization.msgpack_serialize(state_dict, in_place=True)
