"""Zero overhead: the shim's step is the raw Optax step, jitted or eager.

* Under ``jax.jit`` ``Optimizer.apply_gradient`` optimizes to the same XLA
  program as the raw Optax loop with the same transform: same instructions,
  same fusions, no copies added by the legacy <-> Optax state conversion.
* Buffer donation works through ``apply_gradient``: every donated leaf's
  buffer is reused for the matching output.
* Eager calls (no jit) run one cached compiled step (``legacy_optim._eager``):
  results equal the jitted step's bit for bit, new learning rates do not
  recompile, and user rules with Python side effects still run every step.
"""

import collections
import re

import _compiles
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import legacy_optim as optim
from legacy_optim import _eager
from legacy_optim import base
from legacy_optim import traverse_util


def _multi():
  kernels = traverse_util.ModelParamTraversal(lambda path, _: 'kernel' in path)
  others = traverse_util.ModelParamTraversal(
      lambda path, _: 'kernel' not in path)
  return optim.MultiOptimizer((kernels, optim.Adam(0.01, weight_decay=1e-4)),
                              (others, optim.Momentum(0.1, nesterov=True)))


# One configuration per algorithm, chosen to exercise its non-trivial paths
# (weight decay, nesterov, factored second moments, momentum slots).
ALGORITHMS = {
    'GradientDescent': lambda: optim.GradientDescent(0.1),
    'Momentum': lambda: optim.Momentum(0.1, beta=0.8, weight_decay=1e-3,
                                       nesterov=True),
    'Adam': lambda: optim.Adam(0.01, weight_decay=1e-4),
    'AdaBelief': lambda: optim.AdaBelief(0.01, weight_decay=1e-4),
    'Adadelta': lambda: optim.Adadelta(0.5, weight_decay=1e-4),
    'Adafactor': lambda: optim.Adafactor(0.01, beta1=0.9,
                                         min_dim_size_to_factor=2),
    'Adagrad': lambda: optim.Adagrad(0.1),
    'LAMB': lambda: optim.LAMB(0.01, weight_decay=1e-3),
    'LARS': lambda: optim.LARS(0.1, weight_decay=1e-3, nesterov=True),
    'RMSProp': lambda: optim.RMSProp(0.01, centered=True),
    'WeightNorm': lambda: optim.WeightNorm(optim.Momentum(0.1)),
    'MultiOptimizer': _multi,
}
# A compile or two each: the default run checks the optimized program for
# half of them and eager steps for the other half; -m slow runs both tests
# for every algorithm.
PROGRAM_CHECKED = ('Momentum', 'Adafactor', 'LARS', 'RMSProp', 'WeightNorm',
                   'MultiOptimizer')


def _algorithm_params(default):
  return [name if name in default
          else pytest.param(name, marks=pytest.mark.slow)
          for name in sorted(ALGORITHMS)]


def _params():
  rng = np.random.default_rng(0)
  return {
      'dense': {'kernel': jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
                'bias': jnp.asarray(rng.standard_normal(3), jnp.float32)},
      'conv': {'kernel': jnp.asarray(rng.standard_normal((2, 2, 3, 4)),
                                     jnp.float32)},
  }


def _grads(seed):
  rng = np.random.default_rng(100 + seed)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), _params())


# ------------------------------------------------------ optimized HLO


def _instructions(hlo_text):
  """Opcodes of every instruction, grouped by computation (names dropped)."""
  computations, current = [], None
  for line in hlo_text.splitlines():
    if line.rstrip().endswith('{') and '=' not in line.split('(')[0]:
      current = []
      computations.append(current)
    match = re.match(r'\s*(?:ROOT )?%?[\w.\-]+ = .*? ([a-z][\w\-]*)\(', line)
    if match and current is not None:
      current.append(match.group(1))
  return computations


def _program_shape(hlo_text):
  """Order-free summary: opcode counts, and each computation's opcodes.

  Orders differ legitimately: the legacy tree flattens params and state in
  another order than Optax's, so parameters are numbered and scheduled
  differently.
  """
  computations = _instructions(hlo_text)
  opcodes = collections.Counter(op for comp in computations for op in comp)
  bodies = collections.Counter(tuple(sorted(comp)) for comp in computations)
  return opcodes, bodies


def _compiled_text(fn, *args, donate=()):
  return jax.jit(fn, donate_argnums=donate).lower(*args).compile().as_text()


@pytest.mark.parametrize('name', _algorithm_params(PROGRAM_CHECKED))
def test_jitted_step_optimizes_to_the_raw_optax_program(name):
  opt_def = ALGORITHMS[name]()
  params, grads = _params(), _grads(0)
  opt = opt_def.create(params)
  tx = opt_def.to_optax()

  def raw_step(p, s, g):
    updates, s = tx.update(g, s, p)
    return optax.apply_updates(p, updates), s

  shim = _compiled_text(lambda o, g: o.apply_gradient(g), opt, grads,
                        donate=(0,))
  native = _compiled_text(raw_step, params, tx.init(params), grads,
                          donate=(0, 1))
  shim_ops, shim_bodies = _program_shape(shim)
  native_ops, native_bodies = _program_shape(native)
  assert shim_ops['fusion'] >= 1  # The parser saw the program.
  if name == 'MultiOptimizer':
    # Optax keeps one step count per sub-optimizer, the legacy layout one for
    # all: the shim drops the duplicate counters' increments, nothing else.
    extra = shim_ops - native_ops
    assert not extra, extra
    assert set(native_ops - shim_ops) <= {'parameter', 'constant', 'add',
                                          'compare', 'select', 'fusion'}
    return
  assert shim_ops == native_ops, (shim_ops - native_ops, native_ops - shim_ops)
  assert shim_bodies == native_bodies
  # Both alias every state and param output to its input.
  assert shim.count('may-alias') == native.count('may-alias')


def test_program_summary_tells_programs_apart():
  # The comparison above must be able to fail: one extra multiply shows.
  params, grads = _params(), _grads(0)
  tx = optax.sgd(0.1)

  def raw_step(p, s, g):
    updates, s = tx.update(g, s, p)
    return optax.apply_updates(p, updates), s

  def scaled_step(p, s, g):
    updates, s = tx.update(g, s, p)
    factor = g['dense']['bias'][0]  # Data-dependent: not constant-folded.
    updates = jax.tree_util.tree_map(lambda u: u * factor, updates)
    return optax.apply_updates(p, updates), s

  state = tx.init(params)
  assert (_program_shape(_compiled_text(raw_step, params, state, grads)) !=
          _program_shape(_compiled_text(scaled_step, params, state, grads)))


@pytest.mark.parametrize('name', ['Momentum', 'Adam', 'MultiOptimizer'])
def test_donated_buffers_are_reused_through_apply_gradient(name):
  opt = ALGORITHMS[name]().create(_params())
  # Fresh buffers, so nothing is shared between leaves before donating.
  opt = jax.tree_util.tree_map(lambda x: x + 0, opt)
  step = jax.jit(lambda o, g: o.apply_gradient(g), donate_argnums=0)
  before = jax.tree_util.tree_leaves(opt)
  pointers = [x.unsafe_buffer_pointer() for x in before]
  new = step(opt, _grads(0))
  assert all(x.is_deleted() for x in before)
  assert [x.unsafe_buffer_pointer()
          for x in jax.tree_util.tree_leaves(new)] == pointers


# ------------------------------------------------------ eager steps


def _jitted_steps(opt, grads_seq, lrs):
  step = jax.jit(lambda o, g, lr: o.apply_gradient(g, learning_rate=lr))
  for g, lr in zip(grads_seq, lrs):
    opt = step(opt, g, lr)
  return opt


@pytest.mark.parametrize('name', _algorithm_params(
    set(ALGORITHMS) - set(PROGRAM_CHECKED)))
def test_eager_steps_equal_jitted_steps_bitwise(name):
  opt = ALGORITHMS[name]().create(_params())
  grads_seq = [_grads(i) for i in range(3)]
  # Python floats, a NumPy scalar and a jax scalar: every kind of override.
  lrs = [0.05, np.float32(0.02), jnp.float32(0.1)]
  eager = opt
  for g, lr in zip(grads_seq, lrs):
    eager = eager.apply_gradient(g, learning_rate=lr)
  jitted = _jitted_steps(opt, grads_seq, [jnp.float32(lr) for lr in lrs])
  chex.assert_trees_all_equal(eager, jitted)


def test_eager_step_without_overrides_equals_jitted_step():
  opt = ALGORITHMS['Adam']().create(_params())
  eager = opt.apply_gradient(_grads(0)).apply_gradient(_grads(1))
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  chex.assert_trees_all_equal(eager, step(step(opt, _grads(0)), _grads(1)))



@pytest.mark.parametrize('lr_type', [float, np.float32, jnp.float32])
def test_new_learning_rates_do_not_recompile_eager_steps(lr_type):
  opt = optim.Momentum(0.1, weight_decay=1e-3).create(_params())
  grads = _grads(0)
  opt = opt.apply_gradient(grads, learning_rate=lr_type(0.5))  # compiles
  with _compiles.CompileCounter() as counter:
    for lr in (0.1, 0.2, 0.3, 0.4):
      opt = opt.apply_gradient(grads, learning_rate=lr_type(lr))
    jax.block_until_ready(opt)
  assert counter.count == 0


def test_compile_counter_sees_compilations():
  with _compiles.CompileCounter() as counter:
    jax.jit(lambda x: x * 3.5 - 1.25)(jnp.arange(7.0))
  assert counter.count >= 1


def test_static_zero_override_keeps_the_zero_decay_rule():
  # weight_decay=0 skips the decay term, so an infinite param stays infinite
  # (a traced zero would compute inf * 0 = nan): zeros must stay static.
  params = {'w': jnp.asarray([np.inf, 1.0, -2.0], jnp.float32)}
  grads = {'w': jnp.asarray([0.5, -1.0, 0.25], jnp.float32)}
  opt = optim.Momentum(0.1, weight_decay=1e-2).create(params)
  eager = opt.apply_gradient(grads, weight_decay=0)
  jitted = jax.jit(lambda o, g: o.apply_gradient(g, weight_decay=0))(opt, grads)
  chex.assert_trees_all_equal(eager, jitted)
  assert np.isposinf(eager.target['w'][0])
  # And a non-zero override after it is a different configuration.
  decayed = opt.apply_gradient(grads, weight_decay=1e-2)
  assert np.isnan(decayed.target['w'][0])


def test_calls_under_a_trace_run_inline():
  opt = optim.Momentum(0.1).create(_params())
  jaxpr = jax.make_jaxpr(lambda o, g: o.apply_gradient(g, learning_rate=0.2))(
      opt, _grads(0))
  # Inline: the update's arithmetic is in the top-level jaxpr, not hidden in
  # one nested jit call.
  primitives = {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}
  assert {'mul', 'add'} <= primitives, primitives


class _CountingSGD(base.OptimizerDef):
  """A user-written per-leaf rule with a Python side effect."""

  def __init__(self, learning_rate):
    super().__init__(optim.GradientDescent(learning_rate).hyper_params)
    self.calls = 0

  def init_param_state(self, param):
    return ()

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    self.calls += 1
    return param - hyper_params.learning_rate * grad, state


def test_user_rule_side_effects_run_at_every_eager_step():
  opt_def = _CountingSGD(0.1)
  opt = opt_def.create(_params())
  for i in range(3):
    opt = opt.apply_gradient(_grads(i))
  assert opt_def.calls == 3 * len(jax.tree_util.tree_leaves(_params()))
  expected = jax.tree_util.tree_map(
      lambda p, *gs: np.asarray(p) - sum(0.1 * np.asarray(g) for g in gs),
      _params(), *[_grads(i) for i in range(3)])
  chex.assert_trees_all_close(opt.target, expected, rtol=1e-5, atol=1e-6)


class _StepDecay:
  """A schedule that is unhashable and not a dataclass: no key by value."""

  __hash__ = None

  def __init__(self, rate):
    self.rate = rate

  def __call__(self, count):
    return self.rate / (1.0 + count)


def test_unhashable_override_runs_uncached():
  opt = optim.GradientDescent().create(_params())
  size = _eager.cache_size()
  grads = _grads(0)
  opt = opt.apply_gradient(grads, learning_rate=_StepDecay(0.5))
  opt = opt.apply_gradient(grads, learning_rate=_StepDecay(0.5))
  assert _eager.cache_size() == size
  # Steps 0 and 1: rates 0.5 and 0.25.
  expected = jax.tree_util.tree_map(
      lambda p, g: np.asarray(p) - 0.75 * np.asarray(g), _params(), grads)
  chex.assert_trees_all_close(opt.target, expected, rtol=1e-5, atol=1e-6)


class _ConcreteBetaMomentum(optim.Momentum):
  """A subclass whose transform needs beta's concrete value."""

  def _native_transform(self, hyper_params):
    if float(hyper_params.beta) >= 1:
      raise ValueError('beta must be below 1')
    return super()._native_transform(hyper_params)


def test_rule_needing_concrete_override_falls_back_to_inline():
  params = _params()
  opt = _ConcreteBetaMomentum(0.1).create(params)
  grads = _grads(0)
  opt = opt.apply_gradient(grads, beta=0.5).apply_gradient(grads, beta=0.5)
  # m1 = g, m2 = 0.5 g + g; p2 = p - 0.1 (m1 + m2).
  expected = jax.tree_util.tree_map(
      lambda p, g: np.asarray(p) - 0.1 * 2.5 * np.asarray(g), params, grads)
  chex.assert_trees_all_close(opt.target, expected, rtol=1e-5, atol=1e-6)


def test_replaced_def_hyper_params_are_used():
  params, grads = _params(), _grads(0)
  opt = optim.GradientDescent(0.1).create(params)
  opt = opt.apply_gradient(grads)
  opt.optimizer_def.hyper_params = opt.optimizer_def.hyper_params.replace(
      learning_rate=0.5)
  opt = opt.apply_gradient(grads)
  expected = jax.tree_util.tree_map(
      lambda p, g: np.asarray(p) - 0.6 * np.asarray(g), params, grads)
  chex.assert_trees_all_close(opt.target, expected, rtol=1e-5, atol=1e-6)


def test_eager_errors_are_the_uncached_errors():
  opt = optim.Momentum().create(_params())
  with pytest.raises(ValueError, match='no learning rate'):
    opt.apply_gradient(_grads(0))
  with pytest.raises(TypeError, match="no hyper-parameter named 'lr'"):
    opt.apply_gradient(_grads(0), lr=0.1)
  with pytest.raises(TypeError, match='same tree structure'):
    opt.apply_gradient({'dense': _grads(0)['dense']}, learning_rate=0.1)


def test_switched_off_eager_steps_run_op_by_op(monkeypatch):
  monkeypatch.setattr(_eager, 'ENABLED', False)
  params, grads = _params(), _grads(0)
  size = _eager.cache_size()
  opt = optim.GradientDescent(0.1).create(params).apply_gradient(grads)
  assert _eager.cache_size() == size
  expected = jax.tree_util.tree_map(
      lambda p, g: np.asarray(p) - 0.1 * np.asarray(g), params, grads)
  chex.assert_trees_all_close(opt.target, expected, rtol=1e-6)
  monkeypatch.setattr(_eager, 'ENABLED', True)
  _eager.clear_cache()
  optim.GradientDescent(0.1).create(params).apply_gradient(grads)
  assert _eager.cache_size() > 0
