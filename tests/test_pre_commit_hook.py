"""The pre-commit hooks of .pre-commit-hooks.yaml, run by pre-commit itself.

``pre-commit try-repo`` clones this repository (as committed, plus a shadow
commit of uncommitted tracked changes) into a fresh PRE_COMMIT_HOME and runs
the hook on a sample project: the scan hook fails while a staged file uses
flax.optim, passes on modern code, honours ``# noqa`` and the sample
project's ``[tool.flax-optim-compat]``, and installs nothing.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def _git(cwd, *args):
  subprocess.run(['git', *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path):
  root = tmp_path / 'project'
  root.mkdir()
  (root / 'train.py').write_text('from flax import optim\n'
                                 'opt_def = optim.Adam(0.1)\n')
  (root / 'modern.py').write_text('import optax\ntx = optax.adam(0.1)\n')
  (root / 'kept.py').write_text('from flax import optim  # noqa: FOC101\n')
  _git(root, 'init', '-q')
  _git(root, 'add', '.')
  return root


def try_repo(project, tmp_path, *files):
  pytest.importorskip('pre_commit')  # the test extra installs it
  env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / 'home'))
  return subprocess.run(
      [sys.executable, '-m', 'pre_commit', 'try-repo', ROOT,
       'flax-optim-compat-scan', '--files', *files],
      cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_scan_hook_fails_on_flax_optim_and_passes_on_modern_code(
    project, tmp_path):
  found = try_repo(project, tmp_path, 'train.py', 'modern.py')
  assert found.returncode == 1, found.stdout + found.stderr
  assert 'train.py:1  FOC101' in found.stdout
  assert 'train.py:2  FOC103' in found.stdout
  assert 'modern.py' not in found.stdout.split('Failed', 1)[1]
  clean = try_repo(project, tmp_path, 'modern.py', 'kept.py')
  assert clean.returncode == 0, clean.stdout + clean.stderr
  assert 'Passed' in clean.stdout
  # language: script: no environment was built for the hook
  home = tmp_path / 'home'
  assert not any(p.name.startswith(('py_env', 'venv'))
                 for p in home.rglob('*') if p.is_dir())


def test_scan_hook_reads_the_projects_pyproject(project, tmp_path):
  (project / 'pyproject.toml').write_text(
      '[tool.flax-optim-compat]\nignore = ["FOC1"]\n')
  _git(project, 'add', '.')
  result = try_repo(project, tmp_path, 'train.py')
  assert result.returncode == 0, result.stdout + result.stderr
