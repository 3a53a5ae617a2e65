"""``flax-optim-compat migrate PATH...``: rewrite code off flax.optim.

Finds the usages with ``scan`` (one list), plans the edits with
``_rewrite_plan`` and applies them: only the rewritten expressions
change, every other byte of the file stays as it was (comments and formatting
included); imports are added and the now unused ``flax.optim`` ones dropped
with LibCST, which also checks that the result parses.

Modes (one at most; without one, a summary and the exit status only):

* ``--diff``: print a unified diff (``git apply`` takes it); nothing changes;
* ``--write``: rewrite in place, only inside a git work tree and only files
  without uncommitted changes (refused otherwise, naming the files);
* ``--out DIR``: write a rewritten copy of the given tree into ``DIR`` (new or
  empty, outside the sources).

``--report FILE`` writes a Markdown report: per file, each rewritten line old
-> new, what was left and why, notes (checkpoints), dependency pins that
exist only for flax.optim. Jupyter notebooks (``.ipynb``) are migrated cell
by cell (code cells; IPython magics are kept as they are).

Exit status: 0 no flax.optim usage is left (after ``--write``/``--out``; for
``--diff`` and the summary, nothing to change either), 1 usages remain, 2
bad arguments or a refused write.
"""

import argparse
import ast
import difflib
import fnmatch
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import NamedTuple, Optional

import libcst
from libcst import codemod
from libcst.codemod import visitors

from compat import _atomic
from compat.codemod import _project
from compat.codemod import _rewrite_plan
from compat.codemod import scan

EXIT_CLEAN, EXIT_LEFT, EXIT_USAGE = 0, 1, 2
_MAGIC = re.compile(r'^\s*[%!?]')
_CELL = '__flax_optim_compat_cell__'
_MAGIC_CALL = '__flax_optim_compat_magic__'
_PIN_FILES = ('requirements*.txt', 'setup.cfg', 'pyproject.toml', 'setup.py')
_PIN = re.compile(r'''flax\s*(==\s*0\.[0-5](\.\d+)*|<=?\s*0\.[0-6](\.\d+)?|'''
                  r'''~=\s*0\.[0-5](\.\d+)*)''')


class FileResult(NamedTuple):
  path: str  # as shown (relative, '/'-separated)
  old: bytes
  new: bytes
  plan: Optional[_rewrite_plan.Plan]
  error: Optional[str]


class Pin(NamedTuple):
  path: str
  line: int
  text: str


# ---------------------------------------------------------------------------
# One module.


def _fix_imports(code: str, plan: _rewrite_plan.Plan) -> str:
  module = libcst.parse_module(code)
  context = codemod.CodemodContext()
  for module_name, obj, asname in plan.imports:
    visitors.AddImportsVisitor.add_needed_import(context, module_name, obj,
                                                 asname)
  for module_name, obj, asname in plan.removed_imports:
    visitors.RemoveImportsVisitor.remove_unused_import(context, module_name,
                                                       obj, asname)
  module = visitors.AddImportsVisitor(context).transform_module(module)
  module = visitors.RemoveImportsVisitor(context).transform_module(module)
  return module.code


def migrate_source(source: bytes, path: str = '<string>',
                   tier: str = 'exact', reexports=None, exported=(),
                   rate_set_elsewhere: bool = False, model=None,
                   blocked=()):
  """``(new_source, plan)`` for one module's source. Raises SyntaxError.

  ``reexports``/``exported``: what the project's modules hand on from
  flax.optim (``scan.parse_project``); such usages are listed, not
  rewritten, and a re-exported import stays. ``rate_set_elsewhere``:
  another module of the project sets the learning rate per step on
  optimizers it receives (the function ``rate_set_elsewhere``), so this
  module's definitions must take it as an injected hyper-parameter.
  ``model``: the project (``scan.parse_project(...).model``; ``path`` is
  the module's key in it); ``blocked``: ``Leftover``s of this module's
  optimizer flow that other modules keep as they are (``migrate_paths``):
  given, the flow here stays too.
  """
  tree = ast.parse(source, filename=path)
  names = scan.module_names(tree, path, reexports, model)
  findings = scan.scan_source(source, path, reexports, tree, model)
  planner = _rewrite_plan.Planner(source, tree, names, findings, tier,
                                  exported, rate_set_elsewhere, blocked)
  plan = planner.plan()
  if not plan.edits:
    return source, plan
  rendered, dropped = _rewrite_plan.render(source, plan.edits)
  for edit in dropped:
    plan.leftovers.append(_rewrite_plan.Leftover(
        edit.line, edit.construct, '', 'overlaps another rewrite; left as is'))
  code = _fix_imports(rendered.decode('utf-8'), plan)
  return code.encode('utf-8'), plan


def _split_magics(cell: str):
  lines: list[str] = []
  magics: list[str] = []
  for line in cell.splitlines():
    if _MAGIC.match(line):
      indent = line[:len(line) - len(line.lstrip())]
      lines.append(f'{indent}{_MAGIC_CALL}({len(magics)})')
      magics.append(line.lstrip())
    else:
      lines.append(line)
  return '\n'.join(lines), magics


def migrate_notebook(raw: bytes, path: str, tier: str = 'exact'):
  """``(new_notebook_bytes, plan)``: all code cells migrated as one module."""
  notebook = json.loads(raw)
  cells = [c for c in notebook.get('cells', []) if c.get('cell_type') ==
           'code']
  parts, magics = [], []
  for index, cell in enumerate(cells):
    text = ''.join(cell.get('source', []))
    text, cell_magics = _split_magics(text)
    magics.append(cell_magics)
    parts.append(f'{_CELL}({index})\n{text}\n')
  combined = ''.join(parts).encode('utf-8')
  new, plan = migrate_source(combined, path, tier)
  if new == combined:
    return raw, plan
  chunks = re.split(rf'^{_CELL}\((\d+)\)\n', new.decode('utf-8'),
                    flags=re.MULTILINE)
  prefix, bodies = chunks[0], dict(zip(chunks[1::2], chunks[2::2]))
  for index, cell in enumerate(cells):
    body = bodies[str(index)]
    body = body[:-1] if body.endswith('\n') else body
    if index == 0:
      body = prefix + body
    body = re.sub(rf'{_MAGIC_CALL}\((\d+)\)',
                  lambda m, i=index: magics[i][int(m.group(1))], body)
    old = ''.join(cell.get('source', []))
    if body != old:
      cell['source'] = body.splitlines(keepends=True)
  # Jupyter's own layout (nbformat writes it so), so only the cells change.
  text = json.dumps(notebook, indent=1, sort_keys=True,
                    ensure_ascii=False) + '\n'
  return text.encode('utf-8'), plan


# ---------------------------------------------------------------------------
# Files and trees.


def _shown(path: str) -> str:
  relative = os.path.relpath(path) if os.path.isabs(path) else path
  return os.path.normpath(relative).replace(os.sep, '/')


def iter_sources(paths, exclude=()):
  """The .py files and notebooks under ``paths`` (``scan``'s walk and
  ``--exclude`` rules)."""
  return scan.iter_python_files(paths, exclude, suffixes=('.py', '.ipynb'))


def rate_set_elsewhere(project: scan.Project) -> bool:
  """Whether a module overrides hyper-parameters per step
  (``apply_gradient(g, learning_rate=lr)``) on optimizers it creates no
  definition for: they come from another module (ppo's ``models.py``
  creates, ``ppo_lib.py`` sets the rate)."""
  for shown, source, tree in project.parsed:
    constructs = {f.construct for f in scan.scan_source(
        source, shown, project.reexports, tree)}
    if 'apply_gradient_overrides' in constructs and not constructs & {
        'create', 'optimizer_def'}:
      return True
  return False


def migrate_file(path: str, tier: str = 'exact',
                 project: Optional[scan.Project] = None,
                 rate_elsewhere: bool = False, blocked=()) -> FileResult:
  """One file migrated in memory; ``project``: re-exports and the flows
  across modules to follow; ``rate_elsewhere``:
  ``rate_set_elsewhere(project)``; ``blocked``: see ``migrate_source``."""
  shown = _shown(path)
  with open(path, 'rb') as f:
    old = f.read()
  try:
    if path.endswith('.ipynb'):
      new, plan = migrate_notebook(old, shown, tier)
    elif project is not None:
      new, plan = migrate_source(
          old, path.replace(os.sep, '/'), tier, project.reexports,
          project.exported.get(os.path.abspath(path), ()), rate_elsewhere,
          project.model, blocked)
    else:
      new, plan = migrate_source(old, shown, tier)
  except SyntaxError as e:
    return FileResult(shown, old, old, None, f'syntax error line {e.lineno}: '
                      f'{e.msg}')
  except (ValueError, UnicodeDecodeError, libcst.ParserSyntaxError) as e:
    return FileResult(shown, old, old, None, f'{type(e).__name__}: {e}')
  return FileResult(shown, old, new, plan, None)


def migrate_paths(paths, tier: str = 'exact', exclude=()):
  """``(sources, results)``: every file under ``paths`` migrated in memory
  as one project (re-exports, per-step rates and definitions made in one
  module and created in another followed across modules).

  Before anything is returned (and so written), each flow that crosses
  modules is checked whole (``_project.flow_violations``): where one end
  of a link was rewritten and the other was not, every module of that flow
  is migrated again with its optimizer flow kept as it was, and the report
  lists each link with its file, line and reason.
  """
  sources = list(iter_sources(paths, exclude))
  project = scan.parse_project(paths, exclude)
  rate_elsewhere = rate_set_elsewhere(project)
  results = {p: migrate_file(p, tier, project, rate_elsewhere)
             for p in sources}
  key_of = {p.replace(os.sep, '/'): p for p in sources}
  for path, blocked in _project.roll_back(
      project.model.links, lambda key: _result_plan(results, key_of, key)):
    results[key_of[path]] = migrate_file(key_of[path], tier, project,
                                         rate_elsewhere, blocked)
  return sources, [results[p] for p in sources]


def _result_plan(results, key_of, key):
  result = results.get(key_of.get(key))
  return None if result is None else result.plan


def find_pins(paths) -> list:
  """Dependency pins that keep an old flax (``flax==0.5.3``, ``flax<0.6``)."""
  pins = []
  for root_path in paths:
    root = root_path if os.path.isdir(root_path) else os.path.dirname(
        root_path) or '.'
    for dirpath, dirs, files in os.walk(root):
      dirs[:] = [d for d in dirs if not d.startswith('.') and
                 d not in scan.SKIP_DIRS]
      for name in sorted(files):
        if not any(fnmatch.fnmatch(name, p) for p in _PIN_FILES):
          continue
        path = os.path.join(dirpath, name)
        with open(path, 'rb') as f:
          text = f.read().decode('utf-8', 'replace')
        for lineno, line in enumerate(text.splitlines(), 1):
          if _PIN.search(line.split('#')[0]):
            pins.append(Pin(_shown(path), lineno, line.strip()))
      if not os.path.isdir(root_path):
        break
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


def dirty_files(paths) -> tuple[list, list]:
  """(files outside a git work tree, files with uncommitted changes)."""
  outside, dirty = [], []
  for path in paths:
    directory = os.path.dirname(os.path.abspath(path))
    top = _git(['rev-parse', '--show-toplevel'], directory)
    if top.returncode:
      outside.append(path)
      continue
    status = _git(['status', '--porcelain', '--', os.path.abspath(path)],
                  directory)
    if status.returncode or status.stdout.strip():
      dirty.append(path)
  return outside, dirty


def _write_in_place(path: str, data: bytes) -> None:
  """Replaces ``path``'s content atomically (the old file is never lost)."""
  mode = os.stat(path).st_mode
  fd, temp = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.',
                              dir=os.path.dirname(os.path.abspath(path)))
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(temp, mode)
    os.replace(temp, path)
  except BaseException:
    if os.path.exists(temp):
      os.unlink(temp)
    raise


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


def write_tree(paths, out: str, results) -> None:
  """Copies the inputs into ``out`` with the migrated files replaced."""
  check_out(paths, out)
  out_path = pathlib.Path(out)
  changed = {os.path.abspath(r.path): r.new for r in results
             if r.new != r.old}
  if out_path.is_dir():
    out_path.rmdir()  # empty: replaced atomically below
  with _atomic.atomic_destination(out_path) as temp:
    temp.mkdir()
    for source, relative in _out_layout(paths).items():
      destination = temp / relative if relative else temp
      if os.path.isdir(source):
        shutil.copytree(source, destination, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns('.git'))
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


# ---------------------------------------------------------------------------
# Report.


def _changed_lines(result: FileResult):
  old = result.old.decode('utf-8', 'replace').splitlines()
  new = result.new.decode('utf-8', 'replace').splitlines()
  matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
  for tag, i1, i2, j1, j2 in matcher.get_opcodes():
    if tag != 'equal':
      yield i1 + 1, old[i1:i2], new[j1:j2]


def format_report(results, pins, tier: str) -> str:
  lines = [f'# flax-optim-compat migrate report (tier: {tier})', '']
  left = sum(len(r.plan.leftovers) for r in results if r.plan)
  changed = sum(r.new != r.old for r in results)
  lines += [f'{len(results)} file(s) read, {changed} rewritten, {left} '
            'usage(s) left.', '']
  for result in results:
    plan = result.plan
    if result.error:
      lines += [f'## {result.path}', '', f'Not migrated: {result.error}', '']
      continue
    if result.new == result.old and not (plan.leftovers or plan.notes):
      continue
    lines += [f'## {result.path}', '']
    for line, old, new in _changed_lines(result):
      lines.append(f'- line {line}:')
      lines += [f'  - old: `{o.strip()}`' for o in old if o.strip()]
      lines += [f'  - new: `{n.strip()}`' for n in new if n.strip()]
    if plan.leftovers:
      lines += ['', 'Left unchanged:', '']
      lines += [f'- line {l.line} ({l.construct}): `{l.code}`: {l.reason}'
                for l in plan.leftovers]
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
  return '\n'.join(lines)


def format_summary(results, pins) -> str:
  out = []
  for r in results:
    if r.error:
      out.append(f'{r.path}: not migrated: {r.error}')
      continue
    if r.new != r.old:
      out.append(f'{r.path}: {len(r.plan.edits)} rewrite(s)')
    for left in r.plan.leftovers:
      out.append(f'{r.path}:{left.line}: left ({left.construct}): '
                 f'{left.reason}')
  out += [f'{p.path}:{p.line}: pin kept for flax.optim: {p.text}'
          for p in pins]
  return '\n'.join(out)


# ---------------------------------------------------------------------------
# Command line.


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat migrate',
      description='Rewrite flax.optim code to Optax/TrainState code.')
  parser.add_argument('paths', nargs='+', metavar='PATH')
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument('--diff', action='store_true',
                    help='print a unified diff; change nothing')
  mode.add_argument('--write', action='store_true',
                    help='rewrite in place (clean git work tree only)')
  mode.add_argument('--out', metavar='DIR',
                    help='write a rewritten copy of the tree into DIR')
  parser.add_argument(
      '--tier', choices=('exact', 'stock'), default='exact',
      help='exact (default): bit-identical training (stock Optax where it '
      'is exact, else flax_optim_rules); stock: the nearest stock Optax '
      'alias, each line annotated with its measured deviation')
  parser.add_argument('--report', metavar='FILE',
                      help='write a Markdown report to FILE')
  parser.add_argument('--exclude', action='append', default=[],
                      metavar='NAME_OR_GLOB',
                      help='skip files and directories whose name or path '
                      'matches, as scan --exclude does (repeatable)')
  args, exit_code = scan.parse_command_line(parser, argv)
  if args is None:
    return exit_code
  if args.out:
    try:  # before any work: the destination is the user's to pick again
      check_out(args.paths, args.out)
    except (ValueError, FileExistsError) as e:
      print(f'refusing --out: {e}', file=sys.stderr)
      return EXIT_USAGE
  sources, results = migrate_paths(args.paths, args.tier, args.exclude)
  pins = find_pins(args.paths)
  to_change = [(p, r) for p, r in zip(sources, results) if r.new != r.old]
  if args.write and to_change:
    outside, dirty = dirty_files([p for p, _ in to_change])
    if outside or dirty:
      if outside:
        print('refusing --write: not inside a git work tree: ' +
              ', '.join(map(_shown, outside)), file=sys.stderr)
      if dirty:
        print('refusing --write: uncommitted changes in: ' +
              ', '.join(map(_shown, dirty)) + ' (commit or stash them, or '
              'use --out DIR)', file=sys.stderr)
      return EXIT_USAGE
    for path, result in to_change:
      _write_in_place(path, result.new)
  if args.out:
    try:
      write_tree(args.paths, args.out, results)
    except (ValueError, FileExistsError) as e:
      print(f'refusing --out: {e}', file=sys.stderr)
      return EXIT_USAGE
  if args.diff:
    sys.stdout.write(''.join(unified_diff(r) for _, r in to_change))
  else:
    print(format_summary(results, pins) or 'nothing to migrate')
  if args.report:
    with open(args.report, 'w', encoding='utf-8') as f:
      f.write(format_report(results, pins, args.tier))
  left = any(r.error or (r.plan is not None and r.plan.leftovers)
             for r in results)
  pending = bool(to_change) and not (args.write or args.out)
  return EXIT_LEFT if left or pending else EXIT_CLEAN
