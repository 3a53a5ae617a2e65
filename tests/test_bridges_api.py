"""compat's bridge API: conversions, overrides, errors, traversal labels."""

import functools
import importlib.metadata
import re

import chex
from flax import nnx
from flax.training import train_state
import jax
import jax.numpy as jnp
import optax
import pytest

import compat
from compat.bridges import nnx as compat_nnx
from compat.cli import _configs
from compat.cli import check
import legacy_optim as optim
from legacy_optim import traverse_util


@functools.lru_cache(maxsize=None)
def problem():
  return check.Problem(2)


# The three ways out of a legacy Optimizer; the nnx one needs the nnx bridge.
CONVERTERS = [
    compat.to_optax,
    lambda opt: compat.to_train_state(opt, None),
    pytest.param(lambda opt: compat.to_nnx_optimizer(
        opt, problem().nnx_model()), marks=pytest.mark.nnx),
]
CONVERTER_IDS = ['to_optax', 'to_train_state', 'to_nnx_optimizer']


def _traversal(predicate):
  return traverse_util.ModelParamTraversal(lambda path, _: predicate(path))


@pytest.mark.parametrize('name', [config.name for config in _configs.CONFIGS])
def test_converted_fresh_state_is_the_transforms_own_init(name):
  config = _configs.BY_NAME[name]
  optimizer = config.create(problem().params)
  tx, opt_state = compat.to_optax(optimizer, **config.optax_overrides())
  chex.assert_trees_all_equal(tx.init(optimizer.target), opt_state,
                              strict=True)


# --------------------------------------------------------------- schedules


def test_schedule_is_evaluated_at_the_legacy_step_count():
  params = problem().params
  optimizer = optim.GradientDescent(0.1).create(params)
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  for _ in range(3):
    optimizer = optimizer.apply_gradient(grads)
  tx, opt_state = compat.to_optax(
      optimizer, learning_rate=lambda count: jnp.where(count == 3, 0.5, 0.25))
  updates, _ = tx.update(grads, opt_state, optimizer.target)
  chex.assert_trees_all_equal(
      updates, jax.tree_util.tree_map(lambda g: -0.5 * g, grads), strict=True)


def test_overrides_reach_the_transform():
  params = problem().params
  optimizer = optim.Momentum(0.1).create(params)
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  tx, opt_state = compat.to_optax(optimizer, learning_rate=0.5)
  updates, _ = tx.update(grads, opt_state, params)
  chex.assert_trees_all_equal(
      updates, jax.tree_util.tree_map(lambda g: -0.5 * g, grads), strict=True)
  with pytest.raises(TypeError, match='no hyper-parameter named .bogus'):
    compat.to_optax(optimizer, bogus=1.0)


@pytest.mark.parametrize('make_def', [
    optim.GradientDescent,
    lambda: optim.MultiOptimizer(
        (_traversal(lambda p: 'kernel' in p), optim.Momentum(0.1)),
        (_traversal(lambda p: 'bias' in p), optim.Adam())),
    lambda: optim.WeightNorm(optim.Momentum()),
], ids=['GradientDescent', 'MultiOptimizer', 'WeightNorm'])
@pytest.mark.parametrize('convert', CONVERTERS, ids=CONVERTER_IDS)
def test_a_missing_learning_rate_is_asked_for_when_converting(convert,
                                                              make_def):
  optimizer = make_def().create(problem().params)
  with pytest.raises(ValueError, match=r'no learning rate.*learning_rate='):
    convert(optimizer)
  tx, opt_state = compat.to_optax(optimizer, learning_rate=lambda count: 0.5)
  tx.update(problem().grads(optimizer.target, 0), opt_state, optimizer.target)


# ---------------------------------------------------------------- from_optax


def test_from_optax_of_a_fresh_optax_state_is_a_fresh_optimizer():
  params = problem().params
  opt_def = optim.Momentum(0.1, beta=0.5)
  restored = compat.from_optax(opt_def, params,
                               opt_def.to_optax().init(params))
  chex.assert_trees_all_equal(restored, opt_def.create(params), strict=True)


def test_from_optax_names_the_mismatch():
  params = problem().params
  opt_state = optim.Momentum(0.1).to_optax().init(params)
  with pytest.raises(TypeError, match='opt_state'):
    compat.from_optax(optim.GradientDescent(0.1), params, opt_state)
  wrong = jax.tree_util.tree_map(
      lambda x: jnp.zeros((2,) + x.shape) if x.ndim else x, opt_state)
  with pytest.raises(ValueError, match=r"Dense_0.*kernel.*expected shape"):
    compat.from_optax(optim.Momentum(0.1), params, wrong)


def test_from_optax_accepts_a_train_state():
  params = problem().params
  optimizer = optim.Momentum(0.1).create(params)
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  state = compat.to_train_state(optimizer, apply_fn=None)
  state = state.apply_gradients(grads=grads)
  expected = optimizer.apply_gradient(grads)
  chex.assert_trees_all_equal(
      compat.from_optax(optimizer.optimizer_def, state.params,
                        state.opt_state), expected, strict=True)


# --------------------------------------------------------------- TrainState


class _StateWithStats(train_state.TrainState):
  batch_stats: dict


def test_to_train_state_fields_and_subclass():
  optimizer = optim.Momentum(0.1).create(problem().params)
  apply_fn = check.MLP().apply
  state = compat.to_train_state(
      optimizer, apply_fn, train_state_class=_StateWithStats,
      batch_stats={'mean': jnp.zeros(3)})
  assert isinstance(state, _StateWithStats)
  assert state.apply_fn is apply_fn
  chex.assert_trees_all_equal(state.batch_stats, {'mean': jnp.zeros(3)})
  chex.assert_trees_all_equal(state.step, optimizer.state.step, strict=True)
  chex.assert_trees_all_equal(state.params, optimizer.target, strict=True)
  with pytest.raises(TypeError, match='train_state_class'):
    compat.to_train_state(optimizer, None, train_state_class=dict)


# ------------------------------------------------------------- replicated


@pytest.mark.parametrize('convert', CONVERTERS, ids=CONVERTER_IDS)
def test_replicated_optimizer_is_refused_until_unreplicated(convert):
  optimizer = optim.Momentum(0.1).create(problem().params)
  replicated = optimizer.replicate()
  with pytest.raises(ValueError, match=r'unreplicate\(\)'):
    convert(replicated)
  convert(replicated.unreplicate())  # fine once unreplicated


def test_from_optax_refuses_a_replicated_def():
  params = problem().params
  opt_def = optim.ReplicatedOptimizer(optim.Momentum(0.1))
  with pytest.raises(ValueError, match='replicate'):
    compat.from_optax(opt_def, params, opt_def.optimizer_def.to_optax().init(
        params))


# ----------------------------------------------------- traversal labels


def test_traversal_labels():
  params = problem().params
  labels = compat.traversal_labels(
      params, _traversal(lambda p: p.endswith('kernel')),
      _traversal(lambda p: p == '/Dense_0/bias'))
  assert labels == {'Dense_0': {'kernel': '0', 'bias': '1'},
                    'Dense_1': {'kernel': '0', 'bias': 'frozen'}}
  with pytest.raises(ValueError, match=r"Dense_0.*kernel"):
    compat.traversal_labels(params, _traversal(lambda p: 'Dense_0' in p),
                            _traversal(lambda p: p.endswith('kernel')))


def test_partition_by_traversal_labels_matches_multi_optimizer():
  """The migration recipe: MultiOptimizer -> optax.partition(labels)."""
  params = problem().params
  kernels = _traversal(lambda p: p.endswith('kernel'))
  first_bias = _traversal(lambda p: p == '/Dense_0/bias')
  legacy = optim.MultiOptimizer((kernels, optim.GradientDescent(0.1)),
                                (first_bias, optim.GradientDescent(0.01)))
  tx = optax.partition(
      {'0': optax.sgd(0.1), '1': optax.sgd(0.01),
       'frozen': optax.set_to_zero()},
      compat.traversal_labels(params, kernels, first_bias))
  grads = problem().grads(params, 0)
  new = jax.jit(lambda p, g: check.optax_update(tx, p, tx.init(p), g)[0])
  old = jax.jit(lambda opt, g: opt.apply_gradient(g).target)
  chex.assert_trees_all_equal(new(params, grads),
                              old(legacy.create(params), grads), strict=True)


# ------------------------------------------------------------ nnx support


def _release(version: str) -> tuple[int, ...]:
  return tuple(int(part) for part in version.split('.')[:3])


def test_bridge_refuses_flax_older_than_it_supports():
  # Runs on every stack ([testenv:oldest] has flax 0.10): there the bridge
  # must refuse with the flax it needs, from 0.12.7 on it must convert.
  version = importlib.metadata.version('flax')
  optimizer = optim.Adam(1e-3).create(
      {'kernel': jnp.ones((2, 3)), 'bias': jnp.zeros((3,))})
  model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
  if _release(version) < _release(compat_nnx.NNX_MIN_FLAX):
    with pytest.raises(NotImplementedError,
                       match=r'needs flax>=0\.12\.7 .* installed flax is '
                       + re.escape(version)):
      compat.to_nnx_optimizer(optimizer, model)
  else:
    assert compat_nnx.nnx_api_problem() is None
    nnx_opt = compat.to_nnx_optimizer(optimizer, model)
    assert int(nnx_opt.step[...]) == 0
