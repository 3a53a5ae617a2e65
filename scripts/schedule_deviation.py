"""How far are stock Optax schedules from flax 0.5.3's ``lr_schedule``?

``flax.training.lr_schedule`` went away with ``flax.optim``;
``flax_optim_rules.lr_schedule`` keeps it bit for bit. This script measures
the nearest stock Optax spelling of each helper, with and without warmup,
against the golden values real flax 0.5.3 computed
(``tests/golden/schedules.json``, written by
``tests/golden/generate_schedules.py``; no oracle needed here):

* the stock schedule runs under ``jax.jit`` on ``jnp.int32`` step counts (as
  Optax calls it) and is compared with flax 0.5.3's jitted values at every
  step of the grid, ``0..3 * steps_per_epoch``; for the cosine, the steps up
  to ``halfcos_epochs`` (after it flax's wave rises again, Optax's stays 0);
* the figure per spelling is the largest relative deviation
  ``|optax - flax| / |flax|`` over its cases and steps (where flax gives 0,
  any non-zero Optax value counts as the deviation ``inf``).

The figures are quoted in ``compat/codemod/_removals.py`` (what ``scan`` and
``migrate`` report); ``tests/test_lr_schedule.py`` checks that the quoted
text is what this script measures. Run (a few seconds)::

  python scripts/schedule_deviation.py
"""

import json
import math
import os
import sys
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))

from golden import schedule_cases

SCHEDULES_JSON = os.path.join(ROOT, 'tests', 'golden', 'schedules.json')


class Spelling(NamedTuple):
  text: str  # how the report names it
  build: Callable[..., Callable]  # the case's kwargs -> the Optax schedule


def _warmup_steps(kwargs):
  return kwargs['warmup_length'] * kwargs['steps_per_epoch']


def _piecewise(kwargs, offset=0):
  """Optax drops at the boundary step, flax after it: one step later."""
  boundaries, previous = {}, 1.0
  for epoch, factor in kwargs['lr_sched_steps']:
    last_step = int(np.round(epoch * kwargs['steps_per_epoch']))
    boundaries[last_step + 1 - offset] = factor / previous
    previous = factor
  return optax.piecewise_constant_schedule(kwargs['base_learning_rate'],
                                           boundaries)


def _halfcos_steps(kwargs):
  return kwargs['halfcos_epochs'] * kwargs['steps_per_epoch']


# (helper, with warmup) -> the nearest stock spelling.
SPELLINGS = {
    ('constant', False): Spelling(
        'optax.constant_schedule(base)',
        lambda kw: optax.constant_schedule(kw['base_learning_rate'])),
    ('constant', True): Spelling(
        'optax.linear_schedule(0., base, warmup_steps)',
        lambda kw: optax.linear_schedule(0., kw['base_learning_rate'],
                                         _warmup_steps(kw))),
    ('stepped', False): Spelling(
        'optax.piecewise_constant_schedule(base, {boundary_step + 1: '
        'factor / previous_factor})', _piecewise),
    ('stepped', True): Spelling(
        'optax.join_schedules([optax.linear_schedule(0., base, '
        'warmup_steps), the piecewise schedule shifted by warmup_steps], '
        '[warmup_steps])',
        lambda kw: optax.join_schedules(
            [optax.linear_schedule(0., kw['base_learning_rate'],
                                   _warmup_steps(kw)),
             _piecewise(kw, offset=_warmup_steps(kw))],
            [_warmup_steps(kw)])),
    ('cosine', False): Spelling(
        'optax.cosine_decay_schedule(base, halfcos_steps)',
        lambda kw: optax.cosine_decay_schedule(kw['base_learning_rate'],
                                               _halfcos_steps(kw))),
    ('cosine', True): Spelling(
        'optax.warmup_cosine_decay_schedule(0., base, warmup_steps, '
        'halfcos_steps)',
        lambda kw: optax.warmup_cosine_decay_schedule(
            0., kw['base_learning_rate'], _warmup_steps(kw),
            _halfcos_steps(kw))),
}
HELPER_ORDER = ('constant', 'stepped', 'cosine')


def _compared_steps(case) -> list:
  steps = schedule_cases.steps(case)
  if case['helper'] == 'cosine':
    return [s for s in steps if s <= _halfcos_steps(case['kwargs'])]
  return steps


def _relative(got: float, expected: float) -> float:
  if expected == 0:
    return 0.0 if got == 0 else math.inf
  return abs(got - expected) / abs(expected)


def measure(golden=None) -> dict:
  """``{(helper, with warmup): largest relative deviation}`` over the grid."""
  if golden is None:
    with open(SCHEDULES_JSON, encoding='utf-8') as f:
      golden = json.load(f)
  deviations = {key: 0.0 for key in SPELLINGS}
  for case in schedule_cases.CASES:
    kwargs = case['kwargs']
    key = (case['helper'], kwargs.get('warmup_length', 0.0) > 0.0)
    schedule = jax.jit(SPELLINGS[key].build(kwargs))
    flax_values = schedule_cases.values_of(golden['results'][case['name']]
                                           ['jit'])
    for step in _compared_steps(case):
      got = float(np.float32(schedule(jnp.int32(step))))
      deviations[key] = max(deviations[key],
                            _relative(got, float(flax_values[step])))
  return deviations


def phrase(deviation: float) -> str:
  """How the report states a measured deviation."""
  if deviation == 0:
    return 'is bit-identical'
  return f'deviates by up to {deviation:.1e} relative'


def main() -> int:
  deviations = measure()
  for helper in HELPER_ORDER:
    print(f'create_{helper}_learning_rate_schedule')
    for warmup in (False, True):
      spelling = SPELLINGS[(helper, warmup)]
      label = 'with warmup' if warmup else 'no warmup'
      print(f'  {label:11s}  {spelling.text} '
            f'{phrase(deviations[(helper, warmup)])}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
