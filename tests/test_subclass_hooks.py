"""User subclasses see what flax 0.5.3 passed to every documented hook.

``tests/golden/hook_cases.py`` overrides each hook of flax 0.5.3's classes
(``OptimizerDef`` and a built-in's per-leaf and tree hooks,
``update_hyper_params``, ``state_dict``, ``restore_state``; the same on
``MultiOptimizer`` and ``WeightNorm``; a traversal's ``iterate``/``update``
and a ``ModelParamTraversal``'s filter) and records every call: argument
types, tree structure, shapes, dtypes, values, the step's type and the
hyper-params object. ``hooks.json`` holds what REAL flax 0.5.3 recorded
(``generate_hooks.py``); here the same scenarios run on the shim.

Each test compares one hook of one scenario across all phases (create, eager
steps, jitted step, state_dict, restore); ``test_call_order`` compares the
interleaving of all hooks.
"""

import functools
import json
import math
import os
import warnings

from golden import hook_cases
import pytest

_GOLDEN = os.path.join(os.path.dirname(__file__), 'golden', 'hooks.json')
with open(_GOLDEN) as _f:
  ORACLE = json.load(_f)['scenarios']

# On the built-in, jitted fast path the filter of a ModelParamTraversal runs
# while the Optax partition labels are computed: it sees the same objects as
# flax.optim's did (each leaf as a ``_ShapeDtype``), not the same number of
# calls. See test_builtin_multi_filter_sees_flax_values.
_FAST_PATH = 'multi_filter_builtin'


@functools.lru_cache(maxsize=None)
def _shim_run(scenario):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    # Round trip through JSON: tuples and lists compare as flax's did.
    return json.loads(json.dumps(hook_cases.run(scenario)))


def _differences(expected, found, path=''):
  """Paths where two descriptions differ (floats to float32 accuracy)."""
  if isinstance(expected, float) and isinstance(found, float):
    close = math.isclose(expected, found, rel_tol=1e-5, abs_tol=1e-7)
    return [] if close else [f'{path}: {expected} != {found}']
  if type(expected) is not type(found):
    return [f'{path}: {expected!r:.300} != {found!r:.300}']
  if isinstance(expected, dict):
    if set(expected) != set(found):
      return [f'{path}: keys {sorted(expected)} != {sorted(found)}']
    return [d for k in expected
            for d in _differences(expected[k], found[k], f'{path}/{k}')]
  if isinstance(expected, list):
    if len(expected) != len(found):
      return [f'{path}: {len(expected)} items != {len(found)}']
    return [d for i, (e, f) in enumerate(zip(expected, found))
            for d in _differences(e, f, f'{path}[{i}]')]
  return [] if expected == found else [f'{path}: {expected!r} != {found!r}']


def _calls_of(run, hook):
  return {phase: [args for name, args in calls if name == hook]
          for phase, calls in run.items()}


def _hook_cases():
  return [(scenario, hook)
          for scenario, run in ORACLE.items() if scenario != _FAST_PATH
          for hook in sorted({name for calls in run.values()
                              for name, _ in calls})]


def test_every_scenario_was_recorded():
  assert sorted(ORACLE) == sorted(hook_cases.SCENARIOS)
  for run in ORACLE.values():
    assert sorted(run) == sorted(hook_cases.PHASES)


@pytest.mark.parametrize('scenario,hook', _hook_cases(),
                         ids=lambda x: x)
def test_hook_receives_what_flax_passed(scenario, hook):
  expected = _calls_of(ORACLE[scenario], hook)
  found = _calls_of(_shim_run(scenario), hook)
  differences = _differences(expected, found)
  assert not differences, (
      f'{scenario}: {hook} differs from flax 0.5.3 at\n  '
      + '\n  '.join(differences[:10]))


@pytest.mark.parametrize(
    'scenario', [s for s in hook_cases.SCENARIOS if s != _FAST_PATH])
def test_call_order(scenario):
  expected = {p: [name for name, _ in c] for p, c in ORACLE[scenario].items()}
  found = {p: [name for name, _ in c]
           for p, c in _shim_run(scenario).items()}
  assert found == expected


def _without_leaf_identity(description):
  """A filter call's value without the leaf's own value and owners."""
  value = dict(description['value'])
  if 'fields' in value:
    value['fields'] = {k: v for k, v in value['fields'].items()
                       if k in ('shape', 'dtype')}
  value.pop('value', None)
  return json.dumps([description['path']['value'], value], sort_keys=True)


def test_builtin_multi_filter_sees_flax_values():
  expected = _calls_of(ORACLE[_FAST_PATH], 'filter')
  found = _calls_of(_shim_run(_FAST_PATH), 'filter')
  for phase in hook_cases.PHASES:
    seen_by_flax = set(map(_without_leaf_identity, expected[phase]))
    seen_here = set(map(_without_leaf_identity, found[phase]))
    assert seen_here <= seen_by_flax, (phase, seen_here - seen_by_flax)
    # Every leaf's path is asked about whenever flax asked about it.
    assert ({json.loads(s)[0] for s in seen_here} ==
            {json.loads(s)[0] for s in seen_by_flax}), phase
