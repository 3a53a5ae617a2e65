"""OptaxOptimizerDef: any Optax transform behind the legacy Optimizer API.

The proof of every bridge: N steps through ``Optimizer.apply_gradient`` give
the params and Optax state of ``tx.update`` + ``optax.apply_updates`` run
directly, bit for bit (the expected values come from Optax alone), and a
checkpoint taken after k steps, restored into a fresh template and stepped
on, equals the uninterrupted run, on every checkpoint route. Compare like
with like: an eager ``apply_gradient`` runs one compiled step (see
``legacy_optim._eager``), so the reference step is jitted too; with the
compiled eager steps switched off both run op by op. The multi-device cases
are in test_optax_adapter_pmap.py.
"""

import functools

import flax
from flax import serialization
from flax.training import checkpoints as flax_checkpoints
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import compat
import legacy_optim
from legacy_optim import _eager
from legacy_optim import optax_adapter
from legacy_optim._restore import RestoreMismatchError

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

TRANSFORMS = {
    'adam': lambda: optax.adam(1e-2),
    'sgd_momentum': lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    'adamw': lambda: optax.adamw(1e-2, weight_decay=0.1),
    'clipped_chain': lambda: optax.chain(optax.clip_by_global_norm(0.5),
                                         optax.adam(1e-2)),
    'injected': lambda: optax.inject_hyperparams(optax.adam)(
        learning_rate=1e-2, b1=0.8),
}
STEPS = 4


def _params():
  rng = np.random.default_rng(0)
  return {'dense': {'kernel': jnp.asarray(rng.standard_normal((4, 3)),
                                          jnp.float32),
                    'bias': jnp.zeros(3, jnp.float32)},
          'scale': jnp.float32(1.5)}


def _grads(i):
  rng = np.random.default_rng(100 + i)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(np.shape(p)), jnp.float32),
      _params())


def _optax_step(tx):
  """One step of ``tx`` run directly, as the Optax docs write it."""
  def step(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
  return step


@functools.lru_cache(maxsize=None)
def _optax_run(name, steps, *, jit=True):
  """(params, opt_state) after ``steps`` steps of ``TRANSFORMS[name]`` run
  directly (cached: several tests compare with the same run)."""
  tx = TRANSFORMS[name]()
  step = jax.jit(_optax_step(tx)) if jit else _optax_step(tx)
  params = _params()
  opt_state = tx.init(params)
  for i in range(steps):
    params, opt_state = step(params, opt_state, _grads(i))
  return params, opt_state


def _legacy_run(opt_def, steps, apply=None, start=0, optimizer=None):
  apply = apply or (lambda o, g: o.apply_gradient(g))
  optimizer = optimizer or opt_def.create(_params())
  for i in range(start, steps):
    optimizer = apply(optimizer, _grads(i))
  return optimizer


def assert_bit_identical(found, expected):
  """Same pytree (node types included: NamedTuples, EmptyState), same bits."""
  assert (jax.tree_util.tree_structure(found) ==
          jax.tree_util.tree_structure(expected))
  for got, want in zip(jax.tree_util.tree_leaves(found),
                       jax.tree_util.tree_leaves(expected)):
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def assert_run_is(optimizer, params, opt_state, steps):
  assert_bit_identical(optimizer.target, params)
  assert_bit_identical(optimizer.state.param_states, opt_state)
  assert int(optimizer.state.step) == steps


# ------------------------------------------------ steps == Optax directly


@pytest.mark.parametrize('name', TRANSFORMS)
def test_eager_steps_equal_optax_run_directly(name):
  tx = TRANSFORMS[name]()
  optimizer = _legacy_run(legacy_optim.OptaxOptimizerDef(tx), STEPS)
  assert_run_is(optimizer, *_optax_run(name, STEPS), STEPS)


@pytest.mark.parametrize('name', TRANSFORMS)
def test_jitted_steps_equal_optax_run_directly(name):
  tx = TRANSFORMS[name]()
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  optimizer = _legacy_run(legacy_optim.OptaxOptimizerDef(tx), STEPS, step)
  assert_run_is(optimizer, *_optax_run(name, STEPS), STEPS)


@pytest.mark.parametrize('name', ['adam', 'clipped_chain'])
def test_uncompiled_steps_equal_optax_run_op_by_op(name, monkeypatch):
  monkeypatch.setattr(_eager, 'ENABLED', False)
  tx = TRANSFORMS[name]()
  optimizer = _legacy_run(legacy_optim.OptaxOptimizerDef(tx), STEPS)
  assert_run_is(optimizer, *_optax_run(name, STEPS, jit=False), STEPS)


def test_exported_from_the_package():
  assert 'OptaxOptimizerDef' in legacy_optim.__all__
  assert legacy_optim.OptaxOptimizerDef is optax_adapter.OptaxOptimizerDef


def test_create_holds_the_transforms_initial_state():
  tx = TRANSFORMS['clipped_chain']()
  optimizer = legacy_optim.OptaxOptimizerDef(tx).create(_params())
  assert_run_is(optimizer, _params(), tx.init(_params()), 0)
  assert optimizer.state.step.dtype == jnp.int32
  assert isinstance(optimizer.state, legacy_optim.OptimizerState)


# --------------------------------------------- hyper-parameter overrides

LEARNING_RATES = (0.1, None, 0.02, 0.05)  # None: no override that step.

# Transforms with one inject_hyperparams state, and where their state has it.
INJECTED = {
    'injected': (TRANSFORMS['injected'], lambda opt_state: opt_state),
    'injected_in_a_chain': (
        lambda: optax.chain(optax.clip_by_global_norm(0.5),
                            optax.inject_hyperparams(optax.sgd)(
                                learning_rate=1e-2, momentum=0.9)),
        lambda opt_state: opt_state[1]),
}


def _optax_run_with_learning_rates(tx, injected_state):
  """Each override set in the injected state for its step, then the value
  the state held put back: what an override means (one step)."""
  step = jax.jit(_optax_step(tx))
  params = _params()
  opt_state = tx.init(params)
  for i, lr in enumerate(LEARNING_RATES):
    hyperparams = injected_state(opt_state).hyperparams
    held = hyperparams['learning_rate']
    if lr is not None:
      hyperparams['learning_rate'] = lr
    params, opt_state = step(params, opt_state, _grads(i))
    injected_state(opt_state).hyperparams['learning_rate'] = held
  return params, opt_state


@pytest.mark.parametrize('name', INJECTED)
@pytest.mark.parametrize('jit', [False, True], ids=['eager', 'jit'])
def test_learning_rate_override_sets_the_injected_one_for_one_step(jit, name):
  make_tx, injected_state = INJECTED[name]
  opt_def = legacy_optim.OptaxOptimizerDef(make_tx())
  assert 'learning_rate' in opt_def.hyper_params
  assert set(opt_def.hyper_params.values()) == {None}

  def apply(optimizer, grads, lr):
    overrides = {} if lr is None else {'learning_rate': jnp.float32(lr)}
    return optimizer.apply_gradient(grads, **overrides)

  apply = jax.jit(apply, static_argnums=2) if jit else apply
  optimizer = opt_def.create(_params())
  for i, lr in enumerate(LEARNING_RATES):
    optimizer = apply(optimizer, _grads(i), lr)
  params, opt_state = _optax_run_with_learning_rates(make_tx(),
                                                     injected_state)
  assert_run_is(optimizer, params, opt_state, len(LEARNING_RATES))
  # The state keeps the transform's own value.
  assert float(injected_state(optimizer.state.param_states).hyperparams[
      'learning_rate']) == np.float32(1e-2)


def test_override_with_two_injected_states_is_refused():
  tx = optax.chain(optax.inject_hyperparams(optax.add_decayed_weights)(
      weight_decay=1e-4), optax.inject_hyperparams(optax.sgd)(
          learning_rate=0.1))
  optimizer = legacy_optim.OptaxOptimizerDef(tx).create(_params())
  with pytest.raises(ValueError, match='keeps 2 optax.inject_hyperparams '
                     'states'):
    optimizer.apply_gradient(_grads(0), learning_rate=0.1)


def test_override_of_a_transform_without_injected_hyperparams_is_refused():
  optimizer = legacy_optim.OptaxOptimizerDef(optax.adam(1e-2)).create(
      _params())
  with pytest.raises(ValueError, match=r"'learning_rate': the transform "
                     r'keeps no hyper-parameters.*optax.inject_hyperparams'):
    optimizer.apply_gradient(_grads(0), learning_rate=0.1)


def test_override_of_an_unknown_name_is_refused_naming_the_known_ones():
  optimizer = legacy_optim.OptaxOptimizerDef(TRANSFORMS['injected']()).create(
      _params())
  with pytest.raises(ValueError, match=r"'beta1'; expected one of b1, b2, "
                     r'eps, eps_root, learning_rate'):
    optimizer.apply_gradient(_grads(0), beta1=0.5)


def test_override_of_a_scheduled_hyperparameter_is_refused():
  tx = optax.inject_hyperparams(optax.sgd)(
      learning_rate=optax.linear_schedule(0.1, 0.0, 10))
  optimizer = legacy_optim.OptaxOptimizerDef(tx).create(_params())
  with pytest.raises(ValueError, match=r"'learning_rate': the transform "
                     'computes it from a schedule'):
    optimizer.apply_gradient(_grads(0), learning_rate=0.1)


# ------------------------------------------------------ the Optax side


def test_to_optax_is_the_transform_and_its_state_continues_in_optax():
  tx = TRANSFORMS['clipped_chain']()
  opt_def = legacy_optim.OptaxOptimizerDef(tx)
  assert opt_def.to_optax() is tx
  optimizer = _legacy_run(opt_def, 2)
  opt_state = opt_def.to_optax_state(optimizer.state, optimizer.target)
  assert opt_state is optimizer.state.param_states
  # Two steps in the legacy API, two in Optax: the four-step Optax run.
  step = jax.jit(_optax_step(tx))
  params = optimizer.target
  for i in range(2, STEPS):
    params, opt_state = step(params, opt_state, _grads(i))
  expected = _optax_run('clipped_chain', STEPS)
  assert_bit_identical((params, opt_state), expected)
  # And back: the step is the transform's count.
  back = compat.from_optax(opt_def, params, opt_state)
  assert_run_is(back, *expected, STEPS)


def test_to_train_state_continues_as_the_optax_run():
  optimizer = _legacy_run(
      legacy_optim.OptaxOptimizerDef(TRANSFORMS['adamw']()), 2)
  state = compat.to_train_state(optimizer, apply_fn=None)
  assert int(state.step) == 2
  step = jax.jit(lambda state, grads: state.apply_gradients(grads=grads))
  for i in range(2, STEPS):
    state = step(state, _grads(i))
  assert_bit_identical((state.params, state.opt_state),
                       _optax_run('adamw', STEPS))


def test_from_optax_state_without_a_count_needs_the_step():
  opt_def = legacy_optim.OptaxOptimizerDef(TRANSFORMS['sgd_momentum']())
  opt_state = opt_def.to_optax().init(_params())
  with pytest.raises(ValueError, match='no single step count.*pass step='):
    opt_def.from_optax_state(opt_state, _params())
  assert int(opt_def.from_optax_state(opt_state, _params(), step=7).step) == 7


def test_to_optax_takes_no_overrides():
  opt_def = legacy_optim.OptaxOptimizerDef(TRANSFORMS['injected']())
  with pytest.raises(TypeError, match=r'takes no overrides \(got '
                     r'learning_rate\).*opt_state.hyperparams'):
    opt_def.to_optax(learning_rate=0.1)


def test_what_is_no_transform_is_refused():
  with pytest.raises(TypeError, match='must be an optax.GradientTransformation'
                     r'.*got Adam'):
    legacy_optim.OptaxOptimizerDef(legacy_optim.Adam(0.1))


def test_focus_and_per_parameter_wrappers_are_refused():
  opt_def = legacy_optim.OptaxOptimizerDef(optax.adam(1e-2))
  traversal = legacy_optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
  with pytest.raises(ValueError, match=r'focus=.*optax.masked'):
    opt_def.create(_params(), focus=traversal)
  with pytest.raises(TypeError, match='MultiOptimizer needs one state per '
                     'parameter.*optax.partition'):
    legacy_optim.MultiOptimizer((traversal, opt_def))
  with pytest.raises(TypeError, match='WeightNorm needs one state per'):
    legacy_optim.WeightNorm(opt_def)


# ------------------------------------------------ state dict and routes

# The documented layout: {'step', 'param_states': the Optax state as a
# state dict}: NamedTuples by field name, tuples by position, EmptyState {}.
_KERNEL_AND_BIAS = {'dense': {'bias': (3,), 'kernel': (4, 3)}, 'scale': ()}
STATE_DICT_SHAPES = {
    'clipped_chain': {
        '0': {},  # clip_by_global_norm: EmptyState
        '1': {'0': {'count': (), 'mu': _KERNEL_AND_BIAS,
                    'nu': _KERNEL_AND_BIAS},  # ScaleByAdamState
              '1': {}}},  # scale_by_learning_rate: EmptyState
    'sgd_momentum': {'0': {'trace': _KERNEL_AND_BIAS}, '1': {}},
    'injected': {
        'count': (),
        'hyperparams': {'b1': (), 'b2': (), 'eps': (), 'eps_root': (),
                        'learning_rate': ()},
        'hyperparams_states': {},
        'inner_state': {'0': {'count': (), 'mu': _KERNEL_AND_BIAS,
                              'nu': _KERNEL_AND_BIAS}, '1': {}}},
}


def _shapes(state_dict):
  if isinstance(state_dict, dict):
    return {k: _shapes(v) for k, v in state_dict.items()}
  return np.shape(state_dict)


@pytest.mark.parametrize('name', sorted(STATE_DICT_SHAPES))
def test_state_dict_keys_are_the_documented_ones(name):
  optimizer = _legacy_run(
      legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]()), 1)
  assert _shapes(serialization.to_state_dict(optimizer)) == {
      'target': _KERNEL_AND_BIAS,
      'state': {'step': (), 'param_states': STATE_DICT_SHAPES[name]}}


def _save_bytes(tmp_path, optimizer):
  (tmp_path / 'optimizer.msgpack').write_bytes(
      serialization.to_bytes(optimizer))


def _restore_bytes(tmp_path, template):
  return serialization.from_bytes(
      template, (tmp_path / 'optimizer.msgpack').read_bytes())


def _save_flax(tmp_path, optimizer):
  flax_checkpoints.save_checkpoint(str(tmp_path), optimizer, 2)


def _restore_flax(tmp_path, template):
  return flax_checkpoints.restore_checkpoint(str(tmp_path), target=template)


def _restore_compat(tmp_path, template):
  return compat.restore_checkpoint(tmp_path, template)


ROUTES = {
    'serialization': (_save_bytes, _restore_bytes),
    'flax_orbax': (_save_flax, _restore_flax),
    'flax_msgpack': (_save_flax, _restore_flax),
    'compat_orbax': (_save_flax, _restore_compat),
    'compat_msgpack': (_save_flax, _restore_compat),
}


@pytest.fixture(params=ROUTES)
def route(request):
  orbax = flax.config.flax_use_orbax_checkpointing
  flax.config.update('flax_use_orbax_checkpointing',
                     not request.param.endswith('msgpack'))
  yield ROUTES[request.param]
  flax.config.update('flax_use_orbax_checkpointing', orbax)


@pytest.mark.parametrize('name', ['clipped_chain', 'injected'])
def test_checkpoint_after_k_steps_resumes_as_the_uninterrupted_run(
    name, route, tmp_path):
  save, restore = route
  opt_def = legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]())
  save(tmp_path, _legacy_run(opt_def, 2))
  # A fresh template (another definition of the same transform, other
  # params): everything comes from the checkpoint.
  fresh_def = legacy_optim.OptaxOptimizerDef(TRANSFORMS[name]())
  template = fresh_def.create(jax.tree_util.tree_map(lambda p: p * 3,
                                                     _params()))
  restored = restore(tmp_path, template)
  assert restored.optimizer_def is fresh_def
  assert_run_is(restored, *_optax_run(name, 2), 2)
  resumed = _legacy_run(fresh_def, STEPS, start=2, optimizer=restored)
  assert_run_is(resumed, *_optax_run(name, STEPS), STEPS)


def test_checkpoint_of_another_transform_is_refused_naming_the_paths(
    route, tmp_path):
  save, restore = route
  save(tmp_path, _legacy_run(
      legacy_optim.OptaxOptimizerDef(TRANSFORMS['clipped_chain']()), 1))
  template = legacy_optim.OptaxOptimizerDef(
      TRANSFORMS['sgd_momentum']()).create(_params())
  with pytest.raises((RestoreMismatchError, ValueError),
                     match=r'state/param_states/0'):
    restore(tmp_path, template)
