"""``flax_optim_rules.train_state.TrainState``: flax's TrainState, also over
the targets flax.optim stepped and flax's refuses (one bare array, a number,
a tuple), with flax's fields, pytree and checkpoint layout."""

import flax
from flax.training import train_state as flax_train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flax_optim_rules
from flax_optim_rules import train_state
import legacy_optim


def _loss(target):
  leaves = jax.tree_util.tree_leaves(target)
  return sum(jnp.sum(jnp.sin(leaf) * 3.0 - leaf * leaf) for leaf in leaves)


def _shim_targets(target, steps):
  optimizer = legacy_optim.Adam(learning_rate=0.1).create(target)
  for _ in range(steps):
    optimizer = optimizer.apply_gradient(jax.grad(_loss)(optimizer.target))
  return optimizer.target


def _state_targets(target, steps, step=None):
  state = train_state.TrainState.create(
      apply_fn=None, params=target,
      tx=flax_optim_rules.adam(learning_rate=0.1))
  step = step or (lambda s: s.apply_gradients(grads=jax.grad(_loss)(s.params)))
  for _ in range(steps):
    state = step(state)
  assert int(state.step) == steps
  return state.params


def _assert_identical(got, want):
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(
      want)
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize('target', [
    jnp.zeros(1), jnp.full((2, 3), 0.5), 1.0,
    (jnp.zeros(2), jnp.ones(1))], ids=['array', 'matrix', 'number', 'tuple'])
def test_steps_what_flax_optim_stepped_to_the_bit(target):
  _assert_identical(_state_targets(target, 4), _shim_targets(target, 4))


def test_steps_a_bare_array_under_jit():
  step = jax.jit(
      lambda s: s.apply_gradients(grads=jax.grad(_loss)(s.params)))
  _assert_identical(_state_targets(jnp.zeros(1), 3, step),
                    _shim_targets(jnp.zeros(1), 3))


def test_a_dict_steps_as_flaxs_own_train_state_does():
  params = {'w': jnp.ones(2), 'b': jnp.zeros(1)}
  kinds = (train_state.TrainState, flax_train_state.TrainState)
  got, want = (kind.create(apply_fn=None, params=params,
                           tx=optax.adam(0.1)) for kind in kinds)
  grads = jax.grad(_loss)(params)
  _assert_identical(got.apply_gradients(grads=grads).params,
                    want.apply_gradients(grads=grads).params)


def test_an_overwrite_with_gradient_collection_keeps_flaxs_meaning():
  owg = flax_train_state.OVERWRITE_WITH_GRADIENT
  params = {'params': {'w': jnp.ones(2)}, owg: {'s': jnp.zeros(1)}}
  grads = {'params': {'w': jnp.full((2,), 0.5)},
           owg: {'s': jnp.full((1,), 7.0)}}
  kinds = (train_state.TrainState, flax_train_state.TrainState)
  got, want = (kind.create(apply_fn=None, params=params,
                           tx=optax.sgd(0.1)).apply_gradients(grads=grads)
               for kind in kinds)
  _assert_identical(got.params, want.params)
  assert float(got.params[owg]['s'][0]) == 7.0


@pytest.mark.parametrize('params', [jnp.zeros(2), {'w': jnp.ones(2)}],
                         ids=['array', 'dict'])
def test_its_checkpoint_layout_is_flaxs(params):
  kinds = (train_state.TrainState, flax_train_state.TrainState)
  got, want = (flax.serialization.to_state_dict(kind.create(
      apply_fn=None, params=params, tx=optax.adam(0.1)))
               for kind in kinds)
  _assert_identical(got, want)
  restored = flax.serialization.from_state_dict(
      train_state.TrainState.create(apply_fn=None, params=params,
                                    tx=optax.adam(0.1)), want)
  _assert_identical(flax.serialization.to_state_dict(restored), want)
