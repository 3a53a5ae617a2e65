"""Two runnable copies of someone else's code: as written, and migrated.

Used by tests/test_migrate_examples.py (flax's own v0.3.3 examples) and
tests/test_corpus_train.py (research repositories, tests/corpus/repos.toml):

- *original*: the code with only ``migrate``'s neighbouring-removal edits
  (``jax.tree_map``, ``from jax.config import config``...), so that the old
  code runs on today's jax at all; its ``flax.optim`` code is untouched and
  runs through this library's import alias;
- *migrated*: ``migrate --tier exact``'s output.
"""

import importlib.util
import os
import shutil

import _legacy_imports

from compat.codemod import _removals
from compat.codemod import _rewrite_plan
from compat.codemod import migrate


def removals_only(source: bytes, path: str) -> bytes:
  """``source`` with only migrate's neighbouring-removal edits applied, and
  the imports they need (``functools`` for ``jax.partial``)."""
  _, plan = migrate.migrate_source(source, path)
  edits = [e for e in plan.edits if e.construct == 'removed_api']
  rendered, dropped = _rewrite_plan.render(source, edits)
  assert not dropped, dropped
  needed = {_removals.needed_import(e.template) for e in edits}
  imports = [i for i in plan.imports if i == (i[0], None, None) and
             i[0] in needed]
  if not imports:
    return rendered
  text = rendered.decode('utf-8')
  return migrate._fix_imports(  # noqa: SLF001 - migrate's own step
      text, plan._replace(imports=imports, removed_imports=[])).encode('utf-8')


def copies(source_dir, tmp_path, exclude=(), unsafe_fixes=False):
  """``(original_dir, migrated_dir, problems)`` of the .py files under
  ``source_dir`` (migrated as one project; ``unsafe_fixes``: with
  ``--unsafe-fixes``). ``problems``: what keeps the
  migrated copy from running without the shim, one line per file: a file
  migrate could not read, its leftovers, its imports of flax.optim,
  legacy_optim or compat."""
  original, migrated = tmp_path / 'original', tmp_path / 'migrated'
  for target in (original, migrated):
    shutil.copytree(source_dir, target)
  sources, results = migrate.migrate_paths([str(source_dir)], 'exact',
                                           exclude=exclude,
                                           unsafe_fixes=unsafe_fixes)
  problems = []
  for path, result in zip(sources, results):
    if not path.endswith('.py'):
      continue
    relative = os.path.relpath(path, source_dir)
    if result.error is not None:
      problems.append(f'{relative}: not migrated: {result.error}')
      continue
    (original / relative).write_bytes(removals_only(result.old, relative))
    problems += [f'{relative}:{left.line}: {left.construct}: {left.reason}'
                 for left in result.plan.leftovers]
    problems += [f'{relative}: imports {name}'
                 for name in _legacy_imports.legacy_imports(result.new)]
    (migrated / relative).write_bytes(result.new)
  return original, migrated, problems


def assert_bit_identical(old: dict, new: dict, min_steps: int = 5) -> None:
  """Two drivers' runs (``stepN/params/...``, ``stepN/metrics/...`` ->
  array) hold the same keys, at least ``min_steps`` steps, and equal bytes,
  dtypes and shapes under each key."""
  assert sorted(old) == sorted(new)
  steps = {key.split('/')[0] for key in old}
  assert len(steps) >= min_steps, steps
  for key in sorted(old):
    a, b = old[key], new[key]
    assert a.dtype == b.dtype and a.shape == b.shape, key
    assert a.tobytes() == b.tobytes(), (key, a, b)


def load_module(path, name):
  """The module of the file ``path``, run under ``name`` (a copy's)."""
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
