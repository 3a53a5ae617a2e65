"""The flax.optim object model: Optimizer, OptimizerDef, overrides, errors."""

import chex
from flax import serialization
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import legacy_optim as optim
from legacy_optim import _eager
from legacy_optim import base


def _params():
  return {
      'dense': {'kernel': jnp.asarray(np.linspace(-1, 1, 6, dtype=np.float32)
                                      .reshape(2, 3)),
                'bias': jnp.asarray([0.5, -0.25, 0.125], jnp.float32)},
      'scale': jnp.asarray(1.5, jnp.float32),
  }


def _grads(step):
  rng = np.random.default_rng(step)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(np.shape(p)), p.dtype),
      _params())


@pytest.fixture(params=['eager', 'jit'])
def step_fn(request):
  """apply_gradient, eager or jitted (overrides passed as traced args)."""
  def apply(opt, grads, **overrides):
    return opt.apply_gradient(grads, **overrides)
  return apply if request.param == 'eager' else jax.jit(apply)


# --------------------------------------------------------------- references
# Written from the update rules, in NumPy float32, independent of Optax.


def _np(tree):
  return jax.tree_util.tree_map(np.asarray, tree)


def _sgd_reference(params, grads_seq, lrs):
  p = _np(params)
  for g, lr in zip(grads_seq, lrs):
    p = jax.tree_util.tree_map(
        lambda x, gg, lr=lr: (x - np.float32(lr) * np.asarray(gg)).astype(
            np.float32), p, g)
  return p


def _momentum_reference(params, grads_seq, lrs, beta, wd, nesterov):
  p = _np(params)
  m = jax.tree_util.tree_map(np.zeros_like, p)
  f32 = np.float32
  for g, lr in zip(grads_seq, lrs):
    g = _np(g)
    if wd:
      g = jax.tree_util.tree_map(lambda gg, x: gg + f32(wd) * x, g, p)
    m = jax.tree_util.tree_map(lambda mm, gg: f32(beta) * mm + gg, m, g)
    d = (jax.tree_util.tree_map(lambda gg, mm: gg + f32(beta) * mm, g, m)
         if nesterov else m)
    p = jax.tree_util.tree_map(lambda x, dd, lr=lr: x - f32(lr) * dd, p, d)
  return p, m


# ------------------------------------------------------------------- tests


def test_state_layout_matches_flax_optim():
  opt = optim.Momentum(0.1).create(_params())
  assert isinstance(opt.state, optim.OptimizerState)
  assert opt.state.step.dtype == jnp.int32 and int(opt.state.step) == 0
  leaf_state = opt.state.param_states['dense']['kernel']
  assert type(leaf_state).__name__ == '_MomentumParamState'
  chex.assert_trees_all_equal(leaf_state.momentum, jnp.zeros((2, 3)))
  sgd = optim.GradientDescent(0.1).create(_params())
  assert sgd.state.param_states == {'dense': {'kernel': (), 'bias': ()},
                                    'scale': ()}


def test_gradient_descent_matches_reference(step_fn):
  opt = optim.GradientDescent(learning_rate=0.1).create(_params())
  grads_seq = [_grads(i) for i in range(5)]
  lrs = [0.1, 0.05, 0.2, 0.1, 0.01]
  for g, lr in zip(grads_seq, lrs):
    opt = step_fn(opt, g, learning_rate=lr)
  # Under jit XLA fuses p - lr * g into one FMA, so the NumPy reference can
  # differ in the last bit; bit-identity to flax 0.5.3 is test_fidelity's job.
  chex.assert_trees_all_close(
      _np(opt.target), _sgd_reference(_params(), grads_seq, lrs), rtol=1e-6)
  assert int(opt.state.step) == 5


@pytest.mark.parametrize('nesterov', [False, True])
@pytest.mark.parametrize('weight_decay', [0.0, 1e-2])
def test_momentum_matches_reference(step_fn, nesterov, weight_decay):
  opt_def = optim.Momentum(0.1, beta=0.8, weight_decay=weight_decay,
                           nesterov=nesterov)
  opt = opt_def.create(_params())
  grads_seq = [_grads(i) for i in range(6)]
  lrs = [0.1, 0.1, 0.05, 0.05, 0.02, 0.3]
  for g, lr in zip(grads_seq, lrs):
    opt = step_fn(opt, g, learning_rate=lr)
  expected_p, expected_m = _momentum_reference(
      _params(), grads_seq, lrs, 0.8, weight_decay, nesterov)
  chex.assert_trees_all_close(_np(opt.target), expected_p, rtol=2e-6,
                              atol=1e-7)
  momentum = jax.tree_util.tree_map(
      lambda s: s.momentum, opt.state.param_states,
      is_leaf=lambda s: hasattr(s, 'momentum'))
  chex.assert_trees_all_close(_np(momentum), expected_m, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize('nesterov', [False, True])
def test_optax_equivalents_in_docstrings_are_bit_identical(nesterov):
  """The stock Optax expressions the docstrings name give the same bits."""
  params = _params()
  cases = [
      (optim.GradientDescent(0.1), optax.sgd(0.1)),
      (optim.Momentum(0.1, beta=0.9, weight_decay=1e-3, nesterov=nesterov),
       optax.chain(optax.add_decayed_weights(1e-3),
                   optax.trace(0.9, nesterov=nesterov),
                   optax.scale_by_learning_rate(0.1))),
  ]
  for opt_def, stock in cases:
    # Both sides compiled: eager apply_gradient runs a cached compiled step,
    # and compiled vs op-by-op steps may round differently (FMA fusion).
    legacy_step = jax.jit(lambda o, g: o.apply_gradient(g))

    @jax.jit
    def stock_step(p, s, g, stock=stock):
      u, s = stock.update(g, s, p)
      return optax.apply_updates(p, u), s

    opt = opt_def.create(params)
    p, s = params, stock.init(params)
    for i in range(10):
      opt = legacy_step(opt, _grads(i))
      p, s = stock_step(p, s, _grads(i))
    chex.assert_trees_all_equal(opt.target, p)


def test_traced_overrides_do_not_retrace():
  traces = []

  @jax.jit
  def step(opt, g, lr, beta, wd):
    traces.append(1)
    return opt.apply_gradient(g, learning_rate=lr, beta=beta, weight_decay=wd)

  opt = optim.Momentum(0.1).create(_params())
  for i in range(3):
    opt = step(opt, _grads(i), 0.1 / (i + 1), 0.9 - 0.1 * i, 1e-3 * i)
  assert len(traces) == 1


def test_static_flag_cannot_be_traced():
  opt = optim.Momentum(0.1).create(_params())
  with pytest.raises(TypeError, match='nesterov'):
    jax.jit(lambda o, g, n: o.apply_gradient(g, nesterov=n))(
        opt, _grads(0), jnp.asarray(True))


def test_hyper_params_override_replaces_all():
  opt_def = optim.Momentum(0.1, beta=0.9)
  new_hp = opt_def.hyper_params.replace(learning_rate=0.5, beta=0.0)
  assert opt_def.update_hyper_params(hyper_params=new_hp) == new_hp
  opt = opt_def.create(_params())
  by_hp = opt.apply_gradient(_grads(0), hyper_params=new_hp)
  by_sgd = optim.GradientDescent(0.5).create(_params()).apply_gradient(
      _grads(0))
  chex.assert_trees_all_equal(by_hp.target, by_sgd.target)


def test_unknown_override_lists_valid_names():
  opt = optim.Momentum(0.1).create(_params())
  with pytest.raises(TypeError) as e:
    opt.apply_gradient(_grads(0), lr=0.1)
  msg = str(e.value)
  assert "'lr'" in msg
  for name in ('learning_rate', 'beta', 'weight_decay', 'nesterov'):
    assert name in msg


@pytest.mark.parametrize('opt_def', [optim.GradientDescent(),
                                     optim.Momentum()])
def test_missing_learning_rate_raises_value_error_at_update(opt_def):
  opt = opt_def.create(_params())  # creating without a rate is allowed
  with pytest.raises(ValueError, match='no learning rate'):
    opt.apply_gradient(_grads(0))
  # ... and the rate can come with each step.
  opt = opt.apply_gradient(_grads(0), learning_rate=0.1)
  assert int(opt.state.step) == 1


def test_grads_structure_mismatch_names_both_and_first_path():
  opt = optim.GradientDescent(0.1).create(_params())
  grads = _grads(0)
  grads['dense'] = {'kernel': grads['dense']['kernel'],
                    'weight': grads['dense']['bias']}
  with pytest.raises(TypeError) as e:
    opt.apply_gradient(grads)
  msg = str(e.value)
  assert "missing from grads: ['dense']['bias']" in msg
  assert "unexpected in grads: ['dense']['weight']" in msg
  assert 'target: PyTreeDef' in msg and 'grads: PyTreeDef' in msg


def test_empty_params():
  for opt_def in (optim.GradientDescent(0.1), optim.Momentum(0.1)):
    opt = opt_def.create({})
    opt = jax.jit(lambda o: o.apply_gradient({}))(opt)
    assert opt.target == {} and int(opt.state.step) == 1


def test_scalar_params(step_fn):
  opt = optim.Momentum(0.5, beta=0.5).create(jnp.asarray(2.0))
  opt = step_fn(opt, jnp.asarray(1.0))
  opt = step_fn(opt, jnp.asarray(1.0))
  # m1 = 1, p1 = 2 - 0.5; m2 = 1.5, p2 = 1.5 - 0.75.
  assert float(opt.target) == 0.75
  assert float(opt.state.param_states.momentum) == 1.5


def test_per_leaf_api_of_builtin_agrees_with_tree_api():
  opt_def = optim.Momentum(0.1, beta=0.7, weight_decay=0.01, nesterov=True)
  p = _params()['dense']['kernel']
  g = _grads(3)['dense']['kernel']
  state = opt_def.init_param_state(p)
  new_p, new_state = opt_def.apply_param_gradient(
      0, opt_def.hyper_params, p, state, g)
  opt = opt_def.create(p).apply_gradient(g)
  chex.assert_trees_all_equal(new_p, opt.target)
  chex.assert_trees_all_equal(new_state, opt.state.param_states)


# ------------------------------------------------------ user-written defs


@struct.dataclass
class _SignSGDHyperParams:
  learning_rate: float
  decay: float


@struct.dataclass
class _SignSGDParamState:
  ema: jnp.ndarray


class SignSGDWithEma(optim.OptimizerDef):
  """A user-written flax.optim optimizer: only the per-leaf API."""

  def __init__(self, learning_rate=0.1, decay=0.5):
    super().__init__(_SignSGDHyperParams(learning_rate, decay))

  def init_param_state(self, param):
    return _SignSGDParamState(jnp.zeros_like(param))

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    ema = hyper_params.decay * state.ema + (1 - hyper_params.decay) * grad
    return param - hyper_params.learning_rate * jnp.sign(ema), (
        _SignSGDParamState(ema))


def _sign_sgd_reference(params, grads_seq, lr, decay):
  p, ema = _np(params), jax.tree_util.tree_map(np.zeros_like, _np(params))
  for g in grads_seq:
    ema = jax.tree_util.tree_map(
        lambda e, gg: np.float32(decay) * e + np.float32(1 - decay) * gg,
        ema, _np(g))
    p = jax.tree_util.tree_map(lambda x, e: x - np.float32(lr) * np.sign(e),
                               p, ema)
  return p


def test_user_subclass_runs_through_optax(step_fn):
  opt_def = SignSGDWithEma(0.125, 0.5)
  grads_seq = [_grads(i) for i in range(4)]
  opt = opt_def.create(_params())
  for g in grads_seq:
    opt = step_fn(opt, g)
  expected = _sign_sgd_reference(_params(), grads_seq, 0.125, 0.5)
  chex.assert_trees_all_close(_np(opt.target), expected, rtol=1e-6)
  # The raw Optax loop with to_optax() gives the same bits.
  tx = opt_def.to_optax()
  p, s = _params(), tx.init(_params())
  assert isinstance(s, optim.LegacyRuleState)
  for g in grads_seq:
    u, s = tx.update(g, s, p)
    p = optax.apply_updates(p, u)
  chex.assert_trees_all_equal(p, opt.target)
  assert int(s.count) == 4


def test_subclass_of_builtin_overriding_rule_uses_its_own_rule():
  class ClippedMomentum(optim.Momentum):

    def apply_param_gradient(self, step, hyper_params, param, state, grad):
      return super().apply_param_gradient(
          step, hyper_params, param, state, jnp.clip(grad, -0.1, 0.1))

  g = jax.tree_util.tree_map(lambda x: x * 100.0, _grads(0))
  clipped = ClippedMomentum(1.0, beta=0.0).create(_params()).apply_gradient(g)
  expected = _sgd_reference(
      _params(), [jax.tree_util.tree_map(lambda x: jnp.clip(x, -.1, .1), g)],
      [1.0])
  chex.assert_trees_all_close(_np(clipped.target), expected, rtol=1e-6)
  assert ClippedMomentum(1.0)._user_hooks() == {'apply_param_gradient'}
  assert not optim.Momentum(1.0)._user_hooks()


class _HalvedGradAdam(optim.Adam):
  """A user's Adam that halves every gradient, then runs Adam's own rule."""

  calls = 0

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    type(self).calls += 1
    return super().apply_param_gradient(step, hyper_params, param, state,
                                        grad / 2)


def _adam_reference(params, grads_seq, lr, beta1=0.9, beta2=0.999, eps=1e-8):
  f32 = np.float32
  p = _np(params)
  m = jax.tree_util.tree_map(np.zeros_like, p)
  v = jax.tree_util.tree_map(np.zeros_like, p)
  for t, g in enumerate(grads_seq, start=1):
    g = _np(g)
    m = jax.tree_util.tree_map(lambda a, b: f32(beta1) * a + f32(1 - beta1) * b,
                               m, g)
    v = jax.tree_util.tree_map(
        lambda a, b: f32(beta2) * a + f32(1 - beta2) * b * b, v, g)
    corr1, corr2 = f32(1 - beta1**t), f32(1 - beta2**t)
    p = jax.tree_util.tree_map(
        lambda x, mm, vv, c1=corr1, c2=corr2: x - f32(lr) * (mm / c1) / (
            np.sqrt(vv / c2) + f32(eps)), p, m, v)
  return p


def test_builtin_subclass_overriding_a_per_leaf_hook_agrees_on_every_path():
  # Such a def both has a built-in transform (its super() calls run it on one
  # leaf) and must not run it on the tree: every path takes the per-leaf
  # route, runs the user's method at every step, and gives the same numbers.
  opt_def = _HalvedGradAdam(learning_rate=0.1)
  assert opt_def._user_hooks() == {'apply_param_gradient'}
  params = _params()
  leaves = len(jax.tree_util.tree_leaves(params))
  grads_seq = [_grads(0), _grads(1)]
  halved = [jax.tree_util.tree_map(lambda g: g / 2, g) for g in grads_seq]
  expected = _adam_reference(params, halved, 0.1)

  # Eager steps: never from the compiled cache, the user's method each time.
  _HalvedGradAdam.calls = 0
  cache_size = _eager.cache_size()
  eager = opt_def.create(params)
  for g in grads_seq:
    eager = eager.apply_gradient(g)
  assert _HalvedGradAdam.calls == 2 * leaves
  assert _eager.cache_size() == cache_size
  chex.assert_trees_all_close(_np(eager.target), expected, rtol=1e-5,
                              atol=1e-5)

  # A jitted step and a MultiOptimizer holding it take the same route.
  jitted = opt_def.create(params)
  for g in grads_seq:
    jitted = jax.jit(lambda o, g: o.apply_gradient(g))(jitted, g)
  chex.assert_trees_all_close(_np(jitted.target), expected, rtol=1e-5,
                              atol=1e-5)
  multi = optim.MultiOptimizer(
      (optim.ModelParamTraversal(lambda path, _: True), opt_def))
  assert multi._user_hooks() == {'sub_optimizers[0].apply_param_gradient'}
  _HalvedGradAdam.calls = 0
  multi_opt = multi.create(params)
  for g in grads_seq:
    multi_opt = multi_opt.apply_gradient(g)
  assert _HalvedGradAdam.calls == 2 * leaves
  chex.assert_trees_all_close(_np(multi_opt.target), expected, rtol=1e-5,
                              atol=1e-5)

  # to_optax() wraps the user's methods, and its state is the legacy one.
  tx = opt_def.to_optax()
  state = opt_def.to_optax_state(eager.state, eager.target)
  assert isinstance(state, optim.LegacyRuleState)
  assert isinstance(tx.init(params), optim.LegacyRuleState)
  p, s = params, tx.init(params)
  for g in grads_seq:
    u, s = tx.update(g, s, p)
    p = optax.apply_updates(p, u)
  chex.assert_trees_all_equal(p, eager.target)
  chex.assert_trees_all_equal(
      opt_def.from_optax_state(s, p).param_states, eager.state.param_states)


def test_optimizer_def_without_rule_says_what_to_implement():
  class Incomplete(optim.OptimizerDef):
    pass

  with pytest.raises(NotImplementedError, match='init_param_state'):
    Incomplete(None).create({'w': jnp.ones(2)})


# --------------------------------------------------- deprecated helpers


def test_compute_gradient_and_optimize():
  opt = optim.GradientDescent(0.1).create(jnp.asarray([1.0, 2.0]))
  loss, grad = opt.compute_gradient(lambda p: jnp.sum(p ** 2))
  assert float(loss) == 5.0
  chex.assert_trees_all_equal(grad, jnp.asarray([2.0, 4.0]))
  loss, aux, grad = opt.compute_gradient(lambda p: (jnp.sum(p), {'n': 2}))
  assert aux == {'n': 2}
  new_opt, loss = opt.optimize(lambda p: jnp.sum(p ** 2), learning_rate=0.5)
  chex.assert_trees_all_equal(new_opt.target, jnp.asarray([0.0, 0.0]))
  assert opt.compute_gradients == opt.compute_gradient


# --------------------------------------------------------- serialization


def test_state_dict_layout_and_round_trip():
  opt = optim.Momentum(0.1).create(_params())
  opt = opt.apply_gradient(_grads(0))
  sd = serialization.to_state_dict(opt)
  assert set(sd) == {'target', 'state'}
  assert set(sd['state']) == {'step', 'param_states'}
  assert set(sd['state']['param_states']['dense']['kernel']) == {'momentum'}
  # Optimizer pytrees compare their def by identity (as in flax.optim).
  blank = opt.optimizer_def.create(
      jax.tree_util.tree_map(jnp.zeros_like, _params()))
  restored = serialization.from_bytes(blank, serialization.to_bytes(opt))
  chex.assert_trees_all_equal(restored, opt)
  # Containers holding optimizers serialize too.
  box = {'opt': opt, 'ema': _params()}
  restored_box = serialization.from_bytes(
      {'opt': blank, 'ema': _params()}, serialization.to_bytes(box))
  chex.assert_trees_all_equal(restored_box['opt'], opt)


def test_multi_optimizer_state_dict_keeps_none_for_frozen_leaves():
  focus = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
  opt = optim.Momentum(0.1).create(_params(), focus=focus)
  sd = serialization.to_state_dict(opt)
  assert sd['state']['param_states']['scale'] is None
  restored = serialization.from_bytes(
      optim.Momentum(0.1).create(_params(), focus=focus),
      serialization.to_bytes(opt.apply_gradient(_grads(0))))
  assert int(restored.state.step) == 1


# ---------------------------------------------------------- replication


def test_replicate_and_unreplicate_on_local_devices():
  opt = optim.Momentum(0.1).create(_params())
  rep = opt.replicate()
  assert isinstance(rep.optimizer_def, optim.ReplicatedOptimizer)
  n = jax.local_device_count()
  assert rep.target['scale'].shape == (n,)
  step = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name='batch')
  rep = step(rep, jax.tree_util.tree_map(
      lambda g: jnp.broadcast_to(g, (n,) + g.shape), _grads(0)))
  back = rep.unreplicate()
  assert isinstance(back.optimizer_def, optim.Momentum)
  # Compiled vs compiled: eager steps may round differently (no FMA fusion).
  single = jax.jit(lambda o, g: o.apply_gradient(g))(opt, _grads(0))
  chex.assert_trees_all_equal(back.target, single.target)
  with pytest.raises(ValueError, match='not replicated'):
    back.unreplicate()


def test_state_shaped_like_legacy_is_a_pure_restructuring():
  opt_def = optim.Momentum(0.1)
  opt = opt_def.create(_params()).apply_gradient(_grads(1))
  opt_state = opt_def.to_optax_state(opt.state, opt.target)
  back = opt_def.from_optax_state(opt_state, opt.target)
  chex.assert_trees_all_equal(back, opt.state)
  # No array is copied: the same buffers appear on both sides.
  ids = {id(x) for x in jax.tree_util.tree_leaves(opt.state)}
  assert {id(x) for x in jax.tree_util.tree_leaves(opt_state)} == ids


def test_base_module_reexports_legacy_names():
  assert base.MultiOptimizer is optim.MultiOptimizer
  assert base.ReplicatedOptimizer is optim.ReplicatedOptimizer
  assert base.ModelParamTraversal is optim.ModelParamTraversal


def test_flax_training_checkpoints_round_trip(tmp_path):
  from flax.training import checkpoints
  focus = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
  opt = optim.Momentum(0.1).create(_params(), focus=focus)
  opt = opt.apply_gradient(_grads(0))
  box = {'optimizer': opt, 'ema': _params(), 'step': 1}
  for name, tree in (('bare', opt), ('container', box)):
    checkpoints.save_checkpoint(tmp_path / name, tree, step=1)
    blank = jax.tree_util.tree_map(jnp.zeros_like, tree)
    restored = checkpoints.restore_checkpoint(tmp_path / name, target=blank)
    chex.assert_trees_all_equal(restored, tree)
