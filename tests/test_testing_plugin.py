"""The compat.testing pytest plugin, driven through pytester.

The plugin is opt-in: inner runs load it as users do (``-p
flax_optim_compat.pytest_plugin``), with entry-point autoloading off so that a
stale install's metadata cannot load a second copy.
"""

import configparser
import pathlib
import re
import subprocess
import sys

import pytest

pytest_plugins = ['pytester']

REPO = pathlib.Path(__file__).resolve().parent.parent
PLUGIN = 'flax_optim_compat.pytest_plugin'

# A tiny training run: GradientDescent on two leaves, fixed gradients. The
# learning rate comes from the LR file so a later run can change it.
TEST_MODULE = '''
import pathlib
import numpy as np
import legacy_optim as optim

LR = float(pathlib.Path(__file__).with_name('LR').read_text())
PARAMS = {'w': np.array([1.0, -2.0], np.float32), 'b': np.float32(0.5)}
GRADS = [{'w': np.array([0.5, 0.25], np.float32) * k, 'b': np.float32(k)}
         for k in range(1, 4)]


def step(opt, grads):
  return opt.apply_gradient(grads)


def test_train(trajectory):
  opt = optim.GradientDescent(LR).create(PARAMS)
  assert trajectory.check(step, opt, GRADS, steps=3) == 3


@pytest.mark.parametrize('beta', [0.5, 0.9])
def test_two_runs(trajectory, beta):
  for name, lr in (('slow', LR / 2), ('fast', LR)):
    opt = optim.Momentum(lr, beta=beta).create(PARAMS)
    trajectory.check(step, opt, GRADS, name=name)
'''


@pytest.fixture(name='project')
def _project(pytester, monkeypatch):
  monkeypatch.setenv('PYTEST_DISABLE_PLUGIN_AUTOLOAD', '1')
  pytester.makepyfile(test_train='import pytest\n' + TEST_MODULE)
  pytester.path.joinpath('LR').write_text('0.1')
  return pytester


def _run(pytester, *args):
  return pytester.runpytest('-p', PLUGIN, '-q', '-W', 'ignore', *args)


def _files(root: pathlib.Path):
  return sorted(str(p.relative_to(root)) for p in root.rglob('*.traj'))


EXPECTED_FILES = [
    'trajectories/test_train/test_train.traj',
    'trajectories/test_train/test_two_runs_0.5.fast.traj',
    'trajectories/test_train/test_two_runs_0.5.slow.traj',
    'trajectories/test_train/test_two_runs_0.9.fast.traj',
    'trajectories/test_train/test_two_runs_0.9.slow.traj',
]


def test_record_then_assert_then_catch_a_change(project):
  recorded = _run(project, '--record-trajectories')
  recorded.assert_outcomes(passed=3)
  recorded.stdout.fnmatch_lines(['*compat.testing: recorded trajectories*',
                                 '*test_train.traj'])
  assert _files(project.path) == EXPECTED_FILES

  _run(project).assert_outcomes(passed=3)

  project.path.joinpath('LR').write_text('0.2')
  changed = _run(project)
  changed.assert_outcomes(failed=3)
  changed.stdout.re_match_lines([re.escape(
      "E       compat.testing.TrainingDivergence: Training diverged at step 1 "
      "(after 1 update): params['b']: 1 of 1 elements differ")])


def test_missing_recording_fails_with_instructions(project):
  result = _run(project, 'test_train.py::test_train')
  result.assert_outcomes(failed=1)
  result.stdout.fnmatch_lines(
      ['*No recorded trajectory at *test_train.traj. Record it first, on the '
       'old code path: pytest --record-trajectories*'])


def test_trajectory_dir_ini_option(project):
  project.makeini('[pytest]\ntrajectory_dir = goldens/run1\n')
  outcome = _run(project, '--record-trajectories', 'test_train.py::test_train')
  outcome.assert_outcomes(passed=1)
  assert _files(project.path) == [
      'goldens/run1/test_train/test_train.traj']
  _run(project, 'test_train.py::test_train').assert_outcomes(passed=1)


def test_other_fixtures(project):
  project.makepyfile(test_fixtures='''
import numpy as np

def test_flags(record_trajectories, trajectory, assert_same_training):
  assert record_trajectories == trajectory.recording
  params = {'w': np.zeros(2, np.float32)}
  add = lambda s, b: ({'w': s[0]['w'] + b}, s[1])
  assert assert_same_training(add, add, (params, ()), (params, ()),
                              batches=[np.float32(1)]) == 1
  assert trajectory.path('x').name == 'test_flags.x.traj'
''')
  _run(project, 'test_fixtures.py').assert_outcomes(passed=1)
  _run(project, 'test_fixtures.py', '--record-trajectories').assert_outcomes(
      passed=1)


def test_help_lists_the_option(project):
  result = _run(project, '--help')
  result.stdout.fnmatch_lines(['*--record-trajectories*', '*trajectory_dir*'])


def test_earlier_module_name_still_loads_the_plugin(project):
  result = project.runpytest('-p', 'compat.testing.plugin', '-q', '-W',
                             'ignore', '--record-trajectories',
                             'test_train.py::test_train')
  result.assert_outcomes(passed=1)


def test_no_entry_point_loads_it_into_other_projects():
  config = configparser.ConfigParser()
  config.read(REPO / 'setup.cfg')
  assert 'pytest11' not in config['options.entry_points']


def test_plugin_and_package_import_nothing_heavy():
  """Loading the plugin must not import jax, flax, or even compat."""
  code = ('import sys, flax_optim_compat.pytest_plugin; '
          'early = [m for m in ("jax", "flax", "numpy", "compat") '
          'if m in sys.modules]; '
          'import compat.testing, compat.testing.plugin; '
          'heavy = [m for m in ("jax", "flax", "numpy") if m in sys.modules]; '
          'print(early, heavy); sys.exit(bool(early or heavy))')
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO,
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
