"""``flax-optim-compat migrate PATH...``: rewrite code off flax.optim.

Finds the usages with ``scan`` (one list), plans the edits with
``_rewrite_plan`` and applies them: only the rewritten expressions
change, every other byte of the file stays as it was (comments and formatting
included); imports are added and the now unused ``flax.optim`` ones dropped
with LibCST, on the module's import skeleton (``_skeleton``: what its
visitors read, so that the cost stays linear in the file).

Modes (one at most; without one, a summary and the exit status only):

* ``--diff``: print a unified diff (``git apply`` takes it); nothing changes;
* ``--write``: rewrite in place, only files git tracks without uncommitted
  changes (refused otherwise, naming the files), all of them as a whole
  (``_atomic.rewrite_together``: a run stopped midway is finished or undone
  by the next one);
* ``--out DIR``: write a rewritten copy of the given tree into ``DIR`` (new or
  empty, outside the sources; links to directories copied as links).

Every mode names on stderr each file (or directory) it could not read or
parse; the bytes of a rewritten file are kept (byte order mark, encoding).

``--unsafe-fixes`` also applies the fixes that rest on an assumption the
report states (ruff's term: their applicability is *unsafe*), each listed
with it; without it they are listed as available and what they would fix
holds its flow as before (the output is what it would be without them).

``--report FILE`` writes a Markdown report: per file, each rewritten line old
-> new, what was left and why, notes (checkpoints), dependency pins that
exist only for flax.optim. Jupyter notebooks (``.ipynb``) are migrated with
their code cells as one module (IPython magics kept as they are); only the
JSON strings of the source lines that change differ in the file.

Exit status: 0 no flax.optim usage is left (after ``--write``/``--out``; for
``--diff`` and the summary, nothing to change either), 1 usages remain, 2
bad arguments or a refused write.
"""

import argparse
import ast
import difflib
import fnmatch
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import NamedTuple, Optional

import libcst
from libcst import codemod
from libcst.codemod import visitors

from compat import _atomic
from compat.codemod import _codes
from compat.codemod import _config
from compat.codemod import _libcst_visitors
from compat.codemod import _line_match
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _noqa
from compat.codemod import _notebook
from compat.codemod import _plan_findings
from compat.codemod import _project
from compat.codemod import _rewrite_plan
from compat.codemod import _self_check
from compat.codemod import _skeleton
from compat.codemod import _source
from compat.codemod import _tree
from compat.codemod import _user_rules
from compat.codemod import _walk
from compat.codemod import scan

EXIT_CLEAN, EXIT_LEFT, EXIT_USAGE, EXIT_NOT_PROVEN = 0, 1, 2, 3
_PIN_FILES = ('requirements*.txt', 'setup.cfg', 'pyproject.toml', 'setup.py')
_PIN = re.compile(r'''flax\s*(==\s*0\.[0-5](\.\d+)*|<=?\s*0\.[0-6](\.\d+)?|'''
                  r'''~=\s*0\.[0-5](\.\d+)*)''')


class FileResult(NamedTuple):
  path: str  # as shown (relative, '/'-separated)
  old: bytes
  new: bytes
  plan: Optional[_rewrite_plan.Plan]
  error: Optional[str]
  # What is left in ``new``: every flax.optim usage and reference a re-scan
  # finds, at its line in ``new``, with the reason (``left_in_output``).
  left: tuple = ()


class Pin(NamedTuple):
  path: str
  line: int
  text: str


# ---------------------------------------------------------------------------
# One module.


def _fix_imports(code: str, plan: _rewrite_plan.Plan) -> str:
  skeleton = _skeleton.Skeleton(code, _names_bound_by(plan.removed_imports))
  fixed = skeleton.restore(_libcst_fix_imports(skeleton.code, plan))
  if fixed is None:  # not expected: LibCST changed a placeholder
    fixed = _libcst_fix_imports(code, plan)
  return _drop_dotted_imports(fixed, plan.removed_imports)


def _fixed_imports(code: str, plan: _rewrite_plan.Plan, memo: dict) -> str:
  """``_fix_imports``, once per code and imports in ``memo``: a module
  migrated again (``blocked``) often renders as in an earlier round, and
  LibCST's visitors cost more than the rest of its migration."""
  key = ('imports', code, tuple(plan.imports), tuple(plan.removed_imports))
  if key not in memo:
    memo[key] = _fix_imports(code, plan)
  return memo[key]


def _names_bound_by(imports) -> set:
  """The names ``(module, obj, asname)`` imports bind (and ``obj``)."""
  names = set()
  for module, obj, asname in imports:
    names.add(asname or obj or module.partition('.')[0])
    names.add(obj or module.partition('.')[0])
  return names


def _libcst_fix_imports(code: str, plan: _rewrite_plan.Plan) -> str:
  module = libcst.parse_module(code)  # (what LibCST cannot parse fails)
  # What is imported at the top already, the visitor would not add; an
  # import the module does not have, it would not drop (``_skeleton``).
  needed = _skeleton.imports_to_add(code, plan.imports)
  removed = plan.removed_imports if _skeleton.may_remove(
      code, plan.removed_imports) else []
  context = codemod.CodemodContext()
  for module_name, obj, asname in needed:
    visitors.AddImportsVisitor.add_needed_import(context, module_name, obj,
                                                 asname)
  for module_name, obj, asname in removed:
    visitors.RemoveImportsVisitor.remove_unused_import(context, module_name,
                                                       obj, asname)
  # Each visitor copies the module and walks it (the second resolving
  # scopes): one with nothing to do would give the module back as it was.
  with _libcst_visitors.read_once():
    if needed:
      module = visitors.AddImportsVisitor(context).transform_module(module)
    if removed:
      module = visitors.RemoveImportsVisitor(context).transform_module(
          module)
  return module.code


def _drop_dotted_imports(code: str, removed) -> str:
  """Drops ``import flax.optim`` once nothing names ``flax.optim``.

  LibCST keeps it while ``flax`` is read at all (``flax.struct``): such an
  import binds ``flax`` too. Without another import of ``flax`` it
  becomes ``import flax``.
  """
  dotted = {module for module, obj, asname in removed
            if obj is None and asname is None and '.' in module}
  if not dotted:
    return code
  tree = ast.parse(code)
  chains = {ast.unparse(n) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)}
  lines = code.splitlines(keepends=True)
  for node in reversed(tree.body):
    if not (isinstance(node, ast.Import) and len(node.names) == 1 and (
        node.names[0].name in dotted) and node.names[0].asname is None):
      continue
    name = node.names[0].name
    if any(c == name or c.startswith(name + '.') for c in chains):
      continue  # still named
    top = name.partition('.')[0]
    bound_elsewhere = any(
        isinstance(other, ast.Import) and other is not node and any(
            (a.asname or a.name.partition('.')[0]) == top and (
                a.asname is None or a.asname == top) for a in other.names)
        for other in tree.body)
    read = any(isinstance(n, ast.Name) and n.id == top
               for n in ast.walk(tree))
    indent = lines[node.lineno - 1][:node.col_offset]
    if node.col_offset and indent.strip():
      continue  # shares its line with another statement
    replacement = [] if bound_elsewhere or not read else [
        f'{indent}import {top}\n']
    lines[node.lineno - 1:node.end_lineno] = replacement
  return ''.join(lines)


def migrate_source(source: bytes, path: str = '<string>',
                   tier: str = 'exact', reexports=None, exported=(),
                   rate_set_elsewhere: bool = False, chosen=None,
                   model=None, blocked=(), unsafe_fixes: bool = False,
                   memo: Optional[dict] = None, array_states: bool = False):
  """``(new_source, plan)`` for one module's source. Raises SyntaxError.

  ``reexports``/``exported``: what the project's modules hand on from
  flax.optim (``scan.parse_project``); such usages are listed, not
  rewritten, and a re-exported import stays. ``rate_set_elsewhere``:
  another module of the project sets the learning rate per step on
  optimizers it receives (the function ``rate_set_elsewhere``), so this
  module's definitions must take it as an injected hyper-parameter.
  ``chosen``: the codes to rewrite (default all); findings of other codes,
  and those on a ``# noqa`` line for their code, stay as they are (a
  flax.optim one keeps the file's whole flow).
  ``model``: the project (``scan.parse_project(...).model``; ``path`` is
  the module's key in it); ``blocked``: ``(line, construct, reason)`` of
  this module's optimizer flow that other modules keep as they are
  (``migrate_paths``): given, the flow here stays too. ``unsafe_fixes``:
  also apply the fixes that rest on an assumption (``--unsafe-fixes``;
  each is in ``plan.unsafe``, applied or not). ``memo``: a dict kept
  across the calls of one run with the same ``reexports`` and ``model``
  (``migrate_paths``): a module migrated again (``blocked``) is not parsed
  and scanned again. ``array_states``: its creates make the TrainState
  that steps a bare array (another module's optimizers, which may meet
  these, need it: ``migrate_paths``).
  """
  read = _source.read(source)  # raises what Python would refuse
  tree, names, scanned = _scanned(source, path, reexports, model,
                                  {} if memo is None else memo)
  findings = scanned.findings
  def planned(held):
    return _rewrite_plan.Planner(source, tree, names, findings, tier,
                                 exported, rate_set_elsewhere, held,
                                 blocked, unsafe_fixes, scanned.facts,
                                 array_states).plan()

  held = _noqa.held(findings, source, chosen)
  plan = planned(held)
  # What scan reports from the plan alone, a noqa or the selection keeps
  # too (as ruff keeps a suppressed diagnostic's fix): its flow stays.
  also_held = _plan_findings.held(plan, findings, source, tree,
                                    chosen) - held
  if also_held:
    plan = planned(held | also_held)
  plan.notes.extend(_undecided_kernel_names(tree, names, source))
  if not plan.edits:
    return source, plan
  rendered, dropped = _rewrite_plan.render(source, plan.edits)
  for edit in dropped:
    plan.leftovers.append(_rewrite_plan.Leftover(
        edit.line, edit.construct, '', _codes.note(_codes.OVERLAPS_REWRITE)))
  # In the file's encoding, with its byte order mark if it had one.
  new = _source.write(_fixed_imports(_source.read(rendered).text, plan,
                                     {} if memo is None else memo), read)
  # A flow with one link left out is not migrated: the whole file stays.
  problems = [_self_check.Problem(
      edit.line, _codes.filled_note(_codes.REWRITE_OVERLAPS,
                                    construct=edit.construct))
              for edit in dropped
              if edit.construct in _rewrite_plan.FLOW_CONSTRUCTS]
  problems = problems or _self_check.problems(
      source, new, path, tree, None if memo is None else _trees(memo))
  if problems:
    return source, rolled_back(source, plan, problems)
  return new, plan


# ``memo``'s table of the trees parsed, by source: the output of a module
# that stays as it was is scanned again on the tree (and walk) its input
# scan built, a rewritten one on the tree its self-check parsed.
_TREES = 'trees'


def _trees(memo: dict) -> dict:
  return memo.setdefault(_TREES, {})


def _scanned(source: bytes, path: str, reexports, model, memo: dict):
  """``(tree, names, scan.ScannedModule)`` of a module, once per source
  in ``memo``: the names are the scan's, so the flow it proved is the
  plan's too (the plan reads the tree, it never changes it)."""
  key = (path, source)
  if key not in memo:
    tree = _trees(memo)[source] = _tree_of(source, path, model)
    names = scan.module_names(tree, path, reexports, model)
    memo[key] = (tree, names, scan.scan_module(source, path, reexports, tree,
                                               model, names=names))
  return memo[key]


def _tree_of(source: bytes, path: str, model) -> ast.Module:
  """The module's tree: the project's own where its model read this very
  source (with its names, its walk and what its flows collected, kept for
  the run), else parsed here."""
  if model is not None and model.sources.get(path) == source:
    tree = model.trees.get(path)
    if tree is not None:
      return tree
  return ast.parse(source, filename=path)


def _undecided_kernel_names(tree: ast.Module, names, source: bytes) -> list:
  """A note at the first read of each name a notebook binds nowhere that
  the project's notebooks bind to flax.optim and to something else too
  (``_names.Kernel.undecided``): why what it makes stays."""
  undecided = names.kernel.undecided() if names.kernel else {}
  first: dict = {}
  for node in ast.walk(tree) if undecided else ():
    if isinstance(node, ast.Name) and node.id in undecided:
      first[node.id] = min(first.get(node.id, node.lineno), node.lineno)
  lines = source.decode('utf-8', 'replace').splitlines() if first else []
  notes = []
  for name, line in sorted(first.items()):
    bound = sorted(path or _codes.note(_codes.KERNEL_NOT_IMPORT)
                   for path in undecided[name])
    notes.append(_rewrite_plan.Leftover(
        line, 'kernel', lines[line - 1].strip(),
        _codes.filled_note(_codes.KERNEL_UNDECIDED, name=name,
                           bound=', '.join(bound))))
  return notes


def rolled_back(source: bytes, plan: _rewrite_plan.Plan, problems):
  """The plan of a module left as it was: no edit, each problem a
  leftover (``self_check``) at the original line it concerns."""
  lines = source.decode('utf-8', 'replace').splitlines()
  leftovers = plan.leftovers + [_rewrite_plan.Leftover(
      p.line, 'self_check', lines[p.line - 1].strip() if p.line <= len(
          lines) else '', _codes.filled_note(_codes.ROLLED_BACK_BECAUSE,
                                             reason=p.reason))
                                for p in problems]
  return plan._replace(edits=[], leftovers=sorted(set(leftovers)),
                       imports=[], removed_imports=[], migrated=frozenset())


def migrate_notebook(raw: bytes, path: str, tier: str = 'exact',
                     reexports=None, chosen=None, model=None, blocked=(),
                     rate_set_elsewhere: bool = False,
                     unsafe_fixes: bool = False, memo=None,
                     array_states: bool = False):
  """``(new_notebook_bytes, plan)``: all code cells migrated as one module.

  Only the source lines that change differ in the file's bytes
  (``_notebook.Notebook.rewrite``); the plan's leftovers and notes are at
  the notebook file's lines (its edits, like ``blocked``, at the lines of
  the cells joined, where the project's links name them). ``model``: the
  project's (a notebook is a consumer of the package's modules, as a
  script is: the fields, factories, rule classes and links it reads
  come from there); ``rate_set_elsewhere``, ``unsafe_fixes``, ``memo``,
  ``array_states``: as for ``migrate_source``.
  """
  notebook = _notebook.Notebook(raw)
  combined = notebook.module.encode('utf-8')
  new, plan = migrate_source(combined, path, tier, reexports, (),
                             rate_set_elsewhere, chosen, model, blocked,
                             unsafe_fixes, memo, array_states)
  plan = plan._replace(**{
      field: type(getattr(plan, field))(
          item._replace(line=notebook.file_line(item.line))
          for item in getattr(plan, field))
      for field in ('leftovers', 'notes', 'unsafe')},
      own_steps=frozenset(map(notebook.file_line, plan.own_steps)))
  if new == combined:
    return raw, plan
  return notebook.rewrite(new.decode('utf-8')), plan


# ---------------------------------------------------------------------------
# Files and trees.


def _shown(path: str) -> str:
  relative = os.path.relpath(path) if os.path.isabs(path) else path
  return os.path.normpath(relative).replace(os.sep, '/')


def iter_sources(paths, exclude=()):
  """The .py files and notebooks under ``paths`` (``scan``'s walk and
  ``--exclude`` rules)."""
  return scan.iter_python_files(paths, exclude, scan.SOURCE_SUFFIXES)


def rate_set_elsewhere(project: scan.Project) -> bool:
  """Whether a module overrides hyper-parameters per step
  (``apply_gradient(g, learning_rate=lr)``) on optimizers it creates no
  definition for: they come from another module (ppo's ``models.py``
  creates, ``ppo_lib.py`` sets the rate)."""
  for shown, source, tree in project.parsed:
    if _members.APPLY_GRADIENT.encode() not in source:
      continue  # no call to override hyper-parameters in: not scanned
    try:
      found = scan.scan_source(source, shown, project.reexports, tree)
    except Exception:  # pylint: disable=broad-except
      continue  # migrate_file reports the file
    constructs = {f.construct for f in found
                  if not _rewrite_plan.planned_from_tree(f)}
    if 'apply_gradient_overrides' in constructs and not constructs & {
        _members.CREATE, _members.OPTIMIZER_DEF}:
      return True
  return False


def migrate_file(path: str, tier: str = 'exact',
                 project: Optional[scan.Project] = None,
                 rate_elsewhere: bool = False, chosen=None,
                 blocked=(), unsafe_fixes: bool = False,
                 memo=None, array_states: bool = False) -> FileResult:
  """One file migrated in memory; ``project``: re-exports and the flows
  across modules to follow; ``rate_elsewhere``:
  ``rate_set_elsewhere(project)``; ``blocked``, ``unsafe_fixes``,
  ``memo``, ``array_states``: see ``migrate_source``."""
  shown = _shown(path)
  try:
    with open(path, 'rb') as f:
      old = f.read()
  except OSError as e:
    return FileResult(shown, b'', b'', None, f'unreadable: {e}')
  try:
    if path.endswith('.ipynb') and project is not None:
      new, plan = migrate_notebook(
          old, path.replace(os.sep, '/'), tier, project.reexports, chosen,
          project.model, blocked, rate_elsewhere, unsafe_fixes, memo,
          array_states)
    elif path.endswith('.ipynb'):
      new, plan = migrate_notebook(old, shown, tier, chosen=chosen,
                                   unsafe_fixes=unsafe_fixes)
    elif project is not None:
      new, plan = migrate_source(
          old, path.replace(os.sep, '/'), tier, project.reexports,
          project.exported.get(os.path.abspath(path), ()), rate_elsewhere,
          chosen, project.model, blocked, unsafe_fixes, memo, array_states)
    else:
      new, plan = migrate_source(old, shown, tier, chosen=chosen,
                                 unsafe_fixes=unsafe_fixes)
  except SyntaxError as e:
    return FileResult(shown, old, old, None, 'syntax error' + (
        f' line {e.lineno}' if e.lineno else '') + f': {e.msg}')
  except Exception as e:  # pylint: disable=broad-except
    # Unreadable (NUL bytes, bad coding, not a notebook) or beyond the
    # analysis (e.g. RecursionError): this file stays as it is, the others
    # are still migrated.
    return FileResult(shown, old, old, None, scan.failure(shown, e).message)
  result = FileResult(shown, old, new, plan, None)
  try:
    return result._replace(left=left_in_output(
        result, project.reexports if project else None, chosen, memo=memo))
  except Exception as e:  # pylint: disable=broad-except
    return FileResult(shown, old, old, None, _codes.filled_note(
        _codes.RESCAN_FAILED, message=scan.failure(shown, e).message))


# Imports: they stay while other usages or references in the file do.
_KEPT_FOR_OTHERS = frozenset(('import', 'shim'))
# Scan's construct -> the plan's, where they name one usage differently.
_PLAN_CONSTRUCT = {_members.OPTIMIZER_DEF: 'algorithm',
                   'weight_norm': 'algorithm', 'multi_optimizer': 'algorithm'}


def _old_lines_of_new(old: bytes, new: bytes) -> dict:
  """Line of ``new`` -> its line in ``old``, for the lines the rewrite kept."""
  if new == old:  # (most modules: each line is itself)
    return {line: line for line in range(
        1, len(new.decode('utf-8', 'replace').splitlines()) + 1)}
  kept = {}
  for tag, i1, _, j1, j2 in _line_match.opcodes(
      old.decode('utf-8', 'replace').splitlines(),
      new.decode('utf-8', 'replace').splitlines()):
    if tag == 'equal':
      kept.update({j + 1: i1 + (j - j1) + 1 for j in range(j1, j2)})
  return kept


def references(tree: ast.Module, reexports=None, kernel=None) -> list:
  """``(line, dotted path)`` of every name or attribute chain that resolves
  into flax.optim (``legacy_optim`` included), outermost chains only;
  ``kernel``: a notebook's (``_names.kernel_bindings``)."""
  names = _names.ModuleNames(tree, reexports, kernel=(
      _names.Kernel(kernel, tree) if kernel else None))
  inner = {id(n.value) for n in _walk.nodes(tree)
           if isinstance(n, ast.Attribute)}
  found = []
  for node in _walk.nodes(tree):
    if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in (
        inner) and isinstance(node.ctx, ast.Load):
      path = names.resolve(node)
      if _names.is_flax_optim(path):
        found.append((node.lineno, path))
  return sorted(found)


def _output_scan(module: bytes, path: str, reexports, kernel,
                 memo: dict) -> tuple:
  """``(reported findings, references)`` of a migrated module, once
  per output in ``memo`` (a module migrated again in a later round often
  comes out as in an earlier one)."""
  key = ('output', path, module, repr(kernel))
  if key not in memo:
    tree = _trees(memo).get(module) or ast.parse(module, filename=path)
    # What nothing in the text can resolve to flax.optim through (scan's
    # own test) references nothing there: its walk is not made.
    can_name = kernel or scan.may_name_flax_optim(
        module.decode('utf-8', 'replace'), reexports)
    memo[key] = (scan.scan_file(module, path, tree, reexports,
                                kernel=kernel)[0],
                 references(tree, reexports, kernel) if can_name else [])
  return memo[key]


def left_in_output(result: FileResult, reexports=None,
                   chosen=None, kernel=None, memo=None) -> tuple:
  """Every flax.optim usage (scan's findings) and reference left in
  ``result.new``, as ``Leftover``s at their lines there, each with the
  plan's reason for leaving it (or why no rule covered it). What the
  report and the summary count: what is left, not what was attempted;
  ``chosen``: the selected codes (default all): a finding of another code
  is not left (as ``scan --select/--ignore`` would not report it), nor a
  reference unless flax.optim's import (FOC101) is selected; ``kernel``:
  what a notebook's free names mean in the migrated project; ``memo``:
  as for ``migrate_source``."""
  notebook = None
  module = result.new
  if result.path.endswith('.ipynb'):
    notebook = _notebook.Notebook(result.new)
    module = notebook.module.encode('utf-8')
  # (line in the module, construct, what to do by hand)
  # What a scan of the output reports: lines kept by a noqa are not left,
  # nor findings of unselected codes (their lines keep their references).
  every, referenced = _output_scan(module, result.path, reexports, kernel,
                                   {} if memo is None else memo)
  # What the plan's own rules found there, it lists itself (its leftovers).
  every = [f for f in every if not _rewrite_plan.planned_from_tree(f)]
  chosen = set(_codes.BY_CODE) if chosen is None else chosen
  found = [(f.line, f.construct,
            _codes.filled_note(_codes.BY_HAND, replacement=f.replacement))
           for f in every if f.rule != _codes.UNUSED_NOQA and
           f.rule in chosen]
  # A line with a noqa mark keeps its references too (the mark held them).
  covered = {f.line for f in every} | set(_noqa.suppressions(module))
  for line, path in referenced:
    if line not in covered and _codes.code_of('import') in chosen:
      covered.add(line)
      found.append((line, 'reference',
                    _codes.filled_note(_codes.STILL_NAMED, path=path)))
  module_lines = module.decode('utf-8', 'replace').splitlines()
  # (line in the file, construct, what to do by hand, the source line)
  items = [(notebook.file_line(line) if notebook else line, construct,
            fallback, module_lines[line - 1].strip())
           for line, construct, fallback in found]
  plan = result.plan
  planned = plan.leftovers if plan else []
  rolled_back = [l for l in planned if l.construct == 'self_check']
  flow_left = any(l.construct in _rewrite_plan.FLOW_CONSTRUCTS
                  for l in planned) or rolled_back
  old_line = _old_lines_of_new(result.old, result.new)
  items = _without_own_methods(items, result, old_line)
  noted = {(n.line, n.construct) for n in (plan.notes if plan else [])}
  if not flow_left:
    # The flow moved to TrainState: a checkpoint the plan noted now saves
    # one (the report's notes say so), whatever its variable's name.
    items = [i for i in items if (old_line.get(i[0]), i[1]) not in noted]
  kept_for_others = any(i[1] not in _KEPT_FOR_OTHERS for i in items)
  left = []
  for line, construct, fallback, code in sorted(set(items)):
    here = [l for l in planned if l.line == old_line.get(line)]
    same = [l for l in here if l.construct in (
        construct, _PLAN_CONSTRUCT.get(construct))]
    if same or here:
      reason = (same or here)[0].reason
    elif rolled_back:
      reason = _codes.note(_codes.ROLLED_BACK)
    elif construct in _KEPT_FOR_OTHERS and kept_for_others:
      reason = _codes.note(_codes.IMPORT_STILL_NEEDED)
    else:
      reason = _codes.filled_note(_codes.NOT_REWRITTEN_FALLBACK,
                                  fallback=fallback)
    left.append(_rewrite_plan.Leftover(line, construct, code, reason))
  return tuple(sorted(left + rolled_back))  # rolled back: new is old


def _without_own_methods(items, result, old_line) -> list:
  """``items`` (by the output's file lines) less the steps the original's
  project typed as the user's own methods (``_own_methods``), which the
  output's scan, of one file alone, cannot type."""
  own = result.plan.own_steps if result.plan else frozenset()
  return [i for i in items if i[1] not in _members.STEP_METHODS or
          old_line.get(i[0]) not in own]


_UNCHECKED_ACROSS_MODULES = _codes.note(_codes.ACROSS_MODULES_FAILED)


def migrate_paths(paths, tier: str = 'exact', exclude=(), chosen=None,
                  unsafe_fixes: bool = False):
  """``(sources, results)``: every file under ``paths`` migrated in memory
  as one project (re-exports, per-step rates and definitions made in one
  module and created in another followed across modules).
  ``unsafe_fixes``: also apply the fixes that rest on an assumption
  (``--unsafe-fixes``), each listed with it in the report.

  Before anything is returned (and so written), each flow that crosses
  modules is checked whole (``_project.flow_violations``): where one end
  of a link was rewritten and the other was not, every module of that flow
  is migrated again with its optimizer flow kept as it was, and the report
  lists each link with its file, line and reason.
  """
  # As scan's: the project's trees stay while each file is migrated, and
  # every collection walked them all again (40% of migrate's time).
  with scan.without_cycle_collection():
    return _migrate_paths(paths, tier, exclude, chosen, unsafe_fixes)


def _migrate_paths(paths, tier, exclude, chosen, unsafe_fixes):
  sources = list(iter_sources(paths, exclude))
  project = scan.parse_project(paths, exclude)
  rate_elsewhere = rate_set_elsewhere(project)
  memo: dict = {}  # each module's scans (input and output), for every round

  array_paths: set = set()  # (_with_array_states)

  def migrate_one(path, blocked=()):
    return migrate_file(path, tier, project, rate_elsewhere, chosen,
                        blocked, unsafe_fixes, memo, path in array_paths)

  results = {p: migrate_one(p) for p in sources}
  _with_array_states(results, project, array_paths, migrate_one)
  if project.model is None and any(
      e.path == scan.ACROSS_MODULES for e in project.errors):
    # No links to check: any flow might cross modules, so none is
    # rewritten (the removals still are).
    for path, result in results.items():
      flow = [e for e in (result.plan.edits if result.plan else ())
              if e.construct in _rewrite_plan.FLOW_CONSTRUCTS]
      if flow:
        results[path] = migrate_one(path, [(flow[0].line, flow[0].construct,
                                            _UNCHECKED_ACROSS_MODULES)])
  key_of = {p.replace(os.sep, '/'): p for p in sources}
  for path, blocked in _project.roll_back(
      _project.assumed_away(project.model.links if project.model else [],
                            unsafe_fixes),
      lambda key: _result_plan(results, key_of, key),
      _rewrite_plan.flow_migrated,
      lambda key, line: project.notebooks[key].file_line(line)
      if key in project.notebooks else line):
    results[key_of[path]] = migrate_one(key_of[path], blocked)
  if project.model is not None and project.model.kernel:
    _import_kernel_names(results, project.model.kernel, project.reexports,
                         chosen)
    _left_in_kernels(results, project.reexports, chosen)
  for error in project.unreadable:  # nothing under it was migrated
    sources.append(error.path)
    results[error.path] = FileResult(_shown(error.path), b'', b'', None,
                                     error.message)
  return sources, [results[p] for p in sources]


# A notebook's own import of a flax.optim name it read from its kernel.
_KERNEL_IMPORT = _codes.KERNEL_IMPORT


def _with_array_states(results: dict, project, array_paths: set,
                       migrate_one) -> None:
  """Migrates again, their creates making the TrainState that steps a
  bare array, the modules whose optimizers may meet those of a module
  whose creates make it (one holder kept in two modules: a create of one
  over a restored array meets the other's steps). ``array_paths``: where
  ``migrate_one`` makes it, filled here."""
  links = project.model.links if project.model is not None else []
  making = {path.replace(os.sep, '/') for path, result in results.items()
            if _rewrite_plan.makes_array_states(result.plan)}
  if not making or not links:
    return
  shared = _project.sharing_optimizers(links, making)
  for path in results:
    if path.replace(os.sep, '/') in shared - making:
      array_paths.add(path)
      results[path] = migrate_one(path)


def _import_kernel_names(results: dict, kernel: dict, reexports,
                         chosen) -> None:
  """Gives each notebook that still reads a flax.optim name from its kernel
  (``_names.kernel_bindings``; its flow left as it was) an import of it,
  where a notebook that bound it migrated that import away: run after that
  notebook, it would fail. ``results``: path -> FileResult, updated;
  ``kernel``: the project model's; ``reexports``: the project's."""
  new_trees = {}
  dropped_by: dict = {}  # local name -> the notebooks no longer binding it
  for path, result in results.items():
    if not _project.is_notebook(path) or result.plan is None:
      continue
    new_trees[path] = ast.parse(_notebook.Notebook(result.new).module)
    before = _names.kernel_bindings([_names.bindings_of(ast.parse(
        _notebook.Notebook(result.old).module)).top_level])
    after = _names.kernel_bindings([
        _names.bindings_of(new_trees[path]).top_level])
    for local in before:
      bound = _names.kernel_path(kernel, local)
      if bound is not None and _names.kernel_path(before, local) == bound and (
          _names.kernel_path(after, local) != bound):
        dropped_by.setdefault(local, []).append(results[path].path)
  for path, tree in new_trees.items():
    names = _names.ModuleNames(tree, reexports, collect=False,
                               kernel=_names.Kernel(kernel, tree))
    free = names.kernel.names() if names.kernel else {}
    read = {node.id for node in ast.walk(tree) if isinstance(
        node, ast.Name) and isinstance(node.ctx, ast.Load)}
    needed = sorted(local for local in free
                    if local in read and local in dropped_by and (
                        _names.is_flax_optim(names.resolve(
                            ast.Name(id=local)))))
    if needed:
      results[path] = _with_kernel_imports(
          results[path], {local: free[local] for local in needed},
          dropped_by, reexports, chosen)


def _left_in_kernels(results: dict, reexports, chosen) -> None:
  """Counts what each migrated notebook still reads of flax.optim from
  its kernel (the migrated notebooks' ``_names.kernel_bindings``) as left
  in it. ``results``: path -> FileResult, updated."""
  trees = {path: ast.parse(_notebook.Notebook(result.new).module)
           for path, result in results.items()
           if _project.is_notebook(path) and result.plan is not None}
  kernel = _names.kernel_bindings(
      _names.bindings_of(tree).top_level for tree in trees.values())
  for path, tree in trees.items():
    names = _names.ModuleNames(tree, reexports, collect=False,
                               kernel=_names.Kernel(kernel, tree))
    if names.kernel and any(
        _names.is_flax_optim(names.resolve(ast.Name(id=local)))
        for local in names.kernel.names()):
      results[path] = results[path]._replace(left=left_in_output(
          results[path], reexports, chosen, kernel))


def _with_kernel_imports(result: FileResult, bound: dict, dropped_by: dict,
                         reexports, chosen) -> FileResult:
  """``result`` with an import of each of ``bound`` (local name -> the
  dotted path the kernel bound it to) added to its notebook, and a note
  why."""
  imports = []
  for local, dotted in bound.items():
    module, _, name = dotted.rpartition('.')
    imports.append((dotted, None, None) if local == dotted else (
        (dotted, None, local) if not module else (
            module, name, None if name == local else local)))
  notebook = _notebook.Notebook(result.new)
  code = _fix_imports(notebook.module, _rewrite_plan.Plan(
      [], [], [], imports, []))
  new = notebook.rewrite(code)
  added = _notebook.Notebook(new)
  lines = added.module.splitlines()
  notes = []
  for node in ast.parse(added.module).body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        local = alias.asname or alias.name.partition('.')[0]
        if local in bound:
          notes.append(_rewrite_plan.Leftover(
              added.file_line(node.lineno), 'import',
              lines[node.lineno - 1].strip(), _codes.filled_note(
                  _KERNEL_IMPORT, local=local,
                  preparers=', '.join(dropped_by[local]))))
  plan = result.plan
  if plan is not None:
    plan = plan._replace(notes=list(plan.notes) + notes)
  result = result._replace(new=new, plan=plan)
  return result._replace(left=left_in_output(result, reexports, chosen))


def _result_plan(results, key_of, key):
  result = results.get(key_of.get(key))
  return None if result is None else result.plan


def find_pins(paths) -> list:
  """Dependency pins that keep an old flax (``flax==0.5.3``, ``flax<0.6``)."""
  pins = []
  walk = scan.source_walk()  # what it cannot list, the sources' walk says
  for root_path in paths:
    root = root_path if os.path.isdir(root_path) else os.path.dirname(
        root_path) or '.'
    listing = walk.directories(root) if os.path.isdir(root_path) else [
        walk.list_directory(root)]
    for directory in filter(None, listing):
      for name in directory.files:
        if not any(fnmatch.fnmatch(name, p) for p in _PIN_FILES):
          continue
        path = os.path.join(directory.path, name)
        try:
          with open(path, 'rb') as f:
            text = f.read().decode('utf-8', 'replace')
        except OSError:
          continue  # unreadable: no pin to report, never the run's end
        for lineno, line in enumerate(text.splitlines(), 1):
          if _PIN.search(line.split('#')[0]):
            pins.append(Pin(_shown(path), lineno, line.strip()))
  return sorted(set(pins))


def unified_diff(result: FileResult) -> str:
  old = result.old.decode('utf-8', 'replace').splitlines(keepends=True)
  new = result.new.decode('utf-8', 'replace').splitlines(keepends=True)
  lines = []
  for line in difflib.unified_diff(old, new, f'a/{result.path}',
                                   f'b/{result.path}'):
    if not line.endswith('\n'):
      line += '\n\\ No newline at end of file\n'
    lines.append(line)
  return ''.join(lines)


def _git(args, cwd):
  return subprocess.run(['git', *args], cwd=cwd, capture_output=True,
                        text=True, check=False)


class Unwritable(NamedTuple):
  """The files ``--write`` refuses to rewrite in place, by reason."""
  outside: list  # not inside a git work tree
  untracked: list  # git ignores them, or does not track them yet
  dirty: list  # uncommitted changes


def unwritable_files(paths) -> Unwritable:
  """What git could not give back of ``paths`` once rewritten in place."""
  found = Unwritable([], [], [])
  for path in paths:
    directory = os.path.dirname(os.path.abspath(path))
    if _git(['rev-parse', '--show-toplevel'], directory).returncode:
      found.outside.append(path)
      continue
    status = _git(['status', '--porcelain', '--ignored', '--',
                   os.path.abspath(path)], directory)
    if status.stdout.startswith(('??', '!!')):
      found.untracked.append(path)
    elif status.returncode or status.stdout.strip():
      found.dirty.append(path)
  return found


# Where ``--write`` keeps the journal of a rewrite under way, in the git
# directory (never in the user's tree): ``_atomic.rewrite_together``.
WRITE_JOURNAL = 'flax-optim-compat-write.json'


def write_journal(path: str) -> Optional[pathlib.Path]:
  """The journal of the git work tree ``path`` lies in (None: none)."""
  directory = path if os.path.isdir(path) else os.path.dirname(
      os.path.abspath(path))
  try:
    found = _git(['rev-parse', '--absolute-git-dir'], directory)
  except OSError:  # no git: no --write either, so no journal
    return None
  if found.returncode:
    return None
  return pathlib.Path(found.stdout.strip()) / WRITE_JOURNAL


def interrupted_writes(paths) -> list:
  """The journals a stopped ``--write`` left in the work trees of
  ``paths``."""
  journals = {write_journal(path) for path in paths}
  return sorted(j for j in journals if j is not None and j.exists())


def write_port_tests(paths, sources, results) -> list:
  """Writes the test of each rule ``migrate`` kept on RuleDef beside its
  module, never over an existing file; returns a line per test for the
  user."""
  said = []
  for path, result in zip(sources, results):
    if result.plan is None or result.new == result.old:
      continue
    root = next((p for p in paths if os.path.isdir(p) and os.path.abspath(
        path).startswith(os.path.abspath(p) + os.sep)), os.path.dirname(path))
    for test_path, text in _user_rules.port_tests(path, root, result.old,
                                                  result.plan.notes):
      try:
        with open(test_path, 'x', encoding='utf-8') as f:
          f.write(text)
      except FileExistsError:
        said.append(f'{_shown(test_path)}: exists, kept as it is (the test '
                    'of a hand port of the rule kept in '
                    f'{_shown(path)})')
        continue
      said.append(f'{_shown(test_path)}: written: fill in port() to prove '
                  f'your plain Optax port of the rule kept in {_shown(path)}')
  return said


def _out_layout(paths) -> dict:
  """Source path -> path relative to the output directory."""
  if len(paths) == 1 and os.path.isdir(paths[0]):
    return {paths[0]: ''}
  layout: dict[str, str] = {}
  for path in paths:
    name = os.path.basename(os.path.normpath(path))
    if name in layout.values():
      raise ValueError(f'two inputs are both named {name!r}; pass their '
                       'common directory instead')
    layout[path] = name
  return layout


def check_out(paths, out: str) -> None:
  """Raises unless ``out`` can take the rewritten copy of ``paths``."""
  out_path = pathlib.Path(out)
  if out_path.exists() and (not out_path.is_dir() or any(out_path.iterdir())):
    raise _atomic.DestinationExistsError(
        f'{out} exists and is not an empty directory; pick a new one')
  out_abs = os.path.abspath(out)
  for path in paths:
    source = os.path.abspath(path)
    if out_abs == source or out_abs.startswith(source.rstrip(os.sep) +
                                               os.sep):
      raise ValueError(f'--out {out} lies inside the source {path}; pick a '
                       'directory outside it')
  _out_layout(paths)


def _copy_tree(source: str, destination: pathlib.Path,
               walk: _tree.Walk) -> None:
  """Copies the tree ``source`` into ``destination`` along ``walk``: a
  link to a directory becomes the same link (never followed: a loop
  would be copied without end), a link to a file its content; a file
  that cannot be read joins ``walk.unreadable``."""
  for directory in walk.directories(source):
    target = destination / os.path.relpath(directory.path, source)
    target.mkdir(exist_ok=True)
    for name in directory.links:
      os.symlink(os.readlink(os.path.join(directory.path, name)),
                 target / name)
    for name in directory.files:
      if name == '.git':  # a linked work tree's pointer to its repository
        continue
      path = os.path.join(directory.path, name)
      try:
        if os.path.islink(path) and not os.path.exists(path):
          os.symlink(os.readlink(path), target / name)  # leads nowhere
        else:
          shutil.copy2(path, target / name)
      except OSError as e:
        walk.unreadable.append(_tree.Unreadable(path, f'{type(e).__name__}: '
                                                f'{e}'))


def write_tree(paths, out: str, results) -> list:
  """Copies the inputs into ``out`` with the migrated files replaced;
  returns the ``_tree.Unreadable`` entries the copy lacks."""
  check_out(paths, out)
  out_path = pathlib.Path(out)
  changed = {os.path.abspath(r.path): r.new for r in results
             if r.new != r.old}
  if out_path.is_dir():
    out_path.rmdir()  # empty: replaced atomically below
  walk = _tree.Walk(lambda path, name: name != '.git')
  with _atomic.atomic_destination(out_path) as temp:
    temp.mkdir()
    for source, relative in _out_layout(paths).items():
      destination = temp / relative if relative else temp
      if os.path.isdir(source):
        _copy_tree(source, destination, walk)
      else:
        shutil.copy2(source, destination)
    for source, relative in _out_layout(paths).items():
      for result_path, data in changed.items():
        if result_path == os.path.abspath(source):
          target = temp / relative
        elif result_path.startswith(os.path.abspath(source) + os.sep):
          target = temp / relative / os.path.relpath(result_path, source)
        else:
          continue
        target.write_bytes(data)
  return walk.unreadable


# ---------------------------------------------------------------------------
# Proof: the user's program run on both trees.

# Compares the checkpoints two runs left; out of process, as it reads them
# with jax, which the codemod does not import.
PROVE_TOOL = 'compat.testing._prove'
WORKDIR = '{workdir}'
_SHOWN_OUTPUT = 20  # lines of a failed run's output shown


def _side_env(tree: str) -> dict:
  """The environment ``CMD`` runs in on either side: the tree first on
  ``sys.path``; the shim as flax ran it (op by op: the shim's eager kernel
  cache fuses differently from an un-jitted TrainState step, in the last
  bit), strict mode off. The same on both sides: what migrate leaves on the
  migrated tree runs through the shim as on the original."""
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(
      p for p in (tree, env.get('PYTHONPATH')) if p)
  for name in ('LEGACY_OPTIM_STRICT', 'LEGACY_OPTIM_IMPORT_HOOK'):
    env.pop(name, None)
  env['LEGACY_OPTIM_EAGER_JIT'] = '0'
  return env


def _run_side(side: str, paths, results, command: str, base: str):
  """Runs ``command`` on one side's copy of the tree: its work directory,
  or None and what went wrong."""
  tree = os.path.join(base, side)
  write_tree(paths, tree, results)
  workdir = os.path.join(base, f'{side}-workdir')
  os.mkdir(workdir)
  shown = command.replace(WORKDIR, shlex.quote(workdir))
  done = subprocess.run(shown, shell=True, cwd=tree,
                        env=_side_env(tree), capture_output=True,
                        text=True, check=False)
  if done.returncode == 0:
    return workdir, []
  output = (done.stdout + done.stderr).splitlines()[-_SHOWN_OUTPUT:]
  return None, [f'the command failed on the {side} tree (exit '
                f'{done.returncode}): {shown}'] + [f'  {l}' for l in output]


def prove(paths, results, command: str, rtol: float = 0.0):
  """``(proven, lines)``: runs ``command`` (``{workdir}`` replaced by a
  fresh directory per side) on a copy of the original tree under the shim
  and on a copy of the migrated one, then compares what each run left
  there (``compat.testing._prove``). The copies are removed once proven,
  kept (and named) otherwise."""
  base = tempfile.mkdtemp(prefix='flax-optim-compat-prove-')
  unchanged = [r._replace(new=r.old) for r in results]
  workdirs = []
  for side, side_results in (('original', unchanged), ('migrated', results)):
    workdir, failure = _run_side(side, paths, side_results, command, base)
    if workdir is None:
      return False, failure + [f'the runs are kept in {base}']
    workdirs.append(workdir)
  compared = subprocess.run(
      [sys.executable, '-m', PROVE_TOOL, *workdirs, '--rtol', repr(rtol)],
      capture_output=True, text=True, check=False)
  lines = compared.stdout.splitlines()
  if compared.returncode == 0:
    shutil.rmtree(base, ignore_errors=True)
    return True, lines
  if compared.returncode != 1:  # the comparison itself failed
    lines += compared.stderr.splitlines()[-_SHOWN_OUTPUT:]
  return False, lines + [f'the runs are kept in {base}']


def format_proof(proven: bool, lines, command: str, rtol: float) -> list:
  how = f'within rtol={rtol!r}' if rtol else 'bit-identical'
  head = (f'proven ({how}): `{command}` left the same checkpoints and '
          'trajectories on the original tree (under the shim) and on the '
          'migrated one'
          if proven else f'not proven ({how} required): `{command}` on the '
          'original tree (under the shim) and on the migrated one')
  return [head] + [f'  {l}' for l in lines]


# ---------------------------------------------------------------------------
# Report.


def _changed_lines(result: FileResult):
  old = result.old.decode('utf-8', 'replace').splitlines()
  new = result.new.decode('utf-8', 'replace').splitlines()
  for tag, i1, i2, j1, j2 in _line_match.opcodes(old, new):
    if tag != 'equal':
      yield i1 + 1, old[i1:i2], new[j1:j2]


def holding_links(result: FileResult) -> list:
  """The links that keep this file's optimizer flow as it was: the plan's
  flow leftovers with a reason of their own (the rest say
  ``HELD_BY_ANOTHER_LINK``), as ``Leftover``s at lines of the file read.
  The report and the terminal both show these, with the plan's reasons."""
  plan = result.plan
  if plan is None:
    return []
  return sorted({l for l in plan.leftovers
                 if l.construct in _rewrite_plan.FLOW_CONSTRUCTS and
                 l.reason != _rewrite_plan.HELD_BY_ANOTHER_LINK})


def _across_modules(link) -> bool:
  """A link to another module: its reason names both ends (and the same
  link holds each module of the flow)."""
  return link.reason.startswith(_project.KEPT_WITH_FLOW)


# What releases a link whose reason says only what happens there.
_RELEASES = {
    _rewrite_plan.ESCAPE: _codes.note(_codes.ESCAPE_RELEASED),
}


def _reason(link) -> str:
  release = _RELEASES.get(link.construct)
  return f'{link.reason}; {release}' if release else link.reason


def describe_link(link) -> str:
  """One holding link as the report and the terminal show it."""
  if _across_modules(link):
    return link.reason
  return f'line {link.line} ({link.construct}): `{link.code}`: {_reason(link)}'


def _held_usages(result: FileResult, links) -> int:
  """How many of the usages left in ``result`` its flow's holding links
  keep: the ones held by another link, and the links left themselves."""
  reasons = {l.reason for l in links} | {_rewrite_plan.HELD_BY_ANOTHER_LINK}
  return sum(l.reason in reasons for l in result.left)


def rank_holding_links(results) -> list:
  """``(usages held, the link as shown)``, most first: each link is
  credited with the usages its file's flow keeps (any one of a file's
  links holds all of them); a link across modules, with those of every
  module it holds."""
  held: dict[str, int] = {}
  order: dict[str, tuple] = {}
  for result in results:
    links = holding_links(result)
    count = _held_usages(result, links)
    for link in links:
      # The reasons are printed above; here only which link.
      shown = (link.reason[len(_project.KEPT_WITH_FLOW):]
               if _across_modules(link) else
               f'{result.path}:{link.line} ({link.construct}): `{link.code}`')
      held[shown] = held.get(shown, 0) + count
      order.setdefault(shown, (result.path, link.line))
  return sorted(((n, shown) for shown, n in held.items()),
                key=lambda item: (-item[0], order[item[1]]))


def format_ranking(results) -> list:
  ranked = rank_holding_links(results)
  if not ranked:
    return []
  width = len(str(ranked[0][0]))
  return (['optimizer flows kept as they were, by the link holding each '
           '(usages it keeps on flax.optim):'] +
          [f'  {n:>{width}}  {shown}' for n, shown in ranked])


def unsafe_fixes_applied(results) -> list:
  """``(path, Leftover)`` of each unsafe fix carried out."""
  return [(r.path, fix) for r in results
          for fix in _rewrite_plan.unsafe_fixes_applied(r.plan)]


def unsafe_fixes_held(results) -> list:
  """``(path, Leftover)`` of each unsafe fix enabled whose flow another
  link keeps as it was."""
  return [(r.path, fix) for r in results
          for fix in _rewrite_plan.unsafe_fixes_held(r.plan)]


def unsafe_fixes_hidden(results) -> list:
  """``(path, Leftover)`` of each unsafe fix available, not enabled."""
  return [(r.path, fix) for r in results
          for fix in _rewrite_plan.unsafe_fixes_hidden(r.plan)]


def format_unsafe_fixes(results) -> list:
  """The terminal's lines on unsafe fixes: each one applied, with its
  assumption, and how many are hidden (ruff's wording)."""
  lines = [_codes.UNSAFE_FIX_APPLIED_LINE.format(
      where=f'{path}:{fix.line}', assumption=fix.reason)
           for path, fix in unsafe_fixes_applied(results)]
  hidden = len(unsafe_fixes_hidden(results))
  if hidden:
    lines.append(_codes.UNSAFE_FIXES_HIDDEN_LINE.format(
        count=hidden, fixes='fixes' if hidden > 1 else 'fix'))
  return lines


def _unsafe_fixes_section(results) -> list:
  hidden = unsafe_fixes_hidden(results)
  groups = (
      (unsafe_fixes_applied(results), _codes.UNSAFE_FIXES_APPLIED_HEADING),
      (unsafe_fixes_held(results), _codes.UNSAFE_FIXES_HELD_HEADING),
      (hidden, _codes.UNSAFE_FIXES_HIDDEN_HEADING.format(count=len(hidden))))
  if not any(fixes for fixes, _ in groups):
    return []
  lines = ['## Unsafe fixes', '']
  for fixes, heading in groups:
    if fixes:
      lines += [heading, '']
      lines += [f'- {path}:{fix.line}: `{fix.code}`: {fix.reason}'
                for path, fix in fixes]
      lines.append('')
  return lines


def format_report(results, pins, tier: str, proof=()) -> str:
  """``proof``: ``format_proof``'s lines, when ``--prove`` ran."""
  lines = [f'# flax-optim-compat migrate report (tier: {tier})', '']
  if proof:
    lines += ['## Proof', '', '```text', *proof, '```', '']
  # The removed jax/flax APIs beside flax.optim (FOC2xx) are counted apart.
  removed_constructs = {c.construct for c in _codes.CODES
                        if c.code.startswith(_codes.REMOVED_APIS)}
  left = [l for r in results for l in r.left if l.construct != 'self_check']
  removed = sum(l.construct in removed_constructs for l in left)
  changed = sum(r.new != r.old for r in results)
  failed = sum(bool(r.error) for r in results)
  lines += [f'{len(results)} file(s) read, {changed} rewritten, '
            f'{len(left) - removed} flax.optim usage(s) and reference(s) '
            + (f'and {removed} use(s) of other removed APIs ' if removed
               else '') + 'left in the output'
            + (f', {failed} file(s) not migrated' if failed else '') + '.',
            '']
  lines += _unsafe_fixes_section(results)
  for result in results:
    plan = result.plan
    if result.error:
      lines += [f'## {result.path}', '', f'Not migrated: {result.error}', '']
      continue
    if result.new == result.old and not (result.left or plan.notes):
      continue
    lines += [f'## {result.path}', '']
    for line, old, new in _changed_lines(result):
      lines.append(f'- line {line}:')
      lines += [f'  - old: `{o.strip()}`' for o in old if o.strip()]
      lines += [f'  - new: `{n.strip()}`' for n in new if n.strip()]
    # Every link holding this file's flow, before the entries it holds,
    # which say "see above".
    why = list(dict.fromkeys(map(describe_link, holding_links(result))))
    if why:
      lines += ['', 'Why this file\'s optimizer flow is kept as it was:', '']
      lines += [f'- {reason}' for reason in why]
    if result.left:
      lines += ['', 'Left in the output (lines of the migrated file):', '']
      lines += [f'- line {l.line} ({l.construct}): `{l.code}`: {l.reason}'
                for l in result.left]
    if plan.notes:
      lines += ['', 'Notes:', '']
      lines += [f'- line {n.line} ({n.construct}): `{n.code}`: {n.reason}'
                for n in plan.notes]
    lines.append('')
  if pins:
    lines += ['## Dependency pins kept for flax.optim', '',
              'These pins hold flax at a version that still had flax.optim; '
              'once the code is migrated they can go (flax >= 0.6):', '']
    lines += [f'- {p.path}:{p.line}: `{p.text}`' for p in pins]
    lines.append('')
  ranking = format_ranking(results)
  if ranking:
    lines += ['## Links holding optimizer flows', '', '```text', *ranking,
              '```', '']
  return '\n'.join(lines)


def skipped(results) -> list:
  """A line per file (or directory) left as it was because it could not
  be read, parsed or analysed: every mode writes them to stderr."""
  return [f'{r.path}: not migrated: {r.error}' for r in results if r.error]


def format_summary(results, pins) -> str:
  out = []
  for r in results:
    if r.error:
      continue  # on stderr (``skipped``)
    if r.new != r.old:
      out.append(f'{r.path}: {len(r.plan.edits)} rewrite(s)')
    # The links holding the flow first, so that "see above" finds them:
    # those no line left in the output shows (a link to another module, a
    # line with no flax.optim name on it), then the entries in file order,
    # the links among them before the entries they hold.
    links = holding_links(r)
    shown = {l.reason for l in r.left}
    out += [f'{r.path}:{l.line}: holds the flow: {l.reason}'
            if _across_modules(l) else
            f'{r.path}:{l.line}: holds the flow ({l.construct}): '
            f'`{l.code}`: {_reason(l)}'
            for l in links if l.reason not in shown]
    holding = {l.reason for l in links}
    for left in sorted(r.left, key=lambda l: (l.reason not in holding,
                                              l.line)):
      out.append(f'{r.path}:{left.line}: left ({left.construct}): '
                 f'{left.reason}')
    # What a checkpoint written before migrating needs (converting) is
    # said here too where the flow migrated: the report is optional, old
    # files are the user's.
    if _rewrite_plan.flow_migrated(r.plan):
      out += [f'{r.path}:{note.line}: note (checkpoint): {note.reason}'
              for note in r.plan.notes if note.construct == 'checkpoint']
  out += [f'{p.path}:{p.line}: pin kept for flax.optim: {p.text}'
          for p in pins]
  return '\n'.join(out + format_ranking(results) +
                   format_unsafe_fixes(results))


# ---------------------------------------------------------------------------
# Command line.


MIGRATE_EXIT = """
exit status: 0 nothing left to change, 1 usages remain (or --diff has
changes), 2 bad arguments or configuration, or a refused write, 3 --prove
found a difference (with --write, nothing was written)."""


def _prove_arguments_problem(args) -> str:
  """What is wrong with the --prove arguments, or ''."""
  if not args.prove:
    if args.unproven or args.rtol:
      return '--rtol and --unproven go with --prove CMD'
    return ''
  if not (args.out or args.write):
    return ('--prove needs --out DIR or --write: it runs CMD on the '
            'migrated tree before keeping it')
  if WORKDIR not in args.prove:
    return (f'--prove CMD must contain {WORKDIR}: where the program leaves '
            'its checkpoints (each run gets its own directory)')
  if args.rtol < 0:
    return f'--rtol {args.rtol}: expected 0 or more'
  return ''


def main(argv=None) -> int:
  """``flax-optim-compat migrate``; stopped by SIGTERM or SIGHUP as by
  SIGINT, it removes what it was writing and returns 130
  (``_atomic.run_stoppable``)."""
  return _atomic.run_stoppable(_main, argv)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat migrate',
      description='Rewrite flax.optim code to Optax/TrainState code.',
      epilog=scan.EPILOG + MIGRATE_EXIT,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('paths', nargs='+', metavar='PATH')
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument('--diff', action='store_true',
                    help='print a unified diff; change nothing')
  mode.add_argument('--write', action='store_true',
                    help='rewrite in place: only files git tracks, '
                    'committed; all or none (a stopped run is finished or '
                    'undone by the next)')
  mode.add_argument('--out', metavar='DIR',
                    help='write a rewritten copy of the tree into DIR')
  parser.add_argument(
      '--tier', choices=_config.TIERS, default=None,
      help='exact (default): bit-identical training (stock Optax where it '
      'is exact, else flax_optim_rules); stock: the nearest stock Optax '
      'alias, each line annotated with its measured deviation')
  parser.add_argument('--report', metavar='FILE',
                      help='write a Markdown report to FILE')
  parser.add_argument(
      '--unsafe-fixes', action='store_true',
      help='also apply the fixes that rest on an assumption (e.g. that a '
      'function of the project is a generic tree walker); each is listed '
      'with its assumption: check it, e.g. with --prove')
  parser.add_argument(
      '--prove', metavar='CMD',
      help='with --out or --write: run CMD (a shell command; {workdir} '
      'becomes a fresh directory per run) on the original tree under the '
      'shim and on the migrated tree, and compare the checkpoints each run '
      'leaves in its {workdir}: params, step and optimizer state, '
      'bit-identical unless --rtol; with --write, nothing is written '
      'unless proven')
  parser.add_argument('--rtol', type=float, default=0.0, metavar='R',
                      help='with --prove: values may differ by R relative')
  parser.add_argument('--unproven', action='store_true',
                      help='with --prove --write: write even if not proven')
  scan.add_selection_arguments(parser)
  return parser


def _usage_problem(args) -> str:
  """What makes the command line unusable before any work (printed with
  its prefix), or ''."""
  problem = _prove_arguments_problem(args)
  if problem:
    return f'migrate: {problem}'
  if args.out:
    try:  # before any work: the destination is the user's to pick again
      check_out(args.paths, args.out)
    except (ValueError, FileExistsError) as e:
      return f'refusing --out: {e}'
  return ''


def _finish_interrupted_writes(args) -> None:
  for journal in interrupted_writes(args.paths):
    if args.write:  # finished or undone before anything is read
      print(f'migrate: {_atomic.finish_interrupted(journal)}',
            file=sys.stderr)
    else:
      print(f'migrate: a stopped --write left {journal}: run migrate '
            '--write again to finish (or undo) it', file=sys.stderr)


def _write_refused(to_change) -> bool:
  """Says why ``--write`` may not rewrite the files of ``to_change`` (none
  may be outside git, untracked or uncommitted); True where it may not."""
  refused = unwritable_files([p for p, _ in to_change])
  if refused.outside:
    print('refusing --write: not inside a git work tree: ' +
          ', '.join(map(_shown, refused.outside)), file=sys.stderr)
  if refused.untracked:
    print('refusing --write: git does not track (it ignores, or has not '
          'been given) these files with usages, so it could not restore '
          'them: ' + ', '.join(map(_shown, refused.untracked)) + ' (git '
          'add them, --exclude them, or use --out DIR)', file=sys.stderr)
  if refused.dirty:
    print('refusing --write: uncommitted changes in: ' +
          ', '.join(map(_shown, refused.dirty)) + ' (commit or stash them, '
          'or use --out DIR)', file=sys.stderr)
  return any(refused)


def _write_in_place(args, sources, results, to_change) -> None:
  journal = write_journal(to_change[0][0])
  if journal is None:  # unwritable_files refused a file outside git above
    raise RuntimeError(f'no git directory for {to_change[0][0]}')
  _atomic.rewrite_together({path: result.new for path, result in to_change},
                           journal)
  for line in write_port_tests(args.paths, sources, results):
    print(line)


def _print_outcome(args, results, pins, to_change, proof, proven) -> None:
  """The diff or summary, the proof, and the report where asked."""
  summary = format_summary(results, pins)
  if args.diff:
    sys.stdout.write(''.join(unified_diff(r) for _, r in to_change))
    if summary:  # what is left and why, beside a diff that stays clean
      print(summary, file=sys.stderr)
  else:
    print(summary or 'nothing to migrate')
  if proof:
    print('\n'.join(proof))
    if args.write and not proven:
      print('nothing written: the migration is not proven (--unproven '
            'writes it anyway)' if not args.unproven else
            'written although not proven (--unproven)', file=sys.stderr)


def _main(argv=None) -> int:
  args, exit_code = scan.parse_command_line(_parser(), argv)
  if args is None:
    return exit_code
  try:
    config, chosen, exclude = scan.configure(args)
  except ValueError as e:
    print(f'migrate: {e}', file=sys.stderr)
    return EXIT_USAGE
  tier = args.tier or config.tier or 'exact'
  problem = _usage_problem(args)
  if problem:
    print(problem, file=sys.stderr)
    return EXIT_USAGE
  _finish_interrupted_writes(args)
  sources, results = migrate_paths(args.paths, tier, exclude, chosen,
                                   args.unsafe_fixes)
  for line in skipped(results):
    print(line, file=sys.stderr)
  pins = find_pins(args.paths)
  to_change = [(p, r) for p, r in zip(sources, results) if r.new != r.old]
  if args.write and to_change and _write_refused(to_change):
    return EXIT_USAGE
  proof, proven = [], True
  if args.prove:
    try:
      proven, lines = prove(args.paths, results, args.prove, args.rtol)
    except (ValueError, FileExistsError) as e:  # the copies' layout
      print(f'refusing --prove: {e}', file=sys.stderr)
      return EXIT_USAGE
    proof = format_proof(proven, lines, args.prove, args.rtol)
  if args.write and to_change and (proven or args.unproven):
    _write_in_place(args, sources, results, to_change)
  not_copied = []
  if args.out:
    try:
      not_copied = write_tree(args.paths, args.out, results)
    except (ValueError, FileExistsError) as e:
      print(f'refusing --out: {e}', file=sys.stderr)
      return EXIT_USAGE
    for entry in not_copied:
      print(f'{_shown(entry.path)}: not copied to {args.out}: {entry.reason}',
            file=sys.stderr)
  _print_outcome(args, results, pins, to_change, proof, proven)
  if args.report:
    with open(args.report, 'w', encoding='utf-8') as f:
      f.write(format_report(results, pins, tier, proof))
  if not proven:
    return EXIT_NOT_PROVEN
  left = any(r.error or r.left for r in results) or bool(not_copied)
  pending = bool(to_change) and not (args.write or args.out)
  return EXIT_LEFT if left or pending else EXIT_CLEAN
