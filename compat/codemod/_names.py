"""What a scanned module's names mean: imports, assignments, legacy classes.

The static half of ``scan``: resolves names through a module's imports
(``legacy_optim`` counts as ``flax.optim``; a notebook's names it binds
nowhere through the kernel its project's notebooks prepare: ``Kernel``),
tracks which names hold an
``OptimizerDef`` or an ``Optimizer`` (flow-insensitively), finds user
``OptimizerDef`` subclasses, and reads the legacy constructors' signatures
from ``legacy_optim``'s source without importing it (no jax).
"""

import ast
import collections
import functools
import importlib.util
import os
import re
from typing import Callable, NamedTuple, Optional

from compat import _lazy
from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _walk

ALGORITHMS = _lazy.module_without_package('legacy_optim',
                                          'catalogue').RULE_NAMES
TRAVERSALS = ('ModelParamTraversal', 'Traversal', 'TraverseAttr',
              'TraverseCompose', 'TraverseEach', 'TraverseFilter',
              'TraverseId', 'TraverseItem', 'TraverseMerge', 'TraverseTree',
              't_identity')
# The class an ``optim.Optimizer`` annotation names, by either import path.
OPTIMIZER_CLASSES = ('flax.optim.Optimizer', 'flax.optim.base.Optimizer')
# What replaces ``optim.Optimizer(definition, state=..., target=...)``.
HAND_BUILT = _codes.note(_codes.HAND_BUILT)
# ``legacy_class`` of ``getattr(flax.optim, name)``: one of the rules, which
# one the program decides when it runs (``flax_optim_rules.rule_named``).
RULE_BY_NAME = 'getattr(flax.optim, name)'
_OPTIONAL = ('typing.Optional',)
OPTIMIZER_NAME = re.compile(r'(^|_)(opt|optim|optimizer)(_|$)|optimizer',
                             re.IGNORECASE)


# ---------------------------------------------------------------------------
# Constructor signatures of the legacy classes, read from legacy_optim's own
# source (no import: scanning never needs jax).


@functools.lru_cache(maxsize=None)
def legacy_signatures() -> dict:
  """Class name -> [(parameter, default source or None)] of its __init__."""
  spec = importlib.util.find_spec('legacy_optim')
  package_dir = os.path.dirname(spec.origin)
  signatures = {}
  for module in sorted(os.listdir(package_dir)):
    if not module.endswith('.py'):
      continue
    with open(os.path.join(package_dir, module), 'rb') as f:
      tree = ast.parse(f.read())
    for node in tree.body:
      if not isinstance(node, ast.ClassDef):
        continue
      init = next((b for b in node.body if isinstance(b, ast.FunctionDef)
                   and b.name == '__init__'), None)
      if init is None:
        continue
      args = init.args.args[1:]
      defaults = [None] * (len(args) - len(init.args.defaults)) + [
          ast.unparse(d) for d in init.args.defaults]
      signatures[node.name] = list(zip((a.arg for a in args), defaults))
  return signatures


def bind_arguments(class_name: str, call: ast.Call) -> dict:
  """The call's hyper-parameters as source text, defaults filled in."""
  params = legacy_signatures().get(class_name, [])
  values = {name: default for name, default in params}
  for (name, _), arg in zip(params, call.args):
    values[name] = ast.unparse(arg)
  for kw in call.keywords:
    if kw.arg is not None:
      values[kw.arg] = ast.unparse(kw.value)
  return values


# ---------------------------------------------------------------------------
# Name resolution.


def canonical(dotted: str) -> str:
  """legacy_optim[.x] is flax.optim[.x] (the shim serves one as the other)."""
  if dotted == 'legacy_optim' or dotted.startswith('legacy_optim.'):
    return 'flax.optim' + dotted[len('legacy_optim'):]
  return dotted


def is_flax_optim(path: Optional[str]) -> bool:
  """``flax.optim`` itself or a name in it (canonical paths)."""
  return bool(path) and (path == 'flax.optim' or
                         path.startswith('flax.optim.'))


# The table _leading_to_reexports last read and its answer: a scan reads
# one table for every module.
_LEADING: list = [None, 0, frozenset()]


def _leading_to_reexports(reexports: dict) -> frozenset:
  """Every key of ``reexports`` and every dotted prefix of one."""
  if _LEADING[0] is not reexports or _LEADING[1] != len(reexports):
    prefixes = set()
    for key in reexports:
      parts = key.split('.')
      prefixes.update('.'.join(parts[:n]) for n in range(1, len(parts) + 1))
    _LEADING[:] = [reexports, len(reexports), frozenset(prefixes)]
  return _LEADING[2]


def _heads(path: str) -> list:
  """The proper dotted prefixes of ``path`` (``a``, ``a.b`` of ``a.b.c``)."""
  parts = path.split('.')
  return ['.'.join(parts[:n]) for n in range(1, len(parts))]


def _enclosing_packages(directory: str) -> list:
  """The packages ``directory`` sits in, outermost first, itself included
  when it is one (``['t5x']`` for a ``t5x/`` holding ``__init__.py``)."""
  packages: list = []
  directory = os.path.abspath(directory)
  while os.path.isfile(os.path.join(directory, '__init__.py')):
    directory, name = os.path.split(directory)
    if not name.isidentifier():
      break
    packages.insert(0, name)
  return packages


def argument_for(function_node, parameter, call):
  """The argument ``call`` passes for ``parameter``; None: none is, or it
  cannot be told (``*args``, ``**kwargs``)."""
  if any(isinstance(a, ast.Starred) for a in call.args) or any(
      k.arg is None for k in call.keywords):
    return None
  for keyword in call.keywords:
    if keyword.arg == parameter:
      return keyword.value
  arguments = function_node.args
  positional = [a.arg for a in arguments.posonlyargs + arguments.args]
  if parameter in positional:
    position = positional.index(parameter)
    if position < len(call.args):
      return call.args[position]
  return None


def parameter_names(function_node) -> list:
  """The names a call may pass by: positional and keyword-only."""
  arguments = function_node.args
  return [a.arg for a in arguments.posonlyargs + arguments.args +
          arguments.kwonlyargs]


def module_names(path: str, root: str) -> list:
  """Dotted names ``path`` may be imported by: its path under ``root``
  (under the packages ``root`` itself is in, when the scan starts inside a
  package: ``t5x/adafactor.py`` scanned from ``t5x/`` is ``t5x.adafactor``)
  and each tail of it (``src/mylib/__init__.py`` -> ``src.mylib``,
  ``mylib``)."""
  if os.path.isdir(root):
    relative = os.path.relpath(path, root)
    packages = _enclosing_packages(root)
  else:
    relative, packages = os.path.basename(path), []
  parts = packages + os.path.normpath(relative)[:-len('.py')].split(os.sep)
  if parts[-1] == '__init__':
    parts = parts[:-1]
  if not parts or not all(p.isidentifier() for p in parts):
    return []
  return ['.'.join(parts[i:]) for i in range(len(parts))]


def project_reexports(modules: dict) -> dict:
  """``{'mylib.optimizers': 'flax.optim', ...}``: user modules' names bound,
  at module level, to flax.optim or something in it (followed through other
  user modules too). ``modules``: dotted module name -> its ``ast.Module``.
  """
  table: dict = {}
  # Each module's imports, collected once, and read once per round however
  # many dotted names it has; only the table changes per round.
  module_names = {id(tree): ModuleNames(tree, None, collect=False)
                  for tree in modules.values()}
  for _ in range(len(modules) + 1):  # chains through user modules
    found = {}
    bound_of: dict = {}  # id(tree) -> {local: flax.optim path} this round
    for module, tree in modules.items():
      if id(tree) not in bound_of:
        bound_of[id(tree)] = _bound_to_flax_optim(module_names[id(tree)],
                                                  table)
      for local, target in bound_of[id(tree)].items():
        found[f'{module}.{local}'] = target
    if found == table:
      break
    table = found
  return table


def _bound_to_flax_optim(names: 'ModuleNames', table: dict) -> dict:
  """The module-level names a module's imports and aliases bind to
  flax.optim or something in it, other modules' re-exports ``table``
  followed."""
  names.reexports = table
  bound = {}
  for node in names.tree.body:
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
      continue
    for alias in node.names:
      local = alias.asname or alias.name.partition('.')[0]
      target = names.resolve(ast.Name(id=local))
      if is_flax_optim(target):
        bound[local] = target
  names.collect_aliases()  # ``Optimizer = optim.Optimizer`` too
  bound.update(names.aliases)
  return bound


def used_reexports(tree: ast.Module, reexports: dict) -> set:
  """The keys of ``reexports`` that ``tree`` reaches (imports or uses)."""
  names = ModuleNames(tree, reexports, collect=False)
  names.resolve_imports()
  for node in _walk.nodes(tree):
    if isinstance(node, (ast.Name, ast.Attribute)):
      names.resolve(node)
  return names.used_reexports


def other_attribute_declarations(item) -> list:
  """The attribute names a class body's ``item`` declares other than by an
  annotated field: a method or property (``def optimizer(self)``, an Optax
  transform in one class of a project whose other class holds a flax.optim
  Optimizer in a field of that name) or a plain class-level assignment.
  Such a declaration says nothing of flax.optim, so ``x.<name>`` is no
  longer an optimizer wherever the project's fields of that name are."""
  if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
    return [item.name]
  if isinstance(item, ast.Assign):
    return [t.id for t in item.targets if isinstance(t, ast.Name)]
  return []


# ---------------------------------------------------------------------------
# A notebook's kernel: names a notebook uses without binding them.
#
# A notebook that binds a name nowhere can run only in a kernel another
# notebook prepared; of a project's notebooks, those that bind the name at
# their top level are the ones that can have. Where every such binding is
# an import of the same module or name, the free name means that (a
# module, a ``.py`` file, is never read this way: a free name there fails
# when it runs).

# What a binding at a notebook's top level binds where it is not a plain
# import (an assignment, a function, a loop target, a relative import...).
NOT_AN_IMPORT = None


# Scopes of their own: what their bodies bind is not the module's.
_FUNCTION_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                    ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Where a node sits: the module's own scope, a comprehension in it (whose
# walrus still binds in the module), or another scope.
_TOP, _TOP_COMPREHENSION, _INNER = 0, 1, 2


class Bindings(NamedTuple):
  """What a module's code binds (``bindings_of``)."""
  # (name, canonical dotted path or NOT_AN_IMPORT) per binding at its top
  # level; ('*', NOT_AN_IMPORT) for a star import there.
  top_level: list
  assigned: set  # names bound at any depth other than by an import
  imported: set  # names an import binds, at any depth
  star: bool  # a star import somewhere (it may bind any name)

  @property
  def bound(self) -> Optional[set]:
    """Every name bound at any depth; None where a star import may bind
    any."""
    return None if self.star else self.assigned | self.imported


def _import_entries(node) -> list:
  """``(local name, canonical path or NOT_AN_IMPORT)`` per name an import
  statement binds (a relative import: not a plain one)."""
  if isinstance(node, ast.Import):
    return [(alias.asname or alias.name.partition('.')[0], canonical(
        alias.name if alias.asname else alias.name.partition('.')[0]))
            for alias in node.names]
  plain = node.module and not node.level
  return [('*', NOT_AN_IMPORT) if alias.name == '*' else (
      alias.asname or alias.name, canonical(f'{node.module}.{alias.name}')
      if plain else NOT_AN_IMPORT) for alias in node.names]


def bound_by(node) -> Optional[str]:
  """The name ``node`` itself binds other than by an import: a ``Name``
  assigned or deleted, a function, class, parameter, ``except ... as``
  name or match capture; else None."""
  if isinstance(node, ast.Name):
    return None if isinstance(node.ctx, ast.Load) else node.id
  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                       ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
    return node.name
  if isinstance(node, ast.arg):
    return node.arg
  if isinstance(node, ast.MatchMapping):
    return node.rest
  return None


def chain_root(node) -> Optional[str]:
  """The name a name or an attribute chain starts at (``a`` of
  ``a.b.c``); None where the chain starts at another expression (a call's
  result, a subscript)."""
  while isinstance(node, ast.Attribute):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


def binds(node) -> Optional[str]:
  """The name ``node`` itself binds, an import's name included (``import
  a.b`` binds ``a``); else None."""
  if isinstance(node, ast.alias):
    return node.asname or node.name.partition('.')[0]
  return bound_by(node)


def bindings_of(tree: ast.Module) -> Bindings:
  """Every name ``tree`` binds, at any depth (imports, assignment, ``del``,
  ``for``/``with``/``except`` targets, walrus, comprehension variables,
  functions, classes, parameters, match captures), and which bindings sit
  at its top level; in one walk. ``global``/``nonlocal`` declare, not bind
  (the assignment after one binds), but ``global x`` in a function makes
  ``x`` the module's: a top-level entry that is not an import."""
  top_level: list = []
  assigned: set[str] = set()
  imported: set[str] = set()
  star = False
  todo: list = [(tree, _TOP)]
  while todo:
    node, where = todo.pop()
    name = bound_by(node)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      entries = _import_entries(node)
      star |= any(local == '*' for local, _ in entries)
      imported.update(local for local, _ in entries if local != '*')
      if where == _TOP:
        top_level += entries
      continue
    if isinstance(node, ast.Global):
      top_level += [(n, NOT_AN_IMPORT) for n in node.names]
    elif isinstance(node, ast.NamedExpr) and where == _TOP_COMPREHENSION:
      top_level.append((node.target.id, NOT_AN_IMPORT))
    if name is not None:
      assigned.add(name)
      if where == _TOP and not isinstance(node, ast.arg):
        top_level.append((name, NOT_AN_IMPORT))
    if isinstance(node, _FUNCTION_SCOPES):
      inner = _INNER
    elif isinstance(node, _COMPREHENSIONS):
      inner = _TOP_COMPREHENSION if where != _INNER else _INNER
    else:
      inner = where
    todo.extend((child, inner) for child in ast.iter_child_nodes(node))
  return Bindings(top_level, assigned, imported, star)


def top_level_bindings(tree: ast.Module, source: bytes) -> list:
  """``bindings_of(tree).top_level``, reading only statements where
  ``source`` (the tree's) has no walrus: besides a walrus, no expression
  binds a name at the top level (a comprehension's variables and a
  lambda's parameters are their own), so the statements' targets and
  names say the rest, and ``global`` is a statement too."""
  if b':=' in source:
    return bindings_of(tree).top_level
  entries: list = []
  if re.search(rb'\bglobal\b', source):
    for statement in _walk.statements(tree):
      if isinstance(statement, ast.Global):
        entries += [(name, NOT_AN_IMPORT) for name in statement.names]
  todo = list(tree.body)
  while todo:
    statement = todo.pop()
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
      entries += _import_entries(statement)
      continue
    entries += [(name, NOT_AN_IMPORT) for name in statement_binds(statement)]
    if not isinstance(statement, _DEFINITIONS):  # its body binds its own
      todo.extend(_walk.statement_children(statement))
  return entries


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def statement_binds(statement) -> list:
  """The names a statement (or handler, or match case) itself binds in
  its scope other than by an import: a function's or class's name, its
  targets' names, an ``except ... as`` name, a match case's captures (not
  the statements inside it, nor a walrus in its expressions)."""
  if isinstance(statement, _DEFINITIONS):
    return [statement.name]
  names = []
  targets = _targets(statement)
  while targets:  # names, tuples, lists and starred ones bind
    target = targets.pop()
    if isinstance(target, ast.Name):
      names.append(target.id)
    elif isinstance(target, (ast.Tuple, ast.List)):
      targets += target.elts
    elif isinstance(target, ast.Starred):
      targets.append(target.value)
  if isinstance(statement, ast.match_case):
    names += [name for name in map(_bound_by, ast.walk(statement.pattern))
              if name is not None]
  if isinstance(statement, ast.ExceptHandler) and statement.name:
    names.append(statement.name)
  return names


def _targets(statement) -> list:
  """The expressions a statement binds names in (not its own name)."""
  if isinstance(statement, (ast.Assign, ast.Delete)):
    return list(statement.targets)
  if isinstance(statement, (ast.AugAssign, ast.AnnAssign, ast.For,
                            ast.AsyncFor)):
    return [statement.target]
  if isinstance(statement, (ast.With, ast.AsyncWith)):
    return [item.optional_vars for item in statement.items
            if item.optional_vars is not None]
  return []


def _bound_by(node) -> Optional[str]:
  """The name a match pattern's node binds, if any."""
  if isinstance(node, (ast.MatchAs, ast.MatchStar)):
    return node.name
  if isinstance(node, ast.MatchMapping):
    return node.rest
  return None


def kernel_bindings(notebooks) -> dict:
  """Name -> what the notebooks of ``notebooks`` (their top-level
  bindings: ``Bindings.top_level``) that bind it at their top level bind
  it to: a frozenset of canonical dotted paths, ``NOT_AN_IMPORT`` among
  them for a binding other than a plain import (``kernel_path`` reads it).
  A star import at a notebook's top level may bind any name: then the
  table is empty (nothing is known)."""
  table: dict = {}
  for top_level in notebooks:
    for name, path in top_level:
      if name == '*':
        return {}
      table[name] = table.get(name, frozenset()) | {path}
  return table


def kernel_path(kernel: dict, name: str) -> Optional[str]:
  """The dotted path every binding of ``name`` in ``kernel`` (a
  ``kernel_bindings`` table) imports, or None where there is none, they
  disagree, or one is not an import."""
  paths = kernel.get(name, ())
  return next(iter(paths)) if len(paths) == 1 else None


def _only_read(name: str, source: bytes) -> bool:
  """True where every spelling of ``name`` in ``source`` (the tree's) is
  followed, on its line, by ``.``, ``(`` or ``[`` (an attribute, a call,
  an item: ``name.x = ...`` binds no ``name``), none after ``def`` or
  ``class``, or sits after a ``#`` with no quote before it on its line (a
  comment, or a string going on from a line before): then nothing binds
  it. Strings that spell it otherwise only cost the walk this saves."""
  for match in re.finditer(rb'\b' + re.escape(name.encode()) + rb'\b[ \t]*',
                           source):
    start, end = match.start(), match.end()
    if source[start - 1:start] == b'.':
      continue  # an attribute of something else
    line = source[source.rfind(b'\n', 0, start) + 1:start]
    if b'#' in line and not _QUOTES.search(line):
      continue  # in a comment (or in a string that does not end before)
    if source[end:end + 1] not in (b'.', b'(', b'[') or _DEFINES.search(
        source, max(0, start - 16), start):
      return False
  return True


# A quote: where one precedes a ``#`` on a line, the ``#`` may be a string's.
_QUOTES = re.compile(rb'[\'"]')
# ``def``/``class`` and the space before the name they define.
_DEFINES = re.compile(rb'\b(?:def|class)\s+$')


class Kernel:
  """What the names one notebook binds nowhere mean in its project's
  kernel (``table``: ``kernel_bindings``), settled on first use: whether it
  binds a name anywhere takes a walk of it (``bindings_of``), done only
  when a name the kernel decides and the notebook does not import is
  looked up (what most notebooks use, they import), and not even then
  where ``source``, the tree's, spells it only as read (``_only_read``)."""

  def __init__(self, table: dict, tree: ast.Module,
               source: Optional[bytes] = None):
    self.table, self._tree, self._source = table, tree, source
    imported, star = set(), False
    for node in _walk.statements(tree):  # imports are statements
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        for local, _ in _import_entries(node):
          star |= local == '*'
          imported.add(local)
    # Name -> its path, for the names the kernel decides and this notebook
    # does not import (none where a star import of its own may bind any).
    self.candidates = {} if star else {
        name: kernel_path(table, name) for name in table
        if name not in imported and kernel_path(table, name) is not None}
    self._star, self._imported = star, imported
    self._assigned: Optional[set] = None
    self._binds_memo: dict[str, bool] = {}  # name -> whether it binds it

  def _binds(self, name: str) -> bool:
    found = self._binds_memo.get(name)
    if found is None:
      found = self._binds_memo[name] = not (
          self._source is not None and _only_read(name, self._source)) and (
              name in self._assigned_names())
    return found

  def _assigned_names(self) -> set:
    if self._assigned is None:
      self._assigned = bindings_of(self._tree).assigned
    return self._assigned

  def path(self, name: str) -> Optional[str]:
    """The dotted path the kernel gives ``name`` where this notebook binds
    it nowhere; None otherwise."""
    found = self.candidates.get(name)
    return None if found is None or self._binds(name) else found

  def names(self) -> dict:
    """Every free name the kernel decides -> its path."""
    return {name: path for name, path in self.candidates.items()
            if not self._binds(name)}

  def undecided(self) -> dict:
    """The free names the notebooks bind to flax.optim and to something
    else too -> their paths (``kernel_bindings``): they resolve to
    nothing."""
    if self._star:
      return {}
    return {name: paths for name, paths in self.table.items()
            if name not in self._imported and kernel_path(
                self.table, name) is None and any(
                    is_flax_optim(p) for p in paths) and not (
                        self._binds(name))}


def is_optimizer_annotation(names, node) -> bool:
  """``optim.Optimizer``, ``Optional[optim.Optimizer]``, also as a string."""
  node = annotated_class(names, node)
  return node is not None and names.resolve(node) in OPTIMIZER_CLASSES


def annotated_class(names, node) -> Optional[ast.AST]:
  """The class reference an annotation names: ``X`` of ``X``,
  ``Optional[X]`` or ``'X'``; None for one that does not parse."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    try:
      node = ast.parse(node.value, mode='eval').body
    except SyntaxError:
      return None
  if isinstance(node, ast.Subscript) and names.resolve(
      node.value) in _OPTIONAL:
    return annotated_class(names, node.slice)
  return node


def instance_parameter(method) -> Optional[str]:
  """The parameter a method takes its instance by (``self``): its first,
  unless it is a static or class method."""
  arguments = method.args.posonlyargs + method.args.args
  if not arguments or any(
      isinstance(d, ast.Name) and d.id in ('staticmethod', 'classmethod')
      for d in method.decorator_list):
    return None
  return arguments[0].arg


def own_returns(function) -> list:
  """The values (None for a bare ``return``) of ``function``'s own returns,
  not those of functions or classes nested in it. A return is a statement:
  only statement lists are walked (no expression holds one)."""
  values, stack = [], list(function.body)
  while stack:
    node = stack.pop()
    if isinstance(node, ast.Return):
      values.append(node.value)
    elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.ClassDef)):
      stack.extend(_walk.statement_children(node))
  return values


# What ``InnerScopes``' look-up finds: a binding other than an import (the
# name is no import there), or none in a function or class (the module's).
_LOCAL, _MODULE = object(), object()


class InnerScope:
  """A function's or class body's own names, by Python's rules: what it
  binds anywhere in it is its own (flow-insensitively: an import wins over
  another binding of the name, as at the module level); a function reads
  the rest from the functions enclosing it, then from the module (a class
  body's names are not its methods'). A lambda and a comprehension have no
  scope here: their parameters and variables rarely spell an import."""

  __slots__ = ('imports', 'bound', 'declared', 'outer')

  def __init__(self, outer: Optional['InnerScope'], node: ast.AST):
    self.imports: dict[str, str] = {}  # local name -> dotted path imported
    self.bound: set[str] = set()  # names bound here other than by import
    # ``global``/``nonlocal`` names: bound where they are declared to be.
    self.declared: dict[str, str] = {}  # name -> 'global' or 'nonlocal'
    self.outer = outer  # the enclosing function's scope; None: the module
    if not isinstance(node, ast.ClassDef):  # a function's parameters
      self.bound.update(parameter_names(node) + [
          extra.arg for extra in (node.args.vararg, node.args.kwarg)
          if extra is not None])

  def note(self, statement):
    """Notes what ``statement``, one of this scope's, binds other than by
    an import, or declares bound elsewhere."""
    targets = getattr(statement, 'targets', ())
    if len(targets) == 1 and type(targets[0]) is ast.Name:
      self.bound.add(targets[0].id)  # (``x = ...``: most of them)
      return
    self.bound.update(statement_binds(statement))
    if isinstance(statement, (ast.Global, ast.Nonlocal)):
      kind = 'global' if isinstance(statement, ast.Global) else 'nonlocal'
      self.declared.update(dict.fromkeys(statement.names, kind))

  def settle(self, module_bindings: dict):
    """Hands the declared names' imports on to where they bind (once the
    walk is over): a ``global`` one's to the module's table."""
    for name, kind in self.declared.items():
      self.bound.discard(name)
      path = self.imports.pop(name, None)
      if path is None:
        continue
      if kind == 'global':
        module_bindings[name] = path
      elif self.outer is not None:
        self.outer.imports[name] = path


_IMPORTS = frozenset((ast.Import, ast.ImportFrom))
# The statements that bind a name in their scope other than by an import
# (``statement_binds``), or declare one bound elsewhere.
_BINDING_STATEMENTS = frozenset((
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
    ast.AnnAssign, ast.AugAssign, ast.Delete, ast.For, ast.AsyncFor,
    ast.With, ast.AsyncWith, ast.ExceptHandler, ast.match_case, ast.Global,
    ast.Nonlocal))


class InnerScopes:
  """The functions' and classes' own names of one module (``InnerScope``
  each, by its node), and where a name read at a node is bound."""

  def __init__(self, tree: ast.Module, bind_import: Callable,
               module_bindings: dict):
    """Walks ``tree``'s statements in ``_walk.statements``' order (a later
    import of a name wins); ``bind_import(node, table)`` enters an
    import's names into a table, the module's being ``module_bindings``."""
    self.tree = tree
    self.scopes: dict[ast.AST, InnerScope] = {}
    self._memo: dict[ast.AST, Optional[InnerScope]] = {}  # node -> scope
    todo = collections.deque([(tree, None, None)])
    while todo:
      # ``scope``: where the statement binds (None: the module);
      # ``function``: the innermost function around it (a class's body is
      # not its methods' enclosing scope).
      node, scope, function = todo.popleft()
      kind = type(node)  # (by class: most statements bind nothing)
      if kind in _IMPORTS:
        bind_import(node, module_bindings if scope is None else
                    scope.imports)
        continue
      if scope is not None and kind in _BINDING_STATEMENTS:
        scope.note(node)
      if kind in _DEFINITIONS:
        scope = self.scopes[node] = InnerScope(function, node)
        if kind is not ast.ClassDef:
          function = scope
      todo.extend((child, scope, function)
                  for child in _walk.statement_children(node))
    for scope in self.scopes.values():
      scope.settle(module_bindings)
    # Every name a function or class imports, and binds otherwise (where
    # the module imports it too, its binding hides the module's there).
    self.imported = {n for s in self.scopes.values() for n in s.imports}
    self.bound = {n for s in self.scopes.values() for n in s.bound}

  def imports(self) -> list:
    """``(local name, dotted path)`` of every function's and class's
    imports."""
    return [item for scope in self.scopes.values()
            for item in scope.imports.items()]

  def binding(self, name: str, at):
    """What binds ``name`` in the functions and class around the node
    ``at``: the dotted path of its import there, ``_LOCAL`` (bound
    otherwise) or ``_MODULE`` (none of them binds it)."""
    scope = self._scope_at(at)
    while scope is not None:
      if name in scope.imports:
        return scope.imports[name]
      if name in scope.bound:
        return _LOCAL
      scope = scope.outer
    return _MODULE

  def _scope_at(self, node) -> Optional[InnerScope]:
    """The scope of the function or class whose body holds ``node`` (a
    decorator, default, annotation or base class is read outside it);
    None: the module's, or ``node`` is not in the tree."""
    if node in self._memo:
      return self._memo[node]
    parents = _walk.parents(self.tree)
    child, parent, scope = node, parents.get(node), None
    while parent is not None:
      if parent in self.scopes and any(child is s for s in parent.body):
        scope = self.scopes[parent]
        break
      child, parent = parent, parents.get(parent)
    self._memo[node] = scope
    return scope


_UNASKED = object()  # (no answer yet: None is one)


class ModuleNames:
  """One file's imports, legacy-valued names and user OptimizerDef classes.

  ``reexports`` (from ``project_reexports``) resolves names that other
  scanned modules bound to flax.optim (``from mylib import optimizers``).
  ``package``: the dotted package relative imports start from;
  ``model``: the project's ``_project.Model`` (definition factories in
  other modules), or None for a module read alone; ``path``: the module's
  key in it; ``kernel``: for a notebook, what the names it binds nowhere
  mean in its project's kernel.
  """

  def __init__(self, tree: ast.Module, reexports: Optional[dict] = None,
               collect: bool = True, package: Optional[str] = None,
               model=None, module: Optional[str] = None,
               path: Optional[str] = None,
               kernel: Optional[Kernel] = None,
               sibling: Optional[Callable[[str], Optional[str]]] = None):
    """``sibling``: the project's module an absolute import of a top-level
    name means from this file, where files of several directories may be
    imported by that name (``Model.sibling_module``); None: as written."""
    self.tree = tree
    self._sibling = sibling
    self.path = path
    self.reexports = reexports or {}
    self.package, self.model = package, model
    self.package_module = module  # this module's own dotted name
    self.used_reexports: set[str] = set()  # keys of reexports resolved
    # (path, size of the re-export table) -> (what it resolves to, the
    # table's key used or None): chains repeat across a module.
    self._reexport_memo: dict[tuple, tuple] = {}
    # (node, at) -> (``resolve``'s answer, the re-export keys it used):
    # the walk, the flows, the links and the plan ask the same chains again
    # (seven in eight of 1.4M look-ups on a 3,232-file tree). Valid for one
    # re-export table (``_resolved_for``) and bindings (aliases clear it).
    self._resolved: dict[tuple, tuple] = {}
    self._resolved_for: tuple = (None, 0)
    # (question, node) -> ``question(node, self)`` (``answer``): cleared
    # with ``_resolved``.
    self._answers: dict[tuple, object] = {}
    # Module-level local name -> dotted import path (the module's imports,
    # at any depth outside functions and classes, and its aliases).
    self.bindings: dict[str, str] = {}
    self.star_flax_optim = False
    self.defs: set[str] = set()  # names assigned an OptimizerDef
    self.optimizers: set[str] = set()  # names assigned an Optimizer
    self.user_defs: set[str] = set()  # OptimizerDef subclasses defined here
    # Module functions all of whose returns are OptimizerDefs (factories).
    self.def_factories: set[str] = set()
    self.aliases: dict[str, str] = {}  # module-level aliases, their paths
    self._collect_imports()
    # What the names this notebook binds nowhere mean (``resolve`` asks).
    self.kernel = kernel
    self.collect_aliases()
    if collect:
      self.collect()

  def collect(self):
    """Finds the user's definition classes and the names bound to
    definitions and optimizers (again, as the project's model grows)."""
    self._collect_classes()
    self._collect_assignments()

  def _collect_imports(self):
    """Each import into the table of the scope it is written in: the
    module's ``bindings`` or a function's or class's (``InnerScopes``)."""
    self.inner = InnerScopes(self.tree, self._bind_import, self.bindings)

  def _bind_import(self, node, table: dict):
    """Enters what the import statement ``node`` binds into ``table``."""
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.asname:
          table[alias.asname] = self._beside(alias.name)
        else:
          top = alias.name.partition('.')[0]
          table[top] = self._beside(top)
    elif node.module or node.level:
      module = self.absolute(node)
      if module is None:
        return
      if not node.level:
        module = self._beside(module)
      for alias in node.names:
        if alias.name == '*':
          self.star_flax_optim |= canonical(module) == 'flax.optim'
        else:
          table[alias.asname or alias.name] = f'{module}.{alias.name}'

  def _beside(self, module: str) -> str:
    """``module`` as this file's absolute import of it runs it."""
    if self._sibling is None:
      return module
    top, dot, rest = module.partition('.')
    found = self._sibling(top)
    return module if found is None else found + dot + rest

  def collect_aliases(self):
    """Module-level names assigned a flax.optim name (``Optimizer =
    optim.Optimizer``): bound like an import, so their uses resolve too."""
    candidates = [node for node in self.tree.body
                  if isinstance(node, ast.Assign) and isinstance(
                      node.value, (ast.Name, ast.Attribute))]
    found = None
    while candidates and found != self.aliases:  # an alias of an alias
      found = dict(self.aliases)
      for node in candidates:
        path = self.resolve(node.value)
        if not is_flax_optim(path):
          continue
        for target in node.targets:
          if isinstance(target, ast.Name):
            self.bindings[target.id] = self.aliases[target.id] = path
            self._forget_resolved()  # (what its uses resolve to changed)

  def reference_roots(self) -> frozenset:
    """The local names a chain must start with to resolve into flax.optim:
    those bound to flax, to something in flax.optim, to a name another
    module re-exports, to a prefix of one or to something under one (read
    without resolving, so nothing is counted in ``used_reexports``)."""
    leading = _leading_to_reexports(self.reexports)
    roots = set()
    kernel = self.kernel.candidates if self.kernel else {}
    for local, bound in [*self.bindings.items(), *self.inner.imports(),
                         *kernel.items()]:
      path = canonical(bound)
      if path == 'flax' or is_flax_optim(path) or path in leading or any(
          head in self.reexports for head in _heads(path)):
        roots.add(local)
    return frozenset(roots)

  def absolute(self, node) -> Optional[str]:
    """The module a ``from`` import names (relative ones from ``package``;
    None where the package is not known or the dots climb out of it)."""
    if not node.level:
      return node.module
    if self.package is None:
      return None
    parts = self.package.split('.') if self.package else []
    if node.level - 1 > len(parts) or (node.level - 1 == len(parts) and
                                       not node.module):
      return None
    base = parts[:len(parts) - (node.level - 1)]
    return '.'.join(base + ([node.module] if node.module else []))

  def resolve(self, node, at=None) -> Optional[str]:
    """Dotted canonical path of a name/attribute chain, if imported where
    it is read: at the chain's root, or at the node ``at`` (a name made up
    for the look-up, read as if in ``at``'s scope; a node of no function
    or class, or of none of the tree, reads the module's names)."""
    table, (known, size) = self.reexports, self._resolved_for
    if table is not known or len(table) != size:  # (inline: hot)
      self._renew(table)
    found = self._resolved.get((node, at))
    if found is None:
      used, self.used_reexports = self.used_reexports, set()
      try:
        path = self._resolve(node, at)
      finally:
        used, self.used_reexports = self.used_reexports, used
      found = self._resolved[node, at] = (path, frozenset(used))
    if found[1]:
      self.used_reexports |= found[1]
    return found[0]

  def answer(self, question: Callable, node):
    """``question(node, self)``, asked once per node while what ``resolve``
    reads stays the same (``question``: a function of the node and of
    these names only through ``resolve`` and the re-export table, such as
    ``_removals.match``, which the scan's walk and the plan of the same
    module both ask of its nodes)."""
    table, (known, size) = self.reexports, self._resolved_for
    if table is not known or len(table) != size:
      self._renew(table)
    key = (question, node)
    found = self._answers.get(key, _UNASKED)
    if found is _UNASKED:
      found = self._answers[key] = question(node, self)
    return found

  def _renew(self, table: dict) -> None:
    """Forgets what was resolved for another re-export table, or for this
    one before it grew (the rounds of ``project_reexports``), for
    ``table``."""
    self._forget_resolved()
    self._resolved_for = (table, len(table))

  def _forget_resolved(self) -> None:
    self._resolved.clear()
    self._answers.clear()

  def _resolve(self, node, at) -> Optional[str]:
    attributes = []  # outermost first; the chain's root is read first
    while isinstance(node, ast.Attribute):
      attributes.append(node.attr)
      node = node.value
    if not isinstance(node, ast.Name):
      return None
    path = self._root_path(node.id, node if at is None else at)
    if path is None:
      return None
    if not self.reexports:  # (no prefix can be re-exported)
      attributes.append(path)
      return '.'.join(reversed(attributes))
    for attribute in reversed(attributes):  # each prefix may be re-exported
      path = self._reexported(f'{path}.{attribute}')
    return path

  def resolve_imports(self):
    """Resolves what every import binds, the module's and each function's
    and class's (``used_reexports`` counts the re-exports they reach)."""
    for local in self.bindings:
      self.resolve(ast.Name(id=local))
    for _, path in self.inner.imports():
      self._reexported(canonical(path))

  def _root_path(self, name: str, at) -> Optional[str]:
    """The canonical path ``name``, read at the node ``at``, is imported
    as (re-exports followed)."""
    found = self._inner_binding(name, at)
    if found is _LOCAL:
      return None
    if found is not _MODULE:
      return self._reexported(canonical(found))
    if name in self.bindings:
      return self._reexported(canonical(self.bindings[name]))
    if self.star_flax_optim and name in legacy_signatures():
      return f'flax.optim.{name}'
    if self.kernel is not None and self.kernel.path(name) is not None:
      return self._reexported(canonical(self.kernel.path(name)))
    return None

  def _inner_binding(self, name: str, at):
    """``InnerScopes.binding(name, at)``, looked up only where it can
    change the answer (hot: most names no function or class binds): a
    name only bound otherwise in them, which the module cannot import,
    resolves to nothing either way."""
    inner = self.inner
    if name in inner.imported or (name in inner.bound and
                                  self._module_may_bind(name)):
      return inner.binding(name, at)
    return _MODULE

  def _module_may_bind(self, name: str) -> bool:
    """Whether ``name`` may be an import at the module level (read
    cheaply: a star import or a kernel may bind any name)."""
    return name in self.bindings or self.star_flax_optim or (
        self.kernel is not None)

  def binding(self, name_node: ast.Name, at=None) -> Optional[str]:
    """The dotted path, as written, of the import ``name_node`` reads
    (where ``at`` is, if given); None where no import binds it there."""
    found = self._inner_binding(name_node.id,
                                name_node if at is None else at)
    if found is _MODULE:
      return self.bindings.get(name_node.id)
    return None if found is _LOCAL else found

  def _reexported(self, path: str) -> str:
    """``mylib.optimizers.Adam`` -> ``flax.optim.Adam`` if mylib re-exports."""
    if not self.reexports:
      return path  # (most projects re-export nothing: no key to look up)
    key = (path, len(self.reexports))
    found = self._reexport_memo.get(key)
    if found is None:
      found = self._reexport_memo[key] = self._find_reexport(path)
    resolved, used = found
    if used is not None:
      self.used_reexports.add(used)
    return resolved

  def _find_reexport(self, path: str) -> tuple:
    head, tail = path, ''
    while head:
      if head in self.reexports:
        return self.reexports[head] + tail, head
      head, dot, last = head.rpartition('.')
      tail = dot + last + tail if head else tail
    return path, None

  def legacy_class(self, node) -> Optional[str]:
    """'Adam', 'MultiOptimizer', ... if ``node`` names a flax.optim class;
    ``RULE_BY_NAME`` for ``getattr(flax.optim, name)`` (the name not a
    literal)."""
    if isinstance(node, ast.Call):
      return self._class_by_name(node)
    return _class_at(self, node, self.resolve(node))

  def _class_by_name(self, call) -> Optional[str]:
    """``getattr(flax.optim, 'Adam')`` names Adam; ``getattr(flax.optim,
    name)`` one of the update rules (research code read the name from its
    config). A default (a third argument) or a rebound ``getattr`` is
    something else."""
    if not (isinstance(call.func, ast.Name) and call.func.id == 'getattr' and
            self.binding(call.func) is None and len(call.args) == 2 and
            not call.keywords and self.resolve(call.args[0]) == 'flax.optim'):
      return None
    name = call.args[1]
    if isinstance(name, ast.Constant):
      return name.value if isinstance(name.value, str) else None
    return None if isinstance(name, ast.Starred) else RULE_BY_NAME

  def _collect_classes(self):
    changed = True
    while changed:  # subclasses of subclasses
      changed = False
      for node in _walk.statements(self.tree):
        if isinstance(node, ast.ClassDef) and node.name not in self.user_defs:
          if any(self._is_def_class(b) for b in node.bases):
            self.user_defs.add(node.name)
            changed = True

  def user_rule(self, node) -> bool:
    """``node`` names an OptimizerDef subclass of the user's: this
    module's, or another scanned module's (the project's model)."""
    if isinstance(node, ast.Name) and node.id in self.user_defs:
      return True
    return user_rule_at(self, node, self.resolve(node))

  def _is_def_class(self, node) -> bool:
    callee = called(self, node)  # (resolved once for both questions)
    name = callee.name
    if name is None:
      return user_rule_at(self, node, callee.path)
    return (
        name in ALGORITHMS or name == RULE_BY_NAME or name in self.user_defs
        or name in (
            _members.DEF_CLASS, _members.MULTI_OPTIMIZER_CLASS,
            _members.WEIGHT_NORM_CLASS, _members.REPLICATED_OPTIMIZER_CLASS))

  def is_def(self, node) -> bool:
    if isinstance(node, ast.Name) and node.id in self.defs:
      return True
    if isinstance(node, ast.Call) and isinstance(
        node.func, ast.Name) and node.func.id in self.def_factories:
      return True
    if isinstance(node, ast.Call) and self.model is not None and (
        self.model.returns_def(node, self)):
      return True  # a factory of another module, or a config method
    return isinstance(node, ast.Call) and self._is_def_class(node.func)

  def optimizer_confidence(self, node) -> Optional[str]:
    """'certain'/'likely' when ``node`` evaluates to a legacy Optimizer."""
    if isinstance(node, ast.Name):
      if node.id in self.optimizers:
        return 'certain'
      return 'likely' if OPTIMIZER_NAME.search(node.id) else None
    if isinstance(node, ast.Attribute):
      return 'likely' if OPTIMIZER_NAME.search(node.attr) else None
    if isinstance(node, ast.Call):
      func = node.func
      if isinstance(func, ast.Attribute):
        if func.attr == _members.CREATE and self.is_def(func.value):
          return 'certain'
        if func.attr in (_members.APPLY_GRADIENT, _members.REPLICATE,
                         _members.UNREPLICATE):
          return self.optimizer_confidence(func.value)
      if self.resolve(func) in ('flax.jax_utils.replicate',
                                'flax.jax_utils.unreplicate') and node.args:
        return self.optimizer_confidence(node.args[0])
    return None

  def _collect_assignments(self):
    assigns = [n for n in _walk.statements(self.tree)
               if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value]
    for _ in range(3):  # flow-insensitive fixpoint, shallow chains
      found = (len(self.defs), len(self.optimizers), len(self.def_factories))
      for node in assigns:
        targets = node.targets if isinstance(node, ast.Assign) else [
            node.target]
        for target in targets:
          if isinstance(target, (ast.Tuple, ast.List)) and target.elts:
            target = target.elts[0]  # optimizer.optimize(...) -> (opt, ...)
          if not isinstance(target, ast.Name):
            continue
          if self.is_def(node.value):
            self.defs.add(target.id)
          elif self.optimizer_confidence(node.value) == 'certain':
            self.optimizers.add(target.id)
      for function in self.tree.body:
        if isinstance(function, ast.FunctionDef):
          returns = own_returns(function)
          if returns and all(r is not None and self.is_def(r)
                             for r in returns):
            self.def_factories.add(function.name)
      if found == (len(self.defs), len(self.optimizers),
                   len(self.def_factories)):
        break  # a round that adds nothing: so would the next ones


class Callee(NamedTuple):
  """What a called expression names, read once for every rule that acts
  on calls (``called``): most calls match none, told by these alone."""
  path: Optional[str]  # ``ModuleNames.resolve`` of it
  name: Optional[str]  # ``ModuleNames.legacy_class`` of it
  word: str  # its last word: an attribute's or a name's ('' otherwise)


def called(names: ModuleNames, func) -> Callee:
  """The ``Callee`` of ``func`` (a call's function) in the module of
  ``names``: resolved once, where each rule resolved it again."""
  if isinstance(func, ast.Call):  # (``getattr(flax.optim, 'Adam')(...)``)
    return Callee(None, names.legacy_class(func), '')
  path = names.resolve(func)
  word = func.attr if isinstance(func, ast.Attribute) else (
      func.id if isinstance(func, ast.Name) else '')
  return Callee(path, _class_at(names, func, path), word)


def _class_at(names: ModuleNames, node, path: Optional[str]
              ) -> Optional[str]:
  """``legacy_class`` of ``node`` (no call), which resolves to ``path``."""
  if path and path.startswith('flax.optim.'):
    return path.rsplit('.', 1)[1]
  if isinstance(node, ast.Name) and node.id in names.user_defs:
    return node.id
  return None


def user_rule_at(names: ModuleNames, node, path: Optional[str]) -> bool:
  """``ModuleNames.user_rule`` of ``node``, which resolves to ``path``."""
  if isinstance(node, ast.Name) and node.id in names.user_defs:
    return True
  return bool(path) and names.model is not None and (
      path in names.model.user_rules)


def references(tree, names):
  """``(node, parent, dotted)`` for each outermost name or attribute chain
  of ``tree`` that ``names`` resolves (``a.b.c`` once, not ``a`` and
  ``a.b`` too); ``parent``: the node holding it. In ``ast.walk``'s order,
  from the tree's shared walk (the project's phases ask it of every module
  they read: a walk of its own each time cost more than the resolving)."""
  parents = _walk.parents(tree)
  for node in _walk.nodes(tree):
    if not isinstance(node, (ast.Name, ast.Attribute)):
      continue
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute):
      continue
    dotted = names.resolve(node)
    if dotted:
      yield node, parent, dotted

