"""Golden data on disk, and the fidelity metric (Python + NumPy only).

Files (all under ``tests/golden/``):

  oracle.npz   final params and final optimizer state dict of every case, as
               written by real flax 0.5.3 (bfloat16 stored as its uint16 bits);
               key ``'<case>|params|<path>'`` / ``'<case>|state|<path>'``.
  oracle.json  per case: digests of the case spec and of the params/gradients
               fed in, and the layout (path -> dtype, or None / 'empty' for
               state-dict entries holding no array); plus generator versions.
  floors.json  per case: the error of flax 0.5.3's own rules run on today's
               JAX against real flax 0.5.3 (what the XLA version alone does).

Metric: the relative error of the accumulated update over all leaves,
``||(p_new - p0) - (p_old - p0)|| / ||p_old - p0||``, in float64. The bound
is ``max(1e-6, 1.5 * floor)``; a floor of exactly 0 demands bit identity.
"""

import hashlib
import json
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE_NPZ = os.path.join(HERE, 'oracle.npz')
ORACLE_JSON = os.path.join(HERE, 'oracle.json')
FLOORS_JSON = os.path.join(HERE, 'floors.json')
# Edge cases (edge_cases.py): packed golden data and per-leaf ulp floors.
EDGES_NPZ = os.path.join(HERE, 'edges.npz')
EDGES_JSON = os.path.join(HERE, 'edges.json')
EDGE_FLOORS_JSON = os.path.join(HERE, 'edge_floors.json')

ABSOLUTE_BOUND = 1e-6
FLOOR_FACTOR = 1.5


def bound(floor: float) -> float:
  return max(ABSOLUTE_BOUND, FLOOR_FACTOR * floor)


def spec_digest(case) -> str:
  """Digest of the case definition: editing a case invalidates its data."""
  text = json.dumps(case, sort_keys=True)
  return hashlib.sha256(text.encode('utf-8')).hexdigest()


# ---------------------------------------------------------------- arrays
def _bfloat16():
  import ml_dtypes
  return np.dtype(ml_dtypes.bfloat16)


def encode(array: np.ndarray) -> np.ndarray:
  """An array NumPy can save: bfloat16 as its raw uint16 bits."""
  if array.dtype.name == 'bfloat16':
    return array.view(np.uint16)
  return array


def decode(array: np.ndarray, dtype_name: str) -> np.ndarray:
  if dtype_name == 'bfloat16':
    return array.view(_bfloat16())
  if array.dtype.name != dtype_name:
    raise ValueError(f'stored dtype {array.dtype.name} != recorded '
                     f'{dtype_name}')
  return array


def layout(flat: dict) -> dict:
  """``{path: dtype name}``; entries holding no array keep their marker."""
  return {path: (value.dtype.name if isinstance(value, np.ndarray) else value)
          for path, value in flat.items()}


# ---------------------------------------------------------------- files
def save_oracle(results: dict, meta: dict, npz_path: str = ORACLE_NPZ,
                json_path: str = ORACLE_JSON, packed: bool = False) -> None:
  """``results``: {case name: (case, runner.Result)}.

  ``packed``: one byte array per case and kind instead of one array per leaf
  (the zip entry of each array costs more than a tiny leaf's data); the
  shapes then go to the JSON file.
  """
  arrays = {}
  entries = {}
  for name, (case, result) in sorted(results.items()):
    entries[name] = {
        'spec_digest': spec_digest(case),
        'params_digest': result.params_digest,
        'grads_digest': result.grads_digest,
    }
    for kind, flat in (('params', result.final), ('state', result.state)):
      entries[name][kind] = layout(flat)
      leaves = {path: encode(flat[path]) for path in sorted(flat)
                if isinstance(flat[path], np.ndarray)}
      if not packed:
        arrays.update({f'{name}|{kind}|{path}': value
                       for path, value in leaves.items()})
        continue
      entries[name][f'{kind}_shapes'] = {
          path: list(value.shape) for path, value in leaves.items()}
      arrays[f'{name}|{kind}'] = np.concatenate(
          [np.ascontiguousarray(value).reshape(-1).view(np.uint8)
           for value in leaves.values()] or [np.zeros(0, np.uint8)])
  np.savez_compressed(npz_path, **arrays)
  with open(json_path, 'w') as f:
    json.dump({'generator': meta, 'cases': entries}, f, indent=1,
              sort_keys=True)
    f.write('\n')


def _unpack(data: np.ndarray, dtypes: dict, shapes: dict) -> dict:
  """The leaves of a packed byte array (packed in sorted path order)."""
  out, offset = {}, 0
  for path in sorted(shapes):
    shape = shapes[path]
    stored = np.dtype(np.uint16 if dtypes[path] == 'bfloat16' else
                      dtypes[path])
    size = stored.itemsize * int(np.prod(shape, dtype=np.int64))
    out[path] = data[offset:offset + size].view(stored).reshape(shape)
    offset += size
  return out


class Golden:
  """Read access to the oracle's results (per-leaf or packed files)."""

  def __init__(self, npz_path: str = ORACLE_NPZ,
               json_path: str = ORACLE_JSON):
    with open(json_path) as f:
      data = json.load(f)
    self.meta = data['generator']
    self.entries = data['cases']
    self._npz = np.load(npz_path)

  def _flat(self, name: str, kind: str) -> dict:
    entry = self.entries[name]
    if f'{kind}_shapes' in entry:
      stored = _unpack(self._npz[f'{name}|{kind}'], entry[kind],
                       entry[f'{kind}_shapes'])
    else:
      stored = {path: self._npz[f'{name}|{kind}|{path}']
                for path, dtype in entry[kind].items()
                if dtype not in (None, 'empty')}
    return {path: (decode(stored[path], dtype) if path in stored else dtype)
            for path, dtype in entry[kind].items()}

  def params(self, name: str) -> dict:
    return self._flat(name, 'params')

  def state(self, name: str) -> dict:
    return self._flat(name, 'state')


def load_floors() -> dict:
  with open(FLOORS_JSON) as f:
    return json.load(f)


def save_floors(floors: dict, meta: dict) -> None:
  with open(FLOORS_JSON, 'w') as f:
    json.dump({'generator': meta, 'cases': floors}, f, indent=1,
              sort_keys=True)
    f.write('\n')


# ---------------------------------------------------------------- metric
def _f64(value) -> np.ndarray:
  return np.asarray(value).astype(np.float64)


def _ratio(num_sq: float, den_sq: float) -> float:
  if not math.isfinite(num_sq) or not math.isfinite(den_sq):
    return math.inf
  if num_sq == 0.0:
    return 0.0
  if den_sq == 0.0:
    return math.inf
  return math.sqrt(num_sq) / math.sqrt(den_sq)


def update_error(initial: dict, reference: dict, candidate: dict) -> float:
  """Relative error of the accumulated update, all leaves, float64."""
  num = den = 0.0
  for path, ref in reference.items():
    got = candidate.get(path)
    if not isinstance(got, np.ndarray) or got.shape != ref.shape:
      return math.inf
    p0 = _f64(initial[path])
    ref_update = _f64(ref) - p0
    diff = (_f64(got) - p0) - ref_update
    num += float(np.sum(np.square(diff)))
    den += float(np.sum(np.square(ref_update)))
  return _ratio(num, den)


def state_error(reference: dict, candidate: dict) -> float:
  """Relative error ||s_new - s_old|| / ||s_old|| over float state arrays."""
  num = den = 0.0
  for path, ref in reference.items():
    if not isinstance(ref, np.ndarray) or ref.dtype.kind in 'iub':
      continue
    got = candidate.get(path)
    if not isinstance(got, np.ndarray) or got.shape != ref.shape:
      return math.inf
    diff = _f64(got) - _f64(ref)
    num += float(np.sum(np.square(diff)))
    den += float(np.sum(np.square(_f64(ref))))
  return _ratio(num, den)


def layout_differences(reference: dict, candidate: dict) -> list:
  """Where two flat state dicts differ in keys, markers, shapes, dtypes or
  integer values (the step). Empty when the checkpoint layouts agree."""
  problems = []
  for path in sorted(set(reference) | set(candidate)):
    if path not in candidate:
      problems.append(f'{path}: missing')
      continue
    if path not in reference:
      problems.append(f'{path}: unexpected')
      continue
    ref, got = reference[path], candidate[path]
    if not isinstance(ref, np.ndarray) or not isinstance(got, np.ndarray):
      if not (ref is got or (isinstance(ref, str) and ref == got)):
        problems.append(f'{path}: expected {_describe(ref)}, got '
                        f'{_describe(got)}')
      continue
    if ref.shape != got.shape or ref.dtype != got.dtype:
      problems.append(f'{path}: expected {_describe(ref)}, got '
                      f'{_describe(got)}')
    elif ref.dtype.kind in 'iub' and not np.array_equal(ref, got):
      problems.append(f'{path}: expected {ref.tolist()}, got {got.tolist()}')
  return problems


def _describe(value) -> str:
  if isinstance(value, np.ndarray):
    return f'{value.dtype.name}{list(value.shape)}'
  return repr(value)
