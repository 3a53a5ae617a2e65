"""Leaf-by-leaf comparison of two params trees, and the divergence report.

Trees are compared chex-style: structure first (the lists of leaf paths from
``jax.tree_util.tree_flatten_with_path`` must match), then dtype and shape,
then values. With the default ``rtol=atol=0`` values must be identical:
element ``e`` (expected) and ``a`` (actual) agree iff ``e == a`` or both are
NaN (so ``-0.0`` equals ``0.0``, as in ``chex.assert_trees_all_equal``).
With a tolerance, float elements also agree when
``|a - e| <= atol + rtol * |e|`` (``e`` is the old or recorded side);
integer and bool leaves are always compared exactly.

The ulp distance of two floats is the number of representable values of
their dtype between them (0.0 and -0.0 are 0 apart).
"""

import dataclasses
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class LeafDiff:
  """How one leaf differs between the expected and the actual tree."""
  path: str
  problem: str  # 'values', 'dtype', 'shape' or 'digest'.
  detail: str  # Human-readable description.
  differing: int = 0  # Elements that differ (0 if not counted).
  size: int = 0
  max_abs: float = 0.0
  max_ulp: Optional[int] = None


def _ordered_ints(x: np.ndarray) -> np.ndarray:
  """Floats -> int64 that order like the floats (ulp steps apart)."""
  signed = np.dtype(f'i{x.dtype.itemsize}')
  bits = x.view(signed).astype(np.int64)
  magnitude = bits & np.int64(np.iinfo(signed).max)
  return np.where(bits < 0, -magnitude, magnitude)


def ulp_distance(expected: np.ndarray, actual: np.ndarray) -> np.ndarray:
  """Elementwise ulp distance (uint64) of two float arrays of one dtype."""
  e, a = _ordered_ints(expected), _ordered_ints(actual)
  same_sign = (e >= 0) == (a >= 0)
  near = np.abs(e - np.where(same_sign, a, e)).astype(np.uint64)
  far = np.abs(e).astype(np.uint64) + np.abs(a).astype(np.uint64)
  return np.where(same_sign, near, far)


def _is_float(dtype: np.dtype) -> bool:
  return np.issubdtype(dtype, np.floating) or dtype.name == 'bfloat16'


def leaf_diff(path: str, expected: np.ndarray, actual: np.ndarray,
              rtol: float, atol: float,
              labels: Sequence[str] = ('old', 'new')) -> Optional[LeafDiff]:
  """None if the leaves agree, else how they differ."""
  old, new = labels
  if expected.dtype != actual.dtype:
    return LeafDiff(path, 'dtype', f'dtype {old}={expected.dtype.name}, '
                    f'{new}={actual.dtype.name}')
  if expected.shape != actual.shape:
    return LeafDiff(path, 'shape', f'shape {old}={expected.shape}, '
                    f'{new}={actual.shape}')
  if _is_float(expected.dtype):
    e64, a64 = expected.astype(np.float64), actual.astype(np.float64)
    with np.errstate(invalid='ignore', over='ignore'):
      agree = (e64 == a64) | (np.isnan(e64) & np.isnan(a64))
      if rtol or atol:
        agree |= np.abs(a64 - e64) <= atol + rtol * np.abs(e64)
      abs_diff = np.abs(a64 - e64)
  else:
    agree = expected == actual
    abs_diff = np.abs(expected.astype(np.float64) - actual.astype(np.float64))
  bad = ~np.asarray(agree)
  count = int(bad.sum())
  if not count:
    return None
  max_abs = float(np.max(abs_diff[bad]))
  if _is_float(expected.dtype):
    finite = bad & ~np.isnan(expected.astype(np.float64)) & ~np.isnan(
        actual.astype(np.float64))
    ulps = ulp_distance(expected[finite], actual[finite])
    max_ulp = int(ulps.max()) if ulps.size else None
  else:
    max_ulp = int(max_abs)
  first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
  detail = (
      f'{count} of {bad.size} elements differ; max |{old} - {new}| = '
      f'{max_abs:.9g}, max ulp difference = '
      f'{"n/a (NaN)" if max_ulp is None else max_ulp}; first at index '
      f'{first}: {old}={_show(expected[first])} {new}={_show(actual[first])}')
  return LeafDiff(path, 'values', detail, count, int(bad.size), max_abs,
                  max_ulp)


def _show(x) -> str:
  """An element with enough digits to tell neighbouring floats apart."""
  x = np.asarray(x)
  if _is_float(x.dtype):
    digits = {2: 5, 4: 9}.get(x.dtype.itemsize, 17)
    return f'{float(x):.{digits}g}'
  return str(x.item())


def structure_diff(expected_paths: Sequence[str],
                   actual_paths: Sequence[str],
                   labels: Sequence[str] = ('old', 'new'),
                   shown: int = 5) -> Optional[str]:
  """None if the leaf path lists match, else what is missing/extra."""
  if list(expected_paths) == list(actual_paths):
    return None
  old, new = labels
  missing = [p for p in expected_paths if p not in set(actual_paths)]
  extra = [p for p in actual_paths if p not in set(expected_paths)]
  parts = []
  for name, paths in ((f'only in {old}', missing), (f'only in {new}', extra)):
    if paths:
      more = f' (+{len(paths) - shown} more)' if len(paths) > shown else ''
      parts.append(f'{name}: {", ".join(paths[:shown])}{more}')
  return '; '.join(parts) or 'same leaf paths in a different order'


def compare_leaves(expected: Sequence[tuple[str, np.ndarray]],
                   actual: Sequence[tuple[str, np.ndarray]],
                   rtol: float, atol: float,
                   labels: Sequence[str] = ('old', 'new')) -> list[LeafDiff]:
  """Every differing leaf of two same-structured ``(path, array)`` lists."""
  diffs = []
  for (path, e), (_, a) in zip(expected, actual):
    d = leaf_diff(path, e, a, rtol, atol, labels)
    if d is not None:
      diffs.append(d)
  return diffs


class TrainingDivergence(AssertionError):
  """Raised at the first step where two training runs differ.

  Attributes: ``step`` (0 = the initial state, k = after k updates),
  ``what`` ('params' or 'opt_state'), ``path`` (of the first differing leaf,
  in flattening order, or None for a structure mismatch) and ``diffs`` (every
  differing ``LeafDiff`` at that step).
  """

  def __init__(self, message: str, step: int, what: str,
               diffs: Sequence[LeafDiff]):
    super().__init__(message)
    self.step = step
    self.what = what
    self.diffs = list(diffs)
    self.path = diffs[0].path if diffs else None


TrainingDivergence.__module__ = 'compat.testing'  # Its public home.


def _tolerance(rtol: float, atol: float) -> str:
  if not (rtol or atol):
    return 'tolerance: none (rtol=0, atol=0: values must be identical)'
  return f'tolerance: |new - old| <= {atol!r} + {rtol!r} * |old|'


def divergence(step: int, what: str, diffs: Sequence[LeafDiff],
               rtol: float, atol: float, context: str = '',
               shown: int = 5) -> TrainingDivergence:
  """The error for the first divergence, naming step, leaf and numbers."""
  first = diffs[0]
  lines = [
      f'Training diverged at step {step} ({_step_text(step)}): '
      f'{what}{first.path}: {first.detail}.']
  rest = diffs[1:]
  if rest:
    more = f' (+{len(rest) - shown} more)' if len(rest) > shown else ''
    lines.append(f'{len(rest)} more '
                 f'{"leaf differs" if len(rest) == 1 else "leaves differ"} '
                 'at this step: '
                 + ', '.join(f'{what}{d.path}' for d in rest[:shown]) + more)
  lines.append(_tolerance(rtol, atol))
  if context:
    lines.append(context)
  return TrainingDivergence('\n  '.join(lines), step, what, diffs)


def structure_divergence(step: int, what: str, problem: str,
                         context: str = '') -> TrainingDivergence:
  message = (f'Training diverged at step {step} ({_step_text(step)}): the '
             f'{what} trees have different leaves: {problem}.')
  if context:
    message += '\n  ' + context
  return TrainingDivergence(message, step, what, [])


def _step_text(step: int) -> str:
  if step == 0:
    return 'the initial state, before any update'
  return f'after {step} update{"s" if step != 1 else ""}'
