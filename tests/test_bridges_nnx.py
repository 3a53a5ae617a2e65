"""to_nnx_optimizer: path matching, path_map on a hand-written model, layout."""

import functools

import chex
from flax import nnx
import jax
import jax.numpy as jnp
import optax
import pytest

import compat
from compat.cli import _configs
from compat.cli import check
import legacy_optim as optim

# Every test here needs the nnx bridge; its refusal on older flax is tested in
# test_bridges_api.py.
pytestmark = pytest.mark.nnx

K = 2


@functools.lru_cache(maxsize=None)
def problem():
  return check.Problem(2 * K)


class HandPorted(nnx.Module):
  """check.MLP written by hand in nnx, with other names."""

  def __init__(self, rngs):
    self.hidden = nnx.Linear(4, 8, rngs=rngs)
    self.out = nnx.Linear(8, 3, rngs=rngs)

  def __call__(self, x):
    return self.out(jnp.tanh(self.hidden(x)))


PATH_MAP = {'Dense_0': 'hidden', 'Dense_1': 'out'}


def _to_legacy_names(tree):
  return {'Dense_0': tree['hidden'], 'Dense_1': tree['out']}


def _to_nnx_names(tree):
  return {'hidden': tree['Dense_0'], 'out': tree['Dense_1']}


# MultiOptimizer and focus select leaves by their legacy paths: the converted
# optimizer must keep selecting the same leaves under the new names.
@pytest.mark.parametrize('name', ['Momentum(nesterov, wd)', 'Adam',
                                  'MultiOptimizer(unmatched)', 'focus'])
def test_path_map_on_a_hand_written_model_continues_bit_identically(name):
  config = _configs.BY_NAME[name]
  optimizer = config.create(problem().params)
  for i in range(K):
    optimizer = check.legacy_step(
        config, optimizer, problem().grads(optimizer.target, i))
  model = HandPorted(nnx.Rngs(7))
  nnx_opt = compat.to_nnx_optimizer(optimizer, model, path_map=PATH_MAP)
  for i in range(K, 2 * K):
    params = _to_legacy_names(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    check.nnx_step(model, nnx_opt, _to_nnx_names(problem().grads(params, i)))
    optimizer = check.legacy_step(
        config, optimizer, problem().grads(optimizer.target, i))
  chex.assert_trees_all_equal(
      _to_legacy_names(nnx.to_pure_dict(nnx.state(model, nnx.Param))),
      optimizer.target, strict=True)
  assert int(nnx_opt.step[...]) == 2 * K


def test_state_has_nnx_optimizers_own_layout():
  """Same tree, same variable types as nnx.Optimizer with stock Optax."""
  optimizer = optim.Momentum(0.1, beta=0.9).create(problem().params)
  optimizer = optimizer.apply_gradient(problem().grads(optimizer.target, 0))
  model = HandPorted(nnx.Rngs(0))
  converted = compat.to_nnx_optimizer(optimizer, model, path_map=PATH_MAP)
  stock = nnx.Optimizer(HandPorted(nnx.Rngs(0)), optax.chain(
      optax.identity(), optax.trace(0.9),
      optax.scale_by_learning_rate(lambda count: 0.1)),
                        wrt=nnx.Param)
  assert (jax.tree_util.tree_structure(converted.opt_state) ==
          jax.tree_util.tree_structure(stock.opt_state))
  trace = converted.opt_state[1].trace
  assert isinstance(trace['hidden']['kernel'],
                    nnx.training.optimizer.OptVariable)
  momentum = optimizer.state.param_states
  chex.assert_trees_all_equal(
      nnx.to_pure_dict(trace),
      _to_nnx_names(jax.tree_util.tree_map(
          lambda s: s.momentum, momentum,
          is_leaf=lambda s: hasattr(s, 'momentum'))), strict=True)
  chex.assert_trees_all_equal(
      nnx.to_pure_dict(nnx.state(model, nnx.Param)),
      _to_nnx_names(optimizer.target), strict=True)
  assert converted.step[...].dtype == jnp.uint32
  assert int(converted.step[...]) == 1


def test_bridge_model_needs_no_path_map():
  optimizer = optim.GradientDescent(0.1).create(problem().params)
  model = problem().nnx_model()
  compat.to_nnx_optimizer(optimizer, model)
  chex.assert_trees_all_equal(nnx.to_pure_dict(nnx.state(model, nnx.Param)),
                              optimizer.target, strict=True)


def test_whole_variables_dict_hint_and_empty_prefix():
  params = problem().params
  optimizer = optim.GradientDescent(0.1).create({'params': params})
  with pytest.raises(ValueError, match=r"path_map=\{'params': ''\}"):
    compat.to_nnx_optimizer(optimizer, problem().nnx_model())
  model = problem().nnx_model()
  compat.to_nnx_optimizer(optimizer, model, path_map={'params': ''})
  chex.assert_trees_all_equal(nnx.to_pure_dict(nnx.state(model, nnx.Param)),
                              params, strict=True)


class _Wider(nnx.Module):

  def __init__(self, rngs):
    self.hidden = nnx.Linear(4, 9, rngs=rngs)
    self.out = nnx.Linear(9, 3, rngs=rngs)
    self.extra = nnx.Linear(3, 3, rngs=rngs)


def test_mismatched_model_lists_every_path():
  optimizer = optim.Momentum(0.1).create(problem().params)
  with pytest.raises(ValueError) as info:
    compat.to_nnx_optimizer(optimizer, _Wider(nnx.Rngs(0)),
                            path_map={'Dense_0': 'hidden', 'Dense_1': 'out',
                                      'Dense_9': 'nowhere'})
  message = str(info.value)
  for expected in [
      'Dense_0/bias -> hidden/bias: shape (8,), the model expects (9,)',
      'Dense_0/kernel -> hidden/kernel: shape (4, 8), the model expects (4, 9)',
      'Dense_1/kernel -> out/kernel: shape (8, 3), the model expects (9, 3)',
      'model param extra/kernel: no legacy param maps to it',
      'model param extra/bias: no legacy param maps to it',
      "path_map entry 'Dense_9' matches no legacy param",
  ]:
    assert expected in message, message
  assert 'out/bias' not in message  # (3,) fits


def test_unmatched_legacy_params_and_collisions_are_named():
  optimizer = optim.GradientDescent(0.1).create(problem().params)
  with pytest.raises(ValueError) as info:
    compat.to_nnx_optimizer(optimizer, HandPorted(nnx.Rngs(0)),
                            path_map={'Dense_0': 'hidden', 'Dense_1': 'hidden'})
  message = str(info.value)
  assert 'already taken by Dense_0/bias' in message, message
  assert 'model param out/kernel: no legacy param maps to it' in message
  with pytest.raises(ValueError, match='Dense_1/kernel: the model has no such'):
    compat.to_nnx_optimizer(optimizer, HandPorted(nnx.Rngs(0)),
                            path_map={'Dense_0': 'hidden'})


def test_dtype_mismatch_is_named():
  params = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16),
                                  problem().params)
  optimizer = optim.GradientDescent(0.1).create(params)
  with pytest.raises(ValueError, match='dtype bfloat16, the model expects '
                     'float32'):
    compat.to_nnx_optimizer(optimizer, problem().nnx_model())


def test_path_map_may_be_a_function():
  optimizer = optim.GradientDescent(0.1).create(problem().params)
  model = HandPorted(nnx.Rngs(0))
  compat.to_nnx_optimizer(
      optimizer, model,
      path_map=lambda path: path.replace('Dense_0', 'hidden').replace(
          'Dense_1', 'out'))
  chex.assert_trees_all_equal(
      _to_legacy_names(nnx.to_pure_dict(nnx.state(model, nnx.Param))),
      optimizer.target, strict=True)


def test_schedule_override_reaches_nnx_optimizer():
  config = _configs.BY_NAME['Momentum + lr schedule']
  optimizer = config.create(problem().params)
  optimizer = check.legacy_step(config, optimizer,
                                     problem().grads(optimizer.target, 0))
  model = problem().nnx_model()
  nnx_opt = compat.to_nnx_optimizer(optimizer, model,
                                    **config.optax_overrides())
  grads = problem().grads(optimizer.target, 1)
  check.nnx_step(model, nnx_opt, grads)
  expected = check.legacy_step(config, optimizer, grads).target
  chex.assert_trees_all_equal(nnx.to_pure_dict(nnx.state(model, nnx.Param)),
                              expected, strict=True)
