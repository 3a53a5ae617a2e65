"""The project's index: which modules the model has read, and what they
define, by every dotted name they may be imported by.

``ProjectIndex`` reads a module (its ``_names.ModuleNames``, its tree) and
indexes its functions, methods, classes and their bases, the fields
annotated ``optim.Optimizer`` (``Holder``) and the attributes other
classes declare otherwise; it answers which project function a call runs
(``callee``, a method by its receiver's annotated class where that is
known). The model (``_project.Model``) builds on it. Stdlib only.
"""

import ast
import functools
import os
import re
from typing import Callable, NamedTuple, Optional

from compat.codemod import _members
from compat.codemod import _module_aliases
from compat.codemod import _names
from compat.codemod import _walk


class Holder(NamedTuple):
  """A class of the user's (dataclass, NamedTuple) with a field annotated
  ``optim.Optimizer``: what its constructor's arguments are stored in."""
  path: str
  line: int  # the optimizer field's annotation
  name: str  # the class's name
  fields: tuple  # its annotated fields in order: constructor positions
  field: str  # the optimizer field
  # A NamedTuple: also read by position (``opt, mstate = tstate``,
  # ``tstate[0]``), which no field name shows.
  positional: bool = False


def holders_in(path, tree, names) -> list:
  """The ``Holder`` classes ``tree`` defines (top-level and nested)."""
  found = []
  for node in _walk.statements(tree):  # classes are statements
    if not isinstance(node, ast.ClassDef):
      continue
    fields = [item for item in node.body if isinstance(
        item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    order = tuple(item.target.id for item in fields)
    positional = any(ast.unparse(base).rpartition('.')[2] == 'NamedTuple'
                     for base in node.bases)
    for item in fields:
      if _names.is_optimizer_annotation(names, item.annotation):
        found.append(Holder(path, item.lineno, node.name, order,
                            item.target.id, positional))
  return found


def called_name(call) -> Optional[str]:
  """The name ``call``'s callee ends in (``f`` of ``f(...)`` and of
  ``m.f(...)``), else None."""
  func = call.func
  return func.id if isinstance(func, ast.Name) else (
      func.attr if isinstance(func, ast.Attribute) else None)


def storing_names(holders) -> frozenset:
  """The callee names of the calls ``field_stores`` finds a store of
  ``holders`` in (their classes, ``.replace``): told for a call before
  asking each holder."""
  return frozenset(h.name for h in holders) | frozenset(_members.COPY_METHODS)


def field_stores(call, holders) -> list:
  """``[(holder, value)]``: what ``call`` stores in an optimizer field of
  one of ``holders``: the class called by its name (positionally or by
  keyword, also through a module or an alias of the same name), or
  ``.replace``/``._replace`` with the field's keyword."""
  called = called_name(call)
  stores = []
  for holder in holders:
    if called in _members.COPY_METHODS or called == holder.name:
      stores += [(holder, k.value) for k in call.keywords
                 if k.arg == holder.field]
    if called == holder.name:
      position = holder.fields.index(holder.field)
      if position < len(call.args) and not any(
          isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        stores.append((holder, call.args[position]))
  return stores


def attribute_stores(tree, holders) -> list:
  """``[(holder, value)]``: what ``tree`` assigns to an attribute named
  like a holder's optimizer field (``state.optimizer = value``; the
  receiver's class cannot be told, so every such field's). A literal is
  no optimizer, before or after (``config.optimizer = 'adam'``)."""
  stores = []
  for node in _walk.statements(tree):
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and (
        node.value is not None and not is_literal(node.value)):
      targets = node.targets if isinstance(node, ast.Assign) else [
          node.target]
      stores += [(holder, node.value) for target in targets
                 if isinstance(target, ast.Attribute)
                 for holder in holders if holder.field == target.attr]
  return stores


class _Function(NamedTuple):
  path: str  # shown path of its module
  node: ast.AST  # the FunctionDef
  is_method: bool


class ProjectIndex:
  """The modules read so far and what they define (a part of
  ``_project.Model``, which calls ``_init_index`` first)."""

  def _init_index(self, parsed, module_names_of, reexports, parse):
    """The tables the index fills as it reads modules (``_read``)."""
    self.reexports = reexports
    self.module_names_of = module_names_of
    # A dotted name -> the files that may each be imported by it, where
    # more than one may (``checkpoint_utils`` of two script directories):
    # scan's table knows; a plain mapping names each file's own names only.
    self._sharing = getattr(module_names_of, 'sharing', lambda dotted: [])
    self.functions: dict[str, _Function] = {}  # dotted name -> function
    self.methods: dict[str, list] = {}  # function name -> [_Function]
    self.names: dict[str, _names.ModuleNames] = {}  # path -> its names
    self.trees: dict[str, ast.Module] = {}  # path -> its parsed module
    # Field name -> annotated flax.optim.Optimizer in every class of the
    # project that declares it.
    self.fields: dict[str, bool] = {}
    # Field name -> (path, line, class) of its first declaration in the
    # project that is not an ``optim.Optimizer`` field (a field of another
    # type, a method or property, a class-level assignment).
    self._declared_otherwise: dict[str, tuple] = {}
    self.holders: list[Holder] = []  # classes with an optimizer field
    self._function_of: dict[int, _Function] = {}  # id(method node) -> it
    self._taken: set[str] = set()  # dotted names two functions share
    # path -> its module aliases (``module_aliases``), found when asked.
    self._aliases_of: dict[str, dict] = {}
    self._init_classes()
    self.sources = {path: source for path, source, _ in parsed}
    self._init_kernel(parsed, parse)

  def _init_kernel(self, parsed, parse):
    """What the names a notebook binds nowhere mean: what the project's
    notebooks bind at their top level (``kernel_of``: notebooks only)."""
    top_levels = []
    for path, _, tree in parsed:
      if is_notebook(path):
        tree = tree or (parse(path) if parse else None)
        if tree is not None:
          top_levels.append(_names.top_level_bindings(tree,
                                                      self.sources[path]))
    self.kernel = _names.kernel_bindings(top_levels)
    self._kernels: dict[str, _names.Kernel] = {}  # path -> its, once read

  def _read(self, path, tree):
    dotted = self.module_names_of.get(path) or [None]
    self.names[path] = _names.ModuleNames(
        tree, self.reexports, collect=False, package=self.package_of(path),
        model=self, module=dotted[0], path=path,
        kernel=self.kernel_of(path, tree),
        sibling=functools.partial(self.sibling_module, path))
    self.trees[path] = tree
    self._index(path, tree)
    self.names[path].collect()

  def _read_modules_naming(self, words, sources, parse, unparsed) -> list:
    """Reads every module not read yet whose source spells one of
    ``words`` (a parse that fails goes to ``unparsed``); returns them."""
    spells = spells_any_of(words)
    return self._read_paths([
        p for p, (source, _) in sources.items()
        if p not in self.names and p not in unparsed and spells(source)],
        sources, parse, unparsed)

  def _read_paths(self, paths, sources, parse, unparsed) -> list:
    """Reads the modules ``paths`` (a parse that fails goes to
    ``unparsed``); returns them."""
    for path in paths:
      tree = sources[path][1]
      tree = parse(path) if tree is None and parse else tree
      if tree is None:
        unparsed.add(path)
      else:
        self._read(path, tree)
    return paths

  def sibling_module(self, importer: str, top: str) -> Optional[str]:
    """The dotted name of the module ``import <top>`` in ``importer`` runs,
    where files of several directories may be imported as ``top``: the one
    beside ``importer`` (a script's own directory comes first on
    ``sys.path``; research code ran its scripts so). None where ``top``
    names one file of the project, or none beside ``importer``."""
    paths = self._sharing(top)
    if not paths:
      return None
    here = os.path.dirname(importer)
    beside = [p for p in paths if os.path.dirname(p) == here or (
        os.path.basename(p) == '__init__.py' and
        os.path.dirname(os.path.dirname(p)) == here)]
    if len(beside) != 1 or not self.module_names_of.get(beside[0]):
      return None
    return self.module_names_of[beside[0]][0]

  def module_names(self, path, tree) -> _names.ModuleNames:
    """The names of the module at ``path`` (the model's own where it read
    this very tree; else a fresh reading that still sees the project)."""
    if self.trees.get(path) is tree:
      return self.names[path]
    dotted = self.module_names_of.get(path) or [None]
    return _names.ModuleNames(tree, self.reexports,
                              package=self.package_of(path), model=self,
                              module=dotted[0], path=path,
                              kernel=self.kernel_of(path, tree),
                              sibling=functools.partial(self.sibling_module,
                                                        path))

  def kernel_of(self, path, tree) -> Optional[_names.Kernel]:
    """What the names the file at ``path`` (its ``tree``) binds nowhere
    mean: a notebook's in the project's notebooks' kernel, nothing for a
    module. Computed once per notebook (a tree of the same source binds
    the same)."""
    if not is_notebook(path) or path not in self.sources:
      return None
    if path not in self._kernels:
      self._kernels[path] = _names.Kernel(self.kernel, tree,
                                          self.sources[path])
    return self._kernels[path]

  def package_of(self, path) -> Optional[str]:
    """The package a module's relative imports start from."""
    dotted = self.module_names_of.get(path)
    if not dotted:
      return None
    longest = dotted[0]
    if path.endswith('/__init__.py') or path == '__init__.py':
      return longest
    return longest.rpartition('.')[0]

  def _index(self, path, tree):
    names = self.names[path]
    indexed = set()  # ids of this module's methods indexed below
    for node in tree.body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        self._add(path, node.name, _Function(path, node, False))
      elif isinstance(node, ast.ClassDef):
        self._index_class(path, node, names)
        for item in node.body:
          if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = _Function(path, item, True)
            self.methods.setdefault(item.name, []).append(function)
            indexed.add(id(item))
            self._function_of[id(item)] = function
            self._add(path, f'{node.name}.{item.name}', function)
          elif isinstance(item, ast.AnnAssign) and isinstance(
              item.target, ast.Name):
            field = item.target.id
            if _names.is_optimizer_annotation(names, item.annotation):
              self.fields.setdefault(field, True)
            else:
              self._declare_otherwise(field, path, item, node)
          for name in _names.other_attribute_declarations(item):
            self._declare_otherwise(name, path, item, node)
    self.holders += holders_in(path, tree, names)
    # Every other function (top-level or nested) shares the name space of
    # methods called on an unknown receiver: such a name is no method's
    # alone (see ``_method_candidates``). (Each module is indexed once:
    # only its own methods can be among its functions.)
    for node in _walk.statements(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
          id(node) not in indexed):
        self.methods.setdefault(node.name, []).append(
            _Function(path, node, False))

  def _add(self, path, local, function):
    for module in self.module_names_of.get(path, ()):
      dotted = f'{module}.{local}'
      known = self.functions.get(dotted)
      if known is not None and known is not function and not _redefines(
          function, known):
        self._taken.add(dotted)
      self.functions[dotted] = function

  def _declare_fields_otherwise(self, path, tree, fields):
    """Records the classes of a module the model did not read that declare
    one of ``fields`` (annotated, a method or property, assigned): nothing
    there names flax.optim, so none is an optimizer field."""
    for node in _walk.statements(tree):
      if not isinstance(node, ast.ClassDef):
        continue
      for item in node.body:
        declared = _names.other_attribute_declarations(item) + (
            [item.target.id] if isinstance(item, ast.AnnAssign) and
            isinstance(item.target, ast.Name) else [])
        for name in set(declared) & fields:
          self._declare_otherwise(name, path, item, node)

  def _declare_otherwise(self, name, path, item, node):
    """Class ``node``'s body item ``item`` declares attribute ``name`` as
    something other than a flax.optim Optimizer: ``x.<name>`` is not one
    wherever the project's fields of that name are (the first such
    declaration is the one a report names)."""
    self.fields[name] = False
    self._declared_otherwise.setdefault(name, (path, _first_line(item),
                                               node.name))

  def _trees_spelling(self, words, sources, parse):
    """``(path, tree)`` of each project module whose source spells one of
    ``words``; a module the model did not read is parsed here (scan hands
    the model a parse callback instead of every tree), one that does not
    parse is left out."""
    spells = spells_any_of(words)
    for path, (source, tree) in sources.items():
      if not spells(source):
        continue
      tree = self.trees.get(path, tree)
      tree = parse(path) if tree is None and parse else tree
      if tree is not None:
        yield path, tree

  def callee(self, call, names) -> Optional[_Function]:
    """The project function or method a call runs, where it is certain.

    A module function by its import path; a method by its name when every
    function of the project with that name is a method (the receiver's
    class is not known, so all of them must agree: see ``returns_def``).
    """
    if not isinstance(call, ast.Call):
      return None
    return self.callee_at(call, names, names.resolve(call.func))

  def callee_at(self, call, names, path) -> Optional[_Function]:
    """``callee`` of ``call``, whose function resolves to ``path`` (for a
    caller that resolved it already)."""
    path = dotted_at(call.func, names, path)
    return None if path is None else self.functions.get(path)

  def callees(self, call, names) -> list:
    """``[_Function]``: the function ``call`` runs (``callee``), or each
    one it may run through a module alias (``_module_aliases``: every
    module the alias is bound to defines the function); [] where that is
    not known."""
    function = self.callee(call, names)
    if function is not None:
      return [function]
    func = call.func if isinstance(call, ast.Call) else None
    if not (isinstance(func, ast.Attribute) and isinstance(
        func.value, ast.Name)):
      return []
    modules = self.module_aliases(names).get(func.value.id, ())
    found = [self.functions.get(f'{module}.{func.attr}') for module in modules]
    if not found or any(f is None or f.is_method for f in found):
      return []
    return found

  def module_aliases(self, names) -> dict:
    """``_module_aliases.module_aliases`` of the module of ``names``."""
    path = names.path
    if path not in self._aliases_of:
      self._aliases_of[path] = {} if path not in self.trees else (
          _module_aliases.module_aliases(self.trees[path], names,
                                         self._is_module))
    return self._aliases_of[path]

  def alias_references(self, tree, names):
    """``(node, parent, dotted)`` per module ``f`` that an attribute
    ``alias.f`` of ``tree`` (the module of ``names``) may name through a
    module alias, as ``_names.references`` gives the others."""
    aliases = self.module_aliases(names)
    if not aliases:
      return
    parents = _walk.parents(tree)
    for node in _walk.nodes(tree):
      if isinstance(node, ast.Attribute) and isinstance(
          node.value, ast.Name) and node.value.id in aliases:
        for module in aliases[node.value.id]:
          yield node, parents.get(node), f'{module}.{node.attr}'

  @functools.cached_property
  def _modules(self) -> frozenset:
    """The dotted names of the project's modules."""
    return frozenset(dotted for dotteds in self.module_names_of.values()
                     for dotted in dotteds)

  def _is_module(self, dotted) -> bool:
    return dotted in self._modules

  def _method_candidates(self, call) -> list:
    func = call.func
    if not isinstance(func, ast.Attribute):
      return []
    precise = self._hierarchy_methods(call)
    if precise is not None:
      return precise
    candidates = self.methods.get(func.attr, [])
    if not candidates or not all(c.is_method for c in candidates):
      return []
    return candidates

  def function_of(self, node) -> Optional[_Function]:
    """The project's module function whose FunctionDef is ``node``."""
    return next((f for f in self.functions.values() if f.node is node),
                None)

  def _module_function(self, names, name) -> Optional[_Function]:
    """The function ``name`` of the module of ``names``, by its dotted name
    (None where the module has none of its own)."""
    module = names.package_module
    return self.functions.get(f'{module}.{name}') if module else None

  def _model_ids(self, node, path) -> set:
    """id() of the model's own parse of the module function ``node`` of
    ``path`` (the planner parses the module again: the same def by its
    name and line)."""
    registered = [self.functions.get(f'{module}.{node.name}')
                  for module in self.module_names_of.get(path, ())]
    return {id(f.node) for f in registered
            if f is not None and f.path == path and
            f.node.lineno == node.lineno}


def _redefines(function: _Function, known: _Function) -> bool:
  """``function`` is a later def of the top level of ``known``'s module
  under its name (a script redefining ``train_step`` section by section):
  the one other modules call, the module having run by then."""
  return function.path == known.path and not (
      function.is_method or known.is_method) and (
          known.node.lineno < function.node.lineno)


def is_notebook(path: str) -> bool:
  """A Jupyter notebook (its code cells read as one module)."""
  return path.endswith('.ipynb')


def spells_any_of(words) -> Callable[[bytes], bool]:
  """The test whether a module's bytes spell any of ``words`` as a whole
  word. Its pattern runs only where one is a substring: starting with
  ``\\b``, it is tried at every position (most modules spell none)."""
  encoded = [w.encode() for w in sorted(words)]
  pattern = re.compile(rb'\b(' + b'|'.join(map(re.escape, encoded)) + rb')\b')
  return lambda source: any(w in source for w in encoded) and (
      pattern.search(source) is not None)


def dotted_name(node, names) -> Optional[str]:
  """The dotted name a class reference resolves to: an import, else a name
  of the module itself."""
  return dotted_at(node, names, names.resolve(node))


def dotted_at(node, names, path: Optional[str]) -> Optional[str]:
  """``dotted_name`` of ``node``, which resolves to ``path``."""
  if path is None and isinstance(node, ast.Name) and names.package_module:
    return f'{names.package_module}.{node.id}'
  return path


def is_literal(node) -> bool:
  """A constant, an f-string, or a display of them (``-1.0``, ``('a',)``)."""
  if isinstance(node, (ast.Constant, ast.JoinedStr)):
    return True
  if isinstance(node, ast.UnaryOp):
    return is_literal(node.operand)
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return all(is_literal(e) for e in node.elts)
  if isinstance(node, ast.Dict):
    return all(k is not None and is_literal(k) for k in node.keys) and all(
        is_literal(v) for v in node.values)
  return False


def _first_line(item) -> int:
  """The first line of a class body's item (a property's decorator)."""
  return min([item.lineno] + [d.lineno for d in getattr(
      item, 'decorator_list', ())])
