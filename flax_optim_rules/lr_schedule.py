"""flax 0.5.3's ``flax.training.lr_schedule``, bit for bit, on today's jax.

flax removed the module together with ``flax.optim``; ``flax-optim-compat
migrate`` points imports of it here. Each factory takes the legacy arguments
(epochs are converted to steps with ``steps_per_epoch``) and returns
``schedule(step) -> learning rate``, usable as an Optax schedule. The values,
their dtypes and weak types are flax 0.5.3's for a Python ``int`` step and
for a ``jnp.int32`` one, eager or jitted (``tests/golden/schedules.json``):
the arithmetic runs in the same order and precision (Python floats stay
float64 until jax sees them, NumPy's half-to-even rounding of boundaries).

Stock Optax spellings round differently or differ at the edges (the stepped
decay applies one step earlier, the cosine stays at zero after
``halfcos_epochs``); ``scripts/schedule_deviation.py`` measures them.
"""

from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

Schedule = Callable[..., object]


def _with_warmup(learning_rate, step, steps_per_epoch, warmup_length):
  """``learning_rate`` scaled by a ramp from 0 to 1 over ``warmup_length``
  epochs (none when it is 0)."""
  if warmup_length > 0.0:
    # Two divisions, in this order: their rounding is part of the values.
    ramp = step / float(warmup_length) / steps_per_epoch
    return learning_rate * jnp.minimum(1., ramp)
  return learning_rate


def create_constant_learning_rate_schedule(
    base_learning_rate, steps_per_epoch, warmup_length=0.0) -> Schedule:
  """``base_learning_rate`` at every step, after an optional linear warmup.

  Args:
    base_learning_rate: the rate after warmup.
    steps_per_epoch: steps in one epoch.
    warmup_length: epochs over which the rate ramps linearly from 0 (none
      when 0).

  Returns:
    ``schedule(step)``. Without warmup it returns ``base_learning_rate``
    itself (a Python float stays one).
  """

  def schedule(step):
    return _with_warmup(base_learning_rate, step, steps_per_epoch,
                        warmup_length)

  return schedule


def create_stepped_learning_rate_schedule(
    base_learning_rate, steps_per_epoch,
    lr_sched_steps: Sequence[Sequence[float]],
    warmup_length=0.0) -> Schedule:
  """A rate that drops to given fractions of the base after given epochs.

  Args:
    base_learning_rate: the rate before the first drop.
    steps_per_epoch: steps in one epoch.
    lr_sched_steps: ``[[epoch, factor], ...]`` in increasing epochs: from the
      step after ``round(epoch * steps_per_epoch)`` (NumPy's rounding, half
      to even) on, the rate is ``base_learning_rate * factor``.
    warmup_length: epochs over which the rate is ramped linearly from 0
      (none when 0).

  Returns:
    ``schedule(step)``, a float32 array (not weakly typed: the rates are a
    NumPy table cast to float32).
  """
  epochs = np.array([epoch for epoch, _ in lr_sched_steps])
  last_steps = np.round(epochs * steps_per_epoch).astype(int)
  # The table is computed in float64 and rounded once, to float32, by jax.
  factors = [1.0] + [factor for _, factor in lr_sched_steps]
  rates = np.array(factors) * base_learning_rate

  def schedule(step):
    drops_passed = jnp.sum(last_steps < step)
    rate = jnp.take(rates, drops_passed)
    return _with_warmup(rate, step, steps_per_epoch, warmup_length)

  return schedule


def create_cosine_learning_rate_schedule(
    base_learning_rate, steps_per_epoch, halfcos_epochs,
    warmup_length=0.0) -> Schedule:
  """A rate following half a cosine wave from the base to 0, times a warmup.

  Args:
    base_learning_rate: the rate at step 0 (before the warmup factor).
    steps_per_epoch: steps in one epoch.
    halfcos_epochs: epochs of the half wave; the rate is 0 at its end and
      rises again after it (the wave continues).
    warmup_length: epochs over which the rate is scaled by a linear ramp
      from 0 (none when 0); the ramp multiplies the cosine, it does not
      delay it.

  Returns:
    ``schedule(step)``, a weakly typed float32 array.
  """
  half_wave_steps = halfcos_epochs * steps_per_epoch

  def schedule(step):
    # ``jnp.pi`` is a Python float: a Python step keeps the phase in float64.
    phase = step * jnp.pi / half_wave_steps
    fraction = jnp.cos(phase) * 0.5 + 0.5
    return _with_warmup(base_learning_rate * fraction, step, steps_per_epoch,
                        warmup_length)

  return schedule


__all__ = (
    'create_constant_learning_rate_schedule',
    'create_cosine_learning_rate_schedule',
    'create_stepped_learning_rate_schedule',
)
