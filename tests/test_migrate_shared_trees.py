"""``migrate`` plans a module on the tree the project's model parsed of
the same source (its names, its walk and what its flows collected are the
model's, kept for the run), not on a second parse of its own; and re-scans
a rewritten module on the tree its self-check parsed."""

import ast

from compat.codemod import migrate

_MODULES = {
    'helpers.py': '''from flax import optim


def make(params):
  return optim.Adam(0.1).create(params)
''',
    'train.py': '''import helpers


def train(params, grads):
  optimizer = helpers.make(params)
  return optimizer.apply_gradient(grads).target
''',
}


def _migrate_noting_parses(tmp_path, monkeypatch) -> tuple:
  """migrate's results over ``_MODULES`` and every source ``ast.parse``
  was given meanwhile, as given (bytes or str)."""
  for name, text in _MODULES.items():
    (tmp_path / name).write_text(text)
  parsed = []
  parse = ast.parse

  def noting(source, *args, **kwargs):
    parsed.append(source)
    return parse(source, *args, **kwargs)

  monkeypatch.setattr(ast, 'parse', noting)
  _, results = migrate.migrate_paths([str(tmp_path)])
  assert [r.new != r.old for r in results] == [True, True]  # both migrate
  return results, parsed


def test_each_module_is_parsed_once_for_the_model_and_its_plan(
    tmp_path, monkeypatch):
  _, parsed = _migrate_noting_parses(tmp_path, monkeypatch)
  parsed = [s if isinstance(s, bytes) else s.encode() for s in parsed]
  assert [parsed.count(text.encode()) for text in _MODULES.values()] == [1, 1]


def test_each_rewritten_module_is_parsed_once_for_its_check_and_rescan(
    tmp_path, monkeypatch):
  results, parsed = _migrate_noting_parses(tmp_path, monkeypatch)
  # (the output as bytes: the import fix parses its text, before fixing
  # the imports, as a str, and that text is the output where no import
  # changes)
  assert [parsed.count(r.new) for r in results] == [1, 1]
