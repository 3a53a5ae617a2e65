"""Overflow and half-precision edges: legacy_optim does what flax 0.5.3 did.

Each case of ``golden/edge_cases.py`` (every algorithm; float32, float16 and
bfloat16 leaves holding gradients whose squares overflow, the largest finite
gradient, subnormal and zero gradients, params near the dtype's maximum) runs
two steps through ``legacy_optim`` (jitted, eager) and through
``opt_def.to_optax()``, and is compared with real flax 0.5.3's jitted run
(``golden/edges.{npz,json}``, written by ``golden/generate_edges.py``).

Every nan and inf must sit where flax 0.5.3 put it (e.g. Adam leaves an
element whose squared gradient overflowed where it was, as flax did, instead
of turning it into nan). Finite elements agree to ``ceil(1.5 * floor)``
ulps per leaf, where the floor is what flax 0.5.3's own rules reach on
today's JAX (``golden/edge_floors.json``, ``generate_edge_floors.py``); a
floor of 0 demands bit identity. Where XLA computes float16 natively
(AVX512-FP16, see ``_float16_isa``) float16 params get one rounding per step
of slack instead. Only the Adam case runs by default (the
others take a few seconds each to compile): ``pytest -m slow`` runs them.
"""

import functools
import json

import _float16_isa
from golden import edge_cases
from golden import edge_metric
from golden import runner
from golden import store
import jax
import numpy as np
import optax
import pytest

import legacy_optim
from legacy_optim import traverse_util

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

GOLDEN = store.Golden(store.EDGES_NPZ, store.EDGES_JSON)
with open(store.EDGE_FLOORS_JSON) as _f:
  FLOORS = json.load(_f)['cases']

# Every algorithm flax 0.5.3 shipped (MultiOptimizer only routes leaves).
ALGORITHMS = ('GradientDescent', 'Momentum', 'Adam', 'AdaBelief', 'Adadelta',
              'Adafactor', 'Adagrad', 'LAMB', 'LARS', 'RMSProp', 'WeightNorm')


# The default run covers the case of the original report (Adam, whose
# overflowed second moment turned params into nan) on every route; the rest
# of the grid compiles a few seconds per case and runs with `-m slow`.
FAST_CASES = ('adam',)


def _grid():
  return [
      pytest.param(case, id=case['name'],
                   marks=() if case['name'] in FAST_CASES else
                   pytest.mark.slow) for case in edge_cases.EDGE_CASES]


def _oracle(case):
  """flax 0.5.3's jitted run, after checking it is for these inputs."""
  name = edge_cases.entry_name(case, 'jit')
  entry = GOLDEN.entries[name]
  assert entry['spec_digest'] == store.spec_digest(
      edge_cases.entry_spec(case, 'jit')), (
          f'{name}: the case changed since the golden data was written; run '
          'golden/generate_edges.py and golden/generate_edge_floors.py.')
  assert FLOORS[case['name']]['spec_digest'] == entry['spec_digest'], (
      f'{name}: edge_floors.json is older than the golden data; run '
      'golden/generate_edge_floors.py.')
  return entry, GOLDEN.params(name), GOLDEN.state(name)


@functools.lru_cache(maxsize=None)
def _legacy_run(name: str, jit: bool) -> runner.Result:
  return runner.run_edge_case(legacy_optim, traverse_util,
                              edge_cases.EDGE_CASES_BY_NAME[name], jit=jit)


def _optax_params(case) -> dict:
  """The params after each step of a raw Optax loop on ``to_optax()``."""
  from golden import cases
  tx = cases.build_optimizer_def(legacy_optim, traverse_util,
                                 case).to_optax()
  params, grad_steps = runner.edge_inputs()
  opt_state = tx.init(params)

  @jax.jit
  def step(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  out = {}
  for t, grads in enumerate(grad_steps):
    params, opt_state = step(params, opt_state, grads)
    out.update(runner.edge_step_params(t, params))
  return out


def _float16_within_slack(path, expected, found, initial) -> bool:
  """On machines with native float16 (``_float16_isa``): a float16 param
  leaf within one rounding of its largest magnitude so far per step; float16
  state leaves are held to their nan/inf placement only (the params after
  step 2 carry what the state did)."""
  if not path.startswith('step'):
    return True
  steps = int(path.split('/', 1)[0][len('step'):])
  leaf = path.split('/', 1)[1]
  magnitudes = np.abs(initial[leaf].astype(np.float64))
  for t in range(1, steps + 1):
    magnitudes = np.fmax(magnitudes, np.abs(
        expected[f'step{t}/{leaf}'].astype(np.float64)))
  e64, g64 = expected[path].astype(np.float64), found[path].astype(np.float64)
  finite = np.isfinite(e64)
  slack = _float16_isa.float16_slack(np.where(np.isfinite(magnitudes),
                                              magnitudes, 0.), steps)
  return bool(np.all(np.abs(g64 - e64)[finite] <= slack[finite]))


def _assert_like_flax(name, what, expected, found, floors):
  ulps = edge_metric.leaf_ulps(expected, found)
  if _float16_isa.native_float16():
    initial = runner.edge_initial_params()
    ulps = {path: (0 if distance and expected[path].dtype == np.float16 and
                   _float16_within_slack(path, expected, found, initial)
                   else distance) for path, distance in ulps.items()}
  assert set(ulps) == set(floors), (
      f'{name}: {what} leaves differ from the floors\' '
      f'({sorted(set(ulps) ^ set(floors))}).')
  problems = []
  for path, distance in ulps.items():
    if distance is None:
      problems.append(
          f'{path}: nan/inf elements differ: flax 0.5.3 '
          f'{expected[path].ravel().tolist()}, found '
          f'{found[path].ravel().tolist()}')
    elif distance > edge_metric.bound(floors[path]):
      problems.append(
          f'{path}: {distance} ulp (bound {edge_metric.bound(floors[path])}, '
          f'floor {floors[path]}): flax 0.5.3 '
          f'{expected[path].ravel().tolist()}, found '
          f'{found[path].ravel().tolist()}')
  assert not problems, f'{name}: {what}:\n  ' + '\n  '.join(problems)


def test_edge_grid_covers_every_algorithm_and_dtype():
  used = set()
  for case in edge_cases.EDGE_CASES:
    spec = case['optimizer']
    used.add(spec['algo'])
    if 'inner' in spec:
      used.add(spec['inner']['algo'])
  assert used == set(ALGORITHMS), sorted(used ^ set(ALGORITHMS))
  assert {dtype for _, dtype, _, _ in edge_cases.leaves()} == {
      'float32', 'float16', 'bfloat16'}


def test_edge_data_matches_the_grid():
  expected = {edge_cases.entry_name(case, mode)
              for case in edge_cases.EDGE_CASES for mode in edge_cases.MODES}
  assert set(GOLDEN.entries) == expected, (
      'edges.json and edge_cases.py list different cases; run '
      'golden/generate_edges.py.')
  assert set(FLOORS) == set(edge_cases.EDGE_CASES_BY_NAME), (
      'edge_floors.json and edge_cases.py list different cases; run '
      'golden/generate_edge_floors.py.')
  # A floor never excuses a misplaced nan or inf.
  assert all(floor is not None for case in FLOORS.values()
             for kind in ('params', 'state')
             for floor in case[kind].values())


@pytest.mark.parametrize('case', _grid())
def test_jitted_steps_match_flax_053(case):
  entry, params, state = _oracle(case)
  result = _legacy_run(case['name'], jit=True)
  assert result.params_digest == entry['params_digest']
  assert result.grads_digest == entry['grads_digest']
  floors = FLOORS[case['name']]
  _assert_like_flax(case['name'], 'params', params, result.final,
                    floors['params'])
  _assert_like_flax(case['name'], 'state', state, result.state,
                    floors['state'])


@pytest.mark.parametrize('case', _grid())
def test_eager_steps_match_flax_053(case):
  _, params, _ = _oracle(case)
  result = _legacy_run(case['name'], jit=False)
  _assert_like_flax(case['name'], 'eager params', params, result.final,
                    FLOORS[case['name']]['params'])


@pytest.mark.parametrize('case', _grid())
def test_to_optax_steps_match_flax_053(case):
  _, params, _ = _oracle(case)
  _assert_like_flax(case['name'], 'to_optax() params', params,
                    _optax_params(case), FLOORS[case['name']]['params'])


# Both branches of _assert_like_flax on every machine: which one the grid
# takes depends on the CPU (_float16_isa), so each is driven here with the
# predicate set and synthetic flat dicts (float16 param 'h' and float32 param
# 'f' after steps 1 and 2, and a float16 state leaf 's').
_INITIAL = {'h': np.asarray([1.5, -0.25], np.float16),
            'f': np.asarray([0.1, 2.0], np.float32)}
_FLOORS = {'step1/h': 0, 'step1/f': 0, 'step2/h': 0, 'step2/f': 0, 's': 0}


def _ulps_up(values, n):
  for _ in range(n):
    values = np.nextafter(values, np.asarray(np.inf, values.dtype))
  return values


def _edge_outputs():
  """(expected, found): identical copies."""
  expected = {f'step{t}/{leaf}': value.copy() for t in (1, 2)
              for leaf, value in _INITIAL.items()}
  expected['s'] = np.asarray([3.0, 4.0], np.float16)
  return expected, {path: value.copy() for path, value in expected.items()}


@pytest.fixture
def synthetic_inputs(monkeypatch):
  monkeypatch.setattr(runner, 'edge_initial_params', lambda: dict(_INITIAL))


@pytest.mark.parametrize('native', [False, True], ids=['per_op', 'fused'])
def test_like_flax_passes_identical_leaves(monkeypatch, synthetic_inputs,
                                           native):
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: native)
  expected, found = _edge_outputs()
  _assert_like_flax('synthetic', 'params', expected, found, _FLOORS)


@pytest.mark.parametrize('native', [False, True], ids=['per_op', 'fused'])
@pytest.mark.parametrize('path', ['step1/h', 'step2/h', 's'])
def test_like_flax_float16_one_ulp(monkeypatch, synthetic_inputs, native,
                                   path):
  """Per op, a floor of 0 demands the same bits; fused, a float16 param may
  be one rounding per step away, a float16 state leaf anything finite."""
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: native)
  expected, found = _edge_outputs()
  found[path] = _ulps_up(found[path], 1)
  if native:
    _assert_like_flax('synthetic', 'params', expected, found, _FLOORS)
  else:
    with pytest.raises(AssertionError, match=f'{path}: 1 ulp'):
      _assert_like_flax('synthetic', 'params', expected, found, _FLOORS)


def test_like_flax_fused_slack_grows_one_rounding_per_step(
    monkeypatch, synthetic_inputs):
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: True)
  expected, found = _edge_outputs()
  found['step2/h'] = _ulps_up(found['step2/h'], 2)
  _assert_like_flax('synthetic', 'params', expected, found, _FLOORS)
  found['step1/h'] = _ulps_up(found['step1/h'], 2)
  with pytest.raises(AssertionError, match='step1/h: 2 ulp'):
    _assert_like_flax('synthetic', 'params', expected, found, _FLOORS)


@pytest.mark.parametrize('native', [False, True], ids=['per_op', 'fused'])
@pytest.mark.parametrize('change', ['float32 ulp', 'float16 nan', 'state inf'])
def test_like_flax_fails_whatever_the_isa(monkeypatch, synthetic_inputs,
                                          native, change):
  """What fused float16 arithmetic cannot explain fails on both branches."""
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: native)
  expected, found = _edge_outputs()
  path = {'float32 ulp': 'step1/f', 'float16 nan': 'step2/h',
          'state inf': 's'}[change]
  if change == 'float32 ulp':
    found[path] = _ulps_up(found[path], 1)
  else:
    found[path] = found[path].copy()
    found[path][0] = np.nan if change == 'float16 nan' else np.inf
  with pytest.raises(AssertionError, match=path):
    _assert_like_flax('synthetic', 'params', expected, found, _FLOORS)
