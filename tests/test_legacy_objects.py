"""flax 0.5.3's own Optimizer objects: the same pytree, pickles and tree maps.

Against data recorded from real flax 0.5.3 (``golden/generate_objects.py``,
cases in ``golden/object_cases.py``): for every algorithm, WeightNorm,
MultiOptimizer and ``focus`` the shim's ``Optimizer`` has the same key paths,
leaf order, node types, dtypes and shapes (``.state.param_states['w']
.grad_ema``); flax 0.5.3's flat leaves unflatten into the shim's structure
field by field; a ``jax.vmap`` with an ``OptimizerState(None, 0)`` prefix
tree and an ``is_leaf``-stopped ``tree_map`` see what flax 0.5.3 saw; and
pickles written by flax 0.5.3 load and keep training to flax's numbers.

Regenerate the data with
``$ORACLE_PYTHON tests/golden/generate_objects.py``.
"""

import functools
import json
import os
import pickle

import chex
from golden import cases
from golden import object_cases
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import legacy_optim
from legacy_optim import traverse_util

_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'golden')
with open(os.path.join(_HERE, 'objects.json')) as _f:
  GOLDEN = json.load(_f)
ARRAYS = np.load(os.path.join(_HERE, 'objects.npz'))
PICKLES = np.load(os.path.join(_HERE, 'objects_pickles.npz'))

CASES = object_cases.CASES
# One step of flax 0.5.3 (jax 0.4.13) vs the shim: a few float32 roundings.
RTOL = 1e-5
ATOL = 1e-6


def _ids(case):
  return case['name']


def _recorded(case) -> dict:
  return GOLDEN['cases'][case['name']]


def _arrays(case, kind: str) -> list:
  out = []
  while object_cases.flat_key(case['name'], kind, len(out)) in ARRAYS:
    out.append(ARRAYS[object_cases.flat_key(case['name'], kind, len(out))])
  return out


def _as_jax(tree):
  return jax.tree_util.tree_map(jnp.asarray, tree)


def _create(case):
  opt_def = cases.build_optimizer_def(legacy_optim, traverse_util, case)
  focus = cases.build_focus(traverse_util, case)
  return opt_def.create(_as_jax(object_cases.params(case)), focus=focus)


def _step(case, optimizer, step: int):
  # Op by op: compiling each case's step would cost ~1 s a case, and the
  # pytree a step returns does not depend on it.
  with jax.disable_jit():
    return optimizer.apply_gradient(_as_jax(object_cases.grads(case, step)))


@functools.cache
def _created_and_stepped(name: str):
  """The shim's optimizer for case ``name`` and its first step (shared)."""
  case = object_cases.CASES_BY_NAME[name]
  created = _create(case)
  return created, _step(case, created, 0)


# ------------------------------------------------------------ neutral form
def _neutral_step(key) -> list:
  """A jax key-path entry as a neutral step (see ``object_cases``)."""
  if isinstance(key, jax.tree_util.GetAttrKey):
    return ['attr', key.name]
  if isinstance(key, jax.tree_util.DictKey):
    return ['key', key.key]
  if isinstance(key, jax.tree_util.SequenceKey):
    return ['index', key.idx]
  raise AssertionError(
      f'{key!r}: flax 0.5.3 objects flatten to attribute, dict and sequence '
      'keys only')


def _dtype_and_shape(leaf) -> dict:
  return {'dtype': np.asarray(leaf).dtype.name, 'shape': list(np.shape(leaf))}


def neutral(tree, describe_leaf=_dtype_and_shape) -> dict:
  """The neutral form of ``tree`` from jax's own key paths."""
  flat, _ = jax.tree_util.tree_flatten_with_path(
      tree, is_leaf=object_cases.is_empty_node)
  leaves, empty = [], []
  for keys, node in flat:
    path = [_neutral_step(key) for key in keys]
    record = {'path': path,
              'node_types': object_cases.node_types(tree, path)}
    if object_cases.is_empty_node(node):
      empty.append(dict(record, type=type(node).__name__))
    else:
      leaves.append(dict(record, **describe_leaf(node)))
  return {'leaves': leaves, 'empty': empty}


def _describe_entry(entry) -> str:
  path = ''.join(f'.{key}' if kind == 'attr' else f'[{key!r}]'
                 for kind, key in entry['path'])
  rest = {k: v for k, v in entry.items() if k != 'path'}
  return f'{path or "<root>"} {rest}'


def form_differences(expected: dict, got: dict) -> list:
  """Where two neutral forms differ (order included), one line each."""
  problems = []
  for part in ('leaves', 'empty'):
    want, have = expected[part], got[part]
    for i in range(max(len(want), len(have))):
      if i >= len(have):
        problems.append(f'{part} #{i}: missing {_describe_entry(want[i])}')
      elif i >= len(want):
        problems.append(f'{part} #{i}: unexpected {_describe_entry(have[i])}')
      elif want[i] != have[i]:
        problems.append(f'{part} #{i}: expected {_describe_entry(want[i])}, '
                        f'got {_describe_entry(have[i])}')
  return problems


def assert_same_form(expected: dict, got: dict):
  problems = form_differences(expected, got)
  assert not problems, 'pytree differs from flax 0.5.3:\n' + '\n'.join(
      problems[:20])


# ------------------------------------------------------------------ tests
def test_every_algorithm_and_composite_is_recorded():
  recorded = set()
  for case in CASES:
    recorded.update(cases.algorithms(case))
    if case['focus'] is not None:
      recorded.add('focus')
  assert recorded == {
      'GradientDescent', 'Momentum', 'Adam', 'AdaBelief', 'Adadelta',
      'Adafactor', 'Adagrad', 'LAMB', 'LARS', 'RMSProp', 'WeightNorm',
      'MultiOptimizer', 'focus'}
  assert set(GOLDEN['cases']) == set(object_cases.CASES_BY_NAME)
  assert GOLDEN['generator']['flax'] == '0.5.3'


@pytest.mark.parametrize('case', CASES, ids=_ids)
def test_pytree_is_flax_053s(case):
  expected = _recorded(case)['structure']
  created, stepped = _created_and_stepped(case['name'])
  assert_same_form(expected, neutral(created))
  assert_same_form(expected, neutral(stepped))


def test_column_wise_layout_is_reported():
  # The check itself: a per-field (column-wise) layout,
  # .param_states['grad_ema']['dense']['bias'], must be reported.
  case = object_cases.CASES_BY_NAME['adam']
  optimizer, _ = _created_and_stepped(case['name'])
  param_states = optimizer.state.param_states
  column_wise = optimizer.replace(state=optimizer.state.replace(param_states={
      'grad_ema': jax.tree_util.tree_map(lambda s: s.grad_ema, param_states,
                                         is_leaf=object_cases.is_param_state),
      'grad_sq_ema': jax.tree_util.tree_map(
          lambda s: s.grad_sq_ema, param_states,
          is_leaf=object_cases.is_param_state),
  }))
  problems = form_differences(_recorded(case)['structure'],
                              neutral(column_wise))
  assert any(".param_states['dense']['bias'].grad_ema" in line
             for line in problems), problems


@pytest.mark.parametrize('case', CASES, ids=_ids)
def test_flax_053_flat_leaves_unflatten_field_by_field(case):
  recorded = _recorded(case)['structure']
  flax_leaves = _arrays(case, 'stepped')
  _, stepped = _created_and_stepped(case['name'])
  rebuilt = jax.tree_util.tree_structure(stepped).unflatten(flax_leaves)
  for leaf, value in zip(recorded['leaves'], flax_leaves):
    assert object_cases.at_path(rebuilt, leaf['path']) is value, (
        _describe_entry(leaf))
  # flax 0.5.3's numbers after one step, each field where flax had it.
  chex.assert_trees_all_close(stepped, rebuilt, rtol=RTOL, atol=ATOL)
  chex.assert_trees_all_equal(stepped.state.step, rebuilt.state.step)


@pytest.mark.parametrize('case', CASES, ids=_ids)
def test_is_leaf_stops_at_per_parameter_states(case):
  _, stepped = _created_and_stepped(case['name'])
  received = jax.tree_util.tree_map(object_cases.descriptor, stepped.state,
                                    is_leaf=object_cases.is_param_state)
  got = neutral(received, describe_leaf=lambda value: {'value': value})
  assert_same_form(_recorded(case)['is_leaf'], got)


@pytest.mark.parametrize('case', [c for c in CASES if c['vmap']], ids=_ids)
def test_vmap_with_optimizer_state_prefix_tree(case):
  created, stepped = _created_and_stepped(case['name'])
  result = object_cases.vmapped(object_cases.batched_state(created, stepped))
  assert_same_form(_recorded(case)['vmap'], neutral(result))
  expected = jax.tree_util.tree_structure(result).unflatten(
      _arrays(case, 'vmap'))
  chex.assert_trees_all_close(result, expected, rtol=RTOL, atol=ATOL)


# Pickles with NumPy leaves (``jax.device_get(optimizer)``). Those holding
# jax 0.4.13 arrays (also recorded) fail inside today's jax itself:
# ``jax._src.array._reconstruct_array`` passes the old ``named_shape`` to
# ``ShapedArray``.
@pytest.mark.parametrize('case', [c for c in CASES if c['pickle']], ids=_ids)
def test_flax_053_pickle_loads_and_keeps_training(case):
  assert _recorded(case)['pickle']['numpy'] == 'ok'
  data = PICKLES[f'{case["name"]}|numpy'].tobytes()
  optimizer = pickle.loads(data)

  assert type(optimizer) is legacy_optim.Optimizer
  assert type(optimizer.optimizer_def).__name__ == case['optimizer']['algo']
  assert type(optimizer.optimizer_def).__module__.startswith('legacy_optim.')
  structure = _recorded(case)['structure']
  assert (object_cases.paths(neutral(optimizer)) ==
          object_cases.paths(structure))
  param_states = jax.tree_util.tree_leaves(
      optimizer.state.param_states, is_leaf=object_cases.is_param_state)
  assert all(type(s).__module__.startswith('legacy_optim.')
             for s in param_states if object_cases.is_param_state(s))
  flax_leaves = _arrays(case, 'stepped')
  chex.assert_trees_all_equal(jax.tree_util.tree_leaves(optimizer),
                              flax_leaves)

  following = _step(case, optimizer, 1)
  next_record = _recorded(case)['pickle']['next']
  assert (object_cases.paths(neutral(following)) ==
          object_cases.paths(next_record))
  expected = jax.tree_util.tree_structure(following).unflatten(
      _arrays(case, 'next'))
  # The step's dtype is NumPy's business (flax 0.5.3 on NumPy 1.x made the
  # unpickled int32 step int64); its value is flax's.
  assert int(following.state.step) == int(expected.state.step) == 2
  chex.assert_trees_all_close(following.replace(state=following.state.replace(
      step=expected.state.step)), expected, rtol=RTOL, atol=ATOL)
