"""Fidelity: every legacy algorithm tracks real flax 0.5.3 over 100 steps.

Each case of ``golden/cases.py`` runs through ``legacy_optim`` with the same
params, gradient sequence and per-step overrides as the golden data written
by real flax 0.5.3 (``golden/generate_oracle.py``). Metric: the relative
error of the accumulated update, all leaves, float64. Bound: 1e-6, or 1.5x
the case's floor (flax 0.5.3's own rules on today's JAX vs real flax 0.5.3,
``golden/floors.json``) where that is higher; a floor of exactly 0 demands
bit identity. The final optimizer state must also have flax 0.5.3's
checkpoint layout and agree to the same kind of bound.

Regenerate the data with ``tox -e golden`` then ``tox -e golden-floor``.
"""

import functools

import chex
from golden import cases
from golden import runner
from golden import store
import numpy as np
import pytest

import legacy_optim
from legacy_optim import traverse_util

GOLDEN = store.Golden()
FLOORS = store.load_floors()['cases']

# Every algorithm flax 0.5.3 shipped, plus the composites.
ALGORITHMS = ('GradientDescent', 'Momentum', 'Adam', 'AdaBelief', 'Adadelta',
              'Adafactor', 'Adagrad', 'LAMB', 'LARS', 'RMSProp', 'WeightNorm',
              'MultiOptimizer')


# The default run keeps each algorithm's most involved case, which varies
# one thing more (bfloat16, per-step rates, zero gradients, nested lists,
# factored shapes, wrappers, frozen leaves, focus); the whole grid runs with
# -m slow. adam_custom (eps=1e-6) is the Adam case where eps inside the
# square root lands outside the bound (the others sit 7e-8 to 9e-8 away).
REPRESENTATIVE = frozenset({
    'sgd_bf16_lr_override_weak', 'sgd_nested_lists', 'momentum_nesterov_wd',
    'adam_lr_override', 'adam_custom', 'adabelief_custom', 'adadelta',
    'adagrad_bf16',
    'lamb_zero_grads', 'lars_nesterov_wd', 'rmsprop_centered',
    'adafactor_momentum_bf16_buffers', 'adafactor_custom',
    'weightnorm_sgd_lr_override', 'multi_momentum_sgd_frozen',
    'multi_sgd_momentum_hyper_params_override',
    'focus_adam'})


def _case_params():
  unknown = REPRESENTATIVE - set(cases.CASES_BY_NAME)
  assert not unknown, f'REPRESENTATIVE names no case: {sorted(unknown)}'
  return [pytest.param(case, id=case['name'],
                       marks=() if case['name'] in REPRESENTATIVE
                       else pytest.mark.slow)
          for case in cases.CASES]


@functools.lru_cache(maxsize=None)
def _shim_result(name: str) -> runner.Result:
  return runner.run_case(legacy_optim, traverse_util, cases.CASES_BY_NAME[name])


def _checked_result(case) -> runner.Result:
  """The shim's run, after checking the golden data is for these inputs."""
  name = case['name']
  entry = GOLDEN.entries[name]
  assert entry['spec_digest'] == store.spec_digest(case), (
      f'{name}: the case changed since the golden data was written; run '
      '`tox -e golden` and `tox -e golden-floor`.')
  assert FLOORS[name]['spec_digest'] == entry['spec_digest'], (
      f'{name}: floors.json is older than the golden data; run '
      '`tox -e golden-floor`.')
  result = _shim_result(name)
  assert result.params_digest == entry['params_digest'], (
      f'{name}: the initial params differ from those flax 0.5.3 was given '
      '(NumPy stream or bfloat16 conversion changed); regenerate the data.')
  assert result.grads_digest == entry['grads_digest'], (
      f'{name}: the gradients differ from those flax 0.5.3 was given '
      '(NumPy stream or bfloat16 conversion changed); regenerate the data.')
  return result


def _arrays(flat: dict) -> dict:
  return {k: v for k, v in flat.items() if isinstance(v, np.ndarray)}


def _assert_tracks(name, what, expected, actual, error, floor):
  """Error within the bound; bit identity where the floor is exactly 0."""
  if floor == 0:
    try:
      chex.assert_trees_all_equal(_arrays(actual), _arrays(expected))
    except AssertionError as e:
      pytest.fail(
          f'{name}: {what} not bit-identical to flax 0.5.3 although the floor '
          f'is 0 (error {error:.3e}).\n{e}')
  limit = store.bound(floor)
  assert error <= limit, (
      f'{name}: {what} error {error:.3e} > bound {limit:.3e} (floor '
      f'{floor:.3e}: flax 0.5.3 rules on today\'s JAX vs real flax 0.5.3).')


def test_grid_covers_every_algorithm():
  used = {algo for case in cases.CASES for algo in cases.algorithms(case)}
  assert set(ALGORITHMS) <= used, sorted(set(ALGORITHMS) - used)
  assert any(case['focus'] for case in cases.CASES)
  assert {case['dtype'] for case in cases.CASES} == {'float32', 'bfloat16'}
  ranks = {len(shape) for case in cases.CASES
           for _, shape in cases.leaf_paths(case['tree'])}
  assert ranks == {0, 1, 2, 3, 4}


def test_golden_data_matches_the_grid():
  names = [case['name'] for case in cases.CASES]
  assert sorted(GOLDEN.entries) == sorted(names), (
      'oracle.json and cases.py list different cases; run `tox -e golden`.')
  assert sorted(FLOORS) == sorted(names), (
      'floors.json and cases.py list different cases; run '
      '`tox -e golden-floor`.')


@pytest.mark.parametrize('case', _case_params())
def test_accumulated_update_tracks_flax_053(case):
  name = case['name']
  result = _checked_result(case)
  expected = GOLDEN.params(name)
  problems = store.layout_differences(expected, result.final)
  assert not problems, (
      f'{name}: params differ in structure or dtype: ' + '; '.join(problems))
  error = store.update_error(result.initial, expected, result.final)
  _assert_tracks(name, 'accumulated update', expected, result.final, error,
                 FLOORS[name]['params'])


@pytest.mark.parametrize('case', _case_params())
def test_final_state_matches_flax_053(case):
  name = case['name']
  result = _checked_result(case)
  expected = GOLDEN.state(name)
  problems = store.layout_differences(expected, result.state)
  assert not problems, (
      f'{name}: the state dict differs from flax 0.5.3\'s checkpoint layout: '
      + '; '.join(problems))
  error = store.state_error(expected, result.state)
  _assert_tracks(name, 'state', expected, result.state, error,
                 FLOORS[name]['state'])
