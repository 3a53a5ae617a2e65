"""Data parallelism with pmap on 8 fake CPU devices, the flax.optim way.

Covers ``Optimizer.replicate``/``unreplicate`` (ReplicatedOptimizer: grads
averaged as ``psum(g) / psum(1)``), the explicit pattern
``flax.jax_utils.replicate(optimizer)`` + ``lax.pmean``, checkpoints of
replicated optimizers (one copy saved, re-replicated on restore) and several
algorithms. (tests/test_multi_traversal.py has the basic Momentum case.)

Fake devices must be configured before jax starts, so every case runs in one
child process (this file run as a script, see _devices.py); each pytest test
reports one case's outcome.
"""

import functools

import _devices
import chex
from flax import jax_utils
from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import legacy_optim as optim
from legacy_optim import traverse_util

N_DEVICES = 8
AXIS = 'batch'


def _multi():
  kernels = traverse_util.ModelParamTraversal(lambda path, _: 'kernel' in path)
  biases = traverse_util.ModelParamTraversal(lambda path, _: 'bias' in path)
  return optim.MultiOptimizer((kernels, optim.Adam(0.01)),
                              (biases, optim.Momentum(0.1)))


ALGORITHMS = {
    'GradientDescent': lambda: optim.GradientDescent(0.1),
    'Momentum': lambda: optim.Momentum(0.1, beta=0.8, weight_decay=1e-3,
                                       nesterov=True),
    'Adam': lambda: optim.Adam(0.01, weight_decay=1e-4),
    'LARS': lambda: optim.LARS(0.1, weight_decay=1e-3),
    'Adafactor': lambda: optim.Adafactor(0.01, beta1=0.9,
                                         min_dim_size_to_factor=2),
    'MultiOptimizer': _multi,
}

CASES = _devices.Cases(n_devices=N_DEVICES)


# ---------------------------------------------------------------- data


def _params():
  rng = np.random.default_rng(0)
  return {'dense': {
      'kernel': jnp.asarray(rng.standard_normal((5, 3)), jnp.float32),
      'bias': jnp.asarray(rng.standard_normal(3), jnp.float32)}}


def _batch():
  """64 examples: 8 per device."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((64, 5)).astype(np.float32)
  y = rng.standard_normal((64, 3)).astype(np.float32)
  return x, y


def _loss(params, x, y):
  pred = x @ params['dense']['kernel'] + params['dense']['bias']
  return jnp.mean((pred - y) ** 2)


def _shard(a):
  return a.reshape((N_DEVICES, -1) + a.shape[1:])


def _exact_grads(seed):
  """Per-device grads whose sums are exact in float32 in any order.

  Multiples of 2**-10 of magnitude at most 1: every partial sum of 8 of
  them is representable, so the cross-device mean has one correct value.
  """
  rng = np.random.default_rng(200 + seed)
  return jax.tree_util.tree_map(
      lambda p: (rng.integers(-2**10, 2**10, (N_DEVICES,) + p.shape)
                 * 2.0**-10).astype(np.float32), _params())


def _replicas_identical(tree):
  for leaf in jax.tree_util.tree_leaves(tree):
    leaf = np.asarray(leaf)
    for replica in leaf[1:]:
      np.testing.assert_array_equal(replica, leaf[0])


# ---------------------------------------------------------------- cases


@CASES.register(*ALGORITHMS)
def data_parallel_equals_full_batch(name):
  """8 shards of 8 examples, averaged: the single-device full-batch run."""
  x, y = _batch()
  opt = ALGORITHMS[name]().create(_params())

  @functools.partial(jax.pmap, axis_name=AXIS)
  def parallel_step(o, xb, yb):
    return o.apply_gradient(jax.grad(_loss)(o.target, xb, yb))

  @jax.jit
  def full_step(o, xb, yb):
    return o.apply_gradient(jax.grad(_loss)(o.target, xb, yb))

  rep, single = opt.replicate(axis_name=AXIS), opt
  for _ in range(4):
    rep = parallel_step(rep, _shard(x), _shard(y))
    single = full_step(single, x, y)
  _replicas_identical(rep)
  back = rep.unreplicate()
  assert type(back.optimizer_def) is type(opt.optimizer_def)
  # Mean of shard means vs one mean: equal up to summation order.
  chex.assert_trees_all_close(back.target, single.target, rtol=2e-5,
                              atol=1e-6)
  chex.assert_trees_all_close(back.state, single.state, rtol=2e-5, atol=1e-6)
  assert int(back.state.step) == 4


@CASES.register(*ALGORITHMS)
def replicated_mean_matches_the_single_device_step(name):
  """Exact per-device grads: the replicated run is the run on the mean.

  The cross-device mean is exact here, so only the rule's own rounding can
  differ, and it may: XLA:CPU decides per program where to contract
  ``a * b + c`` into a fused multiply-add, and the pmapped program is not the
  jitted one. Hence a bound of a few float32 ulps, not bit identity (the
  bitwise claims are in the cases comparing equal programs).
  """
  opt = ALGORITHMS[name]().create(_params())
  step = jax.pmap(lambda o, g, lr: o.apply_gradient(g, learning_rate=lr),
                  axis_name=AXIS)

  @jax.jit
  def single_step(o, stacked, lr):
    # One device gets all 8 gradient blocks and averages them itself, with
    # the legacy arithmetic sum / count (sums are exact, see _exact_grads).
    mean = jax.tree_util.tree_map(lambda g: g.sum(0) / N_DEVICES, stacked)
    return o.apply_gradient(mean, learning_rate=lr)

  rep, single = opt.replicate(axis_name=AXIS), opt
  for i, lr in enumerate([0.05, 0.02, 0.1]):
    grads = _exact_grads(i)
    rep = step(rep, grads, jnp.full(N_DEVICES, lr, jnp.float32))
    single = single_step(single, grads, jnp.float32(lr))
  _replicas_identical(rep)
  # Operands are O(1): a few ulps of 1.0 absolute.
  chex.assert_trees_all_close(rep.unreplicate().target, single.target,
                              rtol=1e-6, atol=5e-7)
  chex.assert_trees_all_close(rep.unreplicate().state, single.state,
                              rtol=1e-6, atol=5e-7)
  assert int(rep.unreplicate().state.step) == 3


@CASES.register('GradientDescent', 'Momentum', 'Adam', 'MultiOptimizer')
def jax_utils_replicate_with_pmean_equals_replicated_optimizer(name):
  """``jax_utils.replicate(opt)`` + ``lax.pmean``: the other legacy pattern."""
  opt = ALGORITHMS[name]().create(_params())
  rng = np.random.default_rng(3)
  grads_seq = [jax.tree_util.tree_map(
      lambda p: rng.standard_normal((N_DEVICES,) + p.shape).astype(np.float32),
      _params()) for _ in range(3)]

  @functools.partial(jax.pmap, axis_name=AXIS)
  def explicit_step(o, g):
    return o.apply_gradient(jax.lax.pmean(g, axis_name=AXIS))

  wrapped_step = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name=AXIS)
  explicit, wrapped = jax_utils.replicate(opt), opt.replicate(axis_name=AXIS)
  assert type(explicit.optimizer_def) is type(opt.optimizer_def)
  for grads in grads_seq:
    explicit = explicit_step(explicit, grads)
    wrapped = wrapped_step(wrapped, grads)
  chex.assert_trees_all_equal(explicit.target, wrapped.target)
  chex.assert_trees_all_equal(explicit.state, wrapped.state)
  # Unreplicated the flax way, it is an ordinary optimizer again.
  plain = jax_utils.unreplicate(explicit)
  chex.assert_trees_all_equal(plain.target, wrapped.unreplicate().target)
  plain.apply_gradient(jax.tree_util.tree_map(lambda g: g[0], grads_seq[0]))


@CASES.register('Momentum', 'Adam', 'MultiOptimizer')
def restore_re_replicates(name):
  """state_dict keeps one copy; restoring puts it on every device again."""
  opt = ALGORITHMS[name]().create(_params())
  step = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name=AXIS)
  rep = opt.replicate(axis_name=AXIS)
  for i in range(2):
    rep = step(rep, _exact_grads(i))

  state_dict = rep.state_dict()
  one_copy = rep.unreplicate().state_dict()
  chex.assert_trees_all_equal(state_dict, one_copy)
  assert np.shape(state_dict['state']['step']) == ()

  # A template with other values: everything comes from the checkpoint.
  other = ALGORITHMS[name]().create(jax.tree_util.tree_map(
      lambda p: p * 3.0, _params())).replicate(axis_name=AXIS)
  restored = serialization.from_bytes(other, serialization.to_bytes(rep))
  assert isinstance(restored.optimizer_def, optim.ReplicatedOptimizer)
  devices = set(jax.local_devices())
  for saved, leaf in zip(jax.tree_util.tree_leaves(rep),
                         jax.tree_util.tree_leaves(restored)):
    assert leaf.shape == saved.shape  # (8, ...): one copy per device.
    assert leaf.sharding.device_set == devices
    np.testing.assert_array_equal(np.asarray(leaf), np.asarray(saved))
  # Training continues identically from the restored copy.
  continued, expected = (step(restored, _exact_grads(5)),
                         step(rep, _exact_grads(5)))
  chex.assert_trees_all_equal(continued.target, expected.target)
  chex.assert_trees_all_equal(continued.state, expected.state)


@CASES.register('Momentum')
def replicate_on_a_device_subset_with_own_axis_name(name):
  devices = jax.local_devices()[:4]
  opt = ALGORITHMS[name]().create(_params())
  rep = opt.replicate(devices=devices, axis_name='replicas')
  step = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name='replicas',
                  devices=devices)
  grads = jax.tree_util.tree_map(lambda g: g[:4], _exact_grads(0))
  rep = step(rep, grads)
  mean = jax.tree_util.tree_map(lambda g: g.sum(0) / 4, grads)
  single = jax.jit(lambda o, g: o.apply_gradient(g))(opt, mean)
  chex.assert_trees_all_equal(rep.unreplicate().target, single.target)
  restored = rep.restore_state(rep.state_dict())
  for leaf in jax.tree_util.tree_leaves(restored):
    assert leaf.shape[0] == 4
    assert leaf.sharding.device_set == set(devices)
  with pytest.raises(ValueError, match='not replicated'):
    rep.unreplicate().unreplicate()


# ---------------------------------------------------- child process / pytest

outcomes, test_on_8_devices = CASES.pytest_items(__file__)


if __name__ == '__main__':
  CASES.main()
