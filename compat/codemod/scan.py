"""``flax-optim-compat scan PATH...``: find flax.optim usages, running nothing.

Parses every ``*.py`` file under the given paths with Python's own parser
(``ast``) and reports each legacy construct with its replacement and the
section of ``migration_guide.md`` that explains it:

* imports in every spelling (``from flax import optim``, ``import flax.optim
  as optim``, ``from flax.optim.adam import ...``, ``flax.optim.X`` after
  ``import flax``, ``legacy_optim``), and uses of the ``compat`` bridges;
* optimizer definitions (``optim.Adam(...)`` with the stock Optax expression
  filled in from the call's own arguments), ``OptimizerDef`` subclasses,
  ``MultiOptimizer`` and legacy traversals, ``WeightNorm``, ``DynamicScale``;
* ``.create(...)``, ``.apply_gradient(...)`` (flagged separately when it
  passes hyper-parameter overrides), ``.compute_gradient``, ``.optimize``,
  ``.replicate()`` / ``ReplicatedOptimizer``;
* optimizers passed to ``flax.training.checkpoints`` or
  ``flax.serialization``.

Names are resolved through the module's imports and assignments (flow-
insensitively), through what other scanned modules re-export from flax.optim
(``from mylib import optimizers``, see ``parse_project``) and through module
functions that return an OptimizerDef (``make_def(lr).create(params)``);
where only a name suggests an optimizer (``optimizer``, ``opt``), the
finding's confidence is ``likely`` instead of ``certain``.

Output (stable order: path, line, column, construct): a table, or with
``--format json`` one object::

  {"version": 1,
   "files_scanned": int,
   "findings": [{"path": str, "line": int, "column": int,
                 "construct": str, "code": str, "replacement": str,
                 "guide_section": str, "confidence": "certain" | "likely"}],
   "errors": [{"path": str, "line": int | null, "message": str}],
   "summary": {construct: count}}

Exit status: 0 no usage found, 1 usages remain, 2 bad arguments, 3 no usage
found but some files could not be parsed (they are listed, never fatal).
"""

import argparse
import ast
import fnmatch
import json
import os
import sys
from typing import Iterable, NamedTuple, Optional

from compat import _lazy
from compat.codemod import _flow
from compat.codemod import _names
from compat.codemod import _project
from compat.codemod import _removals

rep = _lazy.module_without_package('legacy_optim', 'catalogue')

BRIDGES = ('to_optax', 'from_optax', 'traversal_labels', 'to_train_state',
           'to_nnx_optimizer', 'load_legacy_checkpoint', 'convert_checkpoint',
           'state_shardings')
SKIP_DIRS = ('__pycache__', 'site-packages', 'node_modules')
_CHECKPOINT_FUNCS = {
    'flax.training.checkpoints.save_checkpoint': ('target', 1),
    'flax.training.checkpoints.save_checkpoint_multiprocess': ('target', 1),
    'flax.training.checkpoints.restore_checkpoint': ('target', 1),
    'flax.serialization.to_state_dict': ('target', 0),
    'flax.serialization.from_state_dict': ('target', 0),
    'flax.serialization.to_bytes': ('target', 0),
    'flax.serialization.from_bytes': ('target', 0),
}
EXIT_CLEAN, EXIT_FOUND, EXIT_USAGE, EXIT_UNPARSEABLE = 0, 1, 2, 3


class Finding(NamedTuple):
  path: str
  line: int
  column: int
  construct: str
  code: str
  replacement: str
  guide_section: str
  confidence: str = 'certain'


class ScanError(NamedTuple):
  path: str
  line: Optional[int]
  message: str


class ScanResult(NamedTuple):
  files_scanned: int
  findings: list
  errors: list


# ---------------------------------------------------------------------------
# Findings.


def _algorithm_replacement(name: str, call: ast.Call) -> str:
  values = _names.bind_arguments(name, call)
  stock = rep.stock_optax(name, values, render=lambda v: 'None' if v is None
                          else v)
  faithful = f'{ast.unparse(call)}.to_optax()'
  if not stock.expression:
    return f'{faithful} (same numbers)'
  text = (f'{stock.expression} [{rep.deviation_phrase(stock.variant)}]; '
          f'same numbers: {faithful}')
  return text + (f'; note: {stock.note}' if stock.note else '')


_FIXED = rep.REPLACEMENTS


_ANNOTATIONS = {
    'Optimizer': 'flax.training.train_state.TrainState',
    'DynamicScale': 'flax.training.dynamic_scale.DynamicScale',
    'OptimizerDef': 'optax.GradientTransformation',
}


class _Visitor(ast.NodeVisitor):
  """Reports legacy constructs of one parsed file."""

  def __init__(self, path: str, module: _names.ModuleNames, lines: list):
    self.path, self.module, self.lines = path, module, lines
    self.flow = _flow.OptimizerFlow(module.tree, module)
    self.findings: list[Finding] = []

  def add(self, node, construct, replacement=None, section=None,
          confidence='certain'):
    fixed_text, fixed_section = _FIXED.get(construct, ('', ''))
    line = self.lines[node.lineno - 1].strip() if node.lineno <= len(
        self.lines) else ''
    self.findings.append(Finding(
        self.path, node.lineno, node.col_offset + 1, construct,
        line if len(line) <= 100 else line[:97] + '...',
        replacement or fixed_text, section or fixed_section, confidence))

  # -- imports
  def visit_Import(self, node):
    self._check_removal(node)
    for alias in node.names:
      self._check_import(node, alias.name)

  def _check_removal(self, node):
    removal = _removals.match(node, self.module)
    if removal is not None:
      self.add(node, removal.construct, removal.replacement,
               rep.SECTION_FIND)

  def visit_Assign(self, node):
    self._check_removal(node)
    self.generic_visit(node)

  def visit_Expr(self, node):
    self._check_removal(node)
    self.generic_visit(node)

  def visit_ImportFrom(self, node):
    self._check_removal(node)
    if node.module and not node.level:
      if node.module == 'flax':
        for alias in node.names:
          self._check_import(node, f'flax.{alias.name}', from_flax=True)
      elif node.module in ('flax.traverse_util',):
        if any(a.name in _names.TRAVERSALS for a in node.names):
          self.add(node, 'traversal')
      elif node.module == 'compat':
        if any(a.name in BRIDGES for a in node.names):
          self.add(node, 'shim')
      else:
        self._check_import(node, node.module)
        for alias in node.names:  # from mylib import optimizers (re-export)
          if f'{node.module}.{alias.name}' in self.module.reexports:
            self.add(node, 'import')

  def _check_import(self, node, name, from_flax=False):
    canonical = _names.canonical(name)
    if name == 'legacy_optim' or name.startswith('legacy_optim.'):
      self.add(node, 'shim')
    elif canonical == 'flax.optim' or canonical.startswith('flax.optim.'):
      self.add(node, 'import')
    elif from_flax:
      pass  # other flax submodules are fine

  # -- attribute chains: flax.optim.X after `import flax`, traversals
  def visit_Attribute(self, node):
    self._check_removal(node)
    if (node.attr == 'optim' and isinstance(node.value, ast.Name) and
        self.module.bindings.get(node.value.id) == 'flax'):
      self.add(node, 'import')
    elif node.attr in _names.TRAVERSALS and self.module.resolve(
        node) == f'flax.traverse_util.{node.attr}':
      self.add(node, 'traversal')
    elif (node.attr in BRIDGES and isinstance(node.value, ast.Name) and
          self.module.bindings.get(node.value.id) == 'compat'):
      self.add(node, 'shim')
    self.generic_visit(node)

  # -- annotations: `optimizer: optim.Optimizer` (a NameError once the import
  # goes, though nothing is called)
  def visit_AnnAssign(self, node):
    self._check_annotation(node.annotation)
    self.generic_visit(node)

  def visit_arg(self, node):
    if node.annotation is not None:
      self._check_annotation(node.annotation)
    self.generic_visit(node)

  def _check_annotation(self, annotation):
    path = self.module.resolve(annotation)
    if path and path.startswith('flax.optim.'):
      name = path.rsplit('.', 1)[1]
      self.add(annotation, 'annotation', _ANNOTATIONS.get(
          name, f'the Optax counterpart of {name}'), rep.SECTION_LOOP)

  # -- class definitions
  def visit_ClassDef(self, node):
    if node.name in self.module.user_defs:
      self.add(node, 'optimizer_def_subclass')
    self.generic_visit(node)

  # -- calls
  def visit_Call(self, node):
    self._check_removal(node)
    self._check_call(node)
    self.generic_visit(node)

  def _check_call(self, node):
    module = self.module
    name = module.legacy_class(node.func)
    if name in _names.ALGORITHMS:
      self.add(node, 'optimizer_def', _algorithm_replacement(name, node),
               rep.SECTION_ALGORITHMS)
      return
    if name in ('MultiOptimizer', 'WeightNorm'):
      self.add(node, 'multi_optimizer' if name == 'MultiOptimizer' else
               'weight_norm')
      return
    if name == 'ReplicatedOptimizer':
      self.add(node, 'replicate')
      return
    if name in _names.TRAVERSALS:  # flax.optim.ModelParamTraversal
      self.add(node, 'traversal')
      return
    if name == 'DynamicScale':
      args = ', '.join(ast.unparse(a) for a in node.args) or ', '.join(
          f'{k.arg}={ast.unparse(k.value)}' for k in node.keywords if k.arg)
      self.add(node, 'dynamic_scale',
               _FIXED['dynamic_scale'].text.format(args=args))
      return
    path = module.resolve(node.func)
    if path and path.startswith('flax.traverse_util.') and (
        path.rsplit('.', 1)[1] in _names.TRAVERSALS):
      self.add(node, 'traversal')
      return
    if path in _CHECKPOINT_FUNCS:
      self._check_checkpoint(node, path)
      return
    if isinstance(node.func, ast.Attribute):
      self._check_method(node, node.func.attr, node.func.value)

  def _check_method(self, node, method, receiver):
    module = self.module
    if method == 'create' and module.is_def(receiver):
      self.add(node, 'create')
      if any(k.arg == 'focus' for k in node.keywords) or len(node.args) > 1:
        self.add(node, 'traversal')
      return
    if method not in ('apply_gradient', 'compute_gradient',
                      'compute_gradients', 'optimize', 'replicate'):
      return
    if method == 'replicate' and module.resolve(receiver) is not None:
      return  # jax_utils.replicate(...) and other module functions
    confidence = ('certain' if self.flow.is_optimizer(receiver) else
                  module.optimizer_confidence(receiver))
    if method == 'apply_gradient' and confidence is None:
      confidence = 'likely'  # the method name is flax.optim's alone
    if confidence is None:
      return
    if method == 'apply_gradient' and node.keywords:
      names = ', '.join(k.arg or '**' for k in node.keywords)
      text, section = _FIXED['apply_gradient_overrides']
      self.add(node, 'apply_gradient_overrides', f'({names}) -> {text}',
               section, confidence)
    else:
      self.add(node, 'compute_gradient' if method == 'compute_gradients'
               else method, confidence=confidence)

  def _check_checkpoint(self, node, path):
    keyword, position = _CHECKPOINT_FUNCS[path]
    target = next((k.value for k in node.keywords if k.arg == keyword), None)
    if target is None and len(node.args) > position:
      target = node.args[position]
    if target is None:
      return
    candidates = [target]
    if isinstance(target, (ast.Tuple, ast.List, ast.Set)):
      candidates = list(target.elts)  # save_checkpoint(d, (optimizer, ema))
    elif isinstance(target, ast.Dict):
      candidates = list(target.values)
    elif isinstance(target, ast.Call):
      # e.g. jax_utils.unreplicate(optimizer)
      candidates = [target] + list(target.args)
    found = [self.module.optimizer_confidence(c) for c in candidates]
    confidence = ('certain' if 'certain' in found else
                  'likely' if 'likely' in found else None)
    if confidence is not None:
      self.add(node, 'checkpoint', confidence=confidence)


def module_names(tree, path, reexports=None, model=None):
  """``tree``'s ``ModuleNames``, as part of the project ``model`` if given
  (its relative imports, the factories of its other modules)."""
  if model is None:
    return _names.ModuleNames(tree, reexports)
  return model.module_names(path, tree)


def scan_source(source, path: str = '<string>', reexports=None,
                tree: Optional[ast.Module] = None, model=None) -> list:
  """Findings of one file's source (str or bytes). Raises SyntaxError.

  ``reexports``: names other scanned modules bound to flax.optim
  (``_names.project_reexports``); ``tree``: the source already parsed;
  ``model``: the project's ``_project.Model`` (``parse_project``).
  """
  if tree is None:
    tree = ast.parse(source, filename=path)
  text = source.decode('utf-8', 'replace') if isinstance(source,
                                                         bytes) else source
  visitor = _Visitor(path, module_names(tree, path, reexports, model),
                     text.splitlines())
  visitor.visit(tree)
  return sorted(set(visitor.findings))


def _excluded(path: str, patterns) -> bool:
  """True when a glob matches ``path``, or its tail, or its last name.

  As with flake8's and ruff's ``--exclude``: ``build`` skips every file or
  directory named build at any depth, ``*_pb2.py`` every such file, and
  ``src/gen`` or ``*/gen/*`` the paths they match.
  """
  shown = path.replace(os.sep, '/')
  name = shown.rstrip('/').rsplit('/', 1)[-1]
  for pattern in patterns:
    pattern = pattern.replace(os.sep, '/').rstrip('/')
    if (fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(shown, pattern) or
        fnmatch.fnmatch(shown, '*/' + pattern)):
      return True
  return False


def iter_python_files(paths: Iterable[str], exclude=(),
                      suffixes=('.py',)) -> Iterable[str]:
  """Every file ending in ``suffixes`` under ``paths``, sorted, skipping
  hidden/cache dirs and whatever ``exclude`` matches (see ``_excluded``);
  files named in ``paths`` are always read."""
  for root_path in paths:
    if os.path.isfile(root_path):
      yield root_path
      continue
    found = []
    for root, dirs, files in os.walk(root_path):
      dirs[:] = [d for d in dirs if not d.startswith('.') and
                 d not in SKIP_DIRS and
                 not _excluded(os.path.join(root, d), exclude)]
      found += [os.path.join(root, f) for f in files if f.endswith(suffixes)]
    yield from sorted(p for p in found if not _excluded(p, exclude))


class Project(NamedTuple):
  """Every .py file under the scanned paths, read once."""
  parsed: list  # [(shown path, source bytes, ast.Module)]
  errors: list  # [ScanError]
  # 'mylib.optimizers' -> 'flax.optim': names scanned modules bind to
  # flax.optim, by every dotted name they may be imported by (a name two
  # files could both be imported by counts for neither).
  reexports: dict
  # absolute path -> its local names that other scanned modules reach
  # through ``reexports`` (``optimizers`` for mylib/__init__.py).
  exported: dict
  # The definition factories, fields and links across modules.
  model: _project.Model


def parse_project(paths: Iterable[str], exclude=()) -> Project:
  """Reads and parses every .py file under ``paths`` (see ``Project``)."""
  parsed: list[tuple[str, bytes, ast.Module]] = []
  errors: list[ScanError] = []
  by_module: dict[str, ast.Module] = {}
  ambiguous: set[str] = set()
  module_paths: dict[str, str] = {}
  dotted_of: dict[str, list] = {}  # shown path -> its dotted names
  for root in paths:
    for path in iter_python_files([root], exclude):
      shown = path.replace(os.sep, '/')
      try:
        with open(path, 'rb') as f:
          source = f.read()
        tree = ast.parse(source, filename=shown)
      except SyntaxError as e:
        errors.append(ScanError(shown, e.lineno, f'syntax error: {e.msg}'))
        continue
      except (OSError, ValueError) as e:  # unreadable, NUL bytes, bad coding
        errors.append(ScanError(shown, None, f'{type(e).__name__}: {e}'))
        continue
      parsed.append((shown, source, tree))
      dotted_of[shown] = _names.module_names(path, root)
      for name in dotted_of[shown]:
        if name in by_module and by_module[name] is not tree:
          ambiguous.add(name)
        by_module[name] = tree
        module_paths[name] = os.path.abspath(path)
  modules = {k: v for k, v in by_module.items() if k not in ambiguous}
  reexports = _names.project_reexports(modules)
  exported: dict[str, set[str]] = {}
  for _, _, tree in parsed:
    for dotted in _names.used_reexports(tree, reexports):
      module, _, local = dotted.rpartition('.')
      exported.setdefault(module_paths[module], set()).add(local)
  unique = {shown: [n for n in names if n not in ambiguous]
            for shown, names in dotted_of.items()}
  model = _project.Model(parsed, unique, reexports)
  return Project(parsed, errors, reexports, exported, model)


def scan_paths(paths: Iterable[str], exclude=()) -> ScanResult:
  """Scans files and directories; unparseable files become ``errors``.

  One project: a name a scanned module re-exports from flax.optim
  (``from flax import optim as optimizers`` in mylib) is followed into the
  modules that import it (``from mylib import optimizers``).
  """
  project = parse_project(list(paths), exclude)
  findings = []
  for shown, source, tree in project.parsed:
    findings += scan_source(source, shown, project.reexports, tree,
                            project.model)
  return ScanResult(len(project.parsed) + len(project.errors),
                    sorted(findings), sorted(project.errors))


# ---------------------------------------------------------------------------
# Command line.


def to_json(result: ScanResult) -> dict:
  summary: dict[str, int] = {}
  for f in result.findings:
    summary[f.construct] = summary.get(f.construct, 0) + 1
  return {
      'version': 1,
      'files_scanned': result.files_scanned,
      'findings': [f._asdict() for f in result.findings],
      'errors': [e._asdict() for e in result.errors],
      'summary': dict(sorted(summary.items())),
  }


def format_table(result: ScanResult) -> str:
  rows = [('location', 'construct', 'replacement', 'guide section')]
  rows += [(f'{f.path}:{f.line}',
            f.construct + ('?' if f.confidence == 'likely' else ''),
            f.replacement, f.guide_section) for f in result.findings]
  w0 = max(len(r[0]) for r in rows)
  w1 = max(len(r[1]) for r in rows)
  lines = [f'{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}  [{r[3]}]'
           for r in rows] if result.findings else []
  lines += [f'{e.path}:{e.line or "?"}  unparseable: {e.message}'
            for e in result.errors]
  likely = sum(f.confidence == 'likely' for f in result.findings)
  lines.append(
      f'{len(result.findings)} flax.optim usage(s) in {result.files_scanned} '
      f'file(s) scanned' + (f' ({likely} marked ? are likely, judged by '
                            'names)' if likely else '') +
      (f'; {len(result.errors)} file(s) could not be parsed'
       if result.errors else '') + f'. See {rep.GUIDE}.')
  return '\n'.join(lines)


def parse_command_line(parser: argparse.ArgumentParser, argv):
  """``(args, None)``; ``(None, exit code)`` after ``--help``, bad arguments
  or ``paths`` that do not exist (``scan`` and ``migrate`` share this)."""
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:
    return None, EXIT_USAGE if e.code else EXIT_CLEAN
  missing = [p for p in args.paths if not os.path.exists(p)]
  if missing:
    print(f'no such file or directory: {", ".join(missing)}', file=sys.stderr)
    return None, EXIT_USAGE
  return args, None


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat scan',
      description='Find flax.optim usages in Python sources (no code runs).')
  parser.add_argument('paths', nargs='+', metavar='PATH',
                      help='files or directories to scan')
  parser.add_argument('--format', choices=('table', 'json'), default='table')
  parser.add_argument('--exclude', action='append', default=[],
                      metavar='NAME_OR_GLOB',
                      help='skip files and directories whose name or path '
                      'matches (e.g. build, "*_pb2.py", "src/gen"; '
                      'repeatable)')
  args, exit_code = parse_command_line(parser, argv)
  if args is None:
    return exit_code
  result = scan_paths(args.paths, args.exclude)
  if args.format == 'json':
    print(json.dumps(to_json(result), indent=1))
  else:
    print(format_table(result))
  if result.findings:
    return EXIT_FOUND
  return EXIT_UNPARSEABLE if result.errors else EXIT_CLEAN
