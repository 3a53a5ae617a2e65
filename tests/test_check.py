"""``python -m compat check``: the table, the exit status, the options."""

import io
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compat import cli
from compat.bridges import optax_bridge
from compat.cli import _configs
from compat.cli import check
import legacy_optim as optim


def _run(capsys, *argv):
  status = check.main(['--no-progress', *argv])
  out, err = capsys.readouterr()
  return status, out, err


def _row(out, name):
  return next(line for line in out.splitlines() if line.startswith(name + ' '))


def test_all_identical_exits_zero(capsys):
  status, out, _ = _run(capsys, '--only', 'gradientdescent', '--only',
                        'lr schedule')
  assert status == 0, out
  header = out.splitlines()[0].split()
  assert header[0] == 'config' and 'TrainState' in header
  assert 'nnx.Optimizer' in header and 'eager' not in out.splitlines()[0]
  for name in ('GradientDescent', 'Momentum + lr schedule'):
    assert _row(out, name).split()[-4:] == ['identical'] * 4
  assert '8/8 bit-identical (2 configs x 4 paths; 3 legacy steps' in out


def _shift_count(opt_state):
  """The sabotage: the converted step count is one ahead."""
  return jax.tree_util.tree_map(
      lambda x: x + 1 if jnp.ndim(x) == 0 and x.dtype == jnp.int32 else x,
      opt_state)


def test_a_wrong_conversion_is_reported_and_fails(capsys, monkeypatch):
  original = optax_bridge.optax_state
  monkeypatch.setattr(optax_bridge, 'optax_state',
                      lambda opt: _shift_count(original(opt)))
  status, out, _ = _run(capsys, '--only', 'lr schedule', '--steps', '2',
                        '--eager')
  assert status == 1
  cells = _row(out, 'Momentum + lr schedule').split('  ')
  cells = [c.strip() for c in cells if c.strip()][1:]
  assert len(cells) == 5 and all(c.startswith('diff ') for c in cells), out
  assert '0/5 bit-identical' in out


def test_errors_are_listed_and_fail(capsys, monkeypatch):

  def broken():
    raise NotImplementedError('not landed yet')

  monkeypatch.setattr(_configs, 'CONFIGS', (
      _configs.Config('Broken', broken),
      _configs.BY_NAME['GradientDescent']))
  status, out, _ = _run(capsys, '--steps', '1')
  assert status == 1
  assert _row(out, 'Broken').split()[1:] == ['ERROR', '[1]'] * 4
  assert _row(out, 'GradientDescent').split()[1:] == ['identical'] * 4
  assert '[1] NotImplementedError: not landed yet' in out


def test_progress_goes_to_stderr(capsys):
  status = check.main(['--only', 'GradientDescent', '--steps', '1'])
  out, err = capsys.readouterr()
  assert status == 0
  assert err == 'check: 1/1 GradientDescent\n'
  assert 'check:' not in out

  class Terminal(io.StringIO):

    def isatty(self):
      return True

  terminal = Terminal()
  bar = check._Progress(2, enabled=True, stream=terminal)
  bar.finished('Adam')
  bar.finished('LAMB')
  bar.close()
  text = terminal.getvalue()
  assert text.startswith('\r[' + '.' * 30 + '] 0/2 ')
  assert '\r[' + '#' * 15 + '.' * 15 + '] 1/2 Adam' in text
  assert '\r[' + '#' * 30 + '] 2/2 LAMB' in text
  assert text.endswith('\r')


def test_list_and_usage_errors(capsys):
  assert check.main(['--list']) == 0
  assert capsys.readouterr().out.split('\n')[:-1] == [
      c.name for c in _configs.CONFIGS]
  assert check.main(['--only', 'no such optimizer']) == 2
  assert 'see --list' in capsys.readouterr().err
  for bad in (['--steps', '0'], ['--jobs', '0']):
    with pytest.raises(SystemExit) as info:
      check.main(bad)
    assert info.value.code == 2


def test_help_through_the_cli():
  result = subprocess.run(
      [sys.executable, '-m', 'compat', 'check', '--help'],
      capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith('usage: flax-optim-compat check')
  for option in ('--steps', '--only', '--eager', '--jobs', '--list',
                 '--no-progress'):
    assert option in result.stdout
  assert cli.COMMANDS['check'][0] == 'compat.cli.check'


@pytest.mark.parametrize('expected, actual, difference', [
    (np.float32([1, 2]), np.float32([1, 2]), 0.0),
    (np.float32([np.nan]), np.float32([np.nan]), 0.0),
    (np.float32([1, 2]), np.float32([1, 2.5]), 0.5),
    (np.float32([0.0]), np.float32([-0.0]), np.finfo(np.float64).tiny),
    (np.float32([1]), np.float64([1]), np.finfo(np.float64).tiny),
    (np.float32([1, 2]), np.float32([1]), None),
    ({'a': np.float32(1)}, {'b': np.float32(1)}, None),
])
def test_max_difference_is_bitwise(expected, actual, difference):
  assert check.max_difference(expected, actual) == difference


def test_the_built_in_problem_trains():
  """The model really learns, so the table compares meaningful runs."""
  problem = check.Problem(40)
  optimizer = optim.Momentum(0.1).create(problem.params)
  for i in range(30):
    optimizer = optimizer.apply_gradient(problem.grads(optimizer.target, i))
  held_out = problem.batches[30:]
  before = np.mean([check._loss(problem.params, x, y) for x, y in held_out])
  after = np.mean([check._loss(optimizer.target, x, y) for x, y in held_out])
  assert after < 0.7 * before, (before, after)
