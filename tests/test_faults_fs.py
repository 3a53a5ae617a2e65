"""What ``scan`` and ``migrate`` do with the file system (issue 41).

Nothing a user owns is rewritten where git cannot give it back, nothing
hangs on a tree whose links loop, nothing is skipped without a word, the
bytes of a rewritten file are kept, and a ``--write`` stopped at any point
is finished or undone by the next run. (``convert --force`` and files it
did not write: tests/test_checkpoints.py.)
"""

import codecs
import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from compat.codemod import migrate
from compat.codemod import scan

GOOD = ('from flax import optim\n\n\ndef make(params):\n'
        '  return optim.Momentum(learning_rate=0.1).create(params)\n')
MIGRATED = b'optax.sgd(learning_rate=0.1, momentum=0.9)'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(main, args, cwd):
  """``main(args)`` in this process from ``cwd``: (status, out, err)."""
  out, err = io.StringIO(), io.StringIO()
  previous = os.getcwd()
  os.chdir(cwd)
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      status = main(list(args))
  finally:
    os.chdir(previous)
  return status, out.getvalue(), err.getvalue()


def git(args, cwd):
  subprocess.run(['git', *args], cwd=cwd, check=True, capture_output=True,
                 env={**os.environ, 'GIT_AUTHOR_NAME': 't',
                      'GIT_AUTHOR_EMAIL': 't@t', 'GIT_COMMITTER_NAME': 't',
                      'GIT_COMMITTER_EMAIL': 't@t'})


@pytest.fixture
def repo(tmp_path):
  """A git work tree with two committed modules holding usages."""
  root = tmp_path / 'repo'
  root.mkdir()
  for name in ('a.py', 'b.py'):
    (root / name).write_text(GOOD)
  git(['init', '-q'], root)
  git(['add', '.'], root)
  git(['commit', '-qm', 'old code'], root)
  return root


def _listing(root):
  """Every path under ``root`` but .git's."""
  found = []
  for directory, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if d != '.git']
    found += [os.path.relpath(os.path.join(directory, name), root)
              for name in dirs + files]
  return sorted(found)


# Fault 2: a file git ignores was rewritten in place, with no copy anywhere.
def test_write_refuses_files_git_does_not_track(repo):
  (repo / '.gitignore').write_text('gen/\n')
  git(['add', '.gitignore'], repo)
  git(['commit', '-qm', 'ignore gen'], repo)
  (repo / 'gen').mkdir()
  (repo / 'gen' / 'g.py').write_text(GOOD)
  status, _, err = run(migrate.main, ['--write', '.'], repo)
  assert status == migrate.EXIT_USAGE
  assert 'git does not track' in err and 'gen/g.py' in err
  assert 'a.py' not in err  # only the files it cannot restore are named
  for path in ('gen/g.py', 'a.py', 'b.py'):  # refused whole: none written
    assert (repo / path).read_text() == GOOD


# Fault 3: the copy of --out followed a link looping back up the tree.
def test_out_copies_a_link_to_a_directory_as_a_link(tmp_path):
  src = tmp_path / 'src'
  (src / 'pkg').mkdir(parents=True)
  (src / 'pkg' / 'a.py').write_text(GOOD)
  (src / 'pkg' / 'up').symlink_to('..')  # src/pkg/up/pkg/up/... forever
  out = tmp_path / 'out'
  status, _, err = run(migrate.main, [str(src), '--out', str(out)], tmp_path)
  assert status == migrate.EXIT_CLEAN, err
  assert _listing(out) == ['pkg', 'pkg/a.py', 'pkg/up']
  assert os.readlink(out / 'pkg' / 'up') == '..'
  assert MIGRATED in (out / 'pkg' / 'a.py').read_bytes()
  assert sorted(os.listdir(tmp_path)) == ['out', 'src']  # no temporary left


# Fault 3: stopped (SIGTERM), --out left its temporary directory behind.
def test_sigterm_during_out_removes_what_it_was_writing(tmp_path):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'a.py').write_text(GOOD)
  (src / 'data.txt').write_text('x')
  script = textwrap.dedent(f'''
      import os, shutil, signal, sys
      from compat import cli
      real = shutil.copyfile
      def copyfile(*args, **kwargs):  # stopped in the middle of the copy
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)
      shutil.copyfile = copyfile
      sys.exit(cli.main(['migrate', {str(src)!r}, '--out',
                         {str(tmp_path / 'out')!r}]))
  ''')
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=120, check=False,
                        env={**os.environ, 'PYTHONPATH': ROOT})
  assert done.returncode == 130, done.stderr
  assert 'stopped by SIGTERM' in done.stderr
  assert sorted(os.listdir(tmp_path)) == ['src']


def _unlistable(monkeypatch, name):
  """``os.scandir`` refuses the directories called ``name``, as it does
  for another user's ``chmod 000`` directory (this may run as root, who
  can list those)."""
  real = os.scandir

  def scandir(path='.'):
    if not isinstance(path, int) and os.path.basename(
        os.fspath(path)) == name:
      raise PermissionError(13, 'Permission denied', os.fspath(path))
    return real(path)

  monkeypatch.setattr(os, 'scandir', scandir)


# Fault 4: an unreadable directory was passed over: a false all-clear.
def test_an_unreadable_directory_is_reported_and_counted(tmp_path,
                                                         monkeypatch):
  (tmp_path / 'secret').mkdir()
  (tmp_path / 'secret' / 'a.py').write_text(GOOD)
  (tmp_path / 'modern.py').write_text('import optax\n')
  _unlistable(monkeypatch, 'secret')
  status, out, err = run(scan.main, [str(tmp_path)], tmp_path)
  assert status == scan.EXIT_UNPARSEABLE, out
  assert f'{tmp_path}/secret:?  not scanned: directory not read' in err
  assert 'PermissionError' in err
  assert '1 file(s) or directories could not be read' in out
  status, _, err = run(migrate.main, ['--diff', str(tmp_path)], tmp_path)
  assert status == migrate.EXIT_LEFT
  assert 'secret: not migrated: directory not read' in err
  out = tmp_path.parent / f'{tmp_path.name}-out'
  status, _, err = run(migrate.main, [str(tmp_path), '--out', str(out)],
                       tmp_path)
  assert status == migrate.EXIT_LEFT
  assert f'secret: not copied to {out}: PermissionError' in err


# Fault 5: --diff said nothing of the files it could not read; scan read
# invalid UTF-8 migrate refused; a NUL byte was "syntax error line None".
@pytest.mark.parametrize('mode', [['--diff'], [], ['--out', 'out']])
def test_every_mode_names_the_files_it_skipped_on_stderr(tmp_path, mode):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'good.py').write_text(GOOD)
  (src / 'nul.py').write_bytes(b'x = 1\ny = 2\x00\n')
  (src / 'latin.py').write_bytes(GOOD.encode() + b'# caf\xe9\n')
  status, _, err = run(migrate.main, ['src', *mode], tmp_path)
  assert status == migrate.EXIT_LEFT
  assert ('src/nul.py: not migrated: unreadable: NotSourceText: line 2 '
          'holds a NUL byte') in err
  assert 'src/latin.py: not migrated: unreadable: NotSourceText: line 6: ' \
      'byte 0xe9 is not utf-8' in err
  result = scan.scan_paths([str(src)])  # the same reader, the same verdict
  assert sorted((os.path.basename(e.path), e.line) for e in result.errors
                ) == [('latin.py', 6), ('nul.py', 2)]


# Fault 6: the byte order mark went; an encoding declaration too.
@pytest.mark.parametrize('head,tail', [
    (codecs.BOM_UTF8, b'\r\n# caf\xc3\xa9\r\n'),
    (b'# -*- coding: latin-1 -*-\n', b'# caf\xe9\n')])
def test_a_rewritten_file_keeps_its_bytes(head, tail):
  old = head + GOOD.encode() + tail
  new, _ = migrate.migrate_source(old, 'm.py')
  assert MIGRATED in new
  assert new.startswith(head) and new.endswith(tail)
  assert new.count(codecs.BOM_UTF8) == old.count(codecs.BOM_UTF8)


def _kill_write_at(call, repo):
  """Runs ``migrate --write .`` in ``repo``, killed outright (nothing
  cleans up) when ``os.<call>`` is first given b.py's path or one
  written beside it."""
  script = textwrap.dedent(f'''
      import os, sys
      from compat import cli
      real = os.{call}
      def killed(*args, **kwargs):
        if any('b.py' in os.path.basename(str(a)) for a in args):
          os._exit(9)
        return real(*args, **kwargs)
      os.{call} = killed
      sys.exit(cli.main(['migrate', '--write', '.']))
  ''')
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=120, check=False, cwd=repo,
                        env={**os.environ, 'PYTHONPATH': ROOT})
  assert done.returncode == 9, done.stderr


# Smaller: killed during --write, a complete temporary file stayed in the
# tree and the project was left half migrated (a.py written, b.py not).
@pytest.mark.parametrize('call', ['chmod', 'replace'])
def test_a_killed_write_is_finished_or_undone_by_the_next_run(repo, call):
  _kill_write_at(call, repo)
  status, _, err = run(migrate.main, ['--write', '.'], repo)
  assert status == migrate.EXIT_CLEAN, err
  assert ('finished' if call == 'replace' else 'undid') in err
  for name in ('a.py', 'b.py'):
    assert MIGRATED in (repo / name).read_bytes()
  assert _listing(repo) == ['a.py', 'b.py']  # nothing else left behind
  assert not list((repo / '.git').glob('flax-optim-compat*'))


# Smaller: SIGINT during --write was held to the end without a word.
def test_sigint_during_write_says_what_it_is_doing(repo, monkeypatch):
  real = os.replace

  def interrupted(source, destination):
    if os.path.basename(destination) == 'a.py':
      os.kill(os.getpid(), signal.SIGINT)
    return real(source, destination)

  monkeypatch.setattr(os, 'replace', interrupted)
  try:
    status, _, err = run(migrate.main, ['--write', '.'], repo)
  except KeyboardInterrupt:
    pytest.fail('the interrupt stopped the write midway, unannounced')
  assert status == 130
  assert 'interrupted while renaming the 2 rewritten file(s) into place: ' \
      'finishing' in err
  for name in ('a.py', 'b.py'):  # the project is written whole
    assert MIGRATED in (repo / name).read_bytes()


# Smaller: an interrupt before the point of no return changes nothing, and
# says so.
def test_sigint_while_staging_the_write_changes_nothing(repo, monkeypatch):
  real = os.fsync

  def interrupted(fd):
    if list(repo.glob('.b.py.*')):  # b.py's new content being written
      os.kill(os.getpid(), signal.SIGINT)
    return real(fd)

  monkeypatch.setattr(os, 'fsync', interrupted)
  try:
    status, _, err = run(migrate.main, ['--write', '.'], repo)
  except KeyboardInterrupt:
    pytest.fail('the interrupt escaped unannounced')
  assert status == 130
  assert 'stopped before any file was rewritten: nothing changed' in err
  for name in ('a.py', 'b.py'):
    assert (repo / name).read_text() == GOOD
  assert _listing(repo) == ['a.py', 'b.py']
  assert not list((repo / '.git').glob('flax-optim-compat*'))
