"""``scan`` and ``migrate`` (both tiers) on public research repositories.

Run by ``tox -e corpus`` (as ruff's ecosystem check runs ruff on other
people's code). The repositories, their pinned commits and the subdirectories
read are one table, ``tests/corpus/repos.toml``. Each is got at its commit
into ``--into`` (default: a temporary directory), never committed:

- from a local mirror when ``FLAX_OPTIM_CORPUS_MIRRORS`` names a directory
  holding ``owner+name`` git directories (``owner+name``, ``owner+name/repo``
  or ``owner+name/repo/.git``): ``git archive COMMIT PATHS | tar -x``;
- else by ``git clone`` from github.com and ``git checkout COMMIT``.

A repository the mirrors do not hold at its commit is named "not
available" below the table and is no failure (a repository added to the
table is mirrored later); one that cannot be cloned from github.com is named
"NOT GOT" and the run exits 2 after the table. For each repository that was
got it prints one row:

usages    the INDEPENDENT count (``count_usages``, a plain AST pass that
          shares no code with ``scan``): each import of flax.optim (one per
          imported name), each reference chain that resolves to flax.optim
          (``optim.Adam``, ``flax.optim.OptimizerDef``,
          ``optim.Adam.create``: one per outermost chain) and each load of a
          name imported from flax.optim; in .py files and notebooks' code
          cells. Not followed: a user's own module that re-exports
          flax.optim, nor methods called on optimizer objects
          (``.apply_gradient``), which are not flax.optim names;
found     how many of those usages sit on a line where ``scan`` reports a
          finding (any construct);
rewritten usages that are gone from ``migrate --tier exact``'s output
          (the independent count before minus after, per file);
left      usages still in the output; migrate's own leftovers are listed
          below the table with their reasons, grouped;
broken    links of a migrated program that cannot work (``broken_links``):
          a file that no longer parses, a name used that only a removed
          import bound (in the file, or imported from a project module that
          lost it), or a legacy ``Optimizer`` attribute used on a value that
          migrate turned into Optax/TrainState (approximated two ways: within
          a function, ``_legacy_on_migrated``; and any use of that API once
          no module of the output makes a legacy optimizer any more,
          ``_legacy_api_uses``);
legacy    files of the output that still use flax.optim (the independent
          count) or import legacy_optim or compat.

Not a column: *unreported*, the statements migrate changes or leaves on
whose lines scan reports nothing (``unreported_statements``), listed below
the table; its count is recorded as a ceiling with the figures.

The unsafe tier (``migrate --unsafe-fixes``: the exact tier and the fixes
that rest on an assumption its report states) has a table of its own below
it: per row rewritten, left and broken counted as above, and how many
unsafe fixes were applied. Its pass runs only on the rows whose exact-tier
report names an unsafe fix (``unsafe_tier``): every fix migrate can apply
with the option is one it names without it, so a row whose report names
none migrates the same, and its exact figures are its unsafe ones (``pass
-``). ``--unsafe-fixes`` runs that pass on every row, and fails a row whose
figures then differ although its report named no fix. Then each tier's
share of the independent count against issue 40's targets (``TARGETS``:
90% exact, 95% unsafe), on the rows that are not frameworks whose public
API is the Optimizer (``framework = true`` in repos.toml, counted apart).

``--train`` also runs, for each repository with a recipe
(tests/_corpus_train.py), the migrated copy's own train step beside the
original's under the shim, the shim's imports blocked, and prints a line
each below the table: bit-identical over how many steps, or why not; for
the repositories with a resume recipe (``_corpus_train.RESUMES``) the same
line says whether the migrated copy, restoring the original's checkpoint
with its own migrated restore code, trains on bit-identically (params,
step, optimizer moments) to the original's uninterrupted run.

The figures of each row (usages, found, rewritten, left, broken,
unreported, and the unsafe tier's rewritten as ``rewritten_unsafe``) are
compared with those recorded in ``tests/corpus/figures.toml`` (a table per
row): usages, found, rewritten and rewritten_unsafe below their recorded
floor, left, broken or unreported above their recorded ceiling, or a row
with no recorded figures, is a failure naming the row and the figure
(``scenic: rewritten 23 < recorded 24``, ``ub: rewritten_unsafe 30 <
recorded 36``); a figure that got better is printed, to be recorded in that
file in the same commit as the change that improved it. A broken link in
either tier fails.

migrate's output on each repository (``migrate --diff`` and its
``--report``, run on the extracted tree) is compared with the digests
recorded in ``tests/corpus/outputs.toml`` (scripts/migrate_outputs.py): one
that differs fails, naming the row (``OUTPUT CHANGED: corpus.t5x: migrate's
diff changed``); a change that is meant is listed in the closing note and
recorded with ``--record-outputs``. The same holds for ``migrate
--unsafe-fixes``' output on the rows whose unsafe pass runs
(``[corpus_unsafe.NAME]``; the others' is the exact tier's).

``--json FILE`` writes the same figures. Exit status: 2 when a repository
could not be cloned, else 1 when a migrated program (either tier) has a
broken link, a train step compared differs or fails, a figure is worse than
recorded, or migrate's output differs from its recorded digest, else 0.
"""

import argparse
import ast
import bisect
import collections
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import NamedTuple, Optional

from compat.codemod import _plan_findings
from compat.codemod import migrate
from compat.codemod import scan

# Its neighbour, also when a test loads this file by its path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import migrate_outputs  # noqa: E402

try:  # Python 3.11+
  import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli (install_requires has it)
  import tomli as tomllib

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                     'tests')
TABLE = os.path.join(TESTS, 'corpus', 'repos.toml')
FIGURES_FILE = 'tests/corpus/figures.toml'  # as the messages name it
FIGURES = os.path.join(TESTS, os.pardir, *FIGURES_FILE.split('/'))
# The recorded figures of a row: more is better for the first, less for the
# second.
FLOOR_FIGURES = ('usages', 'found', 'rewritten', 'rewritten_unsafe')
CEILING_FIGURES = ('left', 'broken', 'unreported')
MIRRORS_ENV = 'FLAX_OPTIM_CORPUS_MIRRORS'
# Issue 40's acceptance: the share of the independent count rewritten in
# each tier, on the corpus without frameworks (``framework`` in the table).
TARGETS = {'exact': 0.90, 'unsafe': 0.95}
# The digests of migrate's output with --unsafe-fixes (outputs.toml), for
# the rows whose unsafe pass runs (``unsafe_tier``).
UNSAFE_OUTPUTS = 'corpus_unsafe'
LEGACY_MODULE = 'flax.optim'
# What migrated code must not import (tests/_legacy_imports.py's list).
SHIM_MODULES = ('flax.optim', 'legacy_optim', 'compat')
# Attributes of flax.optim's Optimizer/OptimizerDef that neither a TrainState
# nor an Optax GradientTransformation has.
LEGACY_ATTRIBUTES = frozenset({
    'apply_gradient', 'create', 'hyper_params', 'optimizer_def',
    'param_states', 'state', 'target'})
# The subset that no other common object has.
_ALWAYS_LEGACY = frozenset({'apply_gradient', 'optimizer_def', 'param_states'})
# Calls whose result is migrate's output: Optax/TrainState values.
_MIGRATED_CALL = re.compile(r'^(flax_optim_rules|optax)\.|(^|\.)TrainState\.'
                            r'create$')
_MAGIC = re.compile(r'^\s*[%!]')


class Repo(NamedTuple):
  name: str
  repo: str  # owner/name
  commit: str
  paths: tuple  # subdirectories read; () = the whole tree
  what: str
  # a framework whose public API is the Optimizer: out of ``TARGETS``
  framework: bool = False


def load_table(path: str = TABLE) -> list:
  with open(path, 'rb') as f:
    rows = tomllib.load(f)['repo']
  return [Repo(r['name'], r['repo'], r['commit'], tuple(r.get('paths', ())),
               r.get('what', ''), r.get('framework', False)) for r in rows]


# ---------------------------------------------------------------------------
# Getting a repository at its commit.


class NotMirrored(OSError):
  """The mirrors hold no copy of a repository at its pinned commit."""


def _mirror_git_dir(mirrors: str, repo: str) -> Optional[str]:
  base = os.path.join(mirrors, repo.replace('/', '+'))
  for candidate in (os.path.join(base, 'repo', '.git'),
                    os.path.join(base, 'repo'), base):
    if os.path.isfile(os.path.join(candidate, 'HEAD')):
      return candidate
  return None


def _enclosing_inits(paths) -> list:
  """The ``__init__.py`` of each directory above ``paths`` in the
  repository: a clone has them, so the packages a path sits in name its
  modules (``dopamine/jax`` is ``dopamine.jax`` where ``dopamine`` holds
  one) as they do for a user who scans those paths in a checkout."""
  found = []
  for path in paths:
    parent = os.path.dirname(path.rstrip('/'))
    while parent:
      found.append(f'{parent}/__init__.py')
      parent = os.path.dirname(parent)
  return sorted(set(found))


def _mirrored_files(git_dir: str, entry: Repo) -> list:
  """The files of ``entry`` under its paths that a mirror holds (a mirror
  may lack large blobs: data, binaries, which nothing here reads), and the
  ``__init__.py`` of the packages they sit in (``_enclosing_inits``)."""
  listing = subprocess.run(
      ['git', '--git-dir', git_dir, 'ls-tree', '-r', '-l', '-z',
       entry.commit, '--', *entry.paths, *_enclosing_inits(entry.paths)],
      capture_output=True, check=True)
  files = []
  for record in listing.stdout.decode('utf-8').split('\0'):
    if not record:
      continue
    meta, _, path = record.partition('\t')
    size = meta.split()[3]
    if size.isdigit():  # git shows BAD for a blob the mirror lacks
      files.append(path)
  return files


def get_repo(entry: Repo, into: str, mirrors: Optional[str]) -> str:
  """The directory holding ``entry`` at its commit; raises ``OSError``
  saying why it could not be got."""
  target = os.path.join(into, entry.name)
  marker = os.path.join(target, '.corpus-commit')
  if os.path.isfile(marker):
    with open(marker, encoding='utf-8') as f:
      if f.read().strip() == entry.commit:
        return target
  # Made once there is something to put there: a row the mirrors lack
  # leaves no directory (tests/test_corpus_train.py: not available).
  shutil.rmtree(target, ignore_errors=True)
  git_dir = mirrors and _mirror_git_dir(mirrors, entry.repo)
  if mirrors and not git_dir:
    raise NotMirrored(f'no mirror of {entry.repo} under {mirrors}')
  if git_dir:
    if subprocess.run(['git', '--git-dir', git_dir, 'cat-file', '-e',
                       f'{entry.commit}^{{commit}}'],
                      capture_output=True, check=False).returncode:
      raise NotMirrored(f'the mirror {git_dir} lacks commit {entry.commit}')
    archive = subprocess.run(
        ['git', '--git-dir', git_dir, 'archive', '--format=tar',
         entry.commit, '--', *_mirrored_files(git_dir, entry)],
        capture_output=True, check=False)
    if archive.returncode:
      raise OSError(f'git archive {entry.commit} in {git_dir}: '
                    f'{archive.stderr.decode(errors="replace").strip()}')
    os.makedirs(target)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
      tar.extractall(target, filter='data')
  else:
    url = f'https://github.com/{entry.repo}'
    for command in (['git', 'clone', '--quiet', '--no-checkout', url, target],
                    ['git', '-C', target, 'checkout', '--quiet',
                     entry.commit]):
      run = subprocess.run(command, capture_output=True, text=True,
                           check=False)
      if run.returncode:
        raise OSError(f'{" ".join(command[:2])} {url}: '
                      f'{run.stderr.strip()}')
  with open(marker, 'w', encoding='utf-8') as f:
    f.write(entry.commit)
  return target


# ---------------------------------------------------------------------------
# The independent count.


def notebook_code(raw: bytes) -> str:
  """A notebook's code cells as one module (shell and magic lines, the
  lines a backslash continues them onto and cell magics' cells become
  ``pass``, so that line numbers count the joined cells)."""
  cells = json.loads(raw).get('cells', [])
  lines = []
  for cell in cells:
    if cell.get('cell_type') != 'code':
      continue
    source = cell.get('source', [])
    text = ''.join(source) if isinstance(source, list) else source
    if text.lstrip().startswith('%%'):  # a cell magic: no Python at all
      lines += ['pass'] * len(text.splitlines())
      continue
    shell_indent = None  # the indentation of a magic that goes on (\\)
    for line in text.splitlines():
      if shell_indent is None and not _MAGIC.match(line):
        lines.append(line)
        continue
      if shell_indent is None:
        shell_indent = line[:len(line) - len(line.lstrip())]
      # A magic may be a block's only statement: ``pass`` keeps it a block.
      lines.append(shell_indent + 'pass')
      if not line.endswith('\\'):
        shell_indent = None
  return '\n'.join(lines) + '\n'


def python_source(path: str, raw: bytes) -> str:
  if path.endswith('.ipynb'):
    return notebook_code(raw)
  return raw.decode('utf-8')


def _flax_bindings(tree: ast.AST) -> dict:
  """Local name -> the dotted flax name an import binds it to."""
  bound = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split('.')[0] != 'flax':
          continue
        if alias.asname:
          bound[alias.asname] = alias.name
        else:
          bound['flax'] = 'flax'
    elif (isinstance(node, ast.ImportFrom) and not node.level and
          node.module and node.module.split('.')[0] == 'flax'):
      for alias in node.names:
        bound[alias.asname or alias.name] = f'{node.module}.{alias.name}'
  return bound


def _dotted(node: ast.AST) -> Optional[list]:
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if isinstance(node, ast.Name):
    return [node.id] + parts[::-1]
  return None


def _is_legacy(name: str) -> bool:
  return name == LEGACY_MODULE or name.startswith(LEGACY_MODULE + '.')


def count_usages(tree: ast.AST) -> list:
  """``[(line, column, what)]``: every flax.optim usage of a module (see
  the module docstring). Shares nothing with ``scan`` on purpose."""
  bound = _flax_bindings(tree)
  inner = set()  # chains that are the .value of a longer chain
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute):
      inner.add(id(node.value))
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found += [(node.lineno, node.col_offset, f'import {a.name}')
                for a in node.names if _is_legacy(a.name)]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      found += [(node.lineno, node.col_offset, f'import {a.name}')
                for a in node.names
                if _is_legacy(f'{node.module}.{a.name}')]
    elif (isinstance(node, (ast.Attribute, ast.Name)) and
          id(node) not in inner and isinstance(node.ctx, ast.Load)):
      parts = _dotted(node)
      if parts is None or parts[0] not in bound:
        continue
      name = '.'.join([bound[parts[0]]] + parts[1:])
      if _is_legacy(name):
        found.append((node.lineno, node.col_offset, name))
  return sorted(found)


def legacy_imports(tree: ast.AST) -> list:
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      found += [f'{node.module}.{a.name}' for a in node.names]
  return [n for n in found
          if any(n == m or n.startswith(m + '.') for m in SHIM_MODULES)]


# ---------------------------------------------------------------------------
# Broken links of a migrated program.


def _import_bound(tree: ast.AST) -> set:
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        names.add(alias.asname or alias.name.split('.')[0])
  return names


def _top_level_bound(tree: ast.Module) -> set:
  names = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names |= {a.asname or a.name.split('.')[0] for a in node.names}
    else:
      for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
          names.add(sub.id)
  return names


def _module_name(relative: str) -> str:
  stem = relative[:-3] if relative.endswith('.py') else relative
  parts = stem.split('/')
  if parts[-1] == '__init__':
    parts = parts[:-1]
  return '.'.join(parts)


def _call_name(call: ast.Call) -> str:
  parts = _dotted(call.func)
  return '.'.join(parts) if parts else ''


def _migrated_producers(new_trees: dict, changed: set) -> set:
  """Names of functions in changed files whose return makes an
  Optax/TrainState value in the output (``create_optimizer_def``)."""
  names = set()
  for path, tree in new_trees.items():
    if path not in changed:
      continue
    for node in ast.walk(tree):
      if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        continue
      for sub in ast.walk(node):
        if (isinstance(sub, ast.Return) and sub.value is not None and any(
            isinstance(c, ast.Call) and _MIGRATED_CALL.search(_call_name(c))
            for c in ast.walk(sub.value))):
          names.add(node.name)
  return names


def _legacy_on_migrated(tree: ast.AST, producers: set) -> list:
  """``[(line, text)]``: a legacy Optimizer attribute used on a migrated
  value. Approximated within one function (or the module level): a value
  is migrated when it is a call of ``flax_optim_rules.*``, ``optax.*`` or
  ``*TrainState.create``, a call of a function in ``producers`` (by its
  last name: ``self.factory.create_optimizer_def()``), or a plain name
  assigned from one of those in the same scope. Values carried in
  containers, fields or parameters are not followed."""
  found = []
  scopes = [tree] + [n for n in ast.walk(tree) if isinstance(
      n, (ast.FunctionDef, ast.AsyncFunctionDef))]

  def migrated_call(node):
    if not isinstance(node, ast.Call):
      return False
    name = _call_name(node)
    return bool(_MIGRATED_CALL.search(name)) or (
        name.rpartition('.')[2] in producers)

  for scope in scopes:
    body = [s for s in ast.walk(scope)]
    values = {t.id for s in body if isinstance(s, ast.Assign) and
              migrated_call(s.value)
              for t in s.targets if isinstance(t, ast.Name)}
    for node in body:
      if not (isinstance(node, ast.Attribute) and
              node.attr in LEGACY_ATTRIBUTES):
        continue
      value = node.value
      if (isinstance(value, ast.Name) and value.id in values) or (
          migrated_call(value)):
        found.append((node.lineno, ast.unparse(node)))
  return sorted(set(found))


# What gives flax.optim's layout in migrated code: flax_optim_rules'
# ``OptimizerState`` (built, or annotated) and ``optimizer_state(...)``.
_LAYOUT_VIEW = re.compile(r'(^|\.)(OptimizerState|optimizer_state)$')


def _is_layout_view(node: ast.AST, views: set) -> bool:
  if isinstance(node, ast.Name):
    return node.id in views
  return isinstance(node, ast.Call) and bool(
      _LAYOUT_VIEW.search(ast.unparse(node.func)))


def _layout_views(tree: ast.AST) -> set:
  """Names that hold flax_optim_rules' view of flax.optim's layout: a
  parameter annotated ``OptimizerState``, a name bound to a view."""
  views = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.arg) and node.annotation is not None and (
        _LAYOUT_VIEW.search(ast.unparse(node.annotation))):
      views.add(node.arg)
    elif isinstance(node, ast.Assign) and _is_layout_view(node.value, set()):
      views.update(t.id for t in node.targets if isinstance(t, ast.Name))
  return views


def _legacy_api_uses(tree: ast.AST, own_methods=frozenset()) -> list:
  """``[(line, text)]``: uses of the legacy Optimizer API whatever the
  value: ``.apply_gradient``, ``.optimizer_def``, ``.param_states`` on
  anything, ``.target``/``.state`` on a name or field called like an
  optimizer (``opt``, ``*optim*``): with no legacy optimizer left in a
  program, each of them is broken. A user's rule kept on
  ``flax_optim_rules.RuleDef`` keeps the legacy layout (``RuleState``'s
  ``step`` and ``param_states``): its methods are not such uses; nor are
  reads of flax_optim_rules' view of that layout (``_layout_views``), nor
  calls of a method named so that a class of the program defines itself
  (``own_methods``: a model wrapping its optimizer's step)."""
  kept_rules = [node for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b).endswith('RuleDef') for b in node.bases)]
  inside = {id(n) for rule in kept_rules for n in ast.walk(rule)}
  views = _layout_views(tree)
  found = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Attribute) or id(node) in inside:
      continue
    if node.attr in ('param_states', 'step') and (
        _is_layout_view(node.value, views)) or node.attr in own_methods:
      continue
    receiver = _dotted(node.value)
    named = receiver[-1].lower() if receiver else ''
    if node.attr in _ALWAYS_LEGACY or (
        node.attr in ('target', 'state') and
        (named == 'opt' or 'optim' in named)):
      found.append((node.lineno, ast.unparse(node)))
  return found


def _class_fields(tree: ast.AST) -> dict:
  """``{(class, field): annotation text}`` of a module's classes."""
  return {(node.name, item.target.id): ast.unparse(item.annotation)
          for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
          for item in node.body if isinstance(item, ast.AnnAssign) and
          isinstance(item.target, ast.Name)}


def _migrated_fields(old_trees: dict, new_trees: dict) -> set:
  """Names of the class fields annotated a flax.optim Optimizer before
  and a TrainState after."""
  found = set()
  for path, new_tree in new_trees.items():
    before = _class_fields(old_trees[path])
    for key, annotation in _class_fields(new_tree).items():
      if 'TrainState' in annotation and 'Optimizer' in before.get(key, ''):
        found.add(key[1])
  return found


def _legacy_on_fields(tree: ast.AST, fields: set) -> list:
  """``[(line, text)]``: ``x.<field>.target`` and the rest of the legacy
  Optimizer API read on one of ``fields`` (``_ALWAYS_LEGACY``, ``target``,
  ``state``), whatever ``x`` is."""
  return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
          if isinstance(node, ast.Attribute) and (
              node.attr in _ALWAYS_LEGACY | {'target', 'state'}) and
          isinstance(node.value, ast.Attribute) and node.value.attr in fields]


def broken_links(old_sources: dict, new_sources: dict) -> list:
  """``[(path, line, why)]`` over a migrated project; ``*_sources``:
  relative path -> Python source text (old, migrated)."""
  broken, new_trees, lost = [], {}, {}
  for path, new in new_sources.items():
    try:
      new_trees[path] = ast.parse(new, path)
    except SyntaxError as e:
      broken.append((path, e.lineno or 0, f'does not parse: {e.msg}'))
  old_trees = {p: ast.parse(s, p) for p, s in old_sources.items()
               if p in new_trees}
  for path, new_tree in new_trees.items():
    gone = _import_bound(old_trees[path]) - _import_bound(new_tree)
    gone -= _top_level_bound(new_tree)
    lost[_module_name(path)] = (_top_level_bound(old_trees[path]) -
                                _top_level_bound(new_tree))
    for node in ast.walk(new_tree):
      if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and
          node.id in gone):
        broken.append((path, node.lineno,
                       f'uses {node.id}, bound only by a removed import'))
  for path, new_tree in new_trees.items():
    for node in ast.walk(new_tree):
      if not (isinstance(node, ast.ImportFrom) and node.module):
        continue
      for module, names in lost.items():
        if module and (module == node.module or
                       module.endswith('.' + node.module) or
                       node.module.endswith('.' + module)):
          for alias in node.names:
            if alias.name in names:
              broken.append((path, node.lineno,
                             f'imports {alias.name} from {node.module}, '
                             'which no longer binds it'))
  changed = {p for p in new_sources if new_sources[p] != old_sources[p]}
  producers = _migrated_producers(new_trees, changed)
  legacy_left = any(count_usages(t) or legacy_imports(t)
                    for p, t in new_trees.items() if p.endswith('.py'))
  fields = _migrated_fields(old_trees, new_trees)
  own_methods = frozenset(
      item.name for tree in new_trees.values() for node in ast.walk(tree)
      if isinstance(node, ast.ClassDef) for item in node.body
      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
  for path, tree in new_trees.items():
    for line, text in _legacy_on_migrated(tree, producers):
      broken.append((path, line,
                     f'{text}: legacy Optimizer API on a migrated value'))
    for line, text in _legacy_on_fields(tree, fields):
      broken.append((path, line, f'{text}: legacy Optimizer API on a field '
                     'whose class now holds a TrainState there'))
    if not legacy_left:
      for line, text in _legacy_api_uses(tree, own_methods):
        broken.append((path, line, f'{text}: legacy Optimizer API, but no '
                       'module makes a flax.optim optimizer any more'))
  return sorted(set(broken))


# ---------------------------------------------------------------------------
# One repository.


class Row(NamedTuple):
  name: str
  files: int
  usages: int
  found: int
  rewritten: int
  left: int
  broken: list  # [(path, line, why)]
  legacy_files: list  # relative paths
  reasons: collections.Counter  # 'construct: reason' -> count
  unfound: list  # [(path, line, what)]: usages scan did not report
  # --train: 'bit-identical over N steps' or 'FAILS: why'; None: not run
  # (no recipe, or no --train)
  trains: Optional[str] = None
  # statements migrate changes or leaves that carry no scan finding
  # (``unreported_statements``): [(path, line, text)]
  unreported: tuple = ()
  # the unsafe fixes migrate applied (analysed with ``unsafe_fixes``)
  unsafe_applied: int = 0
  # the unsafe fixes migrate's report names as available, not applied
  # (analysed without ``unsafe_fixes``)
  unsafe_hidden: int = 0
  # the row's figures with --unsafe-fixes (``unsafe_tier``); None: not
  # measured
  unsafe: Optional[dict] = None
  # a framework whose public API is the Optimizer (``Repo.framework``)
  framework: bool = False


def analyse(root: str, entry: Repo, unsafe_fixes: bool = False) -> Row:
  """``unsafe_fixes``: migrate applies them (``migrate --unsafe-fixes``)."""
  paths = [os.path.join(root, p) for p in entry.paths] or [root]
  sources, results = migrate.migrate_paths(paths, 'exact',
                                           unsafe_fixes=unsafe_fixes)
  scanned = scan.scan_paths(paths)
  scan_lines = {(os.path.relpath(os.path.abspath(f.path), root), f.line)
                for f in scanned.findings}
  # scan gives a notebook finding the line of the notebook file, this
  # count the line of its joined code cells: those are matched by text.
  scan_code = {(os.path.relpath(os.path.abspath(f.path), root),
                f.code.strip()) for f in scanned.findings}
  usages = found = rewritten = left = 0
  reasons: collections.Counter = collections.Counter()
  unfound, legacy, old_py, new_py = [], [], {}, {}
  for path, result in zip(sources, results):
    relative = os.path.relpath(path, root)
    try:
      old = python_source(path, result.old)
      before = count_usages(ast.parse(old, relative))
    except (SyntaxError, ValueError) as e:
      reasons[f'unreadable here: {type(e).__name__}'] += 1
      continue
    usages += len(before)
    lines = old.splitlines()
    for line, _, what in before:
      if (relative, line) in scan_lines or (
          path.endswith('.ipynb') and
          (relative, lines[line - 1].strip()) in scan_code):
        found += 1
      else:
        unfound.append((relative, line, what))
    if result.error:
      reasons[f'not migrated: {result.error}'] += 1
    else:
      for leftover in result.plan.leftovers:
        reasons[f'{leftover.construct}: {leftover.reason}'] += 1
    new = python_source(path, result.new)
    old_py[relative], new_py[relative] = old, new
    try:
      new_tree = ast.parse(new, relative)
      after = count_usages(new_tree)
      if after or legacy_imports(new_tree):
        legacy.append(relative)
    except SyntaxError:
      after = before  # broken_links reports it
    rewritten += max(0, len(before) - len(after))
    left += len(after)
  return Row(entry.name, len(sources), usages, found, rewritten, left,
             broken_links(old_py, new_py), legacy, reasons, unfound,
             unreported=tuple(
                 (os.path.relpath(path, root), line, text) for path, line, text
                 in statements_unreported(sources, results, scanned)[1]),
             unsafe_applied=len(migrate.unsafe_fixes_applied(results)),
             unsafe_hidden=len(migrate.unsafe_fixes_hidden(results)),
             framework=entry.framework)


def unsafe_tier(root: str, entry: Repo, row: Row, every_row=False) -> dict:
  """``row``'s figures with ``--unsafe-fixes``: rewritten, left, broken,
  how many unsafe fixes were applied, and whether that pass ran (``run``).
  It runs where ``row``'s exact-tier report names an unsafe fix (or with
  ``every_row``): every fix migrate could apply is one it names without
  them, so a row whose report names none migrates the same with them, and
  its exact figures are its unsafe ones."""
  run = bool(row.unsafe_hidden or every_row)
  measured = analyse(root, entry, unsafe_fixes=True) if run else row
  # (``row`` was analysed without the option: it applied none)
  return {'rewritten': measured.rewritten, 'left': measured.left,
          'broken': len(measured.broken),
          'applied': measured.unsafe_applied,
          'broken_links': measured.broken, 'run': run}


def skip_contradicted(row: Row) -> Optional[str]:
  """A failure line where ``row``'s unsafe pass, run although its exact
  report names no unsafe fix (``--unsafe-fixes``), migrated differently:
  ``unsafe_tier``'s reason to skip it would be wrong."""
  u = row.unsafe
  if row.unsafe_hidden or u is None or not u['run'] or (
      (u['rewritten'], u['left'], u['broken']) ==
      (row.rewritten, row.left, len(row.broken))):
    return None
  return (f'{row.name}: with --unsafe-fixes rewritten {u["rewritten"]}, left '
          f'{u["left"]}, broken {u["broken"]}, without {row.rewritten}, '
          f'{row.left}, {len(row.broken)}, although its exact report names '
          'no unsafe fix (a run without --unsafe-fixes skips that pass)')


def format_unsafe_table(rows: list) -> list:
  """The ``--unsafe-fixes`` figures of the rows that have them."""
  measured = [r for r in rows if r.unsafe is not None]
  if not measured:
    return []
  lines = ['\nwith --unsafe-fixes (each applied fix rests on an assumption '
           'its report states; pass -: its exact report names none, so it '
           'migrates as without them):',
           f'{"repository":10} {"rewritten":>9} {"left":>5} {"broken":>6} '
           f'{"applied":>7} {"pass":>4}']
  for r in measured:
    u = r.unsafe
    lines.append(f'{r.name:10} {u["rewritten"]:9} {u["left"]:5} '
                 f'{u["broken"]:6} {u["applied"]:7} '
                 f'{"run" if u["run"] else "-":>4}')
    lines += [f'  broken: {p}:{line}: {why}'
              for p, line, why in u['broken_links']]
  return lines


def _percent(part: int, whole: int) -> str:
  return f'{100 * part / whole:.0f}%' if whole else '-'


def format_targets(rows: list) -> list:
  """Each tier's share of the independent count against issue 40's
  ``TARGETS``, frameworks apart (``Repo.framework``)."""
  counted = [r for r in rows if not r.framework]
  if not counted:
    return []
  usages = sum(r.usages for r in counted)
  shares = {'exact': sum(r.rewritten for r in counted)}
  if all(r.unsafe is not None for r in counted):
    shares['unsafe'] = sum(r.unsafe['rewritten'] for r in counted)
  apart = ', '.join(r.name for r in rows if r.framework) or 'none'
  lines = [f'\nagainst issue 40\'s targets (frameworks apart: {apart}):']
  for tier, rewritten in shares.items():
    target = TARGETS[tier]
    met = 'met' if usages and rewritten >= target * usages else 'NOT met'
    lines.append(f'  {tier} tier: {rewritten} of {usages} rewritten '
                 f'({_percent(rewritten, usages)}; target '
                 f'{target:.0%}: {met})')
  return lines


def format_table(rows: list, missing: list, unavailable=()) -> str:
  header = (f'{"repository":10} {"files":>5} {"usages":>6} {"found":>6} '
            f'{"rewritten":>9} {"left":>5} {"broken":>6} '
            f'{"legacy files":>12}')
  lines = [header]
  for r in rows:
    lines.append(f'{r.name:10} {r.files:5} {r.usages:6} {r.found:6} '
                 f'{r.rewritten:9} {r.left:5} {len(r.broken):6} '
                 f'{len(r.legacy_files):12}')
  total = Row('all', *(sum(getattr(r, f) for r in rows)
                       for f in ('files', 'usages', 'found', 'rewritten',
                                 'left')),
              [b for r in rows for b in r.broken],
              [s for r in rows for s in r.legacy_files],
              collections.Counter(), [])
  lines.append(f'{"all":10} {total.files:5} {total.usages:6} '
               f'{total.found:6} {total.rewritten:9} {total.left:5} '
               f'{len(total.broken):6} {len(total.legacy_files):12}')
  lines.append(f'\nfound by scan: {_percent(total.found, total.usages)}; '
               'rewritten in the exact tier: '
               f'{_percent(total.rewritten, total.usages)}; repositories '
               'left without flax.optim/legacy_optim: '
               f'{sum(not r.legacy_files for r in rows)}/{len(rows)}')
  lines += format_targets(rows)
  for r in rows:
    if r.reasons:
      lines.append(f'\n{r.name}: left, and why (migrate\'s report):')
      lines += [f'  {n} x {reason}' for reason, n in
                sorted(r.reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    if r.broken:
      lines.append(f'\n{r.name}: broken links of the migrated program:')
      lines += [f'  {p}:{line}: {why}' for p, line, why in r.broken]
    if r.unfound:
      lines.append(f'\n{r.name}: usages scan does not report:')
      lines += [f'  {p}:{line}: {what}' for p, line, what in r.unfound]
    if r.unreported:
      lines.append(f'\n{r.name}: statements migrate changes or leaves '
                   'with no scan finding:')
      lines += [f'  {p}:{line}: {text}' for p, line, text in r.unreported]
  trained = [r for r in rows if r.trains is not None]
  if trained:
    lines.append('\ntrain steps, migrated beside the original (the shim\'s '
                 'imports blocked; tests/_corpus_train.py):')
    lines += [f'  {r.name}: {r.trains}' for r in trained]
  lines += format_unsafe_table(rows)
  for name, why in unavailable:
    lines.append(f'\nnot available: {name}: {why} (not analysed; no '
                 'failure)')
  for name, why in missing:
    lines.append(f'\nNOT GOT: {name}: {why}')
  return '\n'.join(lines)


# ---------------------------------------------------------------------------
# The recorded figures (tests/corpus/figures.toml).


def row_figures(row: Row) -> dict:
  """The figures of ``row`` that are recorded: ``{figure: int}``
  (``row.unsafe``, its unsafe tier, measured)."""
  return {'usages': row.usages, 'found': row.found,
          'rewritten': row.rewritten, 'left': row.left,
          'broken': len(row.broken), 'unreported': len(row.unreported),
          'rewritten_unsafe': row.unsafe['rewritten']}


def load_figures(path: str = FIGURES) -> dict:
  """``{row: {figure: int}}`` as recorded; a ``ValueError`` names a row
  whose figures are not exactly the recorded ones, as integers."""
  with open(path, 'rb') as f:
    recorded = tomllib.load(f)
  expected = set(FLOOR_FIGURES + CEILING_FIGURES)
  for name, figures in recorded.items():
    if not isinstance(figures, dict) or set(figures) != expected or not all(
        type(v) is int for v in figures.values()):
      raise ValueError(
          f'{path}: [{name}] must give exactly {sorted(expected)} as '
          f'integers, found {figures!r}')
  return recorded


def compare_figures(measured: dict, recorded: dict) -> tuple:
  """``(failures, improvements)``, one line each, for the rows of
  ``measured`` (``{row: {figure: int}}``) against ``recorded`` (the same,
  from ``FIGURES``): a floor figure below its record, a ceiling figure
  above it, or a row with no record fails; any other change improved."""
  failures, improvements = [], []
  for name, figures in measured.items():
    if name not in recorded:
      failures.append(f'{name}: no recorded figures in {FIGURES_FILE}; '
                      f'record [{name}] {figures}')
      continue
    for figure, now in figures.items():
      then = recorded[name][figure]
      rising = figure in FLOOR_FIGURES
      if now == then:
        continue
      if (now < then) == rising:
        failures.append(f'{name}: {figure} {now} {"<" if rising else ">"} '
                        f'recorded {then}')
      else:
        improvements.append(
            f'{name}: {figure} {now} {">" if rising else "<"} recorded '
            f'{then}: {"raise the floor" if rising else "lower the ceiling"}'
            f' in {FIGURES_FILE} (in the commit that changed it)')
  return failures, improvements


def _failure(error: Exception) -> str:
  """'FAILS: ...': the first line says which run or check; the last, a
  run's error."""
  why = [line for line in str(error).splitlines() if line.strip()] or [
      type(error).__name__]
  return 'FAILS: ' + ' ... '.join(dict.fromkeys((why[0][:200],
                                                 why[-1][:200])))


def train_comparison(name: str, root: str) -> Optional[str]:
  """``name``'s migrated train step beside the original's (the recipe of
  tests/_corpus_train.py): the line for the table, None without a
  recipe."""
  sys.path.insert(0, TESTS)
  try:
    import _corpus_train  # noqa: PLC0415 - the tests' helpers, on request
  finally:
    sys.path.remove(TESTS)
  if name not in _corpus_train.RUNS:
    return None
  with tempfile.TemporaryDirectory(prefix=f'corpus-train-{name}-') as tmp:
    try:
      steps = _corpus_train.compare(name, root, pathlib.Path(tmp))
    except (AssertionError, subprocess.TimeoutExpired) as e:
      return _failure(e)
  line = f'bit-identical over {steps} steps'
  if name in _corpus_train.UNSAFE_FIXES:  # (its exact tier keeps it whole)
    line = f'migrated with --unsafe-fixes: {line}'
  if name in _corpus_train.RESUMES:
    line += '; resumed from the original\'s checkpoint: ' + _resume_line(
        _corpus_train, name, root)
  return line


def _resume_line(corpus_train, name: str, root: str) -> str:
  """The migrated copy resuming the original's checkpoint
  (``_corpus_train.compare_resume``): the part of the train line."""
  with tempfile.TemporaryDirectory(prefix=f'corpus-resume-{name}-') as tmp:
    try:
      steps = corpus_train.compare_resume(name, root, pathlib.Path(tmp))
    except (AssertionError, subprocess.TimeoutExpired) as e:
      return _failure(e)
  return (f'bit-identical over {steps}+{steps} steps (params, step, '
          'moments)')


def _statement_spans(tree: ast.AST, removed_imports) -> list:
  """``(first, last)`` line of each statement (as scan counts them:
  ``_plan_findings.statement_spans``). An import of modules migrate
  removes nothing from has none: migrate only adds names to it
  (``import ..., train_state``)."""
  dropped = {module for module, _, _ in removed_imports}
  return _plan_findings.statement_spans(tree, lambda node: not (
      isinstance(node, ast.ImportFrom) and node.module not in dropped or (
          isinstance(node, ast.Import) and
          not {a.name for a in node.names} & dropped)))


def _rewritten_lines(result) -> set:
  """The lines of the old source that an edit of migrate's plan spans.
  The diff's hunks alone overstate them: where a rewrite joins a call's
  lines into one, the lines between two edits (an unchanged ``if`` header)
  fall into the same hunk."""
  offsets = [0]
  for line in result.old.splitlines(keepends=True):
    offsets.append(offsets[-1] + len(line))
  lines = set()
  for edit in result.plan.edits:
    first = bisect.bisect_right(offsets, edit.start)
    last = bisect.bisect_right(offsets, max(edit.start, edit.end - 1))
    lines.update(range(first, last + 1))
  return lines


def _import_lines(tree) -> set:
  """The lines of the imports (migrate changes them after its edits)."""
  return {line for node in ast.walk(tree)
          if isinstance(node, (ast.Import, ast.ImportFrom))
          for line in range(node.lineno, node.end_lineno + 1)}


def unreported_statements(paths) -> tuple:
  """``(touched, unreported)``: how many statements of the Python files
  under ``paths`` migrate changes or leaves (a leftover), and those of them
  (path, first line, text) on whose lines scan reports nothing. Lines
  migrate only adds (imports) have no old statement and are not counted;
  notebooks are left out (their findings carry the notebook's lines)."""
  sources, results = migrate.migrate_paths(paths, 'exact')
  return statements_unreported(sources, results, scan.scan_paths(paths))


def statements_unreported(sources, results, scanned) -> tuple:
  """``unreported_statements`` of migrate's ``(sources, results)`` and
  scan's result on the same paths."""
  reported = collections.defaultdict(set)
  for finding in scanned.findings:
    reported[os.path.abspath(finding.path)].add(finding.line)
  touched, unreported = 0, []
  for path, result in zip(sources, results):
    if result.plan is None or path.endswith('.ipynb'):
      continue
    old = result.old.decode('utf-8', 'replace')
    tree = ast.parse(old)
    spans = _statement_spans(tree, result.plan.removed_imports)
    lines = {line for first, old_lines, _ in migrate._changed_lines(result)
             for line in range(first, first + len(old_lines))}
    lines &= _rewritten_lines(result) | _import_lines(tree)
    lines |= {leftover.line for leftover in result.plan.leftovers}
    statements = {_plan_findings.statement_holding(spans, line)
                  for line in lines} - {None}
    touched += len(statements)
    found = reported[os.path.abspath(path)]
    text = old.splitlines()
    for first, last in sorted(statements):
      if not any(first <= line <= last for line in found):
        unreported.append((path, first, text[first - 1].strip()))
  return touched, unreported


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--into', help='where the repositories are put (kept; '
                      'default: a temporary directory, removed after)')
  parser.add_argument('--only', nargs='*', help='these rows of the table')
  parser.add_argument('--json', help='also write the figures here')
  parser.add_argument('--train', action='store_true',
                      help='also train the migrated copies beside the '
                      'originals (the repositories with a recipe)')
  parser.add_argument('--unsafe-fixes', action='store_true',
                      help='run the unsafe tier\'s pass on every row, also '
                      'where the exact report names no unsafe fix (a row '
                      'migrating differently then fails: the reason to '
                      'skip its pass would be wrong)')
  parser.add_argument('--record-outputs', action='store_true',
                      help='record the digests of migrate\'s output and '
                      f'report in {migrate_outputs.OUTPUTS_FILE} instead of '
                      'comparing them (a change listed in the closing note)')
  args = parser.parse_args(argv)
  mirrors = os.environ.get(MIRRORS_ENV)
  table = [e for e in load_table() if not args.only or e.name in args.only]
  into = args.into or tempfile.mkdtemp(prefix='flax-optim-corpus-')
  where = f'mirrors in {mirrors}' if mirrors else 'github.com'
  print(f'corpus: {len(table)} repositories from {where}, into {into}')
  recorded = load_figures()  # before the long part: a bad file fails now
  recorded_outputs = migrate_outputs.load_outputs()
  rows, missing, unavailable = [], [], []
  outputs = {'corpus': {}, UNSAFE_OUTPUTS: {}}
  try:
    for entry in table:
      try:
        root = get_repo(entry, into, mirrors)
      except NotMirrored as e:
        unavailable.append((entry.name, str(e)))
        continue
      except OSError as e:
        missing.append((entry.name, str(e)))
        continue
      row = analyse(root, entry)
      row = row._replace(unsafe=unsafe_tier(root, entry, row,
                                            args.unsafe_fixes))
      outputs['corpus'][entry.name] = migrate_outputs.migrate_outputs(root)
      if row.unsafe['run'] and row.unsafe_hidden:
        outputs[UNSAFE_OUTPUTS][entry.name] = (
            migrate_outputs.migrate_outputs(root, unsafe_fixes=True))
      if args.train:
        row = row._replace(trains=train_comparison(entry.name, root))
      rows.append(row)
    print(format_table(rows, missing, unavailable))
  finally:
    if not args.into:
      shutil.rmtree(into, ignore_errors=True)
  worse, better = compare_figures({r.name: row_figures(r) for r in rows},
                                  recorded)
  worse += [line for line in map(skip_contradicted, rows) if line]
  for line in better:
    print(f'\nbetter than recorded: {line}')
  for line in worse:
    print(f'\nWORSE THAN RECORDED: {line}')
  changed = []
  for group, measured in outputs.items():
    if args.record_outputs:
      migrate_outputs.record_outputs(group, measured)
    else:
      changed += migrate_outputs.compare_outputs(group, measured,
                                                 recorded_outputs)
  for line in changed:
    print(f'\nOUTPUT CHANGED: {line}')
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump({'rows': [r._asdict() for r in rows],
                 'missing': missing, 'unavailable': unavailable}, f,
                indent=1, default=list)
  if missing:
    return 2
  return 1 if worse or changed or any(
      r.broken or 'FAILS' in (r.trains or '') or (
          r.unsafe and r.unsafe['broken']) for r in rows) else 0


if __name__ == '__main__':
  sys.exit(main())
