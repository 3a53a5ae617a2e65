"""Every checkpoint route restores exactly or raises naming the paths.

Routes: ``flax.training.checkpoints`` with its default Orbax backend and with
the msgpack backend, ``flax.serialization``, Orbax directly, pickle, and the
strict ``compat.restore_checkpoint``. Orbax fixtures in
tests/checkpoints/orbax_053/ were written by flax 0.5.3's OWN optim classes
on today's flax (``orbax_053/generate.py``); their expected values are
``expected.msgpack``, written by flax 0.5.3's own serialization.
"""

import pathlib
import pickle
import sys
import warnings

import _oracle
import flax
from flax import serialization
from flax.training import checkpoints as flax_checkpoints
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE / 'checkpoints' / 'orbax_053'
sys.path.insert(0, str(HERE / 'checkpoints'))
sys.path.insert(0, str(FIXTURES))
import fixture_lib as fx
import generate as orbax_053

import compat
import legacy_optim
from legacy_optim import deprecation
from legacy_optim._restore import RestoreMismatchError

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

CASES = sorted(orbax_053.CASES)
ORACLE_PYTHON = _oracle.PYTHON


def _template(name, params=None):
  params = orbax_053.params() if params is None else params
  return orbax_053.CASES[name](legacy_optim).create(params)


def _fixture_dir(name) -> pathlib.Path:
  return FIXTURES / name


def _expected(name):
  return serialization.msgpack_restore(
      (FIXTURES / name / 'expected.msgpack').read_bytes())


def _raw_orbax(path):
  """An Orbax checkpoint read by Orbax alone, as numpy, no template."""
  return jax.tree_util.tree_map(
      np.asarray, ocp.PyTreeCheckpointer().restore(pathlib.Path(path)))


def _bfloat16(params):
  return jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)


# -------------------------------------- flax 0.5.3's classes -> the shim


@pytest.mark.parametrize('name', CASES)
def test_flax_restore_checkpoint_of_flax_0_5_3_orbax_is_bit_exact(name):
  restored = flax_checkpoints.restore_checkpoint(
      str(_fixture_dir(name)), target=_template(name))
  assert isinstance(restored, legacy_optim.Optimizer)
  fx.assert_identical(_expected(name), serialization.to_state_dict(restored))


@pytest.mark.parametrize('name', CASES)
def test_compat_restore_checkpoint_of_flax_0_5_3_orbax_is_bit_exact(name):
  restored = compat.restore_checkpoint(_fixture_dir(name), _template(name))
  fx.assert_identical(_expected(name), serialization.to_state_dict(restored))


@pytest.mark.parametrize('name', ['adam', 'multi_adam_on_kernels'])
def test_orbax_standard_checkpointer_restores_flax_0_5_3_bit_exactly(name):
  path = _fixture_dir(name) / f'checkpoint_{orbax_053.STEPS}'
  restored = ocp.StandardCheckpointer().restore(path, _template(name))
  fx.assert_identical(_expected(name), serialization.to_state_dict(restored))


# -------------------------------------- the shim -> flax 0.5.3's classes


@pytest.mark.parametrize('name', CASES)
def test_shim_writes_the_orbax_tree_flax_0_5_3_writes(name, tmp_path):
  """Same key paths, dtypes and bits as the file flax 0.5.3's classes wrote,
  so they restore it by key path exactly as their own."""
  restored = compat.restore_checkpoint(_fixture_dir(name), _template(name))
  flax_checkpoints.save_checkpoint(str(tmp_path), restored, orbax_053.STEPS)
  fx.assert_identical(
      _raw_orbax(_fixture_dir(name) / f'checkpoint_{orbax_053.STEPS}'),
      _raw_orbax(tmp_path / f'checkpoint_{orbax_053.STEPS}'))


def _flax_0_5_3_optim():
  _oracle.require()
  from golden import generate_floor
  with warnings.catch_warnings():  # its __init__ installs an 'always' filter
    return generate_floor.load_legacy_optim(
        generate_floor.oracle_site_packages(ORACLE_PYTHON))


@pytest.mark.parametrize('name', CASES)
def test_flax_0_5_3_classes_restore_shim_orbax_bit_exactly(name, tmp_path):
  sys.path.insert(0, str(HERE))
  optim = _flax_0_5_3_optim()
  shim = orbax_053.trained(legacy_optim, name)
  flax_checkpoints.save_checkpoint(str(tmp_path / 'shim'), shim, 3)
  theirs = flax_checkpoints.restore_checkpoint(
      str(tmp_path / 'shim'),
      target=orbax_053.CASES[name](optim).create(orbax_053.params()))
  assert type(theirs).__module__.startswith('_flax053.')
  fx.assert_identical(serialization.to_state_dict(shim),
                      serialization.to_state_dict(theirs))
  # And back: what flax 0.5.3's classes write now restores into the shim.
  flax_checkpoints.save_checkpoint(str(tmp_path / 'theirs'), theirs, 3)
  ours = flax_checkpoints.restore_checkpoint(str(tmp_path / 'theirs'),
                                             target=_template(name))
  fx.assert_identical(serialization.to_state_dict(theirs),
                      serialization.to_state_dict(ours))


# ------------------------------------------------ flax.optim's own layout


def test_state_dict_saved_through_orbax_keeps_its_moments(tmp_path):
  """save_checkpoint(dir, to_state_dict(optimizer)): the old-layout tree."""
  expected = _expected('adam')
  flax_checkpoints.save_checkpoint(str(tmp_path), expected, 3)
  restored = flax_checkpoints.restore_checkpoint(str(tmp_path),
                                                 target=_template('adam'))
  fx.assert_identical(expected, serialization.to_state_dict(restored))
  moments = restored.state.param_states['dense']['kernel'].grad_sq_ema
  assert np.all(np.asarray(moments) > 0)


@pytest.fixture
def msgpack_backend():
  flax.config.update('flax_use_orbax_checkpointing', False)
  yield
  flax.config.update('flax_use_orbax_checkpointing', True)


def test_msgpack_backend_round_trips_bit_exactly(tmp_path, msgpack_backend):
  del msgpack_backend
  optimizer = compat.restore_checkpoint(_fixture_dir('rmsprop'),
                                        _template('rmsprop'))
  path = flax_checkpoints.save_checkpoint(str(tmp_path), optimizer, 3)
  assert pathlib.Path(path).is_file()  # a msgpack file, not an Orbax dir
  restored = flax_checkpoints.restore_checkpoint(str(tmp_path),
                                                 target=_template('rmsprop'))
  fx.assert_identical(_expected('rmsprop'),
                      serialization.to_state_dict(restored))
  with pytest.raises(RestoreMismatchError,
                     match='state/param_states/dense/kernel/grad_ema'):
    flax_checkpoints.restore_checkpoint(str(tmp_path), target=_template('adam'))


def test_pickle_round_trips_bit_exactly():
  optimizer = compat.restore_checkpoint(_fixture_dir('adam'), _template('adam'))
  restored = pickle.loads(pickle.dumps(optimizer))
  assert restored.optimizer_def.hyper_params == (
      optimizer.optimizer_def.hyper_params)
  fx.assert_identical(_expected('adam'), serialization.to_state_dict(restored))


# ---------------------------------------------------- mismatches raise


def _restore_routes():
  return {
      'flax': lambda path, target: flax_checkpoints.restore_checkpoint(
          str(path), target=target),
      'compat': compat.restore_checkpoint,
  }


@pytest.mark.parametrize('route', sorted(_restore_routes()))
def test_another_algorithm_raises_naming_the_paths(route):
  with pytest.raises(RestoreMismatchError) as raised:
    _restore_routes()[route](_fixture_dir('adam'), _template('momentum'))
  message = str(raised.value)
  for param in ('dense/kernel', 'dense/bias'):
    assert f'state/param_states/{param}/momentum: expected float32' in message
    assert (f'state/param_states/{param}/grad_ema: expected no entry, found '
            'float32') in message
  assert 'written by AdaBelief, Adam or LAMB' in message


@pytest.mark.parametrize('route', sorted(_restore_routes()))
def test_other_dtype_raises_instead_of_casting(route):
  template = _template('adam', _bfloat16(orbax_053.params()))
  with pytest.raises(RestoreMismatchError,
                     match=r'target/dense/kernel: expected bfloat16\[2, 3\], '
                     r'found float32\[2, 3\]'):
    _restore_routes()[route](_fixture_dir('adam'), template)


@pytest.mark.parametrize('route', sorted(_restore_routes()))
def test_other_shape_or_extra_param_raises(route):
  params = {'dense': {'kernel': jnp.zeros((3, 2)), 'bias': jnp.zeros((3,))},
            'extra': {'w': jnp.zeros((4,))}}
  with pytest.raises(RestoreMismatchError) as raised:
    _restore_routes()[route](_fixture_dir('momentum'),
                             _template('momentum', params))
  message = str(raised.value)
  for path in ('target/dense/kernel',
               'state/param_states/dense/kernel/momentum'):
    assert f'{path}: expected float32[3, 2], found float32[2, 3]' in message
  assert 'target/extra: expected a dict with keys {w}, found no entry' in (
      message)
  assert ('state/param_states/extra: expected a dict with keys {w}, found no '
          'entry') in message


def test_optimizer_inside_a_container_names_the_full_path(tmp_path):
  theirs = {'opt': compat.restore_checkpoint(_fixture_dir('adam'),
                                             _template('adam')),
            'epoch': jnp.asarray(7, jnp.int32)}
  flax_checkpoints.save_checkpoint(str(tmp_path), theirs, 3)
  template = {'opt': _template('momentum'), 'epoch': jnp.asarray(0, jnp.int32)}
  for restore in _restore_routes().values():
    with pytest.raises(RestoreMismatchError,
                       match='opt/state/param_states/dense/bias/momentum'):
      restore(tmp_path, template)


def test_flax_restore_checkpoint_of_an_optimizer_warns_naming_compat(tmp_path):
  deprecation.reset()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    flax_checkpoints.restore_checkpoint(str(_fixture_dir('sgd')),
                                        target=_template('sgd'))
  ours = [w for w in caught if 'restore_checkpoint(dir, target=optimizer)'
          in str(w.message)]
  assert len(ours) == 1, [str(w.message) for w in caught]
  assert 'compat.restore_checkpoint(dir, target)' in str(ours[0].message)
  assert ours[0].filename == __file__  # at the caller's line
  del tmp_path


# ------------------------- the column-wise layout of an earlier release


def _column_wise(name):
  """The Orbax tree an earlier flax-optim-compat wrote (``.state.<field>
  [<param path>]``), built by hand from the fixture's expected values."""
  expected = _expected(name)
  param_states = expected['state']['param_states']
  fields = sorted({f for layer in param_states.values()
                   for state in layer.values() if state for f in state})
  columns = {
      field: {layer: {param: None if state is None else state[field]
                      for param, state in params.items()}
              for layer, params in param_states.items()}
      for field in fields}
  return expected, {'target': expected['target'],
                    'state': dict(step=expected['state']['step'], **columns)}


@pytest.mark.parametrize('name', ['adam', 'rmsprop', 'multi_adam_on_kernels'])
def test_column_wise_orbax_checkpoint_is_converted_exactly(name, tmp_path):
  expected, columns = _column_wise(name)
  ocp.PyTreeCheckpointer().save(tmp_path / 'old', columns)
  restored = compat.restore_checkpoint(tmp_path / 'old', _template(name))
  fx.assert_identical(expected, serialization.to_state_dict(restored))


def test_column_wise_checkpoint_through_flax_raises_naming_the_paths(tmp_path):
  _, columns = _column_wise('adam')
  ocp.PyTreeCheckpointer().save(tmp_path / 'old', columns)
  with pytest.raises(RestoreMismatchError) as raised:
    flax_checkpoints.restore_checkpoint(str(tmp_path / 'old'),
                                        target=_template('adam'))
  message = str(raised.value)
  assert ('state/param_states: expected a dict with keys {dense}, found no '
          'entry') in message
  assert 'state/grad_ema: expected no entry, found a dict' in message
  assert 'compat.restore_checkpoint(path, target) converts it' in message


def test_column_wise_state_dict_through_from_state_dict_raises():
  _, columns = _column_wise('adam')
  with pytest.raises(RestoreMismatchError,
                     match=r'(?s)state/grad_sq_ema: expected no entry.*'
                     r'compat.restore_checkpoint\(path, target\) converts it'):
    serialization.from_state_dict(_template('adam'), columns)


def test_column_wise_state_with_a_missing_column_still_raises(tmp_path):
  _, columns = _column_wise('adam')
  del columns['state']['grad_sq_ema']
  ocp.PyTreeCheckpointer().save(tmp_path / 'old', columns)
  with pytest.raises(RestoreMismatchError,
                     match='state/param_states/dense/bias/grad_sq_ema: '
                     'expected float32'):
    compat.restore_checkpoint(tmp_path / 'old', _template('adam'))
