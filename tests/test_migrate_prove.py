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

import numpy as np
import pytest

from compat.codemod import migrate
from compat.testing import _prove

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
  assert (project / 'train.py').read_text() == PROGRAM


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
