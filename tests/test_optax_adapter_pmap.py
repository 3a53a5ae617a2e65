"""OptaxOptimizerDef under pmap on 8 fake CPU devices, the flax.optim ways.

``Optimizer.replicate`` (ReplicatedOptimizer: grads averaged as ``psum(g) /
psum(1)`` before the transform) and ``jax_utils.replicate`` + ``lax.pmean``
give, bit for bit, what the Optax transform gives run directly in the same
kind of program (a pmapped ``tx.update`` + ``optax.apply_updates`` on the
averaged grads); a replicated checkpoint keeps one copy and re-replicates on
restore. Runs in a child process (see _devices.py).
"""

import functools

import _devices
from flax import jax_utils
from flax import serialization
import jax
import numpy as np
import optax

import legacy_optim

N_DEVICES = 8
AXIS = 'batch'

TRANSFORMS = {
    'adam': lambda: optax.adam(1e-2),
    'clipped_chain': lambda: optax.chain(optax.clip_by_global_norm(0.5),
                                         optax.sgd(0.1, momentum=0.9)),
    'injected': lambda: optax.inject_hyperparams(optax.adamw)(
        learning_rate=1e-2, weight_decay=1e-3),
}

CASES = _devices.Cases(n_devices=N_DEVICES)


def _params():
  rng = np.random.default_rng(0)
  return {'kernel': rng.standard_normal((5, 3)).astype(np.float32),
          'bias': rng.standard_normal(3).astype(np.float32)}


def _exact_grads(seed):
  """Per-device grads whose sums are exact in float32 in any order
  (multiples of 2**-10, at most 1), so the mean has one correct value."""
  rng = np.random.default_rng(200 + seed)
  return jax.tree_util.tree_map(
      lambda p: (rng.integers(-2**10, 2**10, (N_DEVICES,) + p.shape)
                 * 2.0**-10).astype(np.float32), _params())


def _optax_pmapped_run(tx, steps):
  """Optax run directly, one pmapped step per batch of per-device grads."""

  @functools.partial(jax.pmap, axis_name=AXIS)
  def step(params, opt_state, grads):
    grads = jax.tree_util.tree_map(
        lambda g: jax.lax.psum(g, AXIS) / jax.lax.psum(1, AXIS), grads)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params = jax_utils.replicate(_params())
  opt_state = jax_utils.replicate(tx.init(_params()))
  for i in range(steps):
    params, opt_state = step(params, opt_state, _exact_grads(i))
  return params, opt_state


def _assert_bit_identical(found, expected):
  assert (jax.tree_util.tree_structure(found) ==
          jax.tree_util.tree_structure(expected))
  for got, want in zip(jax.tree_util.tree_leaves(found),
                       jax.tree_util.tree_leaves(expected)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _pmapped_apply():
  return jax.pmap(lambda o, g: o.apply_gradient(g), axis_name=AXIS)


@CASES.register(*TRANSFORMS)
def replicate_equals_optax_pmapped_directly(name):
  opt_def = legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]())
  replicated = opt_def.create(_params()).replicate(axis_name=AXIS)
  assert isinstance(replicated.optimizer_def, legacy_optim.ReplicatedOptimizer)
  step = _pmapped_apply()
  for i in range(3):
    replicated = step(replicated, _exact_grads(i))
  params, opt_state = _optax_pmapped_run(TRANSFORMS[name](), 3)
  _assert_bit_identical(replicated.target, params)
  _assert_bit_identical(replicated.state.param_states, opt_state)
  back = replicated.unreplicate()
  assert back.optimizer_def is opt_def
  assert int(back.state.step) == 3


@CASES.register('adam', 'injected')
def jax_utils_replicate_with_pmean_equals_optax_pmapped_directly(name):
  opt_def = legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]())

  @functools.partial(jax.pmap, axis_name=AXIS)
  def step(optimizer, grads):
    return optimizer.apply_gradient(jax.lax.pmean(grads, AXIS))

  optimizer = jax_utils.replicate(opt_def.create(_params()))
  for i in range(3):
    optimizer = step(optimizer, _exact_grads(i))
  params, opt_state = _optax_pmapped_run(TRANSFORMS[name](), 3)
  _assert_bit_identical(optimizer.target, params)
  _assert_bit_identical(optimizer.state.param_states, opt_state)


@CASES.register('clipped_chain', 'injected')
def replicated_checkpoint_resumes_as_the_uninterrupted_run(name):
  step = _pmapped_apply()
  replicated = legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]()).create(
      _params()).replicate(axis_name=AXIS)
  for i in range(2):
    replicated = step(replicated, _exact_grads(i))
  data = serialization.to_bytes(replicated)
  one_copy = serialization.to_state_dict(replicated.unreplicate())
  _assert_bit_identical(serialization.msgpack_restore(data), one_copy)

  template = legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]()).create(
      jax.tree_util.tree_map(lambda p: p * 3, _params())).replicate(
          axis_name=AXIS)
  restored = serialization.from_bytes(template, data)
  for leaf in jax.tree_util.tree_leaves(restored):
    assert leaf.shape[0] == N_DEVICES
  for i in range(2, 4):
    restored = step(restored, _exact_grads(i))
  params, opt_state = _optax_pmapped_run(TRANSFORMS[name](), 4)
  _assert_bit_identical(restored.target, params)
  _assert_bit_identical(restored.state.param_states, opt_state)
  assert int(restored.unreplicate().state.step) == 4


# ---------------------------------------------------- child process / pytest

outcomes, test_on_8_devices = CASES.pytest_items(__file__)


if __name__ == '__main__':
  CASES.main()
