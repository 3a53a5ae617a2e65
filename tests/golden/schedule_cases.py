"""The learning-rate schedule grid: flax 0.5.3's ``flax.training.lr_schedule``.

Importable in both environments (the oracle venv with real flax 0.5.3, which
runs ``generate_schedules.py``, and today's stack, where
``tests/test_lr_schedule.py`` and ``scripts/schedule_deviation.py`` read
``schedules.json``). NumPy and jax only.

Each case is one helper with its keyword arguments; every case is evaluated
at steps ``0..3 * steps_per_epoch`` given three ways: a Python ``int``
(eager), a ``jnp.int32`` scalar (eager; an optimizer's step count) and a
``jnp.int32`` scalar through ``jax.jit``. The three take different paths
through the arithmetic (float64 in Python, float32 in jax) and round
differently, so each has its own golden values.
"""

import jax
import jax.numpy as jnp
import numpy as np

HELPERS = {
    'constant': 'create_constant_learning_rate_schedule',
    'stepped': 'create_stepped_learning_rate_schedule',
    'cosine': 'create_cosine_learning_rate_schedule',
}
STEP_KINDS = ('int', 'int32', 'jit')

CASES = (
    {'name': 'constant', 'helper': 'constant',
     'kwargs': {'base_learning_rate': 0.1, 'steps_per_epoch': 10}},
    {'name': 'constant_warmup', 'helper': 'constant',
     'kwargs': {'base_learning_rate': 0.1, 'steps_per_epoch': 10,
                'warmup_length': 2.0}},
    # Warmup ends mid-epoch (3.5 steps); 0.3 and 1/7 are inexact in binary.
    {'name': 'constant_fractional_warmup', 'helper': 'constant',
     'kwargs': {'base_learning_rate': 0.3, 'steps_per_epoch': 7,
                'warmup_length': 0.5}},
    {'name': 'stepped', 'helper': 'stepped',
     'kwargs': {'base_learning_rate': 0.1, 'steps_per_epoch': 10,
                'lr_sched_steps': [[1, 0.1], [2, 0.01]]}},
    # Boundaries 2.5, 6.5 and 12.5 steps: NumPy rounds half to even (2, 6,
    # 12), not up.
    {'name': 'stepped_rounded_boundaries', 'helper': 'stepped',
     'kwargs': {'base_learning_rate': 0.2, 'steps_per_epoch': 5,
                'lr_sched_steps': [[0.5, 0.5], [1.3, 0.1], [2.5, 0.01]]}},
    {'name': 'stepped_warmup', 'helper': 'stepped',
     'kwargs': {'base_learning_rate': 0.4, 'steps_per_epoch': 10,
                'lr_sched_steps': [[1, 0.5], [2.25, 0.25]],
                'warmup_length': 1.5}},
    {'name': 'cosine', 'helper': 'cosine',
     'kwargs': {'base_learning_rate': 0.1, 'steps_per_epoch': 10,
                'halfcos_epochs': 3}},
    {'name': 'cosine_warmup', 'helper': 'cosine',
     'kwargs': {'base_learning_rate': 0.256, 'steps_per_epoch': 8,
                'halfcos_epochs': 3, 'warmup_length': 0.75}},
    # The half wave ends at step 17.5; the steps after it rise again.
    {'name': 'cosine_fractional_epochs', 'helper': 'cosine',
     'kwargs': {'base_learning_rate': 1.0, 'steps_per_epoch': 7,
                'halfcos_epochs': 2.5}},
)
BY_NAME = {case['name']: case for case in CASES}


def steps(case) -> list:
  return list(range(3 * case['kwargs']['steps_per_epoch'] + 1))


def schedule(module, case):
  """The case's schedule built by ``module`` (flax's or a rewrite of it)."""
  return getattr(module, HELPERS[case['helper']])(**case['kwargs'])


def evaluate(module, case, step_kind) -> list:
  """The schedule's value at each step, the step given as ``step_kind``."""
  fn = schedule(module, case)
  if step_kind == 'int':
    return [fn(step) for step in steps(case)]
  if step_kind == 'jit':
    fn = jax.jit(fn)
  return [fn(jnp.int32(step)) for step in steps(case)]


def describe(values) -> dict:
  """Type, dtype, weak type and exact bits of a list of schedule values.

  A Python float is kept as ``float.hex``, a float32 array as its bits in
  hex. All values of one list must be of one kind (one code path).
  """
  kinds = set()
  bits = []
  for value in values:
    if isinstance(value, float):
      kinds.add(('python', 'float', None))
      bits.append(value.hex())
    elif isinstance(value, jax.Array) and value.dtype == jnp.float32 and (
        not value.shape):
      kinds.add(('jax', 'float32', bool(value.weak_type)))
      bits.append(f'{int(np.asarray(value).view(np.uint32)):08x}')
    else:
      raise ValueError(f'expected a Python float or a float32 jax scalar, '
                       f'got {type(value).__name__} {np.shape(value)}')
  if len(kinds) != 1:
    raise ValueError(f'values of several kinds: {sorted(kinds, key=str)}')
  kind, dtype, weak_type = kinds.pop()
  return {'kind': kind, 'dtype': dtype, 'weak_type': weak_type, 'bits': bits}


def values_of(description) -> np.ndarray:
  """The float64 values a ``describe`` result holds."""
  if description['dtype'] == 'float':
    return np.array([float.fromhex(b) for b in description['bits']])
  words = np.array([int(b, 16) for b in description['bits']], np.uint32)
  return words.view(np.float32).astype(np.float64)
