"""flax_optim_rules' view of flax.optim's state layout over Optax states.

The reference is legacy_optim's ``Optimizer`` (its ``state`` and
``state_dict()``) stepped side by side with a TrainState holding the
flax_optim_rules transform, and the checkpoints real flax 0.5.3 wrote
(tests/checkpoints).
"""

import dataclasses
import functools
import pathlib
import sys
import warnings

import chex
from flax import serialization
from flax.training import train_state
import jax
import jax.numpy as jnp
import optax
import pytest

from compat.codemod import _state_layout
import flax_optim_rules
import legacy_optim
from legacy_optim import catalogue

sys.path.insert(0, str(pathlib.Path(__file__).parent / 'checkpoints'))
import fixture_lib as fx  # noqa: E402

# legacy class, its keyword arguments, the migrated spelling of its transform.
CASES = {
    'sgd': (legacy_optim.GradientDescent, {'learning_rate': 0.1},
            lambda: optax.sgd(0.1)),
    'momentum': (legacy_optim.Momentum, {'learning_rate': 0.1, 'beta': 0.8},
                 lambda: optax.sgd(0.1, momentum=0.8)),
    'adam': (legacy_optim.Adam, {'learning_rate': 0.01, 'weight_decay': 1e-3},
             lambda: flax_optim_rules.adam(learning_rate=0.01,
                                           weight_decay=1e-3)),
    'adabelief': (legacy_optim.AdaBelief, {'learning_rate': 0.01},
                  lambda: flax_optim_rules.adabelief(learning_rate=0.01)),
    'adadelta': (legacy_optim.Adadelta, {'learning_rate': 1.0},
                 lambda: flax_optim_rules.adadelta(learning_rate=1.0)),
    'adagrad': (legacy_optim.Adagrad, {'learning_rate': 0.1},
                lambda: flax_optim_rules.adagrad(learning_rate=0.1)),
    'adafactor': (legacy_optim.Adafactor, {'learning_rate': 0.1, 'beta1': 0.9,
                                           'min_dim_size_to_factor': 2},
                  lambda: flax_optim_rules.adafactor(
                      learning_rate=0.1, beta1=0.9,
                      min_dim_size_to_factor=2)),
    'lamb': (legacy_optim.LAMB, {'learning_rate': 0.01},
             lambda: flax_optim_rules.lamb(learning_rate=0.01)),
    'lars': (legacy_optim.LARS, {'learning_rate': 0.1},
             lambda: flax_optim_rules.lars(learning_rate=0.1)),
    'rmsprop': (legacy_optim.RMSProp, {'learning_rate': 0.01},
                lambda: flax_optim_rules.rmsprop(learning_rate=0.01)),
    'rmsprop_centered': (
        legacy_optim.RMSProp, {'learning_rate': 0.01, 'centered': True},
        lambda: flax_optim_rules.rmsprop(learning_rate=0.01, centered=True)),
}


def _params():
  return {'dense': {'kernel': jnp.arange(6.0).reshape(3, 2) / 7.0,
                    'bias': jnp.array([0.5, -0.25])},
          'scale': jnp.array(1.5)}


def _grads(step):
  return jax.tree_util.tree_map(lambda p: jnp.cos(p * (step + 1.3)),
                                _params())


@functools.lru_cache(maxsize=None)  # the tests only read it
def _legacy(name, steps):
  cls, kwargs, _ = CASES[name]
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    optimizer = cls(**kwargs).create(_params())
    for step in range(steps):
      optimizer = optimizer.apply_gradient(_grads(step))
  return optimizer


@jax.jit
def _step(state, grads):
  # Compiled, as legacy_optim's eager steps are (the same fusions).
  return state.apply_gradients(grads=grads)


@functools.lru_cache(maxsize=None)  # the tests only read it
def _migrated(name, steps, tx=None):
  state = train_state.TrainState.create(
      apply_fn=None, params=_params(), tx=tx or CASES[name][2]())
  for step in range(steps):
    state = _step(state, _grads(step))
  return state


def _assert_same_state_dict(expected, found):
  """Key for key, value for value, dtypes and None included."""
  fx.assert_identical(expected, jax.device_get(found))


@pytest.mark.parametrize('name', sorted(CASES))
def test_state_dict_is_flax_optims(name):
  expected = serialization.to_state_dict(_legacy(name, 3))
  _assert_same_state_dict(expected,
                          flax_optim_rules.state_dict(_migrated(name, 3)))


@pytest.mark.parametrize('name', sorted(CASES))
def test_view_has_the_legacy_fields_and_classes(name):
  legacy = _legacy(name, 3).state
  view = flax_optim_rules.optimizer_state(_migrated(name, 3))
  assert isinstance(view, flax_optim_rules.OptimizerState)
  assert int(view.step) == int(legacy.step) == 3
  legacy_leaf = legacy.param_states['dense']['bias']
  view_leaf = view.param_states['dense']['bias']
  if legacy_leaf == ():
    assert view_leaf == ()
  else:
    # legacy_optim's classes derive from the view's, field for field.
    assert isinstance(legacy_leaf, type(view_leaf))
  chex.assert_trees_all_equal(
      jax.tree_util.tree_leaves(legacy.param_states),
      jax.tree_util.tree_leaves(view.param_states))


@pytest.mark.parametrize('name', sorted(CASES))
def test_view_round_trip_gives_the_optax_state_back(name):
  state = _migrated(name, 3)
  again = flax_optim_rules.replace_optimizer_state(
      state, flax_optim_rules.optimizer_state(state))
  chex.assert_trees_all_equal_structs(state.opt_state, again.opt_state)
  chex.assert_trees_all_equal(state.opt_state, again.opt_state)


def _zero_dense(state):
  """hypernerf's pattern: reset the moments of some params by hand."""
  param_states = dict(state.param_states)
  param_states['dense'] = jax.tree_util.tree_map(jnp.zeros_like,
                                                 param_states['dense'])
  return state.replace(param_states=param_states)


@pytest.mark.parametrize('name', ['adam', 'momentum', 'rmsprop_centered',
                                  'adafactor'])
def test_changed_view_steps_as_flax_optim_did(name):
  legacy = _legacy(name, 3)
  legacy = legacy.replace(state=_zero_dense(legacy.state))
  migrated = _migrated(name, 3)
  migrated = flax_optim_rules.replace_optimizer_state(
      migrated, _zero_dense(flax_optim_rules.optimizer_state(migrated)))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    for step in range(3, 5):
      legacy = legacy.apply_gradient(_grads(step))
      migrated = _step(migrated, _grads(step))
  _assert_same_state_dict(serialization.to_state_dict(legacy),
                          flax_optim_rules.state_dict(migrated))


def test_replacing_the_step_sets_every_count():
  tx = flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)(
      learning_rate=0.01)
  state = _migrated('adam', 1, tx)
  view = flax_optim_rules.optimizer_state(state).replace(step=7)
  state = flax_optim_rules.replace_optimizer_state(state, view)
  assert state.step == 7
  assert int(state.opt_state.count) == 7
  assert int(state.opt_state.inner_state.count) == 7


def test_injected_learning_rate_state_dict_is_flax_optims():
  tx = flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)(
      learning_rate=0.01, weight_decay=1e-3)
  _assert_same_state_dict(serialization.to_state_dict(_legacy('adam', 3)),
                          flax_optim_rules.state_dict(_migrated('adam', 3, tx)))


def test_view_works_under_jit():
  state = _migrated('adam', 1)

  @jax.jit
  def reset(state):
    return flax_optim_rules.replace_optimizer_state(
        state, _zero_dense(flax_optim_rules.optimizer_state(state)))

  reset_state = reset(state)
  assert not jnp.any(reset_state.opt_state.grad_ema['dense']['kernel'])
  chex.assert_trees_all_equal(reset_state.opt_state.grad_ema['scale'],
                              state.opt_state.grad_ema['scale'])


def test_kept_user_rule_state_is_its_own_layout():
  params = {'w': jnp.ones(2)}
  state = train_state.TrainState.create(apply_fn=None, params=params,
                                        tx=optax.identity()).replace(
      step=3, opt_state=flax_optim_rules.LegacyRuleState(
          count=jnp.int32(3), param_states={'w': ('mine', jnp.zeros(2))}))
  view = flax_optim_rules.optimizer_state(state)
  assert view.param_states['w'][0] == 'mine'
  state = flax_optim_rules.replace_optimizer_state(
      state, view.replace(step=4, param_states={'w': ('new', jnp.ones(2))}))
  assert state.opt_state.param_states['w'][0] == 'new'
  assert int(state.opt_state.count) == 4 and state.step == 4


def test_stock_rule_other_than_sgd_is_refused_by_name():
  state = _migrated('adam', 0, optax.adam(0.1))
  with pytest.raises(TypeError, match='ScaleByAdamState'):
    flax_optim_rules.state_dict(state)


@pytest.mark.parametrize('name', fx.one_rule_cases())
def test_restores_a_flax_053_checkpoint_and_writes_it_back(name):
  written = serialization.msgpack_restore(fx.checkpoint_bytes(name))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    tx = fx.optimizer_def(name).to_optax()
  template = train_state.TrainState.create(
      apply_fn=None, params=fx.zero_params(name), tx=tx)
  restored = flax_optim_rules.restore_state(template, written)
  assert int(restored.step) == fx.case(name)['step']
  _assert_same_state_dict(written, flax_optim_rules.state_dict(restored))


def test_restore_names_a_missing_key():
  state = _migrated('adam', 1)
  written = flax_optim_rules.state_dict(state)
  del written['state']['param_states']['dense']['bias']['grad_sq_ema']
  with pytest.raises(ValueError, match='state/param_states/dense/bias/'):
    flax_optim_rules.restore_state(state, written)
  with pytest.raises(ValueError, match="'target', 'state'"):
    flax_optim_rules.restore_state(state, {'params': {}, 'step': 1})


@pytest.mark.parametrize('name', ['adam', 'momentum', 'rmsprop'])
def test_restore_also_reads_the_train_states_own_layout(name):
  # A checkpoint the migrated program wrote (a TrainState's state dict).
  state = _migrated(name, 3)
  written = serialization.to_state_dict(state)
  template = _migrated(name, 0)
  restored = flax_optim_rules.restore_state(template, written)
  chex.assert_trees_all_equal(
      serialization.to_state_dict(restored), written)


def test_a_state_built_with_the_views_classes_checkpoints_in_the_shim():
  # A helper migrated to flax_optim_rules' classes may still feed an
  # Optimizer of the shim (a flow kept elsewhere): it checkpoints alike.
  legacy = _legacy('adam', 3)
  rebuilt = flax_optim_rules.OptimizerState(
      legacy.state.step, jax.tree_util.tree_map(
          lambda s: flax_optim_rules.AdamParamState(s.grad_ema,
                                                    s.grad_sq_ema),
          legacy.state.param_states,
          is_leaf=lambda s: isinstance(s, flax_optim_rules.AdamParamState)))
  _assert_same_state_dict(
      serialization.to_state_dict(legacy),
      serialization.to_state_dict(legacy.replace(state=rebuilt)))


def test_migrates_class_names_are_the_views_with_the_catalogues_fields():
  # migrate spells flax.optim.<module>._<Name>ParamState as
  # flax_optim_rules.<Name>ParamState: each exists, with the checkpoint's
  # field names.
  names = _state_layout.param_state_classes()
  assert len(names) == sum(1 for a in catalogue.RULES if a.state_fields)
  for path, name in names.items():
    algorithm = catalogue.BY_NAME[name[:-len('ParamState')]]
    fields = dataclasses.fields(getattr(flax_optim_rules, name))
    assert tuple(f.name for f in fields) == algorithm.state_fields, path


def test_state_dict_of_a_fresh_train_state_has_flax_optims_step():
  # A TrainState starts at the Python int 0; flax.optim at an int32 array.
  _assert_same_state_dict(serialization.to_state_dict(_legacy('adam', 0)),
                          flax_optim_rules.state_dict(_migrated('adam', 0)))
