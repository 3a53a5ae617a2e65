"""The edge cases' metric: per-leaf ulps, non-finite elements exact.

Today's environment only (it uses ``compat.testing``); shared by
``generate_edge_floors.py`` and ``tests/test_overflow_edges.py``.
"""

import math

import numpy as np

from compat.testing import _compare

FLOOR_FACTOR = 1.5


def nonfinite_mismatches(reference: np.ndarray, candidate: np.ndarray) -> int:
  """How many elements differ in being nan, +inf or -inf."""
  ref, got = reference.astype(np.float64), candidate.astype(np.float64)
  same = ((np.isfinite(ref) & np.isfinite(got)) |
          (np.isnan(ref) & np.isnan(got)) | (np.isinf(ref) & (ref == got)))
  return int(np.sum(~same))


def leaf_ulps(reference: dict, candidate: dict) -> dict:
  """Per float leaf of two flat dicts: the largest ulp distance between
  elements finite in both, or None where the non-finite elements differ
  (or the leaf is missing, or its shape or dtype differs)."""
  out = {}
  for path, ref in sorted(reference.items()):
    if not isinstance(ref, np.ndarray) or ref.dtype.kind in 'iub':
      continue
    got = candidate.get(path)
    if (not isinstance(got, np.ndarray) or got.shape != ref.shape or
        got.dtype != ref.dtype or nonfinite_mismatches(ref, got)):
      out[path] = None
      continue
    finite = np.isfinite(ref.astype(np.float64))
    out[path] = int(_compare.ulp_distance(ref[finite], got[finite]).max(
        initial=0))
  return out


def bound(floor: int) -> int:
  """The ulps allowed for a leaf whose floor is ``floor`` (0: none)."""
  return math.ceil(FLOOR_FACTOR * floor)
