"""flax.optim checkpoints written by REAL flax 0.5.3: restore, continue, convert

Fixtures (tests/checkpoints/, from generate_fixtures.py in the oracle venv)
cover every algorithm and the usual containers. Expected values are the
files themselves and the oracle's continuation, never this code's output.
"""

import functools
import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import warnings

import _oracle
from flax import core
from flax import nnx
from flax import serialization
from flax.training import checkpoints as flax_checkpoints
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / 'checkpoints'))
import _float16_isa
import fixture_lib as fx

import compat
from compat import _atomic
from compat.checkpoints import _convert as convert_impl
from compat.checkpoints import api as checkpoints
import legacy_optim
from legacy_optim import _restore
from legacy_optim import catalogue

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

ORACLE_PYTHON = _oracle.PYTHON


def _continue_legacy(name, optimizer):
  """Applies the oracle's continuation gradients; returns each target."""
  targets = []
  for grad in fx.continuation(name)['grads']:
    optimizer = optimizer.apply_gradient(fx.like(optimizer.target, grad))
    targets.append(optimizer.target)
  return optimizer, targets


def _restored(name):
  return fx.optimizer_in(name, serialization.from_bytes(
      fx.template(name), fx.checkpoint_bytes(name)))


@functools.lru_cache(maxsize=None)
def _legacy_continuation(name):
  """The legacy Optimizer restored from fixture ``name``, then continued."""
  return _continue_legacy(name, _restored(name))


def _digest(path: pathlib.Path):
  files = sorted(p for p in path.rglob('*')) if path.is_dir() else [path]
  return [(str(p), p.stat().st_mtime_ns,
           hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else '')
          for p in files]


# ------------------------------------------------------------- restoring


@pytest.mark.parametrize('name', fx.CASES)
def test_fixture_restores_bit_exactly_through_from_bytes(name):
  data = fx.checkpoint_bytes(name)
  restored = serialization.from_bytes(fx.template(name), data)
  fx.assert_identical(serialization.msgpack_restore(data),
                      serialization.to_state_dict(restored))
  # Re-serializing gives the file back, byte for byte.
  assert serialization.to_bytes(restored) == data


@pytest.mark.parametrize('name', fx.CASES)
def test_fixture_restores_through_restore_checkpoint(name):
  directory = fx.checkpoint_path(name).parent
  restored = flax_checkpoints.restore_checkpoint(
      str(directory), target=fx.template(name))
  optimizer = fx.optimizer_in(name, restored)
  assert isinstance(optimizer, legacy_optim.Optimizer)
  assert int(optimizer.state.step) == fx.case(name)['step']
  fx.assert_identical(
      serialization.msgpack_restore(fx.checkpoint_bytes(name)),
      serialization.to_state_dict(restored))


def _abs_tree(tree):
  return jax.tree_util.tree_map(lambda x: np.abs(np.asarray(x, np.float64)),
                                tree)


def _assert_identical_up_to_float16(expected, found, what, magnitudes,
                                    steps):
  """``fx.assert_identical``, except that where this machine's XLA fuses
  float16 arithmetic (``_float16_isa``), float16 leaves may differ by
  ``float16_slack(magnitudes, steps)`` (``magnitudes``: a tree like
  ``expected``) instead of not at all."""
  if not _float16_isa.native_float16():
    fx.assert_identical(expected, found, what)
    return
  # Either side may hold NumPy or jax arrays (the oracle's file, our state
  # dict): a float16 leaf is anything whose dtype is float16.
  is_half = lambda x: getattr(x, 'dtype', None) == np.float16
  others = lambda tree: jax.tree_util.tree_map(
      lambda x: None if is_half(x) else x, tree, is_leaf=is_half)
  fx.assert_identical(others(expected), others(found), what)
  flat_found = dict(jax.tree_util.tree_flatten_with_path(found)[0])
  flat_magnitudes = dict(jax.tree_util.tree_flatten_with_path(magnitudes)[0])
  for path, e in jax.tree_util.tree_flatten_with_path(expected)[0]:
    if not is_half(e):
      continue
    e64, g64 = np.asarray(e, np.float64), np.asarray(flat_found[path],
                                                     np.float64)
    slack = _float16_isa.float16_slack(flat_magnitudes[path], steps)
    assert np.array_equal(np.isfinite(e64), np.isfinite(g64)) and np.all(
        np.abs(g64 - e64)[np.isfinite(e64)] <= slack[np.isfinite(e64)]), (
            f'{what}{jax.tree_util.keystr(path)}: expected {e!r}, found '
            f'{flat_found[path]!r} (float16 computed natively here: allowed '
            f'{slack.max():.3g} for {steps} step(s))')


# Both branches of _assert_identical_up_to_float16 on every machine: which one
# the checkpoint tests take depends on the CPU (_float16_isa), so each is
# driven here with the predicate set and synthetic trees. As in the real
# comparison, the expected side holds NumPy arrays (the oracle's file) and the
# found side jax Arrays (a state dict of ours).


def _float16_trees(half_found):
  """(expected, found, magnitudes): a float16 leaf 'h' whose found value is
  ``half_found``, and an identical float32 leaf 'f'."""
  expected = {'h': np.asarray([1.5, -0.25], np.float16),
              'f': np.asarray([0.1, 2.0], np.float32)}
  found = {'h': jnp.asarray(half_found, jnp.float16),
           'f': jnp.asarray(expected['f'])}
  return expected, found, _abs_tree(expected)


def _ulps_up(value, n):
  for _ in range(n):
    value = np.nextafter(value, np.float16(np.inf))
  return value


@pytest.mark.parametrize('native', [False, True], ids=['per_op', 'fused'])
def test_float16_comparison_passes_identical_trees(monkeypatch, native):
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: native)
  expected, found, magnitudes = _float16_trees([1.5, -0.25])
  _assert_identical_up_to_float16(expected, found, 'tree', magnitudes, 1)


def test_float16_comparison_per_op_demands_the_same_bits(monkeypatch):
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: False)
  expected, found, magnitudes = _float16_trees(
      [_ulps_up(np.float16(1.5), 1), -0.25])
  with pytest.raises(AssertionError, match=r"tree\['h'\]"):
    _assert_identical_up_to_float16(expected, found, 'tree', magnitudes, 1)


def test_float16_comparison_fused_allows_one_rounding_per_step(monkeypatch):
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: True)
  one_ulp, two_ulps = (_ulps_up(np.float16(1.5), n) for n in (1, 2))
  expected, found, magnitudes = _float16_trees([one_ulp, -0.25])
  _assert_identical_up_to_float16(expected, found, 'tree', magnitudes, 1)
  expected, found, magnitudes = _float16_trees([two_ulps, -0.25])
  _assert_identical_up_to_float16(expected, found, 'tree', magnitudes, 2)
  with pytest.raises(AssertionError, match=r"tree\['h'\].*1 step"):
    _assert_identical_up_to_float16(expected, found, 'tree', magnitudes, 1)


@pytest.mark.parametrize('native', [False, True], ids=['per_op', 'fused'])
@pytest.mark.parametrize('change', ['float32 bits', 'float16 nan', 'dtype'])
def test_float16_comparison_fails_whatever_the_isa(monkeypatch, native,
                                                    change):
  """What fused float16 arithmetic cannot explain fails on both branches:
  another float32 value, a nan where flax 0.5.3 had a number, a leaf that
  is float32 where flax 0.5.3's was float16."""
  monkeypatch.setattr(_float16_isa, 'native_float16', lambda: native)
  expected, found, magnitudes = _float16_trees([1.5, -0.25])
  if change == 'float32 bits':
    found['f'] = jnp.asarray([0.1, 2.5], jnp.float32)
  elif change == 'float16 nan':
    found['h'] = jnp.asarray([np.nan, -0.25], jnp.float16)
  else:
    found['h'] = jnp.asarray([1.5, -0.25], jnp.float32)
  with pytest.raises(AssertionError):
    _assert_identical_up_to_float16(expected, found, 'tree', magnitudes, 1)


@pytest.mark.parametrize('name', fx.CASES)
def test_training_continues_like_flax_0_5_3(name):
  oracle = fx.continuation(name)
  optimizer, targets = _legacy_continuation(name)
  start = serialization.msgpack_restore(fx.checkpoint_bytes(name))
  for key in fx.optimizer_path(name):
    start = start[key]
  # The largest magnitude each element had so far: |lr * g| of a step is at
  # most |p_before| + |p_after|, so one rounding of it per step bounds what
  # fused float16 arithmetic can change (see _float16_isa).
  magnitudes = _abs_tree(start['target'])
  for k, (ours, theirs) in enumerate(zip(targets, oracle['targets'])):
    ours = serialization.to_state_dict(ours)
    if fx.is_bitwise(name):
      magnitudes = jax.tree_util.tree_map(np.maximum, magnitudes,
                                          _abs_tree(theirs))
      _assert_identical_up_to_float16(
          theirs, ours, f'target after step {k + 1}', magnitudes, k + 1)
    else:
      ulps = fx.max_ulp_error(theirs, ours)
      assert ulps <= fx.ulp_bound(name), (
          f'{name}: after step {k + 1} an element is {ulps} ulp from flax '
          f'0.5.3 (bound {fx.ulp_bound(name)}: 1.5x what flax 0.5.3\'s own '
          'rules reach on today\'s JAX)')
  final = oracle['final']
  for key in fx.optimizer_path(name):
    final = final[key]
  assert int(optimizer.state.step) == int(final['state']['step'])
  if fx.is_bitwise(name):
    _assert_identical_up_to_float16(
        final, serialization.to_state_dict(optimizer), 'final state dict',
        {'target': magnitudes, 'state': _abs_tree(final['state'])},
        len(targets))


# ----------------------------------------------------- template-free read


@pytest.mark.parametrize('name', fx.CASES)
def test_load_legacy_checkpoint_reports_what_the_file_holds(name):
  ckpt = compat.load_legacy_checkpoint(fx.checkpoint_path(name).parent)
  fx.assert_identical(serialization.msgpack_restore(fx.checkpoint_bytes(name)),
                      ckpt.state_dict)
  assert ckpt.step == fx.case(name)['step']
  assert ckpt.optimizer_path == fx.optimizer_path(name)
  assert ckpt.num_params == len(fx.case(name)['layout'])
  assert ckpt.nbytes == fx.case(name)['bytes']
  algorithms = set(fx.spec(name).algorithms())
  if 'MultiOptimizer' in algorithms:
    assert ckpt.algorithms == ('MultiOptimizer',)
    assert None in ckpt.leaf_fields.values()  # The unmatched leaf.
  elif 'WeightNorm' in algorithms:
    assert ckpt.algorithms == ('WeightNorm',)
  else:
    (algorithm,) = algorithms
    assert algorithm in ckpt.algorithms
    for fields in ckpt.leaf_fields.values():
      assert set(fields) == set(catalogue.BY_NAME[algorithm].state_fields)


INFERRED = {
    'sgd': 'GradientDescent()',
    'sgd_mixed_dtypes': 'GradientDescent()',
    'adadelta': 'Adadelta()',
    # Written with min_dim_size_to_factor=2; every value from 2 to 3 gives
    # these params the same layout, and inference names the largest.
    'adafactor_factored': 'Adafactor(min_dim_size_to_factor=3)',
    'adafactor_unfactored': 'Adafactor(beta1=0.9)',
    'adagrad': 'Adagrad()',
    'rmsprop': 'RMSProp(centered=False)',
    'rmsprop_centered': 'RMSProp(centered=True)',
}


@pytest.mark.parametrize('name', fx.CASES)
def test_inferred_spec_has_the_checkpoints_layout(name):
  ckpt = compat.load_legacy_checkpoint(fx.checkpoint_path(name))
  assert ckpt.spec == INFERRED.get(name)
  if ckpt.spec is None:
    with pytest.raises(ValueError, match='Cannot infer the optimizer'):
      ckpt.optimizer()
    return
  optimizer = ckpt.optimizer()  # Restores through the validating template.
  fx.assert_identical(ckpt.optimizer_state_dict,
                      serialization.to_state_dict(optimizer))


def test_adafactor_factored_without_factored_leaves_is_inferred_unfactored():
  ckpt = compat.load_legacy_checkpoint(
      fx.checkpoint_path('adafactor_unfactored'))
  # No leaf is factored and none reaches the default min_dim_size (128).
  assert 'factored' not in ckpt.spec


# ------------------------------------------------------------ validation


def _mutated(name, mutate):
  state_dict = serialization.msgpack_restore(fx.checkpoint_bytes(name))
  mutate(state_dict)
  return serialization.msgpack_serialize(state_dict, in_place=True)


def _embedding_state(state_dict):
  return state_dict['state']['param_states']['embed']['embedding']


MUTATIONS = {
    'transposed kernel': (
        lambda sd: sd['target']['dense'].__setitem__(
            'kernel', sd['target']['dense']['kernel'].T.copy()),
        ['target/dense/kernel: expected float32[3, 4], found float32[4, 3]']),
    # Precision may differ (flax 0.5.3 restored float64 NumPy state); the
    # kind of number may not.
    'integer state': (
        lambda sd: _embedding_state(sd).__setitem__(
            'momentum', _embedding_state(sd)['momentum'].astype(np.int32)),
        ['state/param_states/embed/embedding/momentum: expected float32[5, 3], '
         'found int32[5, 3]']),
    'missing and extra entries': (
        lambda sd: sd['state']['param_states']['dense'].update(
            bias=None, extra=np.zeros(2, np.float32)),
        ['state/param_states/dense/bias: expected a dict with keys {momentum}, '
         'found None', 'state/param_states/dense/extra: expected no entry, '
         'found float32[2]']),
    'negative step': (
        lambda sd: sd['state'].__setitem__('step', np.asarray(-2, np.int32)),
        ['state/step: expected a non-negative step, found -2']),
    'two differences at once': (
        lambda sd: (sd['target']['embed'].__setitem__(
            'embedding', np.zeros((5, 4), np.float32)), sd['state'].__setitem__(
                'step', np.asarray(3, np.float32))),
        ['target/embed/embedding: expected float32[5, 3], found float32[5, 4]',
         'state/step: expected int32[], found float32[]']),
}


@pytest.mark.parametrize('mutation', sorted(MUTATIONS))
def test_mismatched_checkpoint_names_every_differing_path(mutation):
  mutate, expected_lines = MUTATIONS[mutation]
  data = _mutated('momentum', mutate)
  with pytest.raises(_restore.RestoreMismatchError) as info:
    serialization.from_bytes(fx.template('momentum'), data)
  message = str(info.value)
  for line in expected_lines:
    assert line in message
  assert len(info.value.differences) == len(expected_lines)


def test_restoring_into_another_algorithm_says_which_one_wrote_it():
  params = fx.zero_params('adagrad')
  template = legacy_optim.Momentum(0.1).create(params)
  with pytest.raises(_restore.RestoreMismatchError,
                     match=r'written by Adagrad, not by Momentum'):
    serialization.from_bytes(template, fx.checkpoint_bytes('adagrad'))


def test_restoring_into_another_model_through_restore_checkpoint_fails():
  params = jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape[::-1]),
                                  fx.zero_params('sgd'))
  template = legacy_optim.GradientDescent(0.1).create(params)
  with pytest.raises(ValueError, match='target/dense/kernel: expected '
                     r'float32\[4, 3\], found float32\[3, 4\]'):
    flax_checkpoints.restore_checkpoint(
        str(fx.checkpoint_path('sgd').parent), target=template)


def test_the_documented_way_to_restore_into_a_changed_model():
  # Read the raw dict, edit it, restore: the escape hatch for deliberate
  # changes (here: a wider embedding, zero-padded) instead of strict=False.
  ckpt = compat.load_legacy_checkpoint(fx.checkpoint_path('sgd'))
  state_dict = ckpt.optimizer_state_dict
  wide = np.pad(state_dict['target']['embed']['embedding'], ((0, 0), (0, 1)))
  state_dict['target']['embed']['embedding'] = wide
  params = fx.zero_params('sgd')
  params['embed']['embedding'] = jnp.zeros((5, 4))
  template = legacy_optim.GradientDescent(0.1).create(params)
  restored = serialization.from_state_dict(template, state_dict)
  np.testing.assert_array_equal(restored.target['embed']['embedding'], wide)




# ------------------------------------------------------------ conversion


def _modern_params(name):
  return jax.tree_util.tree_map(jnp.asarray,
                                core.unfreeze(fx.zero_params(name)))


def _restore_modern(name, to, directory):
  """Restores a converted checkpoint the way modern code does: from a
  template built without looking at the checkpoint. Returns (restored tree,
  a function running one jitted training step on it)."""
  params = _modern_params(name)
  checkpointer = ocp.StandardCheckpointer()
  if to == 'train_state':
    abstract = train_state.TrainState.create(
        apply_fn=None, params=params, tx=fx.optimizer_def(name).to_optax())
    state = checkpointer.restore(directory / 'state', abstract)
    step = jax.jit(lambda s, g: s.apply_gradients(grads=g))

    def run(grads):
      nonlocal state
      state = step(state, fx.like(state.params, grads))
      return state.params

    return state, run
  if to == 'optax':
    tx = fx.optimizer_def(name).to_optax()
    restored = checkpointer.restore(
        directory / 'state', {'params': params, 'opt_state': tx.init(params)})

    @jax.jit
    def optax_step(params, opt_state, grads):
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    state = dict(restored)

    def run(grads):
      state['params'], state['opt_state'] = optax_step(
          state['params'], state['opt_state'], fx.like(state['params'], grads))
      return state['params']

    return restored, run
  model = fx.nnx_model(name)
  optimizer = compat.to_nnx_optimizer(
      fx.optimizer_def(name).create(params), model)
  restored = checkpointer.restore(
      directory / 'state',
      {'model': nnx.state(model), 'optimizer': nnx.state(optimizer)})
  nnx.update(model, restored['model'])
  nnx.update(optimizer, restored['optimizer'])

  @nnx.jit
  def nnx_step(model, optimizer, grads):
    optimizer.update(model, grads)

  def run(grads):
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, grads)
    nnx_step(model, optimizer, state)
    return nnx.state(model, nnx.Param).to_pure_dict()

  return {'model': nnx.state(model).to_pure_dict(),
          'optimizer': nnx.state(optimizer).to_pure_dict()}, run


def _bridged(name, to):
  """What the in-memory bridges make of the legacy Optimizer (expected)."""
  legacy = _restored(name)
  if to == 'train_state':
    return compat.to_train_state(legacy, apply_fn=None)
  if to == 'optax':
    return {'params': legacy.target, 'opt_state': compat.to_optax(legacy)[1]}
  model = fx.nnx_model(name)
  optimizer = compat.to_nnx_optimizer(legacy, model)
  return {'model': nnx.state(model).to_pure_dict(),
          'optimizer': nnx.state(optimizer).to_pure_dict()}


def _convert(name, to, tmp_path):
  dst = tmp_path / 'converted'
  report = compat.convert_checkpoint(fx.checkpoint_path(name), dst, to,
                                     optimizer=fx.case(name)['spec'])
  assert (report.to, report.step, report.num_params, report.bytes_read) == (
      to, fx.case(name)['step'], len(fx.case(name)['layout']),
      fx.case(name)['bytes'])
  return dst


# The nnx target needs the nnx bridge (compat.bridges.nnx.NNX_MIN_FLAX).
MODERN_TARGETS = [pytest.param(to, marks=pytest.mark.nnx) if to == 'nnx'
                  else to for to in checkpoints.MODERN]


@pytest.mark.parametrize('to', MODERN_TARGETS)
@pytest.mark.parametrize('name', fx.CASES)
def test_convert_restores_exact_state_and_converts_back(name, to, tmp_path):
  before = _digest(fx.checkpoint_path(name).parent)
  dst = _convert(name, to, tmp_path)
  restored, _ = _restore_modern(name, to, dst)
  expected = serialization.to_state_dict(_bridged(name, to))
  restored = serialization.to_state_dict(restored)
  if to == 'train_state':
    # TrainState.create's template step is a Python int: it restores as one.
    assert int(restored.pop('step')) == int(expected.pop('step'))
  fx.assert_identical(expected, restored, f'{to} state')
  back = tmp_path / 'back'
  compat.convert_checkpoint(dst, back, 'legacy')
  # legacy -> modern -> legacy gives the original file, byte for byte.
  assert back.read_bytes() == fx.checkpoint_bytes(name)
  assert _digest(fx.checkpoint_path(name).parent) == before  # Untouched.


def _check_continuation(name, to, tmp_path):
  dst = _convert(name, to, tmp_path)
  _, run = _restore_modern(name, to, dst)
  _, expected = _legacy_continuation(name)
  for k, (grads, want) in enumerate(zip(fx.continuation(name)['grads'],
                                        expected)):
    fx.assert_identical(serialization.to_state_dict(want),
                        serialization.to_state_dict(run(grads)),
                        f'{name} via {to}, step {k + 1}')


# A sample that touches every layout feature (dtypes, None states, nested
# inner states, containers) in the default run; all of them under -m slow.
CONTINUATION_SAMPLE = [
    pytest.param('sgd_mixed_dtypes', 'nnx', marks=pytest.mark.nnx),
    ('multi', 'train_state'),
    pytest.param('weight_norm_adam', 'nnx', marks=pytest.mark.nnx),
    ('adafactor_factored', 'optax'), ('train_state', 'train_state')]


@pytest.mark.parametrize('name,to', CONTINUATION_SAMPLE)
def test_converted_checkpoint_continues_bit_identically(name, to, tmp_path):
  _check_continuation(name, to, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize('to', MODERN_TARGETS)
@pytest.mark.parametrize('name', fx.CASES)
def test_every_converted_checkpoint_continues_bit_identically(
    name, to, tmp_path):
  _check_continuation(name, to, tmp_path)


# ----------------------------------------- modern -> legacy, checked by 0.5.3


def _user_train_state_to_legacy(name, tmp_path) -> pathlib.Path:
  """fixture -> TrainState -> 3 jitted modern steps -> the user's own Orbax
  TrainState checkpoint (no conversion record) -> ``--to legacy``."""
  dst = _convert(name, 'train_state', tmp_path)
  abstract = train_state.TrainState.create(
      apply_fn=None, params=_modern_params(name),
      tx=fx.optimizer_def(name).to_optax())
  state = ocp.StandardCheckpointer().restore(dst / 'state', abstract)
  step = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  for grads in fx.continuation(name)['grads']:
    state = step(state, fx.like(state.params, grads))
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(tmp_path / 'user_checkpoint', state)
  checkpointer.wait_until_finished()
  legacy = tmp_path / 'legacy'
  assert checkpoints.main([
      str(tmp_path / 'user_checkpoint'), str(legacy), '--to', 'legacy',
      '--optimizer', fx.case(name)['spec']]) == 0
  # Our own reading of the file agrees with the modern state it came from.
  restored = serialization.from_bytes(fx.template_optimizer(name),
                                      legacy.read_bytes())
  assert int(restored.state.step) == int(state.step) == 6
  fx.assert_identical(
      serialization.to_state_dict(state.opt_state),
      serialization.to_state_dict(compat.to_optax(restored)[1]))
  fx.assert_identical(serialization.to_state_dict(state.params),
                      serialization.to_state_dict(restored.target))
  return legacy


def _check_with_flax_0_5_3(names, tmp_path):
  _oracle.require()
  files = [f'{name}={_user_train_state_to_legacy(name, tmp_path / name)}'
           for name in names]
  script = pathlib.Path(fx.HERE) / 'oracle_restore.py'
  out = subprocess.run([ORACLE_PYTHON, str(script)] + files, check=True,
                       capture_output=True, text=True, timeout=600)
  problems = json.loads(out.stdout.strip().splitlines()[-1])
  assert problems == {name: [] for name in names}


def test_flax_0_5_3_restores_files_converted_from_a_train_state(tmp_path):
  _check_with_flax_0_5_3(['multi', 'weight_norm_adam'], tmp_path)


@pytest.mark.slow
def test_flax_0_5_3_restores_every_algorithm_converted_back(tmp_path):
  _check_with_flax_0_5_3(fx.BARE_CASES, tmp_path)


# ------------------------------------------- CLI, safety of the destination


@pytest.mark.nnx
def test_cli_prints_what_it_converted(tmp_path, capsys):
  dst = tmp_path / 'out'
  assert checkpoints.main([str(fx.checkpoint_path('sgd').parent), str(dst),
                           '--to', 'nnx']) == 0
  out = capsys.readouterr().out
  assert 'optimizer GradientDescent() [inferred]' in out
  assert 'step 3, 3 params (31 values)' in out
  assert f'read {fx.case("sgd")["bytes"]} bytes' in out
  assert f'wrote {checkpoints.disk_size(dst)} bytes' in out


def _sgd_with_nonfinite(tmp_path) -> pathlib.Path:
  """The sgd fixture with two NaNs and an Inf written into its params."""
  state_dict = serialization.msgpack_restore(fx.checkpoint_bytes('sgd'))
  params = state_dict['target']
  params['dense']['kernel'] = params['dense']['kernel'].copy()
  params['dense']['kernel'][0, :2] = np.nan
  params['embed']['embedding'] = params['embed']['embedding'].copy()
  params['embed']['embedding'][4, 2] = -np.inf
  path = tmp_path / 'checkpoint_3'
  path.write_bytes(serialization.msgpack_serialize(state_dict, in_place=True))
  return path


def test_convert_warns_naming_the_leaves_with_nan_or_inf(tmp_path):
  src = _sgd_with_nonfinite(tmp_path)
  with pytest.warns(checkpoints.NonFiniteStateWarning) as caught:
    checkpoints.convert_checkpoint(src, tmp_path / 'out', 'optax')
  message = str(caught[0].message)
  assert '3 NaN or Inf value(s) in 2 leaf(s)' in message, message
  assert '/target/dense/kernel (2), /target/embed/embedding (1)' in message
  assert (tmp_path / 'out').is_dir()  # converted as it is
  with pytest.warns(checkpoints.NonFiniteStateWarning, match=(
      '/target/dense/kernel')):  # and back
    checkpoints.convert_checkpoint(tmp_path / 'out', tmp_path / 'back',
                                   'legacy')


def test_cli_convert_says_on_stderr_which_leaves_hold_nan_or_inf(tmp_path,
                                                                 capsys):
  src = _sgd_with_nonfinite(tmp_path)
  assert checkpoints.main([str(src), str(tmp_path / 'out'), '--to',
                           'optax']) == 0
  err = capsys.readouterr().err
  assert err.startswith('warning: ') and '/target/dense/kernel (2)' in err, (
      err)


def test_a_finite_checkpoint_converts_without_that_warning(tmp_path):
  with warnings.catch_warnings():
    warnings.simplefilter('error', checkpoints.NonFiniteStateWarning)
    checkpoints.convert_checkpoint(fx.checkpoint_path('sgd'),
                                   tmp_path / 'out', 'optax')


def test_cli_info_lists_state_fields_and_candidates(capsys):
  assert checkpoints.main(['--info', str(fx.checkpoint_path('multi'))]) == 0
  out = capsys.readouterr().out
  assert "dense/kernel: ['momentum'] (LARS, Momentum)" in out
  assert 'embed/embedding: None (not optimized)' in out
  assert 'ambiguous: pass --optimizer' in out


def test_cli_ambiguous_algorithm_asks_for_the_optimizer(tmp_path, capsys):
  dst = tmp_path / 'out'
  assert checkpoints.main([str(fx.checkpoint_path('adam')), str(dst)]) == 1
  err = capsys.readouterr().err
  assert 'Cannot infer the optimizer' in err
  assert 'AdaBelief, Adam, LAMB' in err and '--optimizer' in err
  assert not dst.exists()


def test_cli_plain_spec_for_a_partially_optimized_checkpoint(tmp_path):
  # A plain spec is wrapped in a MultiOptimizer owning the params with state
  # (what create(target, focus=...) built); the frozen leaf stays frozen.
  ckpt = compat.load_legacy_checkpoint(fx.checkpoint_path('multi'))
  with pytest.raises(_restore.RestoreMismatchError):
    ckpt.optimizer('Momentum(0.1)')  # Wrong for the Adam-owned bias.
  opt_def = ckpt.optimizer_def(
      "MultiOptimizer(('kernel', Momentum(0.1)), ('bias', Adam(0.1)))")
  assert isinstance(opt_def, legacy_optim.MultiOptimizer)


def test_existing_destination_is_refused_and_both_stay_untouched(tmp_path):
  src = fx.checkpoint_path('momentum')
  dst = tmp_path / 'out'
  dst.mkdir()
  (dst / 'keep.txt').write_text('precious')
  src_before, dst_before = _digest(src.parent), _digest(dst)
  assert checkpoints.main([str(src), str(dst), '--optimizer',
                           'Momentum(0.1)']) == 1
  with pytest.raises(FileExistsError, match='--force'):
    compat.convert_checkpoint(src, dst, optimizer='Momentum(0.1)')
  assert _digest(src.parent) == src_before
  assert _digest(dst) == dst_before
  assert sorted(p.name for p in tmp_path.iterdir()) == ['out']


def test_force_replaces_the_destination(tmp_path, capsys):
  dst = tmp_path / 'out'
  dst.mkdir()
  (dst / 'old.txt').write_text('old')
  # A directory this tool did not write is never deleted, even with --force.
  assert checkpoints.main([str(fx.checkpoint_path('sgd')), str(dst),
                           '--force']) == 1
  assert 'not a checkpoint flax-optim-compat converted' in (
      capsys.readouterr().err)
  assert (dst / 'old.txt').read_text() == 'old'
  (dst / 'old.txt').unlink()
  dst.rmdir()
  assert checkpoints.main([str(fx.checkpoint_path('adagrad')), str(dst)]) == 0
  assert checkpoints.main([str(fx.checkpoint_path('sgd')), str(dst),
                           '--force']) == 0
  assert (dst / 'state').is_dir()  # sgd's conversion (checked below)
  legacy = tmp_path / 'legacy'
  assert checkpoints.main([str(dst), str(legacy)]) == 0
  assert legacy.read_bytes() == fx.checkpoint_bytes('sgd')
  assert sorted(p.name for p in tmp_path.iterdir()) == ['legacy', 'out']


@pytest.mark.parametrize('to', ['train_state', 'legacy'])
def test_force_never_replaces_a_file_the_tool_did_not_write(
    to, tmp_path, capsys):
  # issue 41, fault 1: --force replaced a user's plain file. A file holds
  # no conversion record, so nothing says this tool wrote it: refused.
  src = (fx.checkpoint_path('sgd') if to == 'train_state' else
         _convert('sgd', 'optax', tmp_path))
  precious = tmp_path / 'precious.txt'
  precious.write_text('mine')
  assert checkpoints.main([str(src), str(precious), '--to', to,
                           '--force']) == 1
  err = capsys.readouterr().err
  assert f'{precious} is a file that is not a checkpoint flax-optim-compat ' \
      'converted' in err
  assert precious.read_text() == 'mine'
  link = tmp_path / 'link'
  link.symlink_to(precious)
  assert checkpoints.main([str(src), str(link), '--to', to, '--force']) == 1
  assert f'{link} is a link' in capsys.readouterr().err
  assert link.is_symlink() and precious.read_text() == 'mine'


def test_source_and_destination_must_not_overlap(tmp_path):
  src = fx.checkpoint_path('sgd')
  with pytest.raises(ValueError, match='never modified'):
    compat.convert_checkpoint(src, src, force=True)
  with pytest.raises(ValueError, match='never modified'):
    compat.convert_checkpoint(src.parent, src.parent / 'x')


def test_legacy_destination_directory_gets_checkpoint_step(tmp_path):
  converted = _convert('sgd', 'optax', tmp_path)
  out_dir = tmp_path / 'legacy_dir'
  out_dir.mkdir()
  compat.convert_checkpoint(converted, out_dir, 'legacy')
  assert (out_dir / 'checkpoint_3').read_bytes() == fx.checkpoint_bytes('sgd')
  # flax's restore_checkpoint finds it there.
  restored = flax_checkpoints.restore_checkpoint(
      str(out_dir), target=fx.template('sgd'))
  assert int(restored.state.step) == 3


class _Interrupted(Exception):
  pass


def _interrupt_after_partial_write(real):
  """Wraps a writer: does part of its work, then fails."""

  def writer(tmp, *args, **kwargs):
    real(tmp, *args, **kwargs)
    for path in sorted(pathlib.Path(tmp).rglob('*')) if pathlib.Path(
        tmp).is_dir() else [pathlib.Path(tmp)]:
      if path.is_file():
        path.write_bytes(path.read_bytes()[:1])  # Truncate what was written.
        break
    raise _Interrupted('simulated crash mid-write')

  return writer


@pytest.mark.parametrize('direction', ['to_orbax', 'to_legacy'])
def test_interrupted_conversion_leaves_no_partial_destination(
    direction, tmp_path, monkeypatch):
  converted = _convert('momentum', 'train_state', tmp_path)
  listing = sorted(p.name for p in tmp_path.iterdir())
  dst = tmp_path / 'dst'
  if direction == 'to_orbax':
    monkeypatch.setattr(
        convert_impl, 'write_modern',
        _interrupt_after_partial_write(convert_impl.write_modern))
    call = lambda: compat.convert_checkpoint(
        fx.checkpoint_path('momentum'), dst, optimizer='Momentum(0.1)')
  else:
    monkeypatch.setattr(_atomic, 'write_bytes',
                        _interrupt_after_partial_write(_atomic.write_bytes))
    call = lambda: compat.convert_checkpoint(converted, dst, 'legacy')
  with pytest.raises(_Interrupted):
    call()
  assert not dst.exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == listing  # No debris.


def test_keyboard_interrupt_during_commit_keeps_the_old_destination(
    tmp_path, monkeypatch):
  dst = tmp_path / 'ours'
  dst.mkdir()
  (dst / 'record').write_bytes(b'old')  # the marker ``ours`` looks for
  real_rename = os.rename

  def interrupted_rename(a, b):
    if pathlib.Path(a).parent.name.startswith('.ours.tmp-'):
      raise KeyboardInterrupt  # the new one, on its way into place
    real_rename(a, b)

  monkeypatch.setattr(os, 'rename', interrupted_rename)
  with pytest.raises(KeyboardInterrupt):
    with _atomic.atomic_destination(
        dst, force=True, ours=lambda p: (p / 'record').exists()) as tmp:
      tmp.mkdir()
      _atomic.write_bytes(tmp / 'record', b'new')
  monkeypatch.setattr(os, 'rename', real_rename)
  assert (dst / 'record').read_bytes() == b'old'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['ours']


def test_progress_bar_reports_phases_and_bytes(tmp_path):
  stream = io.StringIO()
  bar = _atomic.Progress(4 << 20, 'read', enabled=True, stream=stream)
  bar.advance(1 << 20)
  bar.phase('decode', 4 << 20)
  bar.advance(4 << 20)
  bar.close()
  text = stream.getvalue()
  assert 'read' in text and 'decode' in text and '100.0%' in text
  assert '4.0/4.0 MiB' in text
  quiet = io.StringIO()
  silent = _atomic.Progress(1 << 40, 'read', stream=quiet)  # Not a terminal.
  silent.advance(1 << 30)
  silent.close()
  assert quiet.getvalue() == ''


def test_cli_progress_flag_draws_a_bar(tmp_path, capsys):
  assert checkpoints.main([str(fx.checkpoint_path('sgd')), str(tmp_path / 'o'),
                           '--progress']) == 0
  err = capsys.readouterr().err
  assert 'decode' in err and '%' in err


# ------------------------------------------------------------- details


def test_chunked_arrays_are_reassembled():
  # flax splits arrays over 1 GiB into chunks; build that form by hand.
  array = np.arange(10, dtype=np.float32).reshape(2, 5)
  chunked = {'__msgpack_chunked_array__': True, 'shape': {'0': 2, '1': 5},
             'chunks': {'0': array.reshape(-1)[:4], '1': array.reshape(-1)[4:]}}
  data = serialization.msgpack_serialize({'w': chunked}, in_place=True)
  np.testing.assert_array_equal(checkpoints._safe_msgpack.decode(data)['w'],
                                serialization.msgpack_restore(data)['w'])
  chunked['chunks'] = {'0': array.reshape(-1)[:4]}  # A chunk missing.
  data = serialization.msgpack_serialize({'w': chunked}, in_place=True)
  with pytest.raises(ValueError, match='chunks hold 4 values'):
    checkpoints._safe_msgpack.decode(data)


@pytest.mark.parametrize('text,message', [
    ('Adam(learning_rate=__import__("os").getcwd())', 'expected a call'),
    ('Adam(__import__("os"))', "Unknown optimizer '__import__'"),
    ('Adam(lambda: 1)', 'must be literals'),
    ('os.system("x")', 'expected a call'),
    ('Sgd(0.1)', "Unknown optimizer 'Sgd'"),
    ('Adam(**{"learning_rate": 1})', r'\*\*kwargs'),
    ("MultiOptimizer(('[', Adam()))", 'Invalid regex'),
    ('MultiOptimizer(Adam())', r'\(regex, spec\) pair'),
    ('Adam(learning_rate=[1])', 'unsupported argument'),
    ('Adam(', 'Invalid optimizer spec'),
])
def test_specs_are_parsed_never_evaluated(text, message):
  with pytest.raises(ValueError, match=message):
    checkpoints._spec.parse(text)


def test_spec_round_trips_through_its_text():
  spec = checkpoints._spec.parse(
      "MultiOptimizer(('kernel$', WeightNorm(Momentum(0.1, nesterov=True))),"
      " ('bias', Adafactor(beta1=None)))")
  assert checkpoints._spec.parse(str(spec)) == spec
  assert spec.algorithms() == ('MultiOptimizer', 'WeightNorm', 'Momentum',
                               'Adafactor')


def test_non_finite_values_are_reported(tmp_path):
  state_dict = serialization.msgpack_restore(fx.checkpoint_bytes('adagrad'))
  bias = state_dict['state']['param_states']['dense']['bias']
  bias['G'] = np.where(np.arange(4) == 0, np.nan, bias['G']).astype(np.float32)
  path = tmp_path / 'checkpoint_3'
  path.write_bytes(serialization.msgpack_serialize(state_dict, in_place=True))
  ckpt = compat.load_legacy_checkpoint(path)
  assert 'dense/bias: holds non-finite values' in ckpt.notes
