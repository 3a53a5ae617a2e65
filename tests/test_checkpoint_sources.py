"""Every checkpoint the old code wrote converts: Orbax directories written by
``flax.training.checkpoints.save_checkpoint`` on today's flax (bare
Optimizer or a container, flax.optim's per-leaf layout or the column-wise one
of an earlier release), ``orbax.checkpoint.CheckpointManager`` trees,
params-only export, ``path_map`` for every target, and ``--stock``."""

import os
import pathlib
import subprocess
import sys

from flax import serialization
from flax.training import checkpoints as flax_checkpoints
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import compat
from compat.checkpoints import api as checkpoints
import legacy_optim

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')
ROOT = pathlib.Path(__file__).resolve().parent.parent

PARAMS = {'dense': {'kernel': jnp.arange(6.0).reshape(2, 3) / 7,
                    'bias': jnp.asarray([0.5, -0.5, 1.0])}}
GRADS = jax.tree_util.tree_map(lambda p: jnp.sin(p) + 0.1, PARAMS)
ADAM = 'Adam(learning_rate=1e-3)'


@pytest.fixture(name='optimizer', scope='module')
def _optimizer():
  optimizer = legacy_optim.Adam(1e-3).create(PARAMS)
  for _ in range(2):
    optimizer = optimizer.apply_gradient(GRADS)
  return optimizer


def _restore_train_state(path, tx):
  abstract = train_state.TrainState.create(apply_fn=None, params=PARAMS,
                                           tx=tx)
  return ocp.StandardCheckpointer().restore((path / 'state').absolute(),
                                            abstract)


def _assert_trees_equal(a, b):
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_orbax_save_checkpoint_of_an_optimizer_converts(optimizer, tmp_path):
  flax_checkpoints.save_checkpoint(tmp_path / 'ckpts', optimizer, step=2)
  info = compat.load_legacy_checkpoint(tmp_path / 'ckpts')
  assert info.step == 2 and 'Adam' in info.algorithms
  assert checkpoints.main([str(tmp_path / 'ckpts'), '--info']) == 0
  report = compat.convert_checkpoint(tmp_path / 'ckpts', tmp_path / 'out',
                                     optimizer=ADAM)
  assert report.step == 2
  state = _restore_train_state(tmp_path / 'out',
                               legacy_optim.Adam(1e-3).to_optax())
  _assert_trees_equal(state.opt_state, compat.to_optax(optimizer)[1])
  _assert_trees_equal(state.params, optimizer.target)
  # And back: flax.optim's own layout again.
  compat.convert_checkpoint(tmp_path / 'out', tmp_path / 'back.msgpack',
                            to='legacy')
  _assert_trees_equal(
      serialization.msgpack_restore((tmp_path / 'back.msgpack').read_bytes()),
      serialization.to_state_dict(jax.device_get(optimizer)))


def test_a_container_keeps_its_other_entries(optimizer, tmp_path):
  ema = jax.tree_util.tree_map(lambda p: p * 0.5, PARAMS)
  flax_checkpoints.save_checkpoint(tmp_path / 'ckpts',
                                   {'optimizer': optimizer, 'ema': ema}, step=2)
  compat.convert_checkpoint(tmp_path / 'ckpts', tmp_path / 'out',
                            to='optax', optimizer=ADAM)
  compat.convert_checkpoint(tmp_path / 'out', tmp_path / 'back.msgpack',
                            to='legacy')
  back = serialization.msgpack_restore(
      (tmp_path / 'back.msgpack').read_bytes())
  _assert_trees_equal(back['ema'], ema)
  _assert_trees_equal(back['optimizer'],
                      serialization.to_state_dict(jax.device_get(optimizer)))


def test_the_column_wise_layout_of_an_earlier_release_converts(optimizer,
                                                               tmp_path):
  state_dict = serialization.to_state_dict(jax.device_get(optimizer))
  states = state_dict['state']['param_states']['dense']
  columns = {'target': state_dict['target'], 'state': {
      'step': state_dict['state']['step'],
      **{field: {'dense': {k: v[field] for k, v in states.items()}}
         for field in ('grad_ema', 'grad_sq_ema')}}}
  ocp.PyTreeCheckpointer().save((tmp_path / 'old').absolute(), columns)
  compat.convert_checkpoint(tmp_path / 'old', tmp_path / 'out',
                            optimizer=ADAM)
  state = _restore_train_state(tmp_path / 'out',
                               legacy_optim.Adam(1e-3).to_optax())
  _assert_trees_equal(state.opt_state, compat.to_optax(optimizer)[1])


def _manager_tree(optimizer, root):
  manager = ocp.CheckpointManager(root.absolute())
  for step in (1, 2):
    opt = optimizer.replace(state=optimizer.state.replace(step=step))
    manager.save(step, args=ocp.args.StandardSave(
        serialization.to_state_dict(opt)))
  manager.wait_until_finished()
  manager.close()


def test_a_checkpoint_manager_tree_converts_keeping_step_numbers(optimizer,
                                                                 tmp_path):
  _manager_tree(optimizer, tmp_path / 'mgr')
  report = compat.convert_checkpoint(tmp_path / 'mgr', tmp_path / 'out',
                                     optimizer=ADAM)
  assert report.steps == (1, 2)
  assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['1', '2']
  for step in (1, 2):
    state = _restore_train_state(tmp_path / 'out' / str(step),
                                 legacy_optim.Adam(1e-3).to_optax())
    assert int(state.step) == step
  # A single step of the tree is named explicitly, not guessed.
  with pytest.raises(ValueError, match='CheckpointManager directory'):
    compat.load_legacy_checkpoint(tmp_path / 'mgr')
  # --force replaces a converted tree (this tool wrote it).
  compat.convert_checkpoint(tmp_path / 'mgr', tmp_path / 'out',
                            optimizer=ADAM, force=True)


def test_cli_on_a_manager_tree_prints_no_absl_noise(optimizer, tmp_path):
  _manager_tree(optimizer, tmp_path / 'mgr')
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  result = subprocess.run(
      [sys.executable, '-m', 'compat', 'convert', str(tmp_path / 'mgr'),
       str(tmp_path / 'out'), '--optimizer', ADAM, '--stock'],
      capture_output=True, text=True, env=env, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stderr == ''
  assert 'Steps: 1, 2' in result.stdout and 'optax.adam(' in result.stdout


def test_params_only_export(optimizer, tmp_path):
  flax_checkpoints.save_checkpoint(tmp_path / 'ckpts', optimizer, step=2)
  compat.convert_checkpoint(tmp_path / 'ckpts', tmp_path / 'out', to='params',
                            optimizer=ADAM)
  params = ocp.StandardCheckpointer().restore(
      (tmp_path / 'out' / 'state').absolute(), PARAMS)
  _assert_trees_equal(params, optimizer.target)
  with pytest.raises(ValueError, match='params only'):
    compat.convert_checkpoint(tmp_path / 'out', tmp_path / 'x', to='legacy')


@pytest.mark.parametrize('to', ['train_state', 'optax'])
def test_path_map_renames_for_every_target(optimizer, tmp_path, to):
  (tmp_path / 'checkpoint_2').write_bytes(serialization.to_bytes(optimizer))
  compat.convert_checkpoint(tmp_path / 'checkpoint_2', tmp_path / 'out', to=to,
                            optimizer=ADAM, path_map={'dense': 'Dense_0'})
  restored = ocp.StandardCheckpointer().restore(
      (tmp_path / 'out' / 'state').absolute())
  assert set(restored['params']) == {'Dense_0'}
  np.testing.assert_array_equal(restored['params']['Dense_0']['kernel'],
                                optimizer.target['dense']['kernel'])
  with pytest.raises(ValueError, match="'nowhere' matches no legacy param"):
    compat.convert_checkpoint(tmp_path / 'checkpoint_2', tmp_path / 'out2',
                              to=to, optimizer=ADAM,
                              path_map={'nowhere': 'x'})


def test_stock_conversion_restores_into_the_stock_template(optimizer,
                                                           tmp_path):
  (tmp_path / 'checkpoint_2').write_bytes(serialization.to_bytes(optimizer))
  report = compat.convert_checkpoint(tmp_path / 'checkpoint_2',
                                     tmp_path / 'out', optimizer=ADAM,
                                     stock=True)
  assert report.stock.parts[0].variant == 'adam'
  assert '3.6e-07' in str(report)
  state = _restore_train_state(tmp_path / 'out', optax.adam(1e-3))
  assert int(state.step) == 2
  _assert_trees_equal(state.opt_state[0].mu, jax.tree_util.tree_map(
      lambda s: s.grad_ema, optimizer.state.param_states,
      is_leaf=lambda x: hasattr(x, 'grad_ema')))
  with pytest.raises(ValueError, match='stock Optax state'):
    compat.convert_checkpoint(tmp_path / 'out', tmp_path / 'x', to='legacy')
  with pytest.raises(ValueError, match='writes optax or train_state'):
    compat.convert_checkpoint(tmp_path / 'checkpoint_2', tmp_path / 'y',
                              to='nnx', optimizer=ADAM, stock=True)


def test_errors_name_the_path(tmp_path):
  (tmp_path / 'empty').mkdir()
  with pytest.raises(FileNotFoundError, match=str(tmp_path / 'empty')):
    compat.load_legacy_checkpoint(tmp_path / 'empty')
