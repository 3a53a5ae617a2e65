"""Cookbook recipes starting from a legacy optimizer, one test each.

Clipping, MultiSteps, injected and scheduled hyper-params, per-step
overrides and extra ``update`` kwargs, per-parameter rates on nnx state,
LoRA, EMA and DynamicScale. Where the math is the legacy loop's own, the
result is compared bit for bit with a jitted legacy step; sharded state is in
test_sharding.py (it needs several devices).
"""

import chex
from flax import nnx
from flax.training import dynamic_scale as dynamic_scale_lib
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import compat
from compat.bridges import nnx as compat_nnx
import legacy_optim as optim

X = jnp.asarray(np.random.default_rng(0).standard_normal((6, 4)), jnp.float32)
Y = jnp.asarray(np.random.default_rng(1).standard_normal((6, 3)), jnp.float32)


def _params():
  rng = np.random.default_rng(2)
  return {'Dense_0': {
      'kernel': jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
      'bias': jnp.asarray(rng.standard_normal((3,)), jnp.float32)}}


def loss_fn(params, scale=1.0):
  dense = params['Dense_0']
  return scale * jnp.mean((X @ dense['kernel'] + dense['bias'] - Y) ** 2)


@jax.jit
def legacy_step(optimizer, grads, learning_rate=None):
  if learning_rate is None:
    return optimizer.apply_gradient(grads)
  return optimizer.apply_gradient(grads, learning_rate=learning_rate)


def _trained(opt_def=None, steps=2):
  optimizer = (opt_def or optim.Adam(1e-2, weight_decay=1e-3)).create(
      _params())
  for _ in range(steps):
    optimizer = legacy_step(optimizer, jax.grad(loss_fn)(optimizer.target))
  return optimizer


class Net(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(4, 3, rngs=rngs)

  def __call__(self, x):
    return self.linear(x)


def _nnx_grads(model):
  return nnx.grad(lambda m: jnp.mean((m(X) - Y) ** 2))(model)


def _nnx_params(model):
  return {'Dense_0': nnx.to_pure_dict(nnx.state(model, nnx.Param))['linear']}


@jax.jit
def optax_step(tx, params, opt_state, grads, extra):
  updates, opt_state = tx.update(grads, opt_state, params, **extra)
  return optax.apply_updates(params, updates), opt_state


optax_step = jax.jit(optax_step.__wrapped__, static_argnums=0)


# --------------------------------------------------------------- clipping
def test_clipping_in_front_is_the_legacy_step_on_clipped_grads():
  optimizer = _trained()
  clip = optax.clip_by_global_norm(0.05)
  tx, opt_state = compat.to_optax(
      optimizer, wrap=lambda tx: optax.chain(clip, tx))
  # The legacy step on clipped grads, clipped in the same program (as the
  # chain does: XLA may fuse the clipping into the rule either way).
  legacy_clipped_step = jax.jit(
      lambda optimizer, grads: optimizer.apply_gradient(
          clip.update(grads, clip.init(None))[0]))
  params = optimizer.target
  for _ in range(2):
    grads = jax.grad(loss_fn)(params)
    params, opt_state = optax_step(tx, params, opt_state, grads, {})
    optimizer = legacy_clipped_step(optimizer,
                                    jax.grad(loss_fn)(optimizer.target))
  chex.assert_trees_all_equal(params, optimizer.target)
  assert int(opt_state[1].count) == int(optimizer.state.step) == 4


# ------------------------------------------------------------- MultiSteps
def test_multisteps_applies_the_legacy_rule_every_k_steps():
  optimizer = _trained()
  tx, opt_state = compat.to_optax(
      optimizer,
      wrap=lambda tx: optax.MultiSteps(tx, 2).gradient_transformation())
  assert int(opt_state.gradient_step) == 2  # The legacy step carried over.
  assert int(opt_state.mini_step) == 0
  params = optimizer.target
  g1 = jax.grad(loss_fn)(params)
  g2 = jax.tree_util.tree_map(lambda g: 0.5 * g, g1)
  params, opt_state = optax_step(tx, params, opt_state, g1, {})
  chex.assert_trees_all_equal(params, optimizer.target)  # Accumulating.
  params, opt_state = optax_step(tx, params, opt_state, g2, {})
  mean = jax.tree_util.tree_map(lambda a, b: (a + b) / 2, g1, g2)
  expected = legacy_step(optimizer, mean)
  chex.assert_trees_all_close(params, expected.target, rtol=1e-6)
  assert int(opt_state.gradient_step) == int(expected.state.step) == 3
  assert int(opt_state.inner_opt_state.count) == 3


# ----------------------------------------- injected hyper-params, schedules
def test_injected_learning_rate_is_set_as_in_optax():
  optimizer = _trained()
  tx, opt_state = compat.to_optax(optimizer, inject=['learning_rate'])
  assert float(opt_state.hyperparams['learning_rate']) == np.float32(1e-2)
  params = optimizer.target
  for lr in (5e-4, 2e-3):
    opt_state.hyperparams['learning_rate'] = jnp.asarray(lr, jnp.float32)
    params, opt_state = optax_step(tx, params, opt_state,
                                   jax.grad(loss_fn)(params), {})
    optimizer = legacy_step(optimizer, jax.grad(loss_fn)(optimizer.target),
                            jnp.asarray(lr, jnp.float32))
  chex.assert_trees_all_equal(params, optimizer.target)
  assert int(opt_state.count) == int(optimizer.state.step) == 4


def test_injected_schedule_continues_from_the_legacy_step():
  schedule = optax.linear_schedule(1e-2, 1e-3, transition_steps=10)
  optimizer = _trained(optim.Momentum(0.1, beta=0.9))
  state = compat.to_train_state(
      optimizer, None, overrides={'learning_rate': schedule},
      inject=['learning_rate'])
  step = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  for _ in range(3):
    lr = schedule(optimizer.state.step)
    state = step(state, jax.grad(loss_fn)(state.params))
    optimizer = legacy_step(optimizer, jax.grad(loss_fn)(optimizer.target),
                            lr)
  chex.assert_trees_all_equal(state.params, optimizer.target)
  assert int(state.step) == int(state.opt_state.count) == 5


def test_inject_names_are_checked():
  with pytest.raises(ValueError, match=r"no single hyper-parameter named "
                     r"'lr'; valid names are: .*learning_rate"):
    compat.to_optax(_trained(), inject=['lr'])


# ----------------------------------- per-step overrides, extra update kwargs
@pytest.mark.nnx
def test_nnx_update_takes_the_legacy_per_step_override():
  optimizer = _trained()
  model = Net(nnx.Rngs(0))
  nnx_opt = compat.to_nnx_optimizer(optimizer, model,
                                    path_map={'Dense_0': 'linear'})

  @nnx.jit
  def step(model, nnx_opt, lr):
    nnx_opt.update(model, _nnx_grads(model), learning_rate=lr)

  for lr in (5e-4, 3e-3):
    step(model, nnx_opt, lr)
    optimizer = legacy_step(optimizer, jax.grad(loss_fn)(optimizer.target),
                            lr)
  chex.assert_trees_all_equal(_nnx_params(model), optimizer.target)
  assert int(nnx_opt.step[...]) == 4


@pytest.mark.nnx
def test_extra_update_kwargs_reach_the_wrappers():
  # reduce_on_plateau needs value=...; its scale stays 1 for these losses.
  optimizer = _trained()
  model = Net(nnx.Rngs(0))
  plateau = optax.contrib.reduce_on_plateau(patience=100)
  nnx_opt = compat.to_nnx_optimizer(
      optimizer, model, path_map={'Dense_0': 'linear'},
      wrap=lambda tx: optax.chain(tx, plateau))

  @nnx.jit
  def step(model, nnx_opt):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(X) - Y) ** 2))(
        model)
    nnx_opt.update(model, grads, value=loss)

  for _ in range(2):
    step(model, nnx_opt)
    optimizer = legacy_step(optimizer, jax.grad(loss_fn)(optimizer.target))
  chex.assert_trees_all_equal(_nnx_params(model), optimizer.target)
  assert float(nnx_opt.opt_state[1].scale[...]) == 1.0
  with pytest.raises(TypeError, match='value'):
    nnx_opt.update(model, _nnx_grads(model))  # As for a stock transform.


def test_raw_optax_update_takes_overrides_and_passes_other_kwargs():
  optimizer = _trained()
  tx, opt_state = compat.to_optax(optimizer)
  grads = jax.grad(loss_fn)(optimizer.target)
  params, _ = optax_step(tx, optimizer.target, opt_state, grads,
                         {'learning_rate': 5e-4, 'value': 1.0})
  chex.assert_trees_all_equal(
      params, legacy_step(optimizer, grads, 5e-4).target)


# ---------------------------------------------- per-parameter rates on nnx
@pytest.mark.nnx
def test_traversal_labels_on_pure_dict_with_int_keys_as_on_state():
  """flax.traverse_util traversals on nnx.to_pure_dict of a Sequential."""
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  kernels = traverse_util.ModelParamTraversal(
      lambda path, _: path.endswith('kernel'))
  biases = traverse_util.ModelParamTraversal(
      lambda path, _: path.endswith('bias'))
  model = nnx.Sequential(nnx.Linear(4, 5, rngs=nnx.Rngs(0)),
                         nnx.Linear(5, 3, rngs=nnx.Rngs(1)))
  state = nnx.state(model, nnx.Param)
  expected = {'layers': {i: {'kernel': '0', 'bias': '1'} for i in (0, 1)}}
  assert compat.traversal_labels(
      nnx.to_pure_dict(state), kernels, biases) == expected
  assert compat.traversal_labels(state, kernels, biases) == nnx.State(expected)


@pytest.mark.nnx
def test_multi_optimizer_inside_nnx_optimizer_on_sequential_state():
  kernels = optim.ModelParamTraversal(lambda path, _: path.endswith('kernel'))
  biases = optim.ModelParamTraversal(lambda path, _: path.endswith('bias'))
  multi = optim.MultiOptimizer((kernels, optim.Adam(1e-2)),
                               (biases, optim.Momentum(0.1, beta=0.9)))
  model = nnx.Sequential(nnx.Linear(4, 5, rngs=nnx.Rngs(0)),
                         nnx.Linear(5, 3, rngs=nnx.Rngs(1)))
  state = nnx.state(model, nnx.Param)
  assert compat.traversal_labels(state, kernels, biases) == nnx.State(
      {'layers': {i: {'kernel': '0', 'bias': '1'} for i in (0, 1)}})
  # The legacy run on the same params, as a dict with string keys.
  legacy = multi.create({'layers': {
      str(i): layer for i, layer in
      nnx.to_pure_dict(state)['layers'].items()}})
  nnx_opt = nnx.Optimizer(model, multi.to_optax(), wrt=nnx.Param)
  grad_fn = nnx.jit(nnx.grad(lambda m: jnp.mean((m(X) - Y) ** 2)))
  step = nnx.jit(lambda model, nnx_opt, grads: nnx_opt.update(model, grads))
  for _ in range(2):
    grads = grad_fn(model)
    step(model, nnx_opt, grads)
    legacy = legacy_step(legacy, {'layers': {
        str(i): g for i, g in nnx.to_pure_dict(grads)['layers'].items()}})
  got = nnx.to_pure_dict(nnx.state(model, nnx.Param))['layers']
  chex.assert_trees_all_equal({str(i): v for i, v in got.items()},
                              legacy.target['layers'])


# ------------------------------------------------------------------ LoRA
class LoraNet(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.LoRALinear(4, 3, lora_rank=2, rngs=rngs)

  def __call__(self, x):
    return self.linear(x)


@pytest.mark.nnx
def test_lora_loads_the_base_weights_and_trains_only_the_adapters():
  optimizer = _trained()
  model = LoraNet(nnx.Rngs(0))
  base_weights = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))
  with pytest.raises(ValueError, match='lora_a: no legacy param maps to it'):
    compat.to_nnx_optimizer(optimizer, model, wrt=nnx.LoRAParam,
                            path_map={'Dense_0': 'linear'})
  nnx_opt = compat.to_nnx_optimizer(optimizer, model, wrt=nnx.LoRAParam,
                                    load=base_weights,
                                    path_map={'Dense_0': 'linear'})
  base = nnx.to_pure_dict(nnx.state(model, base_weights))['linear']
  chex.assert_trees_all_equal(base, optimizer.target['Dense_0'])
  assert int(nnx_opt.step[...]) == 0  # The adapters start afresh.
  adapters = nnx.to_pure_dict(nnx.state(model, nnx.LoRAParam))
  fresh = optimizer.optimizer_def.create(adapters)

  @nnx.jit
  def step(model, nnx_opt):
    grads = nnx.grad(lambda m: jnp.mean((m(X) - Y) ** 2),
                     argnums=nnx.DiffState(0, nnx.LoRAParam))(model)
    nnx_opt.update(model, grads)
    return grads

  grads = step(model, nnx_opt)
  fresh = legacy_step(fresh, nnx.to_pure_dict(grads))
  chex.assert_trees_all_equal(
      nnx.to_pure_dict(nnx.state(model, nnx.LoRAParam)), fresh.target)
  chex.assert_trees_all_equal(  # The base weights are not trained.
      nnx.to_pure_dict(nnx.state(model, base_weights))['linear'], base)


# ------------------------------------------------------------------- EMA
@pytest.mark.nnx
def test_ema_of_the_converted_run_is_the_legacy_runs():
  optimizer = _trained()
  model = Net(nnx.Rngs(0))
  nnx_opt = compat.to_nnx_optimizer(optimizer, model,
                                    path_map={'Dense_0': 'linear'})
  decay = 0.9
  ema_fn = jax.jit(lambda e, p: jax.tree_util.tree_map(
      lambda a, b: decay * a + (1 - decay) * b, e, p))
  ema_new = ema_legacy = optimizer.target

  @nnx.jit
  def step(model, nnx_opt):
    nnx_opt.update(model, _nnx_grads(model))

  for _ in range(3):
    step(model, nnx_opt)
    ema_new = ema_fn(ema_new, _nnx_params(model))
    optimizer = legacy_step(optimizer, jax.grad(loss_fn)(optimizer.target))
    ema_legacy = ema_fn(ema_legacy, optimizer.target)
  chex.assert_trees_all_equal(ema_new, ema_legacy)


# ---------------------------------------------------------- DynamicScale
def _legacy_dynamic_scale_step(optimizer, scale, loss_scale):
  scale, is_finite, _, grads = scale.value_and_grad(
      lambda p: loss_fn(p, loss_scale))(optimizer.target)
  new = optimizer.apply_gradient(grads)
  optimizer = jax.tree_util.tree_map(
      lambda a, b: jnp.where(is_finite, a, b), new, optimizer)
  return optimizer, scale


@nnx.jit
def nnx_dynamic_scale_step(model, nnx_opt, scale, loss_scale):
  # The recipe of migration_guide.md, "Mixed precision (DynamicScale)".
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(params):
    return jnp.mean((nnx.merge(graphdef, params, rest)(X) - Y) ** 2) * (
        loss_scale)

  scale, is_finite, _, grads = scale.value_and_grad(loss)(params)
  # Snapshot the values (not the Variables, which the update changes).
  before = compat_nnx.as_pure(nnx.state((model, nnx_opt)))
  nnx_opt.update(model, grads)
  after = compat_nnx.as_pure(nnx.state((model, nnx_opt)))
  nnx.update((model, nnx_opt), jax.tree_util.tree_map(
      lambda new, old: jnp.where(is_finite, new, old), after, before))
  return scale


@pytest.mark.nnx
def test_dynamic_scale_recipe_skips_non_finite_steps_as_the_legacy_loop():
  optimizer = _trained()
  legacy_scale = optim.DynamicScale(growth_interval=2, scale=2.0 ** 15)
  model = Net(nnx.Rngs(0))
  nnx_opt = compat.to_nnx_optimizer(optimizer, model,
                                    path_map={'Dense_0': 'linear'})
  scale = dynamic_scale_lib.DynamicScale(
      growth_factor=legacy_scale.growth_factor,
      backoff_factor=legacy_scale.backoff_factor,
      growth_interval=legacy_scale.growth_interval,
      fin_steps=legacy_scale.fin_steps, scale=legacy_scale.scale)
  legacy = jax.jit(_legacy_dynamic_scale_step)
  # float32 overflows at loss * scale ~ 3e38: the 1e35 step is skipped.
  for loss_scale in (1.0, 1e35, 1.0, 1.0):
    scale = nnx_dynamic_scale_step(model, nnx_opt, scale, loss_scale)
    optimizer, legacy_scale = legacy(optimizer, legacy_scale, loss_scale)
    chex.assert_trees_all_equal(_nnx_params(model), optimizer.target)
    assert int(nnx_opt.step[...]) == int(optimizer.state.step)
    assert float(scale.scale) == float(legacy_scale.scale)
  assert int(optimizer.state.step) == 5  # 2 before, 3 finite steps.
  assert all(np.isfinite(leaf).all()
             for leaf in jax.tree_util.tree_leaves(_nnx_params(model)))
