"""pytest plugin: record training trajectories once, assert them ever after.

Opt-in: nothing loads it until a project asks for it, with
``pytest -p flax_optim_compat.pytest_plugin``, ``addopts = -p
flax_optim_compat.pytest_plugin`` in its pytest configuration, or
``pytest_plugins = ['flax_optim_compat.pytest_plugin']`` in its top-level
``conftest.py``. (``compat.testing.plugin`` is the same plugin under its
earlier name.) A test asks for the ``trajectory`` fixture and calls
``check``::

  def test_training_is_unchanged(trajectory):
    trajectory.check(train_step, init_state, batches, steps=5)

``pytest --record-trajectories`` (run while the old code path still exists)
writes one file per ``check`` call; every later run replays the same steps
on the current code and asserts the params match the file (bit-identity
unless ``rtol``/``atol`` are given). Files live in ``trajectories/<test
module>/<test name>[.<name>].traj`` beside the test file, or below the
``trajectory_dir`` ini option (relative to the rootdir) when it is set.

Fixtures: ``trajectory``, ``record_trajectories`` (bool: was the option
given) and ``assert_same_training`` (the function of ``compat.testing``).
This module imports only pytest and the standard library at import time, and
lives outside ``compat`` so that loading it never depends on which module
named ``compat`` a project's ``sys.path`` finds first.
"""

import importlib
import pathlib
import re
import sys
from typing import Any, Callable, Iterable, Optional

import pytest

_RECORDED = pytest.StashKey[list]()


def pytest_addoption(parser):
  group = parser.getgroup('compat-testing', 'compat.testing trajectories')
  group.addoption(
      '--record-trajectories', action='store_true', default=False,
      help='record the trajectory files of tests using the `trajectory` '
      'fixture (overwriting them) instead of asserting against them.')
  parser.addini(
      'trajectory_dir', default='',
      help='directory (relative to the rootdir) for trajectory files; by '
      'default a `trajectories` directory beside each test file.')


def pytest_configure(config):
  config.stash[_RECORDED] = []


def pytest_terminal_summary(terminalreporter, config):
  recorded = config.stash.get(_RECORDED, [])
  if recorded:
    terminalreporter.write_sep('=', 'compat.testing: recorded trajectories')
    for path in recorded:
      terminalreporter.write_line(str(path))


def _testing_module():
  """``compat.testing``; fails clearly when a project's ``compat`` hides it."""
  try:
    return importlib.import_module('compat.testing')
  except ImportError as e:
    found = getattr(sys.modules.get('compat'), '__file__', None)
    pytest.fail(
        "The trajectory fixtures need flax-optim-compat's compat.testing, "
        f'which did not import ({e})' +
        (f'; the module named compat found first is {found}' if found
         else '') + '.', pytrace=False)


def _file_name(text: str) -> str:
  return re.sub(r'[^\w.-]+', '_', text).strip('_') or '_'


class TrajectoryFixture:
  """Records (``--record-trajectories``) or asserts one test's trajectories.

  Attributes:
    recording: True when this run records.
  """

  def __init__(self, request: pytest.FixtureRequest):
    config = request.config
    self.recording = bool(config.getoption('record_trajectories'))
    base = config.getini('trajectory_dir')
    test_file = pathlib.Path(str(request.node.path))
    self._dir = (pathlib.Path(str(config.rootpath)) / base if base else
                 test_file.parent / 'trajectories') / _file_name(test_file.stem)
    self._test = _file_name(request.node.name)
    self._recorded = config.stash[_RECORDED]

  def path(self, name: Optional[str] = None) -> pathlib.Path:
    """The file of this test's trajectory ``name`` (or its only one)."""
    stem = self._test + (f'.{_file_name(name)}' if name else '')
    return self._dir / f'{stem}.traj'

  def check(self, step_fn: Callable, init: Any, batches: Iterable[Any],
            steps: Optional[int] = None, *, name: Optional[str] = None,
            rtol: float = 0, atol: float = 0, has_aux: bool = False,
            params_fn: Optional[Callable] = None, values_at: Any = 'all',
            metadata: Optional[dict] = None) -> int:
    """Records the run (recording mode) or asserts it matches the file.

    Arguments are those of ``compat.testing.record_trajectory`` and
    ``assert_matches_trajectory``; ``name`` tells apart several trajectories
    of one test. Returns the number of updates recorded or compared.
    """
    testing = _testing_module()
    path = self.path(name)
    if self.recording:
      path.parent.mkdir(parents=True, exist_ok=True)
      payload = testing.record_trajectory(
          step_fn, init, batches, steps, str(path), values_at=values_at,
          has_aux=has_aux, params_fn=params_fn, metadata=metadata)
      self._recorded.append(path)
      return payload['steps']
    if not path.exists():
      pytest.fail(
          f'No recorded trajectory at {path}. Record it first, on the old '
          'code path: pytest --record-trajectories', pytrace=False)
    return testing.assert_matches_trajectory(
        step_fn, init, batches, str(path), steps=steps, rtol=rtol, atol=atol,
        has_aux=has_aux, params_fn=params_fn)


@pytest.fixture
def trajectory(request) -> TrajectoryFixture:
  """Records or asserts this test's training trajectories (see module doc)."""
  return TrajectoryFixture(request)


@pytest.fixture
def record_trajectories(request) -> bool:
  """True when pytest runs with --record-trajectories."""
  return bool(request.config.getoption('record_trajectories'))


@pytest.fixture
def assert_same_training():
  """``compat.testing.assert_same_training``."""
  return _testing_module().assert_same_training
