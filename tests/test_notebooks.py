"""Notebooks are code too (issue 24): scanned, and rewritten byte for byte.

tests/fixtures/notebooks holds one notebook in two layouts: as Colab saves
it (two-space indent, keys in Colab's order, non-ASCII characters as they
are, no trailing newline) and as ``json.dumps`` writes it by default (sorted
keys, one-space indent, ASCII escapes, a trailing newline); cells with
outputs (an image), metadata, IPython magics, and a source given as one
string. The expected lines below are written by hand.
"""

import difflib
import json
import os

import pytest

from compat.codemod import migrate
from compat.codemod import scan

NOTEBOOKS = os.path.join(os.path.dirname(__file__), 'fixtures', 'notebooks')
LAYOUTS = ('colab_like.ipynb', 'ascii_sorted_like.ipynb')

# The source lines migrate changes (JSON strings, decoded), per layout the
# same: what goes, and what comes.
REMOVED = [
    'import jax\n',
    'from flax import optim',
    '  return optim.GradientDescent(learning_rate=0.1).create(params)\n',
    '  return optimizer.apply_gradient(grads)',
    'print(optimizer.target)  # \u2192 poids',
    "weights = optimizer.target\nprint('poids \u2713', weights)",
]
ADDED = [
    'import optax\n',
    'from flax.training import train_state\n',
    '\n',
    'import jax',
    '  return train_state.TrainState.create(apply_fn=None, params=params, '
    'tx=optax.sgd(learning_rate=0.1))\n',
    '  return optimizer.apply_gradients(grads=grads)',
    'print(optimizer.params)  # \u2192 poids',
    "weights = optimizer.params\nprint('poids \u2713', weights)",
]


def read(name):
  with open(os.path.join(NOTEBOOKS, name), 'rb') as f:
    return f.read()


def source_string(json_line: str) -> str:
  """The string a changed JSON line holds (a list element, or a
  ``"source": "..."`` member)."""
  text = json_line.strip().rstrip(',')
  if text.startswith('"source": '):
    text = text[len('"source": '):]
  return json.loads(text)


def changed_lines(old: bytes, new: bytes):
  removed, added = [], []
  for line in difflib.unified_diff(old.decode().splitlines(),
                                   new.decode().splitlines(), n=0,
                                   lineterm=''):
    if line.startswith(('---', '+++', '@@')):
      continue
    (removed if line[0] == '-' else added).append(line[1:])
  return removed, added


def without_code_sources(document):
  for cell in document['cells']:
    if cell['cell_type'] == 'code':
      del cell['source']
  return document


@pytest.mark.parametrize('name', LAYOUTS)
def test_the_rewrite_changes_only_the_changed_source_lines(name):
  raw = read(name)
  new, plan = migrate.migrate_notebook(raw, name)
  assert not plan.leftovers
  removed, added = changed_lines(raw, new)
  assert [source_string(l) for l in removed] == REMOVED
  assert [source_string(l) for l in added] == ADDED
  # Every line the diff does not name is the old line, byte for byte (the
  # diff above has no others), and the file ends as it did.
  assert new.endswith(b'\n') == raw.endswith(b'\n')
  assert without_code_sources(json.loads(new)) == without_code_sources(
      json.loads(raw))


def test_new_lines_keep_the_files_escaping():
  colab, _ = migrate.migrate_notebook(read('colab_like.ipynb'), 'c.ipynb')
  ascii_only, _ = migrate.migrate_notebook(read('ascii_sorted_like.ipynb'),
                                           'a.ipynb')
  assert '"print(optimizer.params)  # \u2192 poids"' in colab.decode()
  assert '"print(optimizer.params)  # \\u2192 poids"' in ascii_only.decode()
  assert max(ascii_only) < 128


@pytest.mark.parametrize('name', LAYOUTS)
def test_a_second_run_changes_nothing(name):
  new, _ = migrate.migrate_notebook(read(name), name)
  again, plan = migrate.migrate_notebook(new, name)
  assert again == new
  assert not plan.edits


def test_scan_reads_notebooks_at_the_notebook_files_lines():
  result = scan.scan_paths([NOTEBOOKS])
  assert result.errors == []
  found = {(os.path.basename(f.path), f.line, f.construct)
           for f in result.findings}
  # Lines of the JSON files holding `from flax import optim`, the
  # definition with its .create, .apply_gradient and the two reads of
  # optimizer.target (FOC118, which migrate rewrites).
  assert found == {
      ('colab_like.ipynb', 32, 'import'),
      ('colab_like.ipynb', 53, 'optimizer_def'),
      ('colab_like.ipynb', 53, 'create'),
      ('colab_like.ipynb', 57, 'apply_gradient'),
      ('colab_like.ipynb', 71, 'optimizer_use'),
      ('colab_like.ipynb', 102, 'optimizer_use'),
      ('ascii_sorted_like.ipynb', 31, 'import'),
      ('ascii_sorted_like.ipynb', 44, 'optimizer_def'),
      ('ascii_sorted_like.ipynb', 44, 'create'),
      ('ascii_sorted_like.ipynb', 48, 'apply_gradient'),
      ('ascii_sorted_like.ipynb', 83, 'optimizer_use'),
      ('ascii_sorted_like.ipynb', 93, 'optimizer_use'),
  }
  lines = read('colab_like.ipynb').decode().splitlines()
  assert 'from flax import optim' in lines[32 - 1]
  assert 'apply_gradient(grads)' in lines[57 - 1]
  assert 'optimizer.target' in lines[71 - 1]
  assert 'optimizer.target' in lines[102 - 1]


def test_leftovers_in_a_notebook_are_reported_at_its_lines(tmp_path):
  notebook = {'cells': [
      {'cell_type': 'code', 'metadata': {}, 'outputs': [],
       'execution_count': None,
       'source': ['from flax import optim\n',
                  'opt_def = optim.WeightNorm(optim.Adam(0.1), **options)'
                  ]}],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
  raw = json.dumps(notebook, indent=1).encode()
  _, plan = migrate.migrate_notebook(raw, 'w.ipynb')
  lines = raw.decode().splitlines()
  assert plan.leftovers
  for leftover in plan.leftovers:
    assert 'WeightNorm' in lines[leftover.line - 1], leftover
  # What is left in the output: at the file's lines, shown as Python.
  path = tmp_path / 'w.ipynb'
  path.write_bytes(raw)
  result = migrate.migrate_file(str(path))
  assert {(l.line, l.construct, l.code) for l in result.left} >= {
      (lines.index('    "from flax import optim\\n",') + 1, 'import',
       'from flax import optim'),
      (lines.index('    "opt_def = optim.WeightNorm(optim.Adam(0.1), '
                   '**options)"') + 1, 'weight_norm',
       'opt_def = optim.WeightNorm(optim.Adam(0.1), **options)')}


def test_a_byte_order_mark_stays():
  raw = read('colab_like.ipynb')
  new, _ = migrate.migrate_notebook(b'\xef\xbb\xbf' + raw, 'bom.ipynb')
  assert new.startswith(b'\xef\xbb\xbf')
  removed, added = changed_lines(raw, new[3:])
  assert [source_string(l) for l in removed] == REMOVED
  assert [source_string(l) for l in added] == ADDED


def test_cell_magics_and_continued_shell_lines_are_not_python(tmp_path):
  # IPython's own reading (nerfies' and scenic's Colabs): a ``%%`` cell is
  # the magic's input, and a shell line ending in a backslash goes on, at
  # any indentation. Both stay byte for byte; the Python around is migrated.
  notebook = {'cells': [
      {'cell_type': 'code', 'execution_count': None, 'metadata': {},
       'outputs': [], 'source': [
           '%%bash\n', 'pip install flax==0.5.3\n',
           'if [ -d x ]; then echo $x; fi']},
      {'cell_type': 'code', 'execution_count': None, 'metadata': {},
       'outputs': [], 'source': [
           'from flax import optim\n',
           'if True:\n',
           '  !python -m train \\\n',
           '      --config=a.py \\\n',
           '  --workdir=./\n',
           '  opt_def = optim.GradientDescent(learning_rate=0.1)']}],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
  raw = json.dumps(notebook, indent=1).encode()
  path = tmp_path / 'shell.ipynb'
  path.write_bytes(raw)
  result = scan.scan_paths([str(path)])
  assert result.errors == []
  lines = raw.decode().splitlines()
  assert {(f.line, f.construct) for f in result.findings} == {
      (lines.index('    "from flax import optim\\n",') + 1, 'import'),
      (lines.index('    "  opt_def = optim.GradientDescent(learning_rate='
                   '0.1)"') + 1, 'optimizer_def')}
  new, _ = migrate.migrate_notebook(raw, 'shell.ipynb')
  removed, added = changed_lines(raw, new)
  assert [source_string(line) for line in removed] == [
      'from flax import optim\n',
      '  opt_def = optim.GradientDescent(learning_rate=0.1)']
  assert [source_string(line) for line in added] == [
      'import optax\n', '\n', '  opt_def = optax.sgd(learning_rate=0.1)']
