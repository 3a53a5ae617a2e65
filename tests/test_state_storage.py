"""OptimizerState stores built-in per-parameter states column-wise.

Users must not be able to tell: ``param_states`` reads as the legacy tree of
per-parameter objects, the dataclass API and serialization behave as flax
0.5.3's, and a state's tree structure depends on its content only. What
changes is that a jitted step no longer builds per-parameter objects.
"""

import dataclasses
import pickle

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization
from flax import struct
from jax import lax

import legacy_optim as optim
from legacy_optim import adam
from legacy_optim import base


def _params():
  return {'dense': {'kernel': jnp.arange(6, dtype=jnp.float32).reshape(2, 3),
                    'bias': jnp.asarray([0.5, -0.25, 0.125], jnp.float32)},
          'scale': jnp.asarray(1.5, jnp.float32)}


def _grads():
  rng = np.random.default_rng(0)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), _params())


def _stepped(opt_def, steps=2):
  opt = opt_def.create(_params())
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  for _ in range(steps):
    opt = step(opt, _grads())
  return opt


def _legacy_tree(state):
  """param_states rebuilt by hand from its leaves: the flax.optim layout."""
  params = _params()
  flat = jax.tree_util.tree_structure(params).flatten_up_to(
      state.param_states)
  return jax.tree_util.tree_structure(params).unflatten(
      [adam._AdamParamState(s.grad_ema, s.grad_sq_ema) for s in flat])


def test_param_states_read_as_legacy_per_parameter_objects():
  opt = _stepped(optim.Adam(0.1))
  param_states = opt.state.param_states
  assert type(param_states['dense']['kernel']) is adam._AdamParamState
  rebuilt = base.OptimizerState(opt.state.step, _legacy_tree(opt.state))
  chex.assert_trees_all_equal(rebuilt.param_states, param_states)
  chex.assert_trees_all_equal(rebuilt, opt.state)


def test_a_jitted_step_builds_no_per_parameter_objects(monkeypatch):
  opt_def = optim.Adam(0.1)
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  opt = step(opt_def.create(_params()), _grads())  # compiled here.
  built = []
  original_init = adam._AdamParamState.__init__

  def counting_init(self, *args, **kwargs):
    built.append(1)
    original_init(self, *args, **kwargs)

  monkeypatch.setattr(adam._AdamParamState, '__init__', counting_init)
  for _ in range(3):
    opt = step(opt, _grads())
  assert not built
  _ = opt.state.param_states['scale']
  assert len(built) == 3  # one per parameter, built when read.


@pytest.mark.parametrize('opt_def', [
    optim.Adam(0.1), optim.Momentum(0.1), optim.Adafactor(0.1),
    optim.WeightNorm(optim.Adam(0.1)), optim.GradientDescent(0.1),
    optim.MultiOptimizer(
        (optim.ModelParamTraversal(lambda p, _: 'kernel' in p),
         optim.Adam(0.1)),
        (optim.ModelParamTraversal(lambda p, _: 'bias' in p),
         optim.Momentum(0.1))),
], ids=['adam', 'momentum', 'adafactor', 'weight_norm', 'sgd', 'multi'])
def test_tree_structure_depends_on_content_only(opt_def):
  created = opt_def.create(_params())
  stepped = _stepped(opt_def, steps=1)
  by_hand = base.OptimizerState(stepped.state.step,
                                stepped.state.param_states)
  restored = created.restore_state(serialization.to_state_dict(stepped))
  unpickled = pickle.loads(pickle.dumps(stepped.state))
  expected = jax.tree_util.tree_structure(created.state)
  for state in (stepped.state, by_hand, restored.state, unpickled):
    assert jax.tree_util.tree_structure(state) == expected
  chex.assert_trees_all_equal(by_hand, stepped.state)
  chex.assert_trees_all_equal(restored.state, stepped.state)
  chex.assert_trees_all_equal(unpickled, stepped.state)


def test_optimizer_is_a_fori_loop_carry():
  opt_def = optim.Adam(0.1)
  grads = _grads()
  looped = lax.fori_loop(0, 3, lambda _, o: o.apply_gradient(grads),
                         opt_def.create(_params()))
  unrolled = opt_def.create(_params())
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  for _ in range(3):
    unrolled = step(unrolled, grads)
  chex.assert_trees_all_close(looped, unrolled, rtol=1e-6)


def test_dataclass_api():
  state = _stepped(optim.Adam(0.1)).state
  assert [f.name for f in dataclasses.fields(state)] == ['step',
                                                         'param_states']
  with pytest.raises(dataclasses.FrozenInstanceError):
    state.step = 0
  assert state.replace(step=7).step == 7
  chex.assert_trees_all_equal(state.replace(step=7).param_states,
                              state.param_states)
  zeroed = jax.tree_util.tree_map(jnp.zeros_like, state.param_states)
  for replaced in (state.replace(param_states=zeroed),
                   dataclasses.replace(state, param_states=zeroed)):
    chex.assert_trees_all_equal(replaced.param_states, zeroed)
    assert replaced.step is state.step
  by_keyword = base.OptimizerState(step=state.step,
                                   param_states=state.param_states)
  chex.assert_trees_all_equal(by_keyword, state)
  assert 'param_states=' in repr(state) and 'grad_sq_ema=' in repr(state)


def test_state_dict_has_the_flax_optim_layout():
  state = _stepped(optim.Adam(0.1)).state
  as_dict = serialization.to_state_dict(state)
  assert set(as_dict) == {'step', 'param_states'}
  assert set(as_dict['param_states']['dense']['kernel']) == {
      'grad_ema', 'grad_sq_ema'}
  np.testing.assert_array_equal(
      as_dict['param_states']['scale']['grad_sq_ema'],
      state.param_states['scale'].grad_sq_ema)


@pytest.mark.parametrize('change, message', [
    (lambda d: d.pop('param_states'), 'Missing field param_states'),
    (lambda d: d.update(momentum=0), 'Unknown field(s) "momentum"'),
])
def test_restore_names_the_bad_field(change, message):
  state = _stepped(optim.Adam(0.1)).state
  as_dict = serialization.to_state_dict(state)
  change(as_dict)
  with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(
      ')', r'\)')):
    serialization.from_state_dict(state, as_dict)


@struct.dataclass
class _UserParamState:
  trace: jax.Array


class _UserMomentum(optim.OptimizerDef):
  """A user's rule with its own per-parameter class (kept as it is)."""

  def __init__(self):
    super().__init__(None)

  def init_param_state(self, param):
    return _UserParamState(jnp.zeros_like(param))

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    trace = 0.5 * state.trace + grad
    return param - 0.1 * trace, _UserParamState(trace)


def test_user_per_parameter_class_keeps_its_layout():
  opt = _stepped(_UserMomentum())
  paths = [jax.tree_util.keystr(p) for p, _ in
           jax.tree_util.tree_flatten_with_path(opt.state)[0]]
  assert ".param_states['scale'].trace" in paths
  assert type(opt.state.param_states['scale']) is _UserParamState


def test_leaf_paths_name_the_state_field():
  opt = _stepped(optim.Adam(0.1), steps=0)
  paths = [jax.tree_util.keystr(p) for p, _ in
           jax.tree_util.tree_flatten_with_path(opt.state)[0]]
  assert ".grad_sq_ema['dense']['kernel']" in paths


def test_overriding_hyper_params_that_are_not_a_dataclass_says_why():
  # flax.optim only looked inside hyper_params to apply overrides.
  opt = _UserMomentum().create(_params())
  with pytest.raises(TypeError, match=r"cannot override 'beta'.*NoneType"):
    opt.apply_gradient(_grads(), beta=0.1)
