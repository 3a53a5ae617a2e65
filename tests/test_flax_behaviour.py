"""What flax 0.5.3 did with the inputs it accepted, and what its tests checked.

``golden/inputs.json`` holds flax 0.5.3's results for every algorithm given
Python numbers, NumPy float64/float32/int64 arrays and int32 params (with
float and with integer gradients), eager and
jitted, through ``Optimizer.apply_gradient`` and the def-level
``apply_gradient`` (``golden/generate_inputs.py``, run with the oracle). Each
case must come back with the same leaves: container kind, type, dtype, values.
"""

import json
import os
import warnings

from flax import serialization
from golden import input_cases
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import legacy_optim as optim
from legacy_optim import _restore
from legacy_optim import traverse_util
from legacy_optim.momentum import _MomentumParamState

warnings.filterwarnings('ignore', category=optim.LegacyOptimDeprecationWarning)

with open(os.path.join(os.path.dirname(__file__), 'golden', 'inputs.json'),
          encoding='utf-8') as _f:
  ORACLE = json.load(_f)['results']

# Eager Optimizer.apply_gradient runs the cached compiled step for inputs JAX
# represents exactly (README: "Eager apply_gradient runs one cached compiled
# step"): its result is flax 0.5.3's *jitted* one, not its op-by-op one.
COMPILED_EAGER_KINDS = ('numpy_f32', 'jax_int32', 'jax_int32_int_grads',
                        'jax_f32_int_grads')


def _expected(case):
  name = case['name']
  if (case['route'] == 'optimizer' and not case['jit'] and
      case['inputs'] in COMPILED_EAGER_KINDS):
    name = name[:-len('eager')] + 'jit'
  return ORACLE[name]


ANSWERED = [c for c in input_cases.CASES if 'error' not in _expected(c)]
FLAX_RAISED = [c for c in input_cases.CASES if 'error' in _expected(c)]

# The default run keeps to the rules whose result kinds differ most (host
# arithmetic, mixed NumPy/JAX fields, kept integer dtype) and eager steps;
# the whole grid (a compile per jitted case) runs with -m slow.
QUICK_OPTIMIZERS = ('GradientDescent', 'Momentum', 'Adam', 'RMSProp_centered',
                    'Adafactor')


def _param(case):
  quick = case['optimizer'] in QUICK_OPTIMIZERS and (
      not case['jit'] or case['optimizer'] == 'GradientDescent') and (
          # Integer gradients: the Optimizer route only.
          'int_grads' not in case['inputs'] or case['route'] == 'optimizer')
  return pytest.param(case, id=case['name'],
                      marks=() if quick else pytest.mark.slow)


def _result(case):
  opt_def = input_cases.build(optim, case['optimizer'])
  new_params, new_state = input_cases.run(optim, opt_def, case)
  return {'params': input_cases.describe(new_params),
          'state': input_cases.describe(serialization.to_state_dict(new_state))}


@pytest.mark.parametrize('case', [_param(c) for c in ANSWERED])
def test_same_result_as_flax_0_5_3(case):
  assert _result(case) == _expected(case)


def test_the_cases_cover_every_algorithm_input_and_route():
  assert len(ANSWERED) + len(FLAX_RAISED) == len(input_cases.CASES) == 780
  raised = {(c['inputs'], c['optimizer']) for c in FLAX_RAISED}
  # flax raised for Python numbers into rules that read .dtype, and for NumPy
  # int64 gradients where it added a float decay term to them in place.
  reads_dtype = {'Adam', 'Adam_wd', 'AdaBelief', 'Adafactor', 'LAMB'}
  assert raised == {
      (kind, name) for kind in ('python_float', 'python_int',
                                'python_int_int_grads')
      for name in reads_dtype} | {
          ('numpy_int_int_grads', 'LARS'),
          ('numpy_int_int_grads', 'Momentum_wd_nesterov')}


@pytest.mark.parametrize('name', ['Adam', 'LAMB', 'AdaBelief'])
def test_python_numbers_work_where_flax_raised(name):
  """Same step as on float32 arrays holding the same numbers."""
  opt_def = input_cases.build(optim, name)
  params, grads = {'a': 1.0, 'b': -2.0}, {'a': -1.0, 'b': 0.5}
  as_f32 = lambda t: jax.tree_util.tree_map(
      lambda x: np.asarray(x, np.float32), t)
  got = opt_def.create(params).apply_gradient(grads)
  want = opt_def.create(as_f32(params)).apply_gradient(as_f32(grads))
  jax.tree_util.tree_map(np.testing.assert_array_equal, got.target,
                         want.target)


# ------------------------------------------------ named flax 0.5.3 behaviours


def test_integer_params_are_promoted_eager_and_jitted():
  opt_def = optim.GradientDescent(0.1)
  params, grads = jnp.array([1, 2, 3]), jnp.full(3, 0.5)
  for step in (lambda o, g: o.apply_gradient(g),
               jax.jit(lambda o, g: o.apply_gradient(g))):
    new = step(opt_def.create(params), grads)
    assert new.target.dtype == jnp.float32
    np.testing.assert_array_equal(
        new.target, np.array([0.95, 1.95, 2.95], np.float32))


def test_adafactor_keeps_integer_params_as_flax_did():
  opt_def = optim.Adafactor(learning_rate=0.1)
  new = opt_def.create(jnp.array([1, 2, 3])).apply_gradient(jnp.full(3, 0.5))
  assert new.target.dtype == jnp.int32


def test_python_int_step_stays_int_and_numpy_float64_stays_float64():
  opt_def = optim.Momentum(learning_rate=0.1, beta=0.2)
  state = optim.OptimizerState(0, _MomentumParamState(np.array([1.])))
  new_params, new_state = opt_def.apply_gradient(
      opt_def.hyper_params, np.ones((1,)), state, np.array([3.]))
  assert type(new_state.step) is int and new_state.step == 1
  assert isinstance(new_params, np.ndarray) and new_params.dtype == np.float64
  np.testing.assert_array_equal(new_params, np.array([1. - 0.1 * 3.2]))
  np.testing.assert_array_equal(new_state.param_states.momentum, [3.2])


def test_python_number_leaves_to_multi_optimizer():
  opt_def = optim.MultiOptimizer(
      (traverse_util.t_identity['a'], optim.GradientDescent(1.)),
      (traverse_util.t_identity['b'], optim.GradientDescent(10.)))
  params = {'a': 0., 'b': 0., 'c': {}}
  state = opt_def.init_state(params)
  new_params, new_state = opt_def.apply_gradient(
      opt_def.hyper_params, params, state, {'a': -1., 'b': -2., 'c': {}})
  assert jax.tree_util.tree_map(float, new_params) == {
      'a': 1., 'b': 20., 'c': {}}
  assert int(new_state.step) == 1


def test_overlap_error_prints_flax_tree_of_matches():
  t_a = traverse_util.ModelParamTraversal(
      lambda path, _: path.endswith('/x') or path.endswith('/y'))
  t_b = traverse_util.ModelParamTraversal(
      lambda path, value: value.dtype == jnp.int32 or path.endswith('/z'))
  opt_def = optim.MultiOptimizer((t_a, optim.GradientDescent(1.)),
                                 (t_b, optim.GradientDescent(2.)))
  with pytest.raises(ValueError) as e:
    jax.jit(opt_def.init_state)({'a': {'x': 0., 'y': 0.},
                                 'b': {'y': 0, 'z': 0.}})
  assert "['b']['y'] (optimizers [0, 1])" in str(e.value)
  assert ("{'a': {'x': [0], 'y': [0]}, 'b': {'y': [0, 1], 'z': [1]}}"
          in str(e.value))


# ------------------------------------------------ restoring: kind, not width


def _momentum_optimizer():
  return optim.Momentum(learning_rate=1.).create(
      {'kernel': jnp.ones((1, 1)), 'bias': jnp.zeros((1,))})


def test_restore_accepts_other_precision_and_python_step():
  optimizer = _momentum_optimizer()
  state_dict = {
      'target': {'kernel': np.full((1, 1), 2.), 'bias': np.ones((1,))},
      'state': {'step': 1, 'param_states': {
          'kernel': {'momentum': np.ones((1, 1))},
          'bias': {'momentum': np.ones((1,))}}},
  }
  restored = serialization.from_state_dict(optimizer, state_dict)
  assert restored.state.step == 1
  np.testing.assert_array_equal(restored.target['kernel'], [[2.]])


@pytest.mark.parametrize('step,found', [(1.0, 'float'),
                                        (np.ones(()), 'float64[]'),
                                        (np.zeros(2, np.int32), 'int32[2]')])
def test_restore_rejects_another_kind_or_shape(step, found):
  state_dict = serialization.to_state_dict(_momentum_optimizer())
  state_dict['state']['step'] = step
  with pytest.raises(_restore.RestoreMismatchError) as e:
    serialization.from_state_dict(_momentum_optimizer(), state_dict)
  assert f'state/step: expected int32[], found {found}' in str(e.value)
