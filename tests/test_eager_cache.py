"""Eager steps' compiled kernels (``legacy_optim._eager``): same numbers as
the jitted step at mixed shapes and dtypes, shared by equal definitions,
bounded, and freed by ``legacy_optim.eager.clear_cache``."""

import itertools

import _compiles
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import legacy_optim as optim
from legacy_optim import _eager
from legacy_optim import eager
from legacy_optim import traverse_util


def _mixed_params():
  """More alike leaves than one kernel call takes, plus odd ones out."""
  rng = np.random.default_rng(0)
  leaves = {}

  def add(prefix, count, shape, dtype):
    for i in range(count):
      leaves[f'{prefix}{i}'] = {'kernel' if len(shape) > 1 else 'bias':
                                jnp.asarray(rng.standard_normal(shape), dtype)}

  add('small', _eager.CHUNK + 5, (16, 16), jnp.float32)  # Two calls, filled.
  add('scalar', 3, (), jnp.float32)
  add('half', 3, (4, 3), jnp.float16)
  add('brain', 3, (8,), jnp.bfloat16)
  add('brain_matrix', 2, (2, 3, 4), jnp.bfloat16)
  add('large', 2, (130, 130), jnp.float32)  # Above PAD_LIMIT: never filled.
  return leaves


def _grads(params, seed):
  rng = np.random.default_rng(100 + seed)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), params)


def _multi():
  kernels = traverse_util.ModelParamTraversal(
      lambda path, _: 'kernel' in path and 'small' not in path)
  others = traverse_util.ModelParamTraversal(lambda path, _: 'small' in path)
  return optim.MultiOptimizer((kernels, optim.Adam(0.01, weight_decay=1e-4)),
                              (others, optim.Momentum(0.1, nesterov=True)))


DEFINITIONS = {
    'Adam': lambda: optim.Adam(0.01, weight_decay=1e-4),
    'LAMB': lambda: optim.LAMB(0.01, weight_decay=1e-3),
    'Adafactor': lambda: optim.Adafactor(0.01, beta1=0.9,
                                         min_dim_size_to_factor=2),
    'RMSProp': lambda: optim.RMSProp(0.01, centered=True),
    'LARS': lambda: optim.LARS(0.1, weight_decay=1e-3, nesterov=True),
    'WeightNorm': lambda: optim.WeightNorm(optim.Adam(0.01)),
    # Leaves no traversal selects (the bf16 and float16 biases) stay frozen.
    'MultiOptimizer': _multi,
    # The sub-optimizer of a leaf depends on its path in the whole tree.
    'WeightNorm(MultiOptimizer)': lambda: optim.WeightNorm(_multi()),
}



def _eager_and_jitted(opt, steps=3):
  params = opt.target
  grads = [_grads(params, i) for i in range(steps)]
  lrs = [0.05, np.float32(0.02), 0.1]
  eager_opt = opt
  for g, lr in zip(grads, lrs):
    eager_opt = eager_opt.apply_gradient(g, learning_rate=lr)
  step = jax.jit(lambda o, g, lr: o.apply_gradient(g, learning_rate=lr))
  jitted = opt
  for g, lr in zip(grads, lrs):
    # Passed as given: a Python float is weakly typed in both (bfloat16
    # leaves stay bfloat16 where a float32 rate would promote them).
    jitted = step(jitted, g, lr)
  return eager_opt, jitted


# MultiOptimizer runs Adam and Momentum kernels over the mixed leaves (two
# filled calls, dtypes, frozen leaves), and the test below compares Adam's
# eager and jitted steps on them; each other definition (about 10 s each)
# runs with -m slow.
@pytest.mark.parametrize('name', [
    name if name == 'MultiOptimizer' else
    pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(DEFINITIONS)])
def test_eager_steps_equal_jitted_steps_at_mixed_shapes_and_dtypes(name):
  opt = DEFINITIONS[name]().create(_mixed_params())
  eager_opt, jitted = _eager_and_jitted(opt)
  chex.assert_trees_all_equal(eager_opt, jitted, strict=True)
  # The steps moved something: the comparison is not between two copies.
  assert not np.array_equal(eager_opt.target['small0']['kernel'],
                            opt.target['small0']['kernel'])


def test_equal_definitions_share_kernels():
  params = _mixed_params()
  grads = _grads(params, 0)
  optim.Adam(1e-3, beta2=0.99).create(params).apply_gradient(grads)
  size = eager.cache_size()
  with _compiles.CompileCounter() as counter:
    other = optim.Adam(1e-3, beta2=0.99).create(params)
    other = other.apply_gradient(grads).apply_gradient(grads)
    jax.block_until_ready(other)
  assert counter.count == 0
  assert eager.cache_size() == size


# Values equal as Python values would be (0.0 == -0.0), and as NumPy arrays
# (float32 and float64 0.2). The default run takes a chain of definitions
# each equal that way to the one before, after one whose NumPy value differs
# (float32 0.1, then 0.2: a key that ignored array values would reuse the
# first kernel); the whole grid (a compile each) runs with -m slow.
_LEARNING_RATES = (np.float32(0.1), np.float32(0.2),
                   np.asarray(0.2, np.float64))
_WEIGHT_DECAYS = (0.0, -0.0, 1e-2)


@pytest.mark.parametrize('values', [
    pytest.param(((_LEARNING_RATES[0], 0.0), (_LEARNING_RATES[1], 0.0),
                  (_LEARNING_RATES[1], -0.0), (_LEARNING_RATES[2], -0.0)),
                 id='equal-values'),
    pytest.param(tuple(itertools.product(_LEARNING_RATES, _WEIGHT_DECAYS)),
                 id='grid', marks=pytest.mark.slow)])
def test_definitions_with_other_values_get_their_own_kernels(values):
  params, grads = _mixed_params(), _grads(_mixed_params(), 0)
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  for lr, weight_decay in values:
    opt = optim.Adam(lr, weight_decay=weight_decay).create(params)
    chex.assert_trees_all_equal(opt.apply_gradient(grads),
                                step(opt, grads), strict=True)


def test_a_new_override_name_compiles_per_kernel_not_per_leaf():
  params = {f'w{i}': jnp.full((4, 4), i, jnp.float32) for i in range(64)}
  grads = _grads(params, 0)
  opt = optim.Adam(1e-3).create(params).apply_gradient(grads)
  with _compiles.CompileCounter() as counter:
    opt = opt.apply_gradient(grads, beta1=0.8)
    jax.block_until_ready(opt)
  assert 1 <= counter.count <= 2
  with _compiles.CompileCounter() as counter:
    opt = opt.apply_gradient(grads, beta1=0.7)
    jax.block_until_ready(opt)
  assert counter.count == 0


def test_cache_is_bounded(monkeypatch):
  monkeypatch.setattr(_eager, 'MAX_ENTRIES', 3)
  params = _mixed_params()
  grads = _grads(params, 0)
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  for lr in (0.1, 0.2, 0.3):
    opt = optim.Momentum(lr).create(params)
    chex.assert_trees_all_equal(opt.apply_gradient(grads), step(opt, grads))
    assert eager.cache_size() <= 3


def test_clear_cache_frees_kernels_and_steps_compile_again():
  params = _mixed_params()
  grads = _grads(params, 0)
  opt = optim.Adagrad(0.1).create(params)
  first = opt.apply_gradient(grads)
  assert eager.cache_size() > 0
  eager.clear_cache()
  assert eager.cache_size() == 0
  with _compiles.CompileCounter() as counter:
    again = opt.apply_gradient(grads)
    jax.block_until_ready(again)
  assert counter.count >= 1
  chex.assert_trees_all_equal(first, again, strict=True)
