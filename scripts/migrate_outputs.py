"""migrate's output and report on real code, compared with recorded digests.

A refactor of the codemod must not change what ``migrate`` writes for code it
is not about. ``tests/corpus/outputs.toml`` records, for each corpus
repository (``[corpus.NAME]``) and each of flax v0.3.3's examples
(``[examples.NAME]``), the sha256 of ``migrate --diff``'s standard output and
of its ``--report`` file, run on the whole extracted tree. The tree's own
location is replaced by ``<ROOT>`` before hashing (the diff and the report name
files relative to the working directory, the notes by absolute path), so a
digest does not depend on where the tree was extracted.

``scripts/corpus.py`` (``tox -e corpus``) and ``scripts/migrate_examples.py``
(``tox -e migrate-examples``) compare each tree they read; a mismatch fails,
naming the row. A change of output that is meant: list it (and why) in the
issue's closing note, then record the new digests with ``--record-outputs``
on either script.
"""

import hashlib
import os
import re
import subprocess
import sys
import tempfile

try:  # Python 3.11+
  import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli (install_requires has it)
  import tomli as tomllib

REPOSITORY = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
OUTPUTS_FILE = 'tests/corpus/outputs.toml'  # as the messages name it
OUTPUTS = os.path.join(REPOSITORY, *OUTPUTS_FILE.split('/'))
PLACEHOLDER = '<ROOT>'
FIELDS = ('diff', 'report')
_HEADER = (
    '# sha256 of `migrate --diff`\'s output and of its --report file on each\n'
    '# corpus repository and flax v0.3.3 example, the tree\'s location\n'
    '# written <ROOT> (scripts/migrate_outputs.py). A mismatch fails tox -e\n'
    '# corpus / migrate-examples: a change that is meant is listed in the\n'
    '# closing note, then recorded with --record-outputs.\n')


def normalise(text: str, root: str, cwd: str) -> str:
  """``text`` with ``root`` written ``<ROOT>``, as an absolute path and as
  the path relative to ``cwd`` (one pass: at each place the longer form that
  matches wins, so neither is cut inside the other)."""
  forms = {os.path.abspath(root), os.path.relpath(root, cwd)}
  pattern = '|'.join(re.escape(form) + r'(?=/|\b|$)' for form in
                     sorted(forms, key=len, reverse=True))
  return re.sub(pattern, PLACEHOLDER, text)


def digest(text: str) -> str:
  return hashlib.sha256(text.encode('utf-8')).hexdigest()


def digests_of(diff: str, report: str, root: str, cwd: str) -> dict:
  """``{'diff': sha256, 'report': sha256}`` of the normalised texts."""
  return {'diff': digest(normalise(diff, root, cwd)),
          'report': digest(normalise(report, root, cwd))}


def migrate_outputs(root: str, unsafe_fixes: bool = False) -> dict:
  """The digests of ``migrate --diff --report`` (with ``--unsafe-fixes``
  where ``unsafe_fixes``) run on ``root`` by the command line, from this
  repository's directory."""
  with tempfile.TemporaryDirectory(prefix='migrate-outputs-') as tmp:
    report = os.path.join(tmp, 'report.md')
    run = subprocess.run(
        [sys.executable, '-m', 'compat', 'migrate', '--diff', '--report',
         report, *(['--unsafe-fixes'] if unsafe_fixes else []),
         os.path.abspath(root)],
        cwd=REPOSITORY, capture_output=True, check=False)
    with open(report, encoding='utf-8') as f:
      written = f.read()
  return digests_of(run.stdout.decode('utf-8'), written, root, REPOSITORY)


def load_outputs(path: str = OUTPUTS) -> dict:
  """``{'corpus': {name: {'diff', 'report'}}, 'examples': {...}}``; a
  ``ValueError`` names an entry that is not exactly two sha256 digests."""
  with open(path, 'rb') as f:
    recorded = tomllib.load(f)
  for group, rows in recorded.items():
    for name, row in rows.items():
      if not isinstance(row, dict) or set(row) != set(FIELDS) or not all(
          isinstance(v, str) and re.fullmatch('[0-9a-f]{64}', v)
          for v in row.values()):
        raise ValueError(f'{path}: [{group}.{name}] must give exactly '
                         f'{list(FIELDS)} as sha256 hex digests, found '
                         f'{row!r}')
  return recorded


def compare_outputs(group: str, measured: dict, recorded: dict) -> list:
  """One failure line per row of ``measured`` (``{name: digests}``) whose
  digests differ from ``recorded[group]`` or are not recorded."""
  failures = []
  rows = recorded.get(group, {})
  hint = (f'if the change is meant, list it in the closing note and record '
          f'it: --record-outputs (writes {OUTPUTS_FILE})')
  for name, digests in sorted(measured.items()):
    if name not in rows:
      failures.append(f'{group}.{name}: migrate\'s output has no recorded '
                      f'digest; {hint}')
      continue
    changed = [f for f in FIELDS if digests[f] != rows[name][f]]
    if changed:
      failures.append(f'{group}.{name}: migrate\'s {" and ".join(changed)} '
                      f'changed; {hint}')
  return failures


def record_outputs(group: str, measured: dict, path: str = OUTPUTS) -> None:
  """Writes ``measured``'s digests into ``group`` of ``path``, keeping the
  other rows and groups."""
  recorded = load_outputs(path) if os.path.exists(path) else {}
  recorded.setdefault(group, {}).update(measured)
  lines = [_HEADER]
  for group_name in sorted(recorded):
    for name, row in sorted(recorded[group_name].items()):
      lines.append(f'\n[{group_name}.{name}]\n' + ''.join(
          f'{field} = "{row[field]}"\n' for field in FIELDS))
  with open(path, 'w', encoding='utf-8') as f:
    f.write(''.join(lines))
