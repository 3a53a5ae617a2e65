"""Adafactor, LARS and WeightNorm: layout, Optax state mapping, math, quirks.

Reference checks are NumPy float64 implementations written from the papers
(Shazeer & Stern 2018, Algorithms 4/5; You et al. 2017, Algorithm 1;
Salimans & Kingma 2016, eq. 2-4), independent of the code under test.
"""

import dataclasses

import chex
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest

import legacy_optim as optim
from legacy_optim import adafactor as adafactor_lib

F64 = np.float64


def _rand(rng, shape, dtype=np.float32, scale=1.0):
  return jnp.asarray(rng.standard_normal(shape) * scale, dtype)


def _params(dtype=jnp.float32):
  rng = np.random.default_rng(0)
  return {
      'kernel': _rand(rng, (6, 4), dtype),
      'conv': _rand(rng, (3, 2, 5), dtype),
      'bias': _rand(rng, (4,), dtype),
      'scalar': _rand(rng, (), dtype),
  }


def _grads(step, like):
  rng = np.random.default_rng(100 + step)
  return jax.tree_util.tree_map(
      lambda p: _rand(rng, p.shape, p.dtype), like)


# Algorithms with small factoring thresholds so small leaves get factored.
DEFS = {
    'adafactor': lambda: optim.Adafactor(0.1, min_dim_size_to_factor=3),
    'adafactor_momentum_wd': lambda: optim.Adafactor(
        0.1, beta1=0.9, weight_decay_rate=0.01, min_dim_size_to_factor=3,
        dtype_momentum=jnp.bfloat16),
    'adafactor_unfactored': lambda: optim.Adafactor(
        0.05, factored=False, multiply_by_parameter_scale=False,
        clipping_threshold=None),
    'lars': lambda: optim.LARS(0.1, weight_decay=1e-3, eps=1e-9),
    'lars_nesterov': lambda: optim.LARS(0.1, nesterov=True),
    'wn_sgd': lambda: optim.WeightNorm(optim.GradientDescent(0.1)),
    'wn_momentum': lambda: optim.WeightNorm(
        optim.Momentum(0.1, weight_decay=1e-3), wn_decay=1e-2),
    'wn_adafactor': lambda: optim.WeightNorm(
        optim.Adafactor(0.1, beta1=0.5, min_dim_size_to_factor=2)),
    'wn_adam': lambda: optim.WeightNorm(optim.Adam(0.01, weight_decay=1e-3),
                                        wn_decay=1e-3),
}


def _assert_updates_close(actual, expected, start, rtol):
  """||(actual - start) - (expected - start)|| <= rtol ||expected - start||.

  Per leaf, in float64: the project's fidelity metric. Elementwise relative
  checks would mostly measure the float32 rounding of ``start + update``.
  """
  def check(path, a, e, s):
    a, e, s = (np.asarray(x, F64) for x in (a, e, s))
    err = np.linalg.norm((a - s) - (e - s))
    ref = np.linalg.norm(e - s)
    assert err <= rtol * ref, (
        f'{jax.tree_util.keystr(path)}: relative error {err / ref:.3g} > '
        f'{rtol:g}')
  jax.tree_util.tree_map_with_path(check, actual, expected, start)


# ---------------------------------------------------------------- layouts


def _shapes(tree):
  return jax.tree_util.tree_map(lambda x: (tuple(x.shape), x.dtype.name), tree)


def _field_names(obj):
  return tuple(f.name for f in dataclasses.fields(obj))


def test_adafactor_layout():
  params = {'big': jnp.zeros((130, 129)), 'tie': jnp.zeros((128, 128)),
            'cube': jnp.zeros((130, 3, 200)), 'small': jnp.zeros((127, 300)),
            'vec': jnp.zeros((7,)), 'scalar': jnp.zeros(())}
  state = optim.Adafactor(0.1, beta1=0.9,
                          dtype_momentum=jnp.bfloat16).init_state(params)
  leaf = state.param_states['big']
  assert type(leaf).__name__ == '_AdafactorParamState'
  assert _field_names(leaf) == ('v_row', 'v_col', 'v', 'm')
  f32, one = 'float32', ((1,), 'float32')
  expected = {
      # v_row drops the largest axis, v_col the second largest.
      'big': ((129,), f32), 'tie': ((128,), f32), 'cube': ((130, 3), f32),
  }
  expected_col = {'big': ((130,), f32), 'tie': ((128,), f32),
                  'cube': ((3, 200), f32)}
  for name, p in params.items():
    s = _shapes(state.param_states[name])
    assert s.m == (p.shape, 'bfloat16'), name
    if name in expected:
      assert (s.v_row, s.v_col, s.v) == (expected[name], expected_col[name],
                                         one), name
    else:
      assert (s.v_row, s.v_col, s.v) == (one, one, (p.shape, f32)), name
  # Without beta1 the momentum slot is the unused (1,) placeholder.
  no_m = optim.Adafactor(0.1).init_state(params)
  for name in params:
    assert _shapes(no_m.param_states[name]).m == one


def test_lars_layout():
  params = _params(jnp.bfloat16)
  state = optim.LARS(0.1).init_state(params)
  assert _field_names(state.param_states['kernel']) == ('momentum',)
  chex.assert_trees_all_equal_shapes_and_dtypes(
      jax.tree_util.tree_map(lambda s: s.momentum, state.param_states,
                             is_leaf=lambda s: hasattr(s, 'momentum')),
      params)


def test_weight_norm_layout():
  params = _params()
  state = optim.WeightNorm(optim.Momentum(0.1)).init_state(params)
  assert state.step.dtype == jnp.int32
  kernel = state.param_states['kernel']
  assert _field_names(kernel) == ('direction_state', 'scale_state',
                                  'direction', 'scale')
  assert kernel.direction.shape == (6, 4) and kernel.scale.shape == (1, 4)
  assert kernel.direction_state.momentum.shape == (6, 4)
  assert kernel.scale_state.momentum.shape == (1, 4)
  assert state.param_states['conv'].scale.shape == (1, 1, 5)
  for name in ('bias', 'scalar'):  # Not reparametrized.
    leaf = state.param_states[name]
    assert leaf.scale == () and leaf.scale_state == ()
    chex.assert_trees_all_equal(leaf.direction, params[name])
  # GradientDescent keeps no per-parameter state.
  sgd = optim.WeightNorm(optim.GradientDescent(0.1)).init_state(params)
  assert sgd.param_states['kernel'].direction_state == ()


# ------------------------------------------- legacy <-> Optax round trip

_DTYPES = (np.float32, ml_dtypes.bfloat16, np.float16)


@st.composite
def _trees(draw):
  def leaf():
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4]), max_size=3)))
    return shape, draw(st.sampled_from(_DTYPES))

  names = draw(st.lists(st.sampled_from('abcde'), min_size=1, max_size=4,
                        unique=True))
  spec = {n: leaf() for n in names}
  if draw(st.booleans()):
    spec = {'outer': spec, 'z': [leaf(), leaf()]}
  return spec


def _fill(tree, rng):
  """Random positive values of the same shapes and dtypes (step: an int)."""
  def leaf(x):
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer):
      return jnp.asarray(rng.integers(0, 10_000, x.shape), x.dtype)
    return jnp.asarray(rng.uniform(0.5, 1.5, x.shape), x.dtype)
  return jax.tree_util.tree_map(leaf, tree)


# One def per distinct state structure (the others only change numbers).
ROUND_TRIP = ('adafactor_momentum_wd', 'adafactor_unfactored', 'lars',
              'wn_sgd', 'wn_adam')


@pytest.mark.parametrize('name', ROUND_TRIP)
@hypothesis.settings(max_examples=6, deadline=None)
@hypothesis.given(spec=_trees(), seed=st.integers(0, 2**31))
def test_optax_state_round_trip_is_bit_exact(name, spec, seed):
  rng = np.random.default_rng(seed)
  params = jax.tree_util.tree_map(
      lambda s: jnp.asarray(rng.standard_normal(s[0]), s[1]), spec,
      is_leaf=lambda s: isinstance(s, tuple) and len(s) == 2 and
      isinstance(s[0], tuple))
  opt_def = DEFS[name]()
  state = _fill(opt_def.init_state(params), rng)
  opt_state = opt_def.to_optax_state(state, params)
  # The same structure, shapes and dtypes as the transform's own state.
  fresh = opt_def.to_optax().init(params)
  assert (jax.tree_util.tree_structure(opt_state) ==
          jax.tree_util.tree_structure(fresh))
  chex.assert_trees_all_equal_shapes_and_dtypes(opt_state, fresh)
  back = opt_def.from_optax_state(opt_state, params)
  chex.assert_trees_all_equal_structs(back, state)
  chex.assert_trees_all_equal_shapes_and_dtypes(back, state)
  chex.assert_trees_all_equal(back, state)
  # A pure restructuring: every buffer is moved, none is copied.
  ids = {id(x) for x in jax.tree_util.tree_leaves(state)}
  assert {id(x) for x in jax.tree_util.tree_leaves(opt_state)} == ids


# --------------------------------------------- per-leaf API vs tree API


# Op by op: every operation compiles per shape and dtype. The default run
# keeps one row per state structure; -m slow runs all of them.
@pytest.mark.parametrize('name,dtype', [
    pytest.param('adafactor', jnp.float32, marks=pytest.mark.slow),
    ('adafactor_momentum_wd', jnp.bfloat16),
    ('adafactor_unfactored', jnp.float16), ('lars', jnp.bfloat16),
    ('lars_nesterov', jnp.float32),
    pytest.param('wn_momentum', jnp.float32, marks=pytest.mark.slow),
    ('wn_adafactor', jnp.float32),
    pytest.param('wn_adam', jnp.float32, marks=pytest.mark.slow)])
def test_per_leaf_api_agrees_with_tree_api(name, dtype):
  opt_def = DEFS[name]()
  params = _params(dtype)
  state = opt_def.init_state(params)
  leaf_states = jax.tree_util.tree_map(opt_def.init_param_state, params)
  chex.assert_trees_all_equal(leaf_states, state.param_states)
  # A mid-training state (random positive moments, step 7).
  state = _fill(state, np.random.default_rng(5)).replace(step=jnp.int32(7))
  grads = _grads(0, params)
  hp = opt_def.hyper_params
  per_leaf = {
      k: opt_def.apply_param_gradient(state.step, hp, params[k],
                                      state.param_states[k], grads[k])
      for k in params
  }
  params, state = opt_def.apply_gradient(hp, params, state, grads)
  chex.assert_trees_all_equal({k: v[0] for k, v in per_leaf.items()}, params)
  chex.assert_trees_all_equal({k: v[1] for k, v in per_leaf.items()},
                              state.param_states)
  assert int(state.step) == 8


# ------------------------------------------------ overrides and schedules

# (def factory, overrides) with the overrides that differ from the defaults.
OVERRIDES = {
    'adafactor': (
        lambda **kw: optim.Adafactor(min_dim_size_to_factor=3, **kw),
        dict(learning_rate=0.3, beta1=0.8, decay_rate=0.7, step_offset=1,
             clipping_threshold=0.5, weight_decay_rate=0.01, epsilon1=1e-20,
             epsilon2=1e-2)),
    'lars': (optim.LARS,
             dict(learning_rate=0.3, beta=0.5, weight_decay=0.01,
                  trust_coefficient=0.1, eps=1e-3)),
    'wn_momentum': (
        lambda wn_decay=0, wn_eps=1e-8, **kw: optim.WeightNorm(
            optim.Momentum(**kw), wn_decay=wn_decay, wn_eps=wn_eps),
        # (wn_eps is left out: flax.optim's init used the constructor's.)
        dict(learning_rate=0.3, beta=0.5, weight_decay=0.01, wn_decay=0.1)),
    'wn_adam': (
        lambda wn_decay=0, **kw: optim.WeightNorm(optim.Adam(**kw),
                                                  wn_decay=wn_decay),
        dict(learning_rate=0.3, beta1=0.5, beta2=0.9, eps=1e-3,
             weight_decay=0.01, wn_decay=0.1)),
}


# The default run keeps a rule and a wrapper; -m slow runs all of them.
@pytest.mark.parametrize('name', [
    name if name in ('adafactor', 'wn_momentum')
    else pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(OVERRIDES)])
def test_traced_overrides_under_jit(name):
  make, overrides = OVERRIDES[name]
  base_kw = {'beta1': 0.9} if name == 'adafactor' else {}
  params = _params()
  plain = make(**base_kw).create(params)
  step = jax.jit(lambda opt, g, kw: opt.apply_gradient(g, **kw))
  configured_step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  configured = make(**{**base_kw, **overrides}).create(params)
  for i in range(3):
    grads = _grads(i, params)
    plain = step(plain, grads, overrides)
    configured = configured_step(configured, grads)
    # Different programs (traced vs constant values) may round differently.
    _assert_updates_close(plain.target, configured.target, params, rtol=1e-5)
  # Traced: other values reuse the compiled step.
  step(plain, _grads(0, params), jax.tree_util.tree_map(
      lambda v: v * 2, overrides))
  assert step._cache_size() == 1


@pytest.mark.parametrize('name', ['adafactor', 'lars', 'wn_momentum'])
def test_learning_rate_schedule_on_the_optax_path(name):
  opt_def = DEFS[name]()
  params = _params()
  rates = [0.1, 0.02, 0.3]
  tx = opt_def.to_optax(learning_rate=lambda count: jnp.asarray(rates)[count])
  opt_state = tx.init(params)
  legacy = opt_def.create(params)
  p = params
  for i, rate in enumerate(rates):
    grads = _grads(i, params)
    updates, opt_state = tx.update(grads, opt_state, p)
    p = optax.apply_updates(p, updates)
    legacy = legacy.apply_gradient(grads, learning_rate=rate)
  # Legacy calls may run as one compiled step: compare up to rounding.
  _assert_updates_close(p, legacy.target, params, rtol=1e-5)
  chex.assert_trees_all_equal_structs(
      opt_def.from_optax_state(opt_state, p), legacy.state)


def test_weight_norm_overrides_reach_the_wrapped_optimizer():
  inner = optim.Momentum(0.1, beta=0.9)
  wn = optim.WeightNorm(inner, wn_decay=0.0)
  hp = wn.update_hyper_params(learning_rate=0.5, wn_decay=0.2)
  assert hp.inner.learning_rate == 0.5 and hp.inner.beta == 0.9
  assert hp.wn_decay == 0.2 and hp.wn_eps == 1e-8
  # As in flax.optim, hyper_params= replaces the wrapped optimizer's ones.
  replaced = wn.update_hyper_params(hyper_params=inner.hyper_params.replace(
      beta=0.1))
  assert replaced.inner.beta == 0.1
  with pytest.raises(TypeError, match='no hyper-parameter named .betta.'):
    wn.update_hyper_params(betta=0.3)


def test_missing_learning_rate_fails_when_the_update_runs():
  params = _params()
  for opt_def in (optim.Adafactor(), optim.LARS(),
                  optim.WeightNorm(optim.Momentum())):
    opt = opt_def.create(params)  # Creating without a rate is fine.
    with pytest.raises(ValueError, match='no learning rate'):
      opt.apply_gradient(_grads(0, params))
    opt.apply_gradient(_grads(0, params), learning_rate=0.1)


def test_transforms_need_params():
  params = _params()
  for opt_def in (optim.Adafactor(0.1), optim.LARS(0.1),
                  optim.WeightNorm(optim.GradientDescent(0.1))):
    tx = opt_def.to_optax()
    with pytest.raises(ValueError, match='needs params'):
      tx.update(_grads(0, params), tx.init(params))


# ----------------------------------------------------------------- quirks


def test_adafactor_layout_fields_cannot_be_overridden():
  opt = optim.Adafactor(0.1).create(_params())
  for override in ({'factored': False}, {'min_dim_size_to_factor': 2}):
    with pytest.raises(ValueError, match='fixes the shapes'):
      opt.apply_gradient(_grads(0, _params()), **override)
    with pytest.raises(ValueError, match='fixes the shapes'):
      jax.jit(lambda o, v, k=next(iter(override)): o.apply_gradient(  # noqa: B008
          _grads(0, _params()), **{k: v}))(opt, next(iter(override.values())))
  with pytest.raises(TypeError, match='multiply_by_parameter_scale'):
    jax.jit(lambda o, v: o.apply_gradient(
        _grads(0, _params()), multiply_by_parameter_scale=v))(opt, True)
  with pytest.raises(TypeError, match='min_dim_size_to_factor'):
    optim.Adafactor(0.1, min_dim_size_to_factor=2.5)


def test_adafactor_multiply_by_parameter_scale_override_is_honoured():
  # flax.optim silently ignored this override; here it takes effect.
  params = _params()
  overridden = optim.Adafactor(0.1).create(params).apply_gradient(
      _grads(0, params), multiply_by_parameter_scale=False)
  direct = optim.Adafactor(0.1, multiply_by_parameter_scale=False).create(
      params).apply_gradient(_grads(0, params))
  chex.assert_trees_all_equal(overridden.target, direct.target)


def test_adafactor_before_step_offset_restarts_the_second_moment():
  # flax.optim: NaN parameters for step < step_offset. Here the decay
  # schedule holds its first value (beta2_hat = 0) until step_offset.
  params = {'w': jnp.asarray([[1.0, -2.0], [0.5, 3.0]])}
  opt_def = optim.Adafactor(0.1, step_offset=3, factored=False)
  opt = opt_def.create(params)
  for i in range(5):
    g = _grads(i, params)
    opt = opt.apply_gradient(g)
    gw = np.asarray(g['w'], F64)
    if i <= 3:  # Steps 0..3 use t = 1: v is the fresh squared gradient.
      np.testing.assert_allclose(opt.state.param_states['w'].v,
                                 gw**2 + 1e-30, rtol=1e-6)
  assert np.all(np.isfinite(opt.target['w']))
  # Step 4 = step_offset + 1 uses t = 2 (beta2_hat = 1 - 2^-0.8).
  np.testing.assert_allclose(
      adafactor_lib.decay_rate_pow(jnp.int32(4) - 3, 0.8), 1 - 2**-0.8,
      rtol=1e-7)
  np.testing.assert_allclose(
      adafactor_lib.decay_rate_pow(jnp.int32(0) - 3, 0.8), 0.0)


def test_adafactor_decay_schedule_hook_can_be_overridden():
  # flax.optim computed the decay through Adafactor._decay_rate_pow; a
  # subclass replacing it still changes the rule.
  class ConstantDecay(optim.Adafactor):

    @staticmethod
    def _decay_rate_pow(i, exponent=0.8):
      del i, exponent
      return 0.5

  params = {'w': jnp.asarray([1.0, -2.0, 3.0])}
  g = {'w': jnp.asarray([0.5, 0.25, -1.0])}
  opt = ConstantDecay(0.1, factored=False).create(params)
  opt = opt.apply_gradient(g).apply_gradient(g)
  # v = 0.5 * v + 0.5 * (g^2 + eps1) twice from 0: 0.75 (g^2 + eps1).
  np.testing.assert_allclose(opt.state.param_states['w'].v,
                             0.75 * (np.asarray(g['w'])**2 + 1e-30),
                             rtol=1e-6)


def test_weight_norm_scalar_leaf_is_left_unnormalized():
  # flax.optim raised IndexError on a 0-d leaf; it is now updated like a
  # vector: the wrapped optimizer's rule on the leaf itself.
  params = {'s': jnp.float32(1.5), 'k': jnp.ones((3, 2))}
  opt = optim.WeightNorm(optim.GradientDescent(0.1)).create(params)
  opt = opt.apply_gradient({'s': jnp.float32(2.0), 'k': jnp.ones((3, 2))})
  np.testing.assert_allclose(opt.target['s'], 1.5 - 0.1 * 2.0, rtol=1e-7)


def test_lars_zero_norms_use_unit_trust_ratio():
  params = {'zero': jnp.zeros(3), 'w': jnp.ones(3)}
  grads = {'zero': jnp.ones(3), 'w': jnp.zeros(3)}
  opt = optim.LARS(0.5, beta=0.0).create(params).apply_gradient(grads)
  np.testing.assert_allclose(opt.target['zero'], -0.5 * np.ones(3))
  np.testing.assert_allclose(opt.target['w'], np.ones(3))


def test_adafactor_momentum_slot_follows_beta1_override():
  # flax.optim: the slot shape follows beta1 (None -> the (1,) placeholder).
  params = {'w': jnp.ones((4,))}
  opt = optim.Adafactor(0.1, beta1=0.9).create(params)
  opt = opt.apply_gradient({'w': jnp.ones((4,))}, beta1=None)
  assert opt.state.param_states['w'].m.shape == (1,)


# ------------------------------------------ references from the papers


def _rms(x):
  return np.sqrt(np.mean(np.square(x)))


def _adafactor_paper(x, grads, rho, d=1.0, c=0.8, eps1=1e-30, eps2=1e-3):
  """Shazeer & Stern (2018), Alg. 4 (matrices, factored) / Alg. 5."""
  x = np.asarray(x, F64)
  r = np.zeros(x.shape[0]) if x.ndim == 2 else None
  col = np.zeros(x.shape[1]) if x.ndim == 2 else None
  v = np.zeros(x.shape)
  for t, g in enumerate(grads, start=1):
    g = np.asarray(g, F64)
    beta2 = 1.0 - t**-c
    g2 = g * g + eps1
    alpha = max(eps2, _rms(x)) * rho
    if x.ndim == 2:
      r = beta2 * r + (1 - beta2) * g2.sum(axis=1)
      col = beta2 * col + (1 - beta2) * g2.sum(axis=0)
      v_hat = np.outer(r, col) / r.sum()
    else:
      v = beta2 * v + (1 - beta2) * g2
      v_hat = v
    u = g / np.sqrt(v_hat)
    u = u / max(1.0, _rms(u) / d)
    x = x - alpha * u
  return x


@pytest.mark.parametrize('shape', [(6, 4), (4, 6), (5,)])
@pytest.mark.parametrize('clip', [1.0, 0.05])
def test_adafactor_matches_the_paper(shape, clip):
  rng = np.random.default_rng(1)
  x0 = rng.standard_normal(shape).astype(np.float32)
  grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
  opt = optim.Adafactor(0.2, clipping_threshold=clip,
                        min_dim_size_to_factor=3).create({'x': x0})
  for g in grads:
    opt = opt.apply_gradient({'x': g})
  expected = _adafactor_paper(x0, grads, 0.2, d=clip)
  _assert_updates_close(opt.target['x'], expected, x0, rtol=1e-5)


def _lars_paper(w, grads, lr, trust, wd, mom, nesterov=False):
  """You, Gitman & Ginsburg (2017), Algorithm 1 (+ Nesterov's look-ahead)."""
  w = np.asarray(w, F64)
  v = np.zeros_like(w)
  for g in grads:
    g = np.asarray(g, F64)
    local_lr = trust * np.linalg.norm(w) / (
        np.linalg.norm(g) + wd * np.linalg.norm(w))
    step = lr * local_lr * (g + wd * w)
    v = mom * v + step
    w = w - (step + mom * v if nesterov else v)
  return w


@pytest.mark.parametrize('nesterov', [False, True])
def test_lars_matches_the_paper(nesterov):
  rng = np.random.default_rng(2)
  w0 = rng.standard_normal((5, 3)).astype(np.float32)
  grads = [rng.standard_normal((5, 3)).astype(np.float32) for _ in range(4)]
  opt = optim.LARS(0.5, beta=0.9, weight_decay=0.01, trust_coefficient=0.02,
                   nesterov=nesterov).create({'w': w0})
  for g in grads:
    opt = opt.apply_gradient({'w': g})
  expected = _lars_paper(w0, grads, 0.5, 0.02, 0.01, 0.9, nesterov)
  _assert_updates_close(opt.target['w'], expected, w0, rtol=1e-5)


def _weight_norm_paper(w, grads, lr, wn_decay):
  """Salimans & Kingma (2016): w = g v/||v|| per output column, SGD on (v, g).

  grad_g = (grad_w . v) / ||v||, grad_v = g/||v|| (I - v v^T/||v||^2) grad_w.
  """
  w = np.asarray(w, F64)
  g = np.linalg.norm(w, axis=0)
  v = w / g
  for gw in grads:
    gw = np.asarray(gw, F64)
    norm = np.linalg.norm(v, axis=0)
    grad_g = (gw * v).sum(axis=0) / norm
    grad_v = g / norm * (gw - v * (v * gw).sum(axis=0) / norm**2)
    grad_v = grad_v + wn_decay * v
    g, v = g - lr * grad_g, v - lr * grad_v
  return g * v / np.linalg.norm(v, axis=0)


@pytest.mark.parametrize('wn_decay', [0.0, 0.1])
def test_weight_norm_matches_the_paper(wn_decay):
  rng = np.random.default_rng(3)
  w0 = rng.standard_normal((5, 3)).astype(np.float32)
  grads = [rng.standard_normal((5, 3)).astype(np.float32) for _ in range(4)]
  opt = optim.WeightNorm(optim.GradientDescent(0.1), wn_decay=wn_decay,
                         wn_eps=0.0).create({'w': w0})
  for g in grads:
    opt = opt.apply_gradient({'w': g})
  expected = _weight_norm_paper(w0, grads, 0.1, wn_decay)
  _assert_updates_close(opt.target['w'], expected, w0, rtol=1e-5)
