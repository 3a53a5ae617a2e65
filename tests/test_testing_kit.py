"""compat.testing: old path vs new path, trajectory files, divergence reports.

Acceptance: a linen model trained by a legacy Optimizer step equals the same
model trained by nnx.Optimizer on ``nnx.bridge.ToNNX`` (and by TrainState and
a raw Optax loop); a changed hyper-parameter is caught at the first step it
matters, at the right leaf; trajectories recorded under the shim and under
real flax 0.5.3 (``tests/oracle_trajectories``, written by the oracle env)
replay on the new paths; unreadable files give clear errors.
"""

import functools
import importlib.util
import pathlib
import subprocess

import _oracle
import chex
from flax import linen as nn
from flax import nnx
from flax.training import train_state
import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import optax
import pytest

import compat
from compat import testing
from compat.testing import _compare
from compat.testing import _record_core
import legacy_optim as optim

ORACLE_DIR = pathlib.Path(__file__).parent / 'oracle_trajectories'


def _load_oracle_script():
  spec = importlib.util.spec_from_file_location(
      'record_flax053', ORACLE_DIR / 'record_flax053.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


ORACLE = _load_oracle_script()


# ------------------------------------------------------------ a linen model


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    hidden = jnp.tanh(nn.Dense(4)(x))
    return nn.Dense(2)(hidden)


def _data(steps=3, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(8, 3)).astype(np.float32),
           rng.normal(size=(8, 2)).astype(np.float32)) for _ in range(steps)]


BATCHES = _data()
PARAMS = MLP().init(jax.random.key(0), BATCHES[0][0])['params']


def _loss(y, t):
  return jnp.mean((y - t)**2)


@jax.jit
def legacy_step(opt, batch):
  x, t = batch
  grads = jax.grad(lambda p: _loss(MLP().apply({'params': p}, x), t))(
      opt.target)
  return opt.apply_gradient(grads)


@nnx.jit
def nnx_step(state, batch):
  model, optimizer = state
  x, t = batch
  optimizer.update(model, nnx.grad(lambda m: _loss(m(x), t))(model))


@jax.jit
def train_state_step(state, batch):
  x, t = batch
  grads = jax.grad(lambda p: _loss(state.apply_fn({'params': p}, x), t))(
      state.params)
  return state.apply_gradients(grads=grads)


def _nnx_model():
  """A ToNNX model with its own (different) random init."""
  return nnx.bridge.ToNNX(MLP(), rngs=nnx.Rngs(1)).lazy_init(BATCHES[0][0])


# One def instance each, so jitted steps compile once per module.
OPTIMIZERS = {
    'momentum': optim.Momentum(0.1, beta=0.9, weight_decay=1e-3),
    'adam': optim.Adam(0.01, weight_decay=1e-3),
}


# ------------------------------------------------------------- acceptance


@pytest.mark.parametrize('name', ['momentum', 'adam'])
def test_legacy_step_equals_nnx_optimizer_on_tonnx(name):
  old = OPTIMIZERS[name].create(PARAMS)
  steps = testing.assert_same_training(
      legacy_step, nnx_step, old, _nnx_model(), batches=BATCHES,
      compare_opt_state=True)
  assert steps == len(BATCHES)


def test_legacy_step_equals_train_state():
  old = OPTIMIZERS['momentum'].create(PARAMS)
  testing.assert_same_training(
      legacy_step, train_state_step, old, batches=BATCHES,
      convert=lambda o: compat.to_train_state(o, MLP().apply),
      compare_opt_state=True)


def test_default_convert_gives_the_raw_optax_pair():
  old = OPTIMIZERS['momentum'].create(PARAMS)
  tx, _ = compat.to_optax(old)

  @jax.jit
  def optax_step(state, batch):
    params, opt_state = state
    x, t = batch
    grads = jax.grad(lambda p: _loss(MLP().apply({'params': p}, x), t))(
        params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  testing.assert_same_training(legacy_step, optax_step, old, batches=BATCHES,
                               compare_opt_state=True)


def _expect_divergence(old, new_init, *, step, path, more_leaves):
  with pytest.raises(testing.TrainingDivergence) as info:
    testing.assert_same_training(legacy_step, nnx_step, old, new_init,
                                 batches=BATCHES)
  err = info.value
  assert (err.step, err.path, err.what) == (step, path, 'params')
  assert len(err.diffs) == 1 + more_leaves
  message = str(err)
  assert f'at step {step} ' in message
  assert f'params{path}:' in message
  for part in ('elements differ', 'max |old - new| = ', 'max ulp difference'):
    assert part in message
  if more_leaves:
    assert f'{more_leaves} more lea' in message
  return err


@pytest.mark.parametrize('name,overrides,step,path,more', [
    ('adam', {'eps': 1e-7}, 1, "['Dense_0']['bias']", 3),
    # The biases start at zero, so weight decay first moves only kernels.
    ('momentum', {'weight_decay': 2e-3}, 1, "['Dense_0']['kernel']", 1),
    # Momentum starts at zero: beta first matters in the second update.
    ('momentum', {'beta': 0.8}, 2, "['Dense_0']['bias']", 3),
])
def test_changed_hyper_param_is_caught_where_it_first_matters(
    name, overrides, step, path, more):
  old = OPTIMIZERS[name].create(PARAMS)
  model = _nnx_model()
  new_init = (model, compat.to_nnx_optimizer(old, model, **overrides))
  # The first differing leaf in flattening order is named.
  _expect_divergence(old, new_init, step=step, path=path, more_leaves=more)


def _grad_seq(nonzero, steps=3, seed=3):
  """Gradient trees shaped like PARAMS, zero except at the ``nonzero`` leaf."""
  rng = np.random.default_rng(seed)
  seq = []
  for _ in range(steps):
    grads = jax.tree_util.tree_map(np.zeros_like, PARAMS)
    layer, leaf = nonzero
    grads[layer][leaf] = rng.normal(size=PARAMS[layer][leaf].shape).astype(
        np.float32)
    seq.append(grads)
  return seq


def _apply(opt, grads):
  return opt.apply_gradient(grads)


_jitted_apply = jax.jit(_apply)


def test_divergence_names_the_only_differing_leaf():
  old = optim.Momentum(0.1, beta=0.9).create(PARAMS)
  tx, opt_state = compat.to_optax(old, beta=0.5)

  @jax.jit
  def optax_step(state, grads):
    updates, new_opt_state = tx.update(grads, state[1], state[0])
    return optax.apply_updates(state[0], updates), new_opt_state

  with pytest.raises(testing.TrainingDivergence) as info:
    testing.assert_same_training(
        _jitted_apply, optax_step, old, (old.target, opt_state),
        batches=_grad_seq(('Dense_1', 'kernel')))
  assert (info.value.step, info.value.path) == (2, "['Dense_1']['kernel']")
  assert len(info.value.diffs) == 1
  assert 'more lea' not in str(info.value)


def _kinds():
  """Every state kind compat.testing knows, all holding PARAMS."""
  old = OPTIMIZERS['momentum'].create(PARAMS)
  tx, opt_state = compat.to_optax(old)
  model = _nnx_model()
  nnx_opt = compat.to_nnx_optimizer(old, model)
  both = nnx.ModelAndOptimizer(_nnx_model(), tx, wrt=nnx.Param)
  nnx.update(both.model, nnx.state(model, nnx.Param))
  return {
      'legacy': old,
      'train_state': train_state.TrainState.create(
          apply_fn=None, params=PARAMS, tx=tx),
      'pair': (PARAMS, opt_state),
      'nnx_pair': (model, nnx_opt),
      'model_and_optimizer': both,
      'bare_module': model,
  }


def test_params_of_every_kind_are_the_linen_params():
  expected = _record_core.canonical_leaves(PARAMS)
  for kind, state in _kinds().items():
    got = _record_core.canonical_leaves(testing.params_of(state))
    assert [p for p, _ in got] == [p for p, _ in expected], kind
    chex.assert_trees_all_equal([a for _, a in got], [a for _, a in expected])


def test_opt_state_of_nnx_matches_the_legacy_optax_layout():
  kinds = _kinds()
  expected = _record_core.canonical_leaves(testing.opt_state_of(
      kinds['legacy']))
  for kind in ('pair', 'nnx_pair', 'model_and_optimizer'):
    got = _record_core.canonical_leaves(testing.opt_state_of(kinds[kind]))
    assert [p for p, _ in got] == [p for p, _ in expected], kind
  with pytest.raises(TypeError, match='nnx.Module alone'):
    testing.opt_state_of(kinds['bare_module'])


# ----------------------------------------------------- the report's numbers


def _identity(state, batch):
  del batch
  return state


def _perturb_at(step, ulps, index):
  """A step that moves ``index`` of leaf 'b' up by ``ulps`` ulp at ``step``."""
  def step_fn(state, k):
    params, opt_state = state
    if k != step:
      return state
    b = np.array(params['b'])
    for _ in range(ulps):
      b[index] = np.nextafter(b[index], np.inf, dtype=b.dtype)
    return {**params, 'b': b}, opt_state
  return step_fn


@pytest.mark.parametrize('dtype', [np.float32, np.float64, np.float16])
@pytest.mark.parametrize('ulps', [1, 3])
def test_report_counts_elements_abs_and_ulp(dtype, ulps):
  params = {'a': np.ones(3, dtype), 'b': np.array([[0.5, -2.0], [3.0, 7.0]],
                                                  dtype)}
  with pytest.raises(testing.TrainingDivergence) as info:
    testing.assert_same_training(
        _identity, _perturb_at(2, ulps, (1, 0)), (params, ()), (params, ()),
        batches=[1, 2, 3])
  (diff,) = info.value.diffs
  x = dtype(3.0)
  moved = x
  for _ in range(ulps):
    moved = np.nextafter(moved, np.inf, dtype=dtype)
  assert info.value.step == 2 and diff.path == "['b']"
  assert (diff.differing, diff.size, diff.max_ulp) == (1, 4, ulps)
  assert diff.max_abs == float(moved) - float(x)
  assert '1 of 4 elements differ' in str(info.value)
  assert 'first at index (1, 0)' in str(info.value)


@pytest.mark.parametrize('rtol,atol,passes', [
    (0, 0, False),
    (0, 1e-6, True),  # 3 + 1 ulp is 3 + 2.4e-7.
    (1e-7, 0, True),  # 2.4e-7 <= 1e-7 * 3.
    (1e-8, 1e-8, False),
])
def test_tolerance(rtol, atol, passes):
  params = {'b': np.array([3.0, 1.0], np.float32)}
  run = lambda: testing.assert_same_training(
      _identity, _perturb_at(1, 1, 0), (params, ()), (params, ()),
      batches=[1], rtol=rtol, atol=atol)
  if passes:
    run()
  else:
    with pytest.raises(testing.TrainingDivergence):
      run()


@pytest.mark.parametrize('a,b,equal', [
    (np.nan, np.nan, True),
    (0.0, -0.0, True),
    (np.inf, np.inf, True),
    (np.nan, 1.0, False),
    (np.inf, -np.inf, False),
])
def test_special_values(a, b, equal):
  diff = _compare.leaf_diff('x', np.float32([a]), np.float32([b]), 0, 0)
  assert (diff is None) == equal


@pytest.mark.parametrize('dtype', ['float16', 'bfloat16', 'float32',
                                   'float64'])
def test_ulp_distance_counts_representable_values(dtype):
  dt = jnp.dtype(dtype)
  tiny = np.array(0, dt)
  steps = [tiny]
  for _ in range(3):  # 0 -> three subnormals up, and mirrored down.
    steps.append(np.nextafter(steps[-1], np.array(1, dt)))
  neg = -steps[-1]
  got = _compare.ulp_distance(np.array([neg, steps[0], np.array(1.0, dt)]),
                              np.array([steps[-1], -steps[0],
                                        np.nextafter(np.array(1.0, dt),
                                                     np.array(2, dt))]))
  np.testing.assert_array_equal(got, [6, 0, 1])


def test_structure_and_dtype_mismatches_are_reported():
  params = {'a': np.ones(2, np.float32)}
  with pytest.raises(testing.TrainingDivergence, match=r"only in new: \['c'\]"):
    testing.assert_same_training(
        _identity, _identity, (params, ()), ({**params, 'c': 1.0}, ()),
        batches=[])
  with pytest.raises(testing.TrainingDivergence,
                     match='dtype old=float32, new=float64'):
    testing.assert_same_training(
        _identity, _identity, (params, ()),
        ({'a': np.ones(2, np.float64)}, ()), batches=[])


def test_opt_state_comparison_catches_what_params_do_not_show():
  old = optim.GradientDescent(0.1).create(PARAMS)
  tx, opt_state = compat.to_optax(old)
  shifted = opt_state._replace(count=opt_state.count + 5)

  @jax.jit
  def optax_step(state, grads):
    updates, new_opt_state = tx.update(grads, state[1], state[0])
    return optax.apply_updates(state[0], updates), new_opt_state

  batches = _grad_seq(('Dense_0', 'bias'))
  testing.assert_same_training(_jitted_apply, optax_step, old,
                               (old.target, shifted), batches=batches)
  with pytest.raises(testing.TrainingDivergence,
                     match=r'opt_state\.count') as e:
    testing.assert_same_training(_jitted_apply, optax_step, old,
                                 (old.target, shifted), batches=batches,
                                 compare_opt_state=True)
  assert (e.value.step, e.value.what) == (0, 'opt_state')


def test_step_function_conventions():
  params = {'w': np.zeros(2, np.float32)}
  add = lambda s, b: ({'w': s[0]['w'] + b}, s[1])
  with_aux = lambda s, b: (add(s, b), {'loss': 0.0})
  batches = [np.float32(1), np.float32(2)]
  assert testing.assert_same_training(add, add, (params, ()), (params, ()),
                                      batches=iter(batches)) == 2
  assert testing.assert_same_training(
      with_aux, with_aux, (params, ()), (params, ()), batches=batches,
      has_aux=True, steps=1) == 1
  with pytest.raises(ValueError, match='batches ran out after 2'):
    testing.assert_same_training(add, add, (params, ()), (params, ()),
                                 batches=batches, steps=3)
  with pytest.raises(ValueError, match='new_init or convert'):
    testing.assert_same_training(add, add, (params, ()), (params, ()),
                                 batches=batches, convert=lambda o: o)
  with pytest.raises(TypeError, match='params_fn'):
    testing.assert_same_training(add, add, object(), (params, ()),
                                 batches=batches)
  # params_fn as an (old, new) pair of extractors.
  testing.assert_same_training(
      lambda s, b: {'p': s['p'] + b}, add, {'p': params['w']}, (params, ()),
      batches=batches, params_fn=(lambda s: {'w': s['p']}, None))


# -------------------------------------------------------------- trajectories


def _record_legacy(path, name='momentum', values_at='all'):
  old = OPTIMIZERS[name].create(PARAMS)
  return testing.record_trajectory(legacy_step, old, BATCHES, None, str(path),
                                   values_at=values_at)


def test_trajectory_recorded_under_the_shim_replays_on_nnx(tmp_path):
  path = tmp_path / 'momentum.traj'
  payload = _record_legacy(path)
  assert payload['steps'] == len(BATCHES)
  old = OPTIMIZERS['momentum'].create(PARAMS)
  model = _nnx_model()
  nnx_init = (model, compat.to_nnx_optimizer(old, model))
  assert testing.assert_matches_trajectory(nnx_step, nnx_init, BATCHES,
                                           str(path)) == len(BATCHES)
  # The file's values are the legacy run's params, bit for bit.
  traj = testing.read_trajectory(str(path))
  opt = old
  for batch in BATCHES:
    opt = legacy_step(opt, batch)
  chex.assert_trees_all_equal(
      traj.values[-1],
      [np.asarray(x) for x in jax.tree_util.tree_leaves(opt.target)])


@functools.cache
def _beta_changed():
  """One TrainState (so one compiled step) with Momentum's beta changed."""
  old = OPTIMIZERS['momentum'].create(PARAMS)
  return compat.to_train_state(old, MLP().apply, overrides={'beta': 0.5})


@pytest.mark.parametrize('values_at', ['all', 'none', 'ends', {0, 1}])
def test_replay_catches_a_changed_hyper_param(tmp_path, values_at):
  path = tmp_path / 'm.traj'
  _record_legacy(path, values_at=values_at)
  with pytest.raises(testing.TrainingDivergence) as info:
    testing.assert_matches_trajectory(train_state_step, _beta_changed(),
                                      BATCHES, str(path))
  assert (info.value.step, info.value.path) == (2, "['Dense_0']['bias']")
  message = str(info.value)
  assert str(path) in message
  if values_at == 'all':
    assert 'max |recorded - new|' in message
  else:  # Step 2 has only digests.
    assert 'recorded digest' in message


def test_replay_rejects_other_batches_and_step_counts(tmp_path):
  path = tmp_path / 'm.traj'
  _record_legacy(path)
  old = OPTIMIZERS['momentum'].create(PARAMS)
  with pytest.raises(ValueError, match='Batch 1 .* differs'):
    testing.assert_matches_trajectory(legacy_step, old, _data(seed=1),
                                      str(path))
  with pytest.raises(ValueError, match='records 3 updates, not steps=2'):
    testing.assert_matches_trajectory(legacy_step, old, BATCHES, str(path),
                                      steps=2)


# ------------------------------------------------------ recorded by flax 0.5.3

# Fidelity bound for replaying a flax 0.5.3 recording (jax 0.4.13, jitted
# steps) on today's stack, jitted too: identical values (measured: 0 ulp for
# both cases on every path). Longer runs of other rules may drift by a few
# ulp between XLA versions; the guide's bound for those is rtol=1e-6.
ORACLE_BOUNDS = {'momentum_nesterov': (0, 0), 'adam': (0, 0)}


def _oracle_def(case):
  cls, kwargs = ORACLE.CASES[case]
  return getattr(optim, cls)(**kwargs)


@nnx.jit
def _nnx_grad_step(state, grads):
  model, optimizer = state
  tree = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(tree, grads)
  optimizer.update(model, tree)


@jax.jit
def _train_state_grad_step(state, grads):
  return state.apply_gradients(grads=grads)


def _oracle_init(case, path_name):
  """(step, init) on the shim or a new path, from the recording's params."""
  old = _oracle_def(case).create(ORACLE.initial_params())
  if path_name == 'legacy':
    return _jitted_apply, old
  if path_name == 'train_state':
    return _train_state_grad_step, compat.to_train_state(old, MLP().apply)
  model = nnx.bridge.ToNNX(MLP(), rngs=nnx.Rngs(2)).lazy_init(
      jnp.ones((1, 3)))
  return _nnx_grad_step, (model, compat.to_nnx_optimizer(old, model))


@pytest.mark.parametrize('path_name', ['legacy', 'train_state', 'nnx'])
@pytest.mark.parametrize('case', sorted(ORACLE.CASES))
def test_flax053_recording_replays_on_every_path(case, path_name):
  file = ORACLE_DIR / f'{case}.traj'
  traj = testing.read_trajectory(str(file))
  assert traj.created_by['jax'] == '0.4.13'
  assert traj.metadata['recorded_with'].startswith('flax 0.5.3 ')
  rtol, atol = ORACLE_BOUNDS[case]
  step_fn, init = _oracle_init(case, path_name)
  assert testing.assert_matches_trajectory(
      step_fn, init, ORACLE.gradients(), str(file), rtol=rtol,
      atol=atol) == ORACLE.STEPS


@pytest.mark.slow
def test_oracle_recording_is_reproducible(tmp_path):
  """Re-records under the oracle env; params digests equal the committed."""
  subprocess.run([_oracle.require(), str(ORACLE_DIR / 'record_flax053.py'),
                  '--out', str(tmp_path)], check=True, capture_output=True)
  for case in ORACLE.CASES:
    fresh = testing.read_trajectory(str(tmp_path / f'{case}.traj'))
    committed = testing.read_trajectory(str(ORACLE_DIR / f'{case}.traj'))
    assert fresh.digests == committed.digests
    assert fresh.batch_digests == committed.batch_digests


# ------------------------------------------------------------- file format


@pytest.fixture(name='recorded')
def _recorded(tmp_path):
  path = tmp_path / 'r.traj'
  params = {'w': np.arange(3, dtype=np.float32)}
  testing.record_trajectory(lambda s, b: ({'w': s[0]['w'] + b}, s[1]),
                            (params, ()), [np.float32(1)], 1, str(path))
  return path


def _envelope(path):
  return msgpack.unpackb(path.read_bytes(), raw=False)


def _rewrite(path, envelope):
  path.write_bytes(msgpack.packb(envelope, use_bin_type=True))


def test_values_at_must_be_known(tmp_path):
  with pytest.raises(ValueError, match="values_at must be 'all'"):
    testing.record_trajectory(_identity, ({'w': np.ones(1)}, ()), [1], 1,
                              str(tmp_path / 'x.traj'), values_at='some')


def test_file_holds_only_plain_msgpack(recorded):
  def no_ext(code, data):
    raise AssertionError(f'msgpack ext type {code} in a trajectory file')
  envelope = msgpack.unpackb(recorded.read_bytes(), raw=False, ext_hook=no_ext)
  assert (envelope['format'], envelope['version']) == (
      'compat.testing/trajectory', 1)
  payload = msgpack.unpackb(envelope['payload'], raw=False, ext_hook=no_ext)
  assert payload['paths'] == ["['w']"] and payload['dtypes'] == ['float32']
  assert np.frombuffer(payload['records'][1]['values'][0], '<f4').tolist() == [
      1.0, 2.0, 3.0]


@pytest.mark.parametrize('version,match', [
    (2, 'version 2 is not supported.*newer release'),
    (0, 'version 0 is not supported.*Re-record'),
])
def test_other_format_versions_are_refused(recorded, version, match):
  envelope = _envelope(recorded)
  envelope['version'] = version
  _rewrite(recorded, envelope)
  with pytest.raises(testing.TrajectoryFileError, match=match):
    testing.read_trajectory(str(recorded))


def _flip_payload_byte(path):
  envelope = _envelope(path)
  body = bytearray(envelope['payload'])
  body[len(body) // 2] ^= 0x01
  envelope['payload'] = bytes(body)
  _rewrite(path, envelope)


def _inconsistent_payload(path):
  """Valid checksum, but the payload's record count disagrees."""
  envelope = _envelope(path)
  payload = msgpack.unpackb(envelope['payload'], raw=False)
  payload['records'] = payload['records'][:1]
  body = msgpack.packb(payload, use_bin_type=True)
  import hashlib
  envelope.update(payload=body, sha256=hashlib.sha256(body).hexdigest())
  _rewrite(path, envelope)


@pytest.mark.parametrize('damage,match', [
    (lambda p: p.write_bytes(p.read_bytes()[:-40]), 'does not decode'),
    (_flip_payload_byte, 'checksum mismatch'),
    (lambda p: p.write_text('hello'), 'not a compat.testing trajectory'),
    (lambda p: _rewrite(p, {'format': 'other', 'version': 1}),
     'not a compat.testing trajectory'),
    (_inconsistent_payload, 'disagree'),
])
def test_damaged_files_are_refused(recorded, damage, match):
  damage(recorded)
  with pytest.raises(testing.TrajectoryFileError, match=match):
    testing.read_trajectory(str(recorded))


def test_recording_core_imports_nothing_of_todays_stack():
  """The core runs under flax 0.5.3: it may use numpy, jax, msgpack only."""
  source = pathlib.Path(_record_core.__file__).read_text()
  imports = {line.split()[1].split('.')[0] for line in source.splitlines()
             if line.strip().startswith(('import ', 'from '))}
  assert imports <= {'collections', 'hashlib', 'platform', 'typing', 'jax',
                     'jaxlib', 'msgpack', 'numpy', 'compat'}
