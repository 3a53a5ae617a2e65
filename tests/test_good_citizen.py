"""Installing flax-optim-compat breaks nothing of a user's, and its commands
are the ones the docs show.

Two throwaway projects stand in for users: one with its own ``compat.py``,
one with its own ``compat/`` and ``legacy_optim/`` packages. ``python -m
pytest`` must run clean in both, and every command form that README.md and
migration_guide.md show must run this library's tool there. The commands run
with this interpreter and its console script, i.e. the installed package: a
stale install (one whose metadata predates this checkout) fails here until
``pip install -e .`` is run again.
"""

import configparser
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from compat import cli
from compat.codemod import scan

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = (REPO / 'README.md', REPO / 'migration_guide.md')
CONSOLE_SCRIPT = str(pathlib.Path(sys.executable).parent / cli.PROG)

# `python -m X` forms the docs may show: this library's command, and the
# user's own test run (checked by the projects' `python -m pytest` below).
OUR_MODULE = 'flax_optim_compat'
OTHER_MODULES = {'pytest'}

# A user's file the scanner must report (exit status 1).
USER_TRAINING = '''
from flax import optim

def make(params):
  return optim.Adam(learning_rate=1e-3).create(params)
'''

# The user's own modules announce themselves if anything runs them.
USER_MODULE = '''
NAME = 'user'
if __name__ == '__main__':
  print("the user's {} ran")
'''


def _write(root: pathlib.Path, files: dict) -> pathlib.Path:
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding='utf-8')
  return root


@pytest.fixture(name='module_project')
def _module_project(tmp_path):
  """A project with its own compat.py."""
  return _write(tmp_path / 'module_project', {
      'compat.py': USER_MODULE.format('compat.py'),
      'train.py': USER_TRAINING,
      'test_user.py': '''
          import compat
          import flax

          def test_own_compat():
            assert compat.NAME == 'user'
            assert flax.linen is not None
          ''',
  })


@pytest.fixture(name='package_project')
def _package_project(tmp_path):
  """A project with its own compat/ and legacy_optim/ packages."""
  return _write(tmp_path / 'package_project', {
      'compat/__init__.py': USER_MODULE.format('compat package'),
      'compat/__main__.py': 'print("the user\'s compat/__main__.py ran")\n',
      'legacy_optim/__init__.py': USER_MODULE.format('legacy_optim'),
      'src/train.py': USER_TRAINING,
      'tests/test_user.py': '''
          import compat
          import flax.training.train_state
          import legacy_optim

          def test_own_packages():
            assert compat.NAME == legacy_optim.NAME == 'user'
          ''',
  })


def _env():
  env = dict(os.environ)
  for name in ('PYTEST_ADDOPTS', 'PYTEST_PLUGINS',
               'PYTEST_DISABLE_PLUGIN_AUTOLOAD', 'LEGACY_OPTIM_IMPORT_HOOK',
               'LEGACY_OPTIM_STRICT'):
    env.pop(name, None)
  return env


def _run(args, cwd, check_clean=True):
  result = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True,
                          text=True, check=False, timeout=300)
  output = result.stdout + result.stderr
  if check_clean:
    assert "the user's" not in output, (args, output)
    assert 'Traceback (most recent call last)' not in output, (args, output)
  return result


@pytest.mark.parametrize('project_name', ['module_project', 'package_project'])
def test_users_pytest_runs_clean(project_name, request):
  project = request.getfixturevalue(project_name)
  result = _run([sys.executable, '-m', 'pytest', '-q', '-p',
                 'no:cacheprovider'], project)
  output = result.stdout + result.stderr
  assert result.returncode == 0, output
  assert '1 passed' in output, output
  assert 'Error while loading plugin' not in output
  assert 'Tensorflow' not in output


def test_installed_metadata_loads_no_pytest_plugin():
  """The plugin is opt-in: no installed copy may declare an entry point."""
  declared = [
      (dist.metadata['Name'], dist.locate_file(''), ep.value)
      for dist in importlib.metadata.distributions()
      if (dist.metadata['Name'] or '').lower() == 'flax-optim-compat'
      for ep in dist.entry_points if ep.group == 'pytest11']
  assert not declared, (
      f'installed metadata declares a pytest11 entry point: {declared}; '
      'reinstall (pip install -e .)')


def test_opt_in_plugin_loads_beside_a_users_compat(module_project):
  without = _run([sys.executable, '-m', 'pytest', '--help'], module_project)
  assert '--record-trajectories' not in without.stdout
  with_plugin = _run([sys.executable, '-m', 'pytest', '-q', '-p',
                      'no:cacheprovider', '-p', f'{OUR_MODULE}.pytest_plugin',
                      '--help'], module_project)
  assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr
  assert '--record-trajectories' in with_plugin.stdout


def _documented_forms():
  """{launcher: {subcommand or option, ...}} from the docs' command lines."""
  forms = {}
  for doc in DOCS:
    text = doc.read_text(encoding='utf-8')
    for match in re.finditer(
        r'(flax-optim-compat|python -m ([\w.]+))(?:[ \t]+([\w-]+))?', text):
      launcher, module, word = match.groups()
      if module in OTHER_MODULES:
        continue
      if word and (word in cli.COMMANDS or word.startswith('-')):
        forms.setdefault(launcher, set()).add(word)
      else:
        forms.setdefault(launcher, set())
  return forms


DOCUMENTED = _documented_forms()
LAUNCHERS = {cli.PROG: [CONSOLE_SCRIPT],
             f'python -m {OUR_MODULE}': [sys.executable, '-m', OUR_MODULE]}


def test_docs_show_only_commands_that_cannot_be_hijacked():
  assert set(DOCUMENTED) <= set(LAUNCHERS), DOCUMENTED
  # Both forms are shown, with every command of the tool among them.
  assert set(DOCUMENTED) == set(LAUNCHERS)
  shown = set().union(*DOCUMENTED.values())
  assert set(cli.COMMANDS) | {'--version'} <= shown, shown


@pytest.mark.parametrize('launcher', sorted(LAUNCHERS))
@pytest.mark.parametrize('project_name', ['module_project', 'package_project'])
def test_scan_runs_this_librarys_tool(launcher, project_name, request):
  project = request.getfixturevalue(project_name)
  result = _run(LAUNCHERS[launcher] + ['scan', '.'], project)
  assert result.returncode == scan.EXIT_FOUND, result.stdout + result.stderr
  assert re.search(r'train\.py:2 +FOC101 +import', result.stdout), result.stdout
  assert '1 file(s) could not' not in result.stdout


@pytest.mark.parametrize('launcher', sorted(LAUNCHERS))
def test_every_documented_command_is_this_librarys(launcher,
                                                  package_project):
  for word in sorted(DOCUMENTED.get(launcher, ()) | {'--help'}):
    if word in cli.COMMANDS:
      args, expected = [word, '--help'], f'usage: {cli.PROG} {word}'
    elif word == '--version':
      args, expected = [word], f'{cli.PROG} '
    else:
      args, expected = [word], f'usage: {cli.PROG} '
    result = _run(LAUNCHERS[launcher] + args, package_project)
    assert result.returncode == 0, (word, result.stdout + result.stderr)
    assert result.stdout.startswith(expected), (word, result.stdout)


def test_version_is_the_distributions():
  setup = configparser.ConfigParser()
  setup.read(REPO / 'setup.cfg')
  result = _run([CONSOLE_SCRIPT, '--version'], REPO)
  assert result.returncode == 0, result.stderr
  assert result.stdout == f'{cli.PROG} {setup["metadata"]["version"]}\n'


def test_closed_pipe_ends_quietly(tmp_path):
  """`flax-optim-compat scan . | head -1`: no traceback, no message."""
  _write(tmp_path, {'many.py': 'from flax import optim\n' * 2000})
  process = subprocess.Popen([CONSOLE_SCRIPT, 'scan', '.'], cwd=tmp_path,
                             env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  assert process.stdout.readline().startswith('location')
  process.stdout.close()  # far more than a pipe's buffer is still unwritten
  stderr = process.stderr.read()
  process.stderr.close()
  assert process.wait(timeout=120) == cli.EXIT_BROKEN_PIPE
  assert stderr == ''


@pytest.fixture(name='tree')
def _tree(tmp_path):
  files = ['app/main.py', 'app/build/gen.py', 'build/out.py',
           'app/proto/msg_pb2.py', 'app/build.py', 'vendor/lib/x.py',
           'app/vendor/keep.py']
  _write(tmp_path, {name: 'x = 1\n' for name in files})
  return tmp_path


def _scanned(root, exclude):
  return sorted(os.path.relpath(p, root).replace(os.sep, '/')
                for p in scan.iter_python_files([str(root)], exclude))


@pytest.mark.parametrize('exclude, skipped', [
    # A bare name: every directory or file of that name, at any depth.
    (['build'], ['app/build/gen.py', 'build/out.py']),
    (['build.py'], ['app/build.py']),
    (['build/'], ['app/build/gen.py', 'build/out.py']),
    # Globs on the name.
    (['*_pb2.py'], ['app/proto/msg_pb2.py']),
    (['bui*'], ['app/build.py', 'app/build/gen.py', 'build/out.py']),
    # A relative path matches that path's tail; full-path globs still work.
    (['vendor/lib'], ['vendor/lib/x.py']),
    (['*/vendor/*'], ['app/vendor/keep.py', 'vendor/lib/x.py']),
    (['build', 'proto'], ['app/build/gen.py', 'app/proto/msg_pb2.py',
                          'build/out.py']),
])
def test_exclude_takes_names_and_globs(tree, exclude, skipped):
  everything = _scanned(tree, [])
  assert len(everything) == 7
  assert sorted(set(everything) - set(_scanned(tree, exclude))) == skipped


def test_exclude_on_the_command_line(tree):
  result = _run([CONSOLE_SCRIPT, 'scan', '.', '--exclude', 'build',
                 '--exclude', 'vendor'], tree)
  assert result.returncode == scan.EXIT_CLEAN, result.stdout + result.stderr
  # Left: app/main.py, app/build.py, app/proto/msg_pb2.py.
  assert '0 flax.optim usage(s) in 3 file(s) scanned' in result.stdout


def test_library_is_quiet_and_the_warning_switch_works(tmp_path):
  """Importing and using the library prints nothing but its warnings, and
  the documented filter silences those."""
  code = textwrap.dedent('''
      import warnings
      import legacy_optim
      warnings.filterwarnings(
          'ignore', category=legacy_optim.LegacyOptimDeprecationWarning)
      import numpy as np
      from flax import optim
      import compat
      optimizer = optim.Adam(1e-3).create({'w': np.zeros(2, np.float32)})
      optimizer = optimizer.apply_gradient({'w': np.ones(2, np.float32)})
      compat.to_optax(optimizer)
      compat.to_train_state(optimizer, apply_fn=None)
      ''')
  result = _run([sys.executable, '-c', code], tmp_path)
  assert result.returncode == 0, result.stderr
  assert (result.stdout, result.stderr) == ('', '')


def test_import_hook_is_inert_until_flax_optim_is_imported(tmp_path):
  code = textwrap.dedent('''
      import sys, warnings
      warnings.simplefilter('error')
      import flax_optim_compat
      assert '_flax_optim_compat_hook' not in sys.modules
      import flax.linen, flax.training.train_state
      assert not hasattr(flax, 'not_an_attribute')
      ours = sorted(m for m in sys.modules
                    if m.split('.')[0] in ('legacy_optim', 'compat'))
      assert not ours, ours
      from flax import optim
      assert 'legacy_optim' in sys.modules
      print('OK')
      ''')
  result = _run([sys.executable, '-c', code], tmp_path)
  assert result.stdout == 'OK\n', result.stdout + result.stderr
