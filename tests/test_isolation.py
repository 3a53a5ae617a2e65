"""``scan`` and ``migrate`` never stop on one file (issue 24).

A file that cannot be read, parsed or analysed (whatever the analysis
raises, RecursionError included) is listed with the reason; every other file
is still scanned or migrated, and the exit status says that files were left
out.
"""

import contextlib
import io
import os

import pytest

from compat.codemod import _names
from compat.codemod import migrate
from compat.codemod import scan

ISOLATION = os.path.join(os.path.dirname(__file__), 'fixtures', 'isolation')
GOOD = ('from flax import optim\n\n\ndef make(params):\n'
        '  return optim.Momentum(learning_rate=0.1).create(params)\n')


def run_scan(argv):
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    status = scan.main(argv)
  return status, out.getvalue()


@pytest.fixture
def failing_analysis(monkeypatch):
  """The per-file analysis raises for every file named ``bad*.py``."""
  original = scan._Visitor.__init__

  def init(self, path, module, lines):
    if os.path.basename(path).startswith('bad'):
      raise ZeroDivisionError('an analysis bug')
    original(self, path, module, lines)

  monkeypatch.setattr(scan._Visitor, '__init__', init)


@pytest.fixture
def tree(tmp_path):
  (tmp_path / 'good.py').write_text(GOOD)
  (tmp_path / 'bad_module.py').write_text(GOOD)
  return tmp_path


def test_scan_lists_a_file_whose_analysis_raises_and_scans_the_rest(
    tree, failing_analysis):
  del failing_analysis
  result = scan.scan_paths([str(tree)])
  assert result.files_scanned == 2
  assert {(os.path.basename(f.path), f.line, f.construct)
          for f in result.findings} == {
              ('good.py', 1, 'import'), ('good.py', 5, 'optimizer_def'),
              ('good.py', 5, 'create')}
  assert [(os.path.basename(e.path), e.line, e.message)
          for e in result.errors] == [
              ('bad_module.py', None, 'analysis failed, file skipped: '
               'ZeroDivisionError: an analysis bug')]
  err = io.StringIO()
  with contextlib.redirect_stderr(err):
    status, _ = run_scan([str(tree)])
  assert status == scan.EXIT_FOUND
  assert 'bad_module.py:?  not scanned: analysis failed' in err.getvalue()
  # Nothing found, but a file left out: never the clean status.
  (tree / 'good.py').unlink()
  assert run_scan([str(tree)])[0] == scan.EXIT_UNPARSEABLE


def test_migrate_leaves_a_file_whose_analysis_raises_and_migrates_the_rest(
    tree, failing_analysis):
  del failing_analysis
  _, results = migrate.migrate_paths([str(tree)])
  by_name = {os.path.basename(r.path): r for r in results}
  assert by_name['bad_module.py'].new == by_name['bad_module.py'].old
  assert by_name['bad_module.py'].error == (
      'analysis failed, file skipped: ZeroDivisionError: an analysis bug')
  assert by_name['good.py'].error is None
  assert b'optax.sgd(learning_rate=0.1, momentum=0.9)' in by_name[
      'good.py'].new
  report = migrate.format_report(results, [], 'exact')
  assert 'Not migrated: analysis failed' in report
  assert '1 file(s) not migrated' in report
  err = io.StringIO()
  with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
      err):
    status = migrate.main([str(tree / 'bad_module.py')])
  assert status == migrate.EXIT_LEFT  # nothing to change, a file left out
  assert 'bad_module.py: not migrated: analysis failed' in err.getvalue()


def test_an_error_across_modules_leaves_each_file_scanned_alone(
    tree, monkeypatch):
  def raising(modules):
    raise RecursionError('maximum recursion depth exceeded')

  monkeypatch.setattr(_names, 'project_reexports', raising)
  result = scan.scan_paths([str(tree)])
  assert {os.path.basename(f.path) for f in result.findings} == {
      'good.py', 'bad_module.py'}
  assert [(e.path, e.message) for e in result.errors] == [
      (scan.ACROSS_MODULES, 'analysis failed, file skipped: RecursionError: '
       'maximum recursion depth exceeded')]
  assert result.files_scanned == 2


def test_unreadable_and_non_notebook_files_are_listed(tmp_path):
  (tmp_path / 'good.py').write_text(GOOD)
  (tmp_path / 'not_json.ipynb').write_text('{"cells": [')
  (tmp_path / 'not_a_notebook.ipynb').write_text('[1, 2]')
  (tmp_path / 'latin1.py').write_bytes(b'# -*- coding: utf-8 -*-\nx = "\xe9"\n')
  result = scan.scan_paths([str(tmp_path)])
  assert sorted(os.path.basename(e.path) for e in result.errors) == [
      'latin1.py', 'not_a_notebook.ipynb', 'not_json.ipynb']
  assert all(e.message.startswith(('unreadable: ', 'syntax error: '))
             for e in result.errors), result.errors
  assert {os.path.basename(f.path) for f in result.findings} == {'good.py'}
  _, results = migrate.migrate_paths([str(tmp_path)])
  errors = {os.path.basename(r.path): r.error for r in results}
  assert errors['good.py'] is None
  assert all(errors[name] for name in ('latin1.py', 'not_a_notebook.ipynb',
                                       'not_json.ipynb'))


def test_self_recursive_functions_never_stop_a_run():
  """flax 0.12.8's core/spmd.py shapes: whatever the analysis makes of
  recursive_like.py, the run goes on and train_like.py is scanned."""
  result = scan.scan_paths([ISOLATION])
  train = {(f.line, f.construct) for f in result.findings
           if f.path.endswith('train_like.py')}
  assert train == {(1, 'import'), (5, 'optimizer_def'), (5, 'create')}
  for error in result.errors:
    assert error.path.endswith('recursive_like.py')
    assert 'RecursionError' in error.message
  _, results = migrate.migrate_paths([ISOLATION])
  train_result = next(r for r in results if r.path.endswith('train_like.py'))
  assert b'flax_optim_rules.adam(learning_rate=0.1)' in train_result.new


def test_self_recursive_functions_are_analysed():
  result = scan.scan_paths([os.path.join(ISOLATION, 'recursive_like.py')])
  assert result.errors == []
