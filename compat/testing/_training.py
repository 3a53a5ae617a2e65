"""Old path vs new path, step by step: ``assert_same_training`` and replay.

Step numbering: step 0 is the initial state, step ``k`` the state after
``k`` updates. Params (and optionally optimizer state) are extracted from
each state as ``compat.testing._kinds`` describes, and compared leaf by leaf
as ``compat.testing._compare`` describes (bit-identity by default).
"""

from typing import Any, Callable, Iterable, Optional, Union

import jax

from compat.testing import _compare
from compat.testing import _kinds
from compat.testing import _record_core as core

Extractor = Optional[Union[Callable, tuple[Callable, Callable]]]


def _pair(fn: Extractor, name: str) -> tuple[Optional[Callable], ...]:
  if fn is None or callable(fn):
    return fn, fn
  if isinstance(fn, tuple) and len(fn) == 2 and all(
      f is None or callable(f) for f in fn):
    return fn
  raise TypeError(f'{name} must be a callable or an (old, new) pair of '
                  f'callables, got {fn!r}')


# ---------------------------------------------------------------- converting


def default_convert(old_init: Any, new_init: Any = None) -> Any:
  """The new path's initial state, derived from a legacy ``Optimizer``.

  * ``new_init`` is None: the raw Optax pair ``(params, opt_state)`` of
    ``compat.to_optax(old_init)`` (the step function uses that call's ``tx``).
  * ``new_init`` is an ``nnx.Module``: ``(model, compat.to_nnx_optimizer(
    old_init, model))``, which also writes the legacy params into the model.

  For a ``TrainState`` (which needs the model's ``apply_fn``) pass
  ``convert=lambda old: compat.to_train_state(old, apply_fn)``.
  """
  if not _kinds.is_legacy_optimizer(old_init):
    raise TypeError(
        'The new initial state can only be derived from a legacy Optimizer, '
        f'got {type(old_init).__name__}: pass new_init=... (or convert=...).')
  import compat
  if new_init is None:
    _, opt_state = compat.to_optax(old_init)
    return old_init.target, opt_state
  return new_init, compat.to_nnx_optimizer(old_init, new_init)


def _new_state(old_init, new_init, convert) -> Any:
  """Applies the rules of ``assert_same_training``'s new_init/convert."""
  if convert is not None:
    if new_init is not None:
      raise ValueError('Pass new_init or convert, not both: convert(old_init) '
                       'builds the new initial state.')
    return convert(old_init)
  if new_init is None or _kinds.is_bare_module(new_init):
    return default_convert(old_init, new_init)
  return new_init


# ---------------------------------------------------------------- comparing


def _check_step(step: int, what: str, expected: list, actual: list,
                rtol: float, atol: float, labels, context: str) -> None:
  problem = _compare.structure_diff([p for p, _ in expected],
                                    [p for p, _ in actual], labels)
  if problem:
    raise _compare.structure_divergence(step, what, problem, context)
  diffs = _compare.compare_leaves(expected, actual, rtol, atol, labels)
  if diffs:
    raise _compare.divergence(step, what, diffs, rtol, atol, context)


def _opt_state_snapshot(state, fn) -> list:
  tree = fn(state) if fn is not None else _kinds.opt_state_of(state)
  return core.canonical_leaves(jax.device_get(tree))


def assert_same_training(old_step: Callable, new_step: Callable,
                         old_init: Any, new_init: Any = None, *,
                         batches: Iterable[Any], steps: Optional[int] = None,
                         convert: Optional[Callable] = None,
                         rtol: float = 0, atol: float = 0,
                         compare_opt_state: bool = False,
                         has_aux: bool = False,
                         params_fn: Extractor = None,
                         opt_state_fn: Extractor = None) -> int:
  """Asserts two training paths stay identical, step after step.

  Both step functions see the same batches, in order, starting from the
  same initial state; after every step the params are compared (and, with
  ``compare_opt_state``, the optimizer states). The first difference raises.

  Args:
    old_step: ``old_step(state, batch)`` -> new state, on the old path.
    new_step: the same for the new path. A step on an nnx state updates it
      in place; its return value is ignored.
    old_init: the old path's initial state (typically a legacy Optimizer).
    new_init: the new path's initial state. If it is a complete state (a
      TrainState, a ``(params, opt_state)`` pair, an nnx model/optimizer
      pair, ...) it is used as is. If it is None or a bare ``nnx.Module``,
      the new state is derived from ``old_init`` with the compat bridges
      (see ``default_convert``).
    batches: an iterable of batches; each goes to both step functions.
    steps: how many updates (None: until ``batches`` is exhausted).
    convert: ``convert(old_init)`` -> the new initial state, replacing the
      default bridges (then leave ``new_init`` None).
    rtol, atol: tolerance on float leaves, ``|new - old| <= atol + rtol *
      |old|``; the default 0, 0 demands identical values.
    compare_opt_state: also compare the optimizer states (in the Optax
      layout, see ``compat.testing._kinds``).
    has_aux: both step functions return ``(new_state, aux)``.
    params_fn, opt_state_fn: ``state -> tree`` extractors for state kinds
      this module does not know; one callable or an ``(old, new)`` pair.

  Returns:
    The number of updates compared.

  Raises:
    TrainingDivergence (an AssertionError): the step, the first differing
      leaf path, the max absolute and ulp differences and the number of
      differing elements (or the paths present on only one side).
  """
  old_params_fn, new_params_fn = _pair(params_fn, 'params_fn')
  old_opt_fn, new_opt_fn = _pair(opt_state_fn, 'opt_state_fn')
  old_state = old_init
  new_state = _new_state(old_init, new_init, convert)
  labels = ('old', 'new')

  def check(step):
    _check_step(step, 'params', core.params_snapshot(old_state, old_params_fn),
                core.params_snapshot(new_state, new_params_fn), rtol, atol,
                labels, '')
    if compare_opt_state:
      _check_step(step, 'opt_state',
                  _opt_state_snapshot(old_state, old_opt_fn),
                  _opt_state_snapshot(new_state, new_opt_fn), rtol, atol,
                  labels, '')

  check(0)
  k = 0
  for k, batch in core.batch_stream(batches, steps):
    old_state = core.advance(old_step, old_state, batch, has_aux)
    new_state = core.advance(new_step, new_state, batch, has_aux)
    check(k)
  return k


# ------------------------------------------------------------------ replay


def _recorded_leaves(traj: core.Trajectory, k: int):
  if traj.values[k] is None:
    return None
  return list(zip(traj.paths, traj.values[k]))


def _digest_diffs(traj, k, actual) -> list:
  diffs = []
  for (path, leaf), digest in zip(actual, traj.digests[k]):
    if core.leaf_digest(leaf) != digest:
      diffs.append(_compare.LeafDiff(
          path, 'digest', 'differs from the recorded digest (only digests '
          'were recorded at this step, so no numbers: record with '
          "values_at='all' for a detailed report)"))
  return diffs


def assert_matches_trajectory(step_fn: Callable, init: Any,
                              batches: Iterable[Any], path: str, *,
                              steps: Optional[int] = None,
                              rtol: float = 0, atol: float = 0,
                              has_aux: bool = False,
                              params_fn: Optional[Callable] = None) -> int:
  """Asserts that training from ``init`` reproduces a recorded trajectory.

  Runs as many updates as the file records (``steps``, if given, must be
  that number), on the same batches (their
  digests must match the recorded ones: a different batch is reported as an
  input error, not a divergence), and compares the params after each step
  with the recorded ones: as values where the file holds them (within
  ``rtol``/``atol``), else by digest (bit-identity only; skipped when a
  tolerance is given).

  Returns:
    The number of updates compared.

  Raises:
    TrainingDivergence: as ``assert_same_training``; labels are
      ``recorded`` and ``new``.
    TrajectoryFileError: the file is unreadable, corrupted or of another
      format version.
    ValueError: a batch differs from the recorded one, or too few batches.
  """
  traj = core.read_trajectory(path)
  if steps is not None and steps != traj.steps:
    raise ValueError(f'{path} records {traj.steps} updates, not steps={steps}'
                     ': re-record it (pytest --record-trajectories).')
  labels = ('recorded', 'new')
  context = f'(trajectory {path}, recorded with {_created(traj)})'

  def check(k, state):
    actual = core.params_snapshot(state, params_fn)
    problem = _compare.structure_diff(traj.paths, [p for p, _ in actual],
                                      labels)
    if problem:
      raise _compare.structure_divergence(k, 'params', problem, context)
    expected = _recorded_leaves(traj, k)
    if expected is not None:
      _check_step(k, 'params', expected, actual, rtol, atol, labels, context)
    elif not (rtol or atol):
      diffs = _digest_diffs(traj, k, actual)
      if diffs:
        raise _compare.divergence(k, 'params', diffs, rtol, atol, context)

  state = init
  check(0, state)
  for k, batch in core.batch_stream(batches, traj.steps):
    if core.tree_digest(batch) != traj.batch_digests[k - 1]:
      raise ValueError(
          f'Batch {k} (fed to update {k}) differs from the batch recorded in '
          f'{path}: replay needs the same batches, in the same order, with the '
          'same dtypes.')
    state = core.advance(step_fn, state, batch, has_aux)
    check(k, state)
  return traj.steps


def _created(traj: core.Trajectory) -> str:
  info = traj.created_by
  return ', '.join(f'{k} {info[k]}' for k in ('jax', 'numpy') if k in info)
