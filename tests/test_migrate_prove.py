"""``migrate --prove CMD``: the user's program run on both trees, and what
it leaves behind compared (``compat.testing._prove``).

Each proof runs a small program twice (original under the shim, migrated)
in fresh interpreters, then compares in a third: about half a minute, so
those tests are marked slow (tox -e slow).
"""

import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compat import testing
from compat.codemod import migrate
from compat.testing import _prove
import flax_optim_rules
import legacy_optim

# Five Adam steps, then a flax checkpoint of the optimizer. The data are
# chosen so that stock optax.adam rounds some values otherwise than
# flax.optim's Adam within these steps (it is exact on many inputs).
PROGRAM = '''\
import sys

import jax
import jax.numpy as jnp
from flax import optim
from flax.training import checkpoints


def loss_fn(params, x):
  return jnp.sum(jnp.tanh(x @ params['w'] + params['b']) ** 2)


def main(workdir, steps=5):
  params = {'w': jnp.sin(jnp.arange(64.0)).reshape(8, 8),
            'b': jnp.cos(jnp.arange(8.0))}
  optimizer = optim.Adam(learning_rate=0.01).create(params)
  x = jnp.cos(jnp.arange(32.0) * 0.37).reshape(4, 8)
  for _ in range(steps):
    grads = jax.grad(loss_fn)(optimizer.target, x)
    optimizer = optimizer.apply_gradient(grads)
  checkpoints.save_checkpoint(workdir, optimizer, steps)


if __name__ == '__main__':
  main(sys.argv[1])
'''
COMMAND = f'{shlex.quote(sys.executable)} train.py {{workdir}}'


@pytest.fixture
def project(tmp_path, monkeypatch):
  source = tmp_path / 'project'
  source.mkdir()
  (source / 'train.py').write_text(PROGRAM)
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  monkeypatch.chdir(tmp_path)
  # The runs a failed proof keeps go under tmp_path, not /tmp.
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
  return source


@pytest.mark.slow
def test_the_exact_tier_is_proven_on_the_users_program(project, capsys):
  code = migrate.main(['project', '--out', 'out', '--prove', COMMAND])
  out = capsys.readouterr().out
  assert code == migrate.EXIT_CLEAN, out
  assert 'proven (bit-identical)' in out, out
  assert ('checkpoint_5 (step 5): params, step and optimizer state '
          'bit-identical') in out, out
  assert 'from flax import optim' not in (
      pathlib.Path('out') / 'train.py').read_text()


@pytest.mark.slow
def test_the_stock_tier_is_not_proven_and_nothing_is_written(project, capsys):
  # Adagrad: stock Optax starts its accumulator at 0.1 where flax.optim's
  # starts at 0, a difference by construction (stock Adam is flax.optim's
  # formula in another order: it can round alike on some CPUs, and did
  # on an AVX2 EPYC over these 5 steps).
  program = PROGRAM.replace('optim.Adam(learning_rate=0.01)',
                            'optim.Adagrad(learning_rate=0.01)')
  (project / 'train.py').write_text(program)
  subprocess.run(['git', 'init', '-q'], cwd=project, check=True)
  subprocess.run(['git', 'add', '.'], cwd=project, check=True)
  subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t',
                  'commit', '-qm', 'old'], cwd=project, check=True)
  code = migrate.main(['project', '--write', '--tier', 'stock', '--prove',
                       COMMAND])
  captured = capsys.readouterr()
  assert code == migrate.EXIT_NOT_PROVEN, captured.out + captured.err
  assert 'not proven (bit-identical required)' in captured.out
  # The first difference: file, step, leaf, how many values, by how much.
  assert 'checkpoint_5 (step 5): leaf params/' in captured.out, captured.out
  assert 'elements differ; max |original - migrated| = ' in captured.out
  assert 'nothing written' in captured.err
  assert f'the runs are kept in {tempfile.gettempdir()}' in captured.out
  assert (project / 'train.py').read_text() == program


# A library module, and a script beside the project (not migrated) that
# records its training with compat.testing: the optimizer and the step it
# gets from the project are flax.optim's on the original tree, a TrainState
# on the migrated one.
LIBRARY = '''\
import jax
import jax.numpy as jnp
from flax import optim


def loss_fn(params, x):
  return jnp.sum(jnp.tanh(x @ params['w'] + params['b']) ** 2)


def create_optimizer(params):
  return optim.Adam(learning_rate=0.01).create(params)


def train_step(optimizer, x):
  grads = jax.grad(loss_fn)(optimizer.target, x)
  return optimizer.apply_gradient(grads)
'''
# The project's own loop: it proves train_step's parameter an optimizer.
LOOP = '''

def train(params, batches):
  optimizer = create_optimizer(params)
  for x in batches:
    optimizer = train_step(optimizer, x)
  return optimizer
'''
RECORDER = '''\
import os
import sys

import jax.numpy as jnp

from compat import testing
import train

params = {'w': jnp.sin(jnp.arange(64.0)).reshape(8, 8),
          'b': jnp.cos(jnp.arange(8.0))}
batches = [jnp.cos(jnp.arange(32.0) * 0.37 * k).reshape(4, 8)
           for k in range(1, 6)]
testing.record_trajectory(train.train_step, train.create_optimizer(params),
                          batches, 5, os.path.join(sys.argv[1], 'train.traj'))
'''


def _recording_project(project, library):
  (project / 'train.py').write_text(library)
  recorder = project.parent / 'record.py'
  recorder.write_text(RECORDER)
  return f'{shlex.quote(sys.executable)} {shlex.quote(str(recorder))} ' + (
      '{workdir}')


@pytest.mark.slow
def test_a_recorded_trajectory_proves_the_migration_step_by_step(project,
                                                                  capsys):
  command = _recording_project(project, LIBRARY + LOOP)
  code = migrate.main(['project', '--out', 'out', '--prove', command])
  out = capsys.readouterr().out
  assert 'proven (bit-identical)' in out, out
  assert 'train.traj (trajectory): params at steps 0 to 5 bit-identical' in (
      out), out
  assert code == migrate.EXIT_CLEAN, out
  code = migrate.main(['project', '--out', 'stock', '--tier', 'stock',
                       '--prove', command])
  out = capsys.readouterr().out
  assert 'not proven (bit-identical required)' in out, out
  # The first step where stock optax.adam's params differ: file, step, leaf.
  assert "  train.traj (trajectory, step " in out, out
  assert " of 5): leaf params['" in out, out
  assert 'elements differ; max |original - migrated| = ' in out, out
  assert code == migrate.EXIT_NOT_PROVEN, out


@pytest.mark.slow
def test_what_migrate_leaves_runs_alike_on_both_trees(project, capsys):
  # Without the loop, train_step's callers are outside the project: the
  # flow stays on flax.optim, and the migrated tree runs it through the shim
  # just as the original does (an eager step compiled by the shim on one
  # side and run op by op on the other differed in the last bit).
  command = _recording_project(project, LIBRARY)
  code = migrate.main(['project', '--out', 'out', '--prove', command])
  out = capsys.readouterr().out
  assert 'holds the flow' in out or 'left (apply_gradient)' in out, out
  assert 'proven (bit-identical)' in out, out
  assert 'train.traj (trajectory): params at steps 0 to 5 bit-identical' in (
      out), out
  assert code == migrate.EXIT_LEFT, out

@pytest.mark.parametrize('args, problem', [
    (['--prove', COMMAND], '--prove needs --out DIR or --write'),
    (['--out', 'out', '--prove', 'python train.py'], 'must contain {workdir}'),
    (['--out', 'out', '--rtol', '1e-6'], '--rtol and --unproven go with'),
])
def test_prove_arguments_are_checked_before_any_run(project, capsys, args,
                                                    problem):
  assert migrate.main(['project', *args]) == migrate.EXIT_USAGE
  assert problem in capsys.readouterr().err
  assert not os.path.exists('out')


def test_flax_optim_and_train_state_layouts_are_read_alike():
  # The same numbers in flax.optim's Optimizer layout and in a TrainState's
  # (columns of fields, a count, an int64 step) give the same leaves.
  w, b = np.arange(4.0).reshape(2, 2), np.ones(2)
  legacy = {'target': {'w': w, 'b': b}, 'state': {
      'step': np.int32(3), 'param_states': {
          'w': {'grad_ema': w * 2, 'grad_sq_ema': w * 3},
          'b': {'grad_ema': b * 2, 'grad_sq_ema': b * 3}}}}
  train_state = {'step': np.int64(3), 'params': {'w': w, 'b': b},
                 'opt_state': {'count': np.int32(3),
                               'grad_ema': {'w': w * 2, 'b': b * 2},
                               'grad_sq_ema': {'w': w * 3, 'b': b * 3}}}
  old = _prove.canonical_leaves(legacy)
  new = _prove.canonical_leaves(train_state)
  assert [p for p, _ in old] == [p for p, _ in new] == [
      'params/b', 'params/w', 'step', 'opt_state/count',
      'opt_state/grad_ema/b', 'opt_state/grad_ema/w',
      'opt_state/grad_sq_ema/b', 'opt_state/grad_sq_ema/w']
  for (_, a), (_, c) in zip(old, new):
    np.testing.assert_array_equal(a, c)
  # Stock Optax's names for Adam's fields (optax.adam's chain: mu, nu).
  stock = {'step': np.int64(3), 'params': {'w': w, 'b': b},
           'opt_state': [{'count': np.int32(3), 'mu': {'w': w * 2, 'b': b * 2},
                          'nu': {'w': w * 3, 'b': b * 3}}, None]}
  renamed = _prove.in_stock_names(old, _prove.canonical_leaves(stock))
  assert [p for p, _ in renamed] == [
      p for p, _ in _prove.canonical_leaves(stock)]



def test_a_transform_without_a_count_is_compared_by_its_step():
  # flax.optim's Momentum, and optax.sgd's in a TrainState (what migrate
  # writes for it): a trace and no count, only the TrainState's step.
  w = np.arange(4.0).reshape(2, 2)
  legacy = {'target': {'w': w}, 'state': {
      'step': np.int32(3), 'param_states': {'w': {'momentum': w * 2}}}}
  stock = {'step': np.int64(3), 'params': {'w': w},
           'opt_state': [{'trace': {'w': w * 2}}, None]}
  new = _prove.canonical_leaves(stock)
  old = _prove.in_stock_names(_prove.canonical_leaves(legacy), new)
  kept = _prove.without_uncounted_steps(old, new)
  assert [p for p, _ in kept] == [p for p, _ in new] == [
      'params/w', 'step', 'opt_state/trace/w']
  # A count that is more than the step stays, to be named as a difference.
  counted = {'step': np.int64(3), 'params': {'w': w},
             'opt_state': {'count': np.int32(2), 'trace': {'w': w * 2}}}
  assert 'opt_state/count' in dict(_prove.without_uncounted_steps(
      _prove.canonical_leaves(counted), new))

# ---------------------------------------------------------------------------
# Trajectories a program records with compat.testing, compared step by step
# (in process: the two runs' work directories written here).


def _grads(steps=5):
  rng = np.random.default_rng(3)
  return [{'w': rng.normal(size=(3, 4)).astype(np.float32),
           'b': rng.normal(size=4).astype(np.float32)}
          for _ in range(steps)]


def _record_legacy_adam(workdir, grads, values_at='all'):
  """The original program: flax.optim's Adam (through the shim)."""
  params = {'w': np.ones((3, 4), np.float32), 'b': np.zeros(4, np.float32)}
  optimizer = legacy_optim.Adam(learning_rate=0.01).create(params)
  step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  testing.record_trajectory(step, optimizer, grads, len(grads),
                            os.path.join(workdir, 'adam.traj'),
                            values_at=values_at)


def _record_train_state(workdir, grads, learning_rate, values_at='all'):
  """The migrated program: a TrainState of flax.optim's Adam rule."""
  params = {'w': np.ones((3, 4), np.float32), 'b': np.zeros(4, np.float32)}
  state = train_state.TrainState.create(
      apply_fn=None, params=params,
      tx=flax_optim_rules.adam(learning_rate=learning_rate))
  step = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  testing.record_trajectory(step, state, grads, len(grads),
                            os.path.join(workdir, 'adam.traj'),
                            values_at=values_at)


def _doubled_from_update(k):
  """0.01, then 0.02 from the k-th update on (count k - 1): a migration
  that changed the learning rate there."""
  return lambda count: jnp.where(count < k - 1, 0.01, 0.02)


@pytest.fixture
def workdirs(tmp_path):
  original, migrated = tmp_path / 'original', tmp_path / 'migrated'
  original.mkdir()
  migrated.mkdir()
  return str(original), str(migrated)


def test_recorded_trajectories_that_agree_are_proven(workdirs):
  original, migrated = workdirs
  _record_legacy_adam(original, _grads())
  _record_train_state(migrated, _grads(), 0.01)
  proven, lines = _prove.compare_workdirs(original, migrated)
  assert proven, lines
  assert lines == ['adam.traj (trajectory): params at steps 0 to 5 '
                   'bit-identical']


@pytest.mark.parametrize('values_at, how', [
    # Values: how many, by how much; digests only: that they differ.
    ('all', '4 of 4 elements differ; max |original - migrated| = '),
    ('none', 'its digests differ (only digests were recorded'),
])
def test_the_first_differing_step_of_a_trajectory_is_named(workdirs,
                                                           values_at, how):
  original, migrated = workdirs
  _record_legacy_adam(original, _grads(), values_at)
  _record_train_state(migrated, _grads(), _doubled_from_update(3), values_at)
  proven, lines = _prove.compare_workdirs(original, migrated)
  assert not proven
  # Updates 1 and 2 are flax.optim's to the bit; update 3 is not: the file,
  # the step, the first leaf (params in jax's order: b before w).
  assert len(lines) == 1, lines
  assert lines[0].startswith(
      "adam.traj (trajectory, step 3 of 5): leaf params['b']: "), lines
  assert how in lines[0], lines
  assert "1 more leaves differ at this step" in lines[0], lines


def test_a_trajectory_on_other_batches_is_an_input_difference(workdirs):
  original, migrated = workdirs
  grads = _grads()
  _record_legacy_adam(original, grads)
  grads[1] = {k: v + 1 for k, v in grads[1].items()}
  _record_train_state(migrated, grads, 0.01)
  proven, lines = _prove.compare_workdirs(original, migrated)
  assert not proven
  assert lines == ['adam.traj (trajectory): batch 2 differs between the '
                   'runs: the program fed them other data, so their params '
                   'cannot be compared']


def test_a_trajectory_left_by_one_run_only_is_named(workdirs):
  original, migrated = workdirs
  _record_legacy_adam(original, _grads())
  proven, lines = _prove.compare_workdirs(original, migrated)
  assert (proven, lines) == (False, ['adam.traj: only the original run left '
                                     'it'])
