"""Test cases that need N fake CPU devices, run in one child process.

XLA reads ``--xla_force_host_platform_device_count`` once, when the backend
starts, so multi-device cases cannot share the pytest process. A test module
registers its cases here, runs itself as a script in a child process with the
flag set (``main``), and reports each case as its own pytest test::

  CASES = _devices.Cases(n_devices=8)

  @CASES.register('Momentum', 'Adam')
  def zero1(name): ...

  outcomes, test_on_8_devices = CASES.pytest_items(__file__)

  if __name__ == '__main__':
    CASES.main()
"""

from concurrent import futures
import functools
import json
import os
import subprocess
import sys
import traceback

import pytest

# Child processes run one at a time on a background thread, started as soon
# as collection knows which modules need one (tests/conftest.py), so they use
# the second core while the main process runs the other modules' tests.
_REGISTERED: dict[str, 'Cases | Background'] = {}
_RUNNER = futures.ThreadPoolExecutor(max_workers=1)
_STARTED: dict[str, futures.Future] = {}


def start(script: str) -> futures.Future:
  """Queues ``script``'s child process (once); its future gives the result."""
  if script not in _STARTED:
    _STARTED[script] = _RUNNER.submit(_REGISTERED[script].run_child, script)
  return _STARTED[script]


def start_for(module_paths) -> None:
  """Queues the child process of every registered module among these."""
  for path in module_paths:
    if path in _REGISTERED:
      start(path)


class Background:
  """A module's own child processes (``run()`` starts them, waits for them
  and returns their results), queued with the device cases' after collection
  so they run beside the main process too::

    RUNS = _devices.Background(run_everything)
    outcomes = RUNS.fixture(__file__)  # module-scoped: what run() returned
  """

  def __init__(self, run):
    self._run = run

  def run_child(self, script):
    del script  # run() knows its own processes
    return self._run()

  def fixture(self, script: str):
    script = os.path.abspath(script)
    _REGISTERED[script] = self

    @pytest.fixture(scope='module')
    def outcomes():
      return start(script).result()

    return outcomes


class Cases:
  """A registry of child-process cases and the plumbing to run them."""

  def __init__(self, n_devices: int, timeout: float = 600):
    self.n_devices = n_devices
    self.timeout = timeout
    self._cases = {}

  def register(self, *variants):
    """Registers ``fn`` once per variant, as case ``fn_name[variant]``."""
    def decorate(fn):
      for variant in variants or (None,):
        name = fn.__name__ if variant is None else f'{fn.__name__}[{variant}]'
        self._cases[name] = (fn if variant is None
                             else functools.partial(fn, variant))
      return fn
    return decorate

  def names(self) -> list[str]:
    return list(self._cases)

  def main(self) -> None:
    """Child process: runs every case, one JSON line per outcome."""
    import jax
    assert jax.local_device_count() == self.n_devices, jax.local_devices()
    for name, case in self._cases.items():
      try:
        case()
        result = {'case': name, 'ok': True}
      except Exception:
        result = {'case': name, 'ok': False, 'error': traceback.format_exc()}
      print(json.dumps(result), flush=True)

  def run_child(self, script: str):
    """Runs ``script`` with the flag set: ``(results by case, process)``."""
    env = dict(os.environ)
    env['XLA_FLAGS'] = (
        f'--xla_force_host_platform_device_count={self.n_devices}')
    env['PYTHONWARNINGS'] = 'ignore'
    out = subprocess.run([sys.executable, script], env=env,
                         capture_output=True, text=True,
                         timeout=self.timeout, check=False)
    results = {}
    for line in out.stdout.splitlines():
      if line.startswith('{'):
        entry = json.loads(line)
        results[entry['case']] = entry
    return results, out

  def fixture(self, script: str):
    """A module-scoped fixture waiting for ``script``'s child process."""
    script = os.path.abspath(script)
    _REGISTERED[script] = self

    @pytest.fixture(scope='module')
    def outcomes():
      results, out = start(script).result()
      if not results:
        pytest.fail(f'child process failed (exit {out.returncode}):\n'
                    f'{out.stdout}\n{out.stderr}')
      return results, out

    return outcomes

  def pytest_items(self, script: str):
    """``(fixture, test)`` to bind at the end of a test module.

    The test runs once per registered case (all of them in one child
    process, started by the module-scoped fixture)::

      outcomes, test_on_8_devices = CASES.pytest_items(__file__)
    """
    outcomes = self.fixture(script)

    @pytest.mark.parametrize('case', self.names())
    def test_on_devices(outcomes, case):
      self.check(outcomes, case)

    test_on_devices.__name__ = f'test_on_{self.n_devices}_devices'
    return outcomes, test_on_devices

  @staticmethod
  def check(outcomes, case: str) -> None:
    results, out = outcomes
    assert case in results, (
        f'{case} did not report (exit {out.returncode}):\n'
        f'{out.stderr[-3000:]}')
    assert results[case]['ok'], results[case]['error']
