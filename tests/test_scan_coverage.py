"""scan reports every statement migrate changes or leaves.

A work list, a CI gate and a pre-commit hook read scan, so what migrate
would rewrite or leave must show there too: each statement with a changed
or left line carries a scan finding (``scripts/corpus.py``'s
``unreported_statements``; lines migrate only adds, its imports, are not
statements of the old source).
"""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / 'tests' / 'fixtures'


def _corpus():
  spec = importlib.util.spec_from_file_location(
      'corpus', ROOT / 'scripts' / 'corpus.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize('tree', ['migrate', 'scan_tree'])
def test_every_statement_migrate_touches_has_a_finding(tree):
  touched, unreported = _corpus().unreported_statements(
      [str(FIXTURES / tree)])
  assert touched > 20  # the fixtures' flows are migrated
  assert unreported == []


def test_a_create_passed_as_a_value_is_found(tmp_path):
  source = tmp_path / 'train.py'
  source.write_text(
      'import jax\n'
      'from flax import optim\n'
      '\n'
      '\n'
      'def make(params):\n'
      '  definition = optim.Adam(learning_rate=0.1)\n'
      "  return jax.jit(definition.create, backend='cpu')(params)\n")
  from compat.codemod import scan
  found = scan.scan_paths([str(tmp_path)]).findings
  assert [(f.line, f.rule) for f in found if f.line == 7] == [(7, 'FOC108')]
