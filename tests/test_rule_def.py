"""``flax_optim_rules.RuleDef``: a user's own rule kept verbatim, same numbers.

``migrate`` keeps a ``flax.optim.OptimizerDef`` subclass as the user wrote
it and moves it onto ``flax_optim_rules.RuleDef`` (``OptimizerState(...)``
built by hand becomes ``RuleState(...)``). Here each rule's methods are
written once and put on both bases; the kept rule's ``to_optax()`` must
match the shim's ``to_optax()`` of the original class bit for bit, step
after step, jitted and not: a tree-level ``apply_gradient`` override with
global-norm clipping and a bfloat16 state (vision_transformer's
``momentum_clip.Optimizer``), a per-leaf-only rule, and a float16 state.
"""

import warnings

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flax_optim_rules
import legacy_optim


def _clipped_momentum(base, make_state):
  """A momentum rule overriding the tree-level ``apply_gradient`` (global
  norm clipping), with a half-precision state; ``make_state`` is the whole
  tree's state class its ``apply_gradient`` builds by hand."""

  class ClippedMomentum(base):

    @flax.struct.dataclass
    class HyperParams:
      learning_rate: np.ndarray
      beta: np.ndarray
      grad_norm_clip: np.ndarray

    @flax.struct.dataclass
    class State:
      momentum: np.ndarray

    def __init__(self, learning_rate=None, beta=0.9, dtype='bfloat16',
                 grad_norm_clip=None):
      hyper_params = ClippedMomentum.HyperParams(learning_rate, beta,
                                                 grad_norm_clip)
      super().__init__(hyper_params)
      self.dtype = dict(bfloat16=jnp.bfloat16, float32=jnp.float32)[dtype]

    def init_param_state(self, param):
      return ClippedMomentum.State(jnp.zeros_like(param, dtype=self.dtype))

    def apply_gradient(self, hyper_params, params, state, grads):
      step = state.step
      params_flat, treedef = jax.tree_util.tree_flatten(params)
      states_flat = treedef.flatten_up_to(state.param_states)
      grads_flat = treedef.flatten_up_to(grads)
      if hyper_params.grad_norm_clip:
        grads_l2 = jnp.sqrt(sum([jnp.vdot(p, p) for p in grads_flat]))
        factor = jnp.minimum(1.0, hyper_params.grad_norm_clip / grads_l2)
        grads_flat = [factor * g for g in grads_flat]
      out = [self.apply_param_gradient(step, hyper_params, p, s, g)
             for p, s, g in zip(params_flat, states_flat, grads_flat)]
      new_params_flat, new_states_flat = list(zip(*out))
      new_params = jax.tree_util.tree_unflatten(treedef, new_params_flat)
      new_states = jax.tree_util.tree_unflatten(treedef, new_states_flat)
      return new_params, make_state(step + 1, new_states)

    def apply_param_gradient(self, step, hyper_params, param, state, grad):
      del step
      new_momentum = hyper_params.beta * state.momentum + grad
      new_param = param - hyper_params.learning_rate * new_momentum
      return new_param, ClippedMomentum.State(new_momentum.astype(self.dtype))

  return ClippedMomentum


def _per_leaf_adagrad(base, state_dtype):
  """A per-leaf-only rule (no tree hook): Adagrad with a bias-free decay,
  its accumulator kept in ``state_dtype``."""

  class LeafAdagrad(base):

    @flax.struct.dataclass
    class HyperParams:
      learning_rate: float
      eps: float

    @flax.struct.dataclass
    class State:
      sum_sq: jax.Array

    def __init__(self, learning_rate=0.1, eps=1e-6):
      super().__init__(LeafAdagrad.HyperParams(learning_rate, eps))

    def init_param_state(self, param):
      return LeafAdagrad.State(jnp.zeros(param.shape, state_dtype))

    def apply_param_gradient(self, step, hyper_params, param, state, grad):
      sum_sq = state.sum_sq + jnp.square(grad).astype(state_dtype)
      scale = jnp.sqrt(sum_sq.astype(param.dtype) + hyper_params.eps)
      new_param = param - hyper_params.learning_rate * grad / scale
      return new_param, LeafAdagrad.State(sum_sq + 0 * step)

  return LeafAdagrad


def _rules():
  """(case, the shim's OptimizerDef subclass, the kept RuleDef one, kwargs)."""
  return {
      'tree_override_bfloat16': (
          _clipped_momentum(legacy_optim.OptimizerDef,
                            legacy_optim.OptimizerState),
          _clipped_momentum(flax_optim_rules.RuleDef,
                            flax_optim_rules.RuleState),
          dict(learning_rate=0.05, grad_norm_clip=1.0)),
      'per_leaf_float32': (
          _per_leaf_adagrad(legacy_optim.OptimizerDef, jnp.float32),
          _per_leaf_adagrad(flax_optim_rules.RuleDef, jnp.float32), {}),
      'per_leaf_float16': (
          _per_leaf_adagrad(legacy_optim.OptimizerDef, jnp.float16),
          _per_leaf_adagrad(flax_optim_rules.RuleDef, jnp.float16), {}),
  }


RULES = _rules()


def _params():
  key_w, key_b = jax.random.split(jax.random.PRNGKey(0))
  return {'dense': {'kernel': jax.random.normal(key_w, (4, 3)),
                    'bias': jax.random.normal(key_b, (3,))}}


def _grads(step):
  keys = jax.random.split(jax.random.PRNGKey(100 + step), 2)
  return {'dense': {'kernel': 3.0 * jax.random.normal(keys[0], (4, 3)),
                    'bias': jax.random.normal(keys[1], (3,))}}


def _run(tx, steps, jit, rates=None):
  """(params, opt_state) after ``steps`` of ``tx`` on fixed gradients;
  ``rates``: a learning rate set in the state before each step."""
  params = _params()
  opt_state = tx.init(params)

  def step(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  step = jax.jit(step) if jit else step
  trajectory = []
  for i in range(steps):
    if rates is not None:
      opt_state = optax.tree_utils.tree_set(opt_state,
                                            learning_rate=rates[i])
    params, opt_state = step(params, opt_state, _grads(i))
    trajectory.append((params, opt_state))
  return trajectory


def _shim(cls, **kwargs):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    return cls(**kwargs)


@pytest.mark.parametrize('jit', [False, True], ids=['without_jit', 'with_jit'])
@pytest.mark.parametrize('case', sorted(RULES))
def test_kept_rule_equals_the_shims_transform(case, jit):
  legacy_cls, kept_cls, kwargs = RULES[case]
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    expected = _run(_shim(legacy_cls, **kwargs).to_optax(), 5, jit)
  found = _run(kept_cls(**kwargs).to_optax(), 5, jit)
  for (want_params, want_state), (params, state) in zip(expected, found):
    assert isinstance(state, flax_optim_rules.LegacyRuleState)
    chex.assert_trees_all_equal(params, want_params)
    chex.assert_trees_all_equal(state, want_state)
  first_params, _ = found[0]
  assert not np.array_equal(first_params['dense']['kernel'],
                            _params()['dense']['kernel'])


def test_half_precision_state_keeps_its_dtype():
  _, kept_cls, kwargs = RULES['tree_override_bfloat16']
  tx = kept_cls(**kwargs).to_optax()
  (_, state), = _run(tx, 1, jit=True)
  assert state.param_states['dense']['kernel'].momentum.dtype == jnp.bfloat16
  assert state.count == 1


@pytest.mark.parametrize('jit', [False, True], ids=['without_jit', 'with_jit'])
def test_injected_learning_rate_equals_the_shims_override(jit):
  """``apply_gradient(g, learning_rate=lr)`` migrates to a rate injected
  with ``inject_learning_rate(rule)`` and set in the state at each step."""
  legacy_cls, kept_cls, _ = RULES['tree_override_bfloat16']
  rates = [jnp.float32(0.1 / (i + 1)) for i in range(4)]
  kept = flax_optim_rules.inject_learning_rate(kept_cls(grad_norm_clip=1.0))
  found = _run(kept(learning_rate=0.0), 4, jit, rates=rates)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    optimizer = _shim(legacy_cls, grad_norm_clip=1.0).create(_params())

    def step(optimizer, grads, rate):
      return optimizer.apply_gradient(grads, learning_rate=rate)

    step = jax.jit(step) if jit else step
    for i, (kept_params, kept_state) in enumerate(found):
      optimizer = step(optimizer, _grads(i), rates[i])
      chex.assert_trees_all_equal(kept_params, optimizer.target)
      chex.assert_trees_all_equal(kept_state.inner_state.param_states,
                                  optimizer.state.param_states)


def test_overrides_name_the_rule_and_the_valid_names():
  _, kept_cls, kwargs = RULES['tree_override_bfloat16']
  with pytest.raises(TypeError, match=r'ClippedMomentum has no hyper-param'
                     r".*'beta2'.*learning_rate, beta, grad_norm_clip"):
    kept_cls(**kwargs).to_optax(beta2=0.9)


def test_a_rule_without_its_hooks_says_which_to_write():
  with pytest.raises(NotImplementedError, match='init_param_state'):
    flax_optim_rules.RuleDef(None).to_optax().init(_params())


def test_update_without_params_is_a_clear_error():
  _, kept_cls, kwargs = RULES['per_leaf_float32']
  tx = kept_cls(**kwargs).to_optax()
  with pytest.raises(ValueError, match=r'LeafAdagrad.to_optax\(\) needs '
                     'params'):
    tx.update(_grads(0), tx.init(_params()))
