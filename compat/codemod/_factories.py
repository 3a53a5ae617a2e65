"""Which of the project's functions return an OptimizerDef on every path,
and where each definition they return is made.

A least fixpoint over the functions the index (``_project_index``) holds:
``make_def().create(p)`` in another module is known to create an
optimizer; a method call runs one of several overrides, which must all
agree. The user's own OptimizerDef subclasses are found here too. A part
of ``_project.Model``. Stdlib only.
"""

import ast
from typing import NamedTuple

from compat.codemod import _links
from compat.codemod import _names
from compat.codemod import _params
from compat.codemod import _walk


class _ReturnsOf(NamedTuple):
  name: str  # the function's name
  values: list  # its own returns' values (None: a bare return)


class Factories:
  """The definition factories and the user's rule classes (a part of
  ``_project.Model``)."""

  def _init_factories(self):
    self.def_functions: set = set()  # FunctionDef nodes returning defs
    # FunctionDef -> its own returns, read once.
    self._returns: dict = {}
    # Dotted name -> (path, ClassDef) of the user's OptimizerDef subclasses
    # defined at a module's top level: their calls in any module make
    # definitions (a rule kept on flax_optim_rules.RuleDef once migrated).
    self.user_rules: dict[str, tuple] = {}
    # Dotted names of the user rule classes that another module calls.
    self.called_rules: set[str] = set()
    self._called: set = set()  # factories with a call in the project
    # id(FunctionDef) -> its ``_producers``, once the factories are solved
    # (``_factory_producers``: the links ask again per call of a method
    # name many classes define).
    self._producers_memo: dict = {}
    # (len(def_functions), their names): ``returns_def`` asks a method
    # call only where a factory has its name.
    self._def_names: tuple = (0, frozenset())

  def _collect_user_rules(self) -> set:
    """Adds the user rule classes found so far; returns the new ones' names
    (modules that mention them may construct or subclass them: those read
    already are read again, the others when a round finds them)."""
    found = set()
    while True:
      fresh = {}
      for path, names in self.names.items():
        for node in self.trees[path].body:
          if isinstance(node, ast.ClassDef) and node.name in names.user_defs:
            for module in self.module_names_of.get(path, ()):
              dotted = f'{module}.{node.name}'
              if dotted not in self.user_rules:
                fresh[dotted] = (path, node)
      if not fresh:
        return found
      self.user_rules.update(fresh)
      words = {dotted.rpartition('.')[2] for dotted in fresh}
      found |= words
      for path, names in self.names.items():
        text = self.sources[path].decode('utf-8', 'replace')
        if any(word in text for word in words):
          names.collect()

  def _read_calls(self, sources, parse, unparsed):
    """Reads the modules whose functions the modules read so far call (an
    optimizer made in one is stepped in the other), then every module that
    names one of the functions (``_params`` proves their parameters from
    all their calls); the factories are solved again over them."""
    called: dict = {}  # (each module's walk, once)
    while self._read_paths(sorted(
        p for p in _params.callee_modules(self, called)
        if p not in unparsed), sources, parse, unparsed):
      pass
    self._read_modules_naming(_params.function_names(self), sources, parse,
                              unparsed)
    for dotted in self._taken:
      self.functions.pop(dotted, None)
    self._solve_factories()

  def returns_def(self, call, names) -> bool:
    """A call of a project factory whose every return is an OptimizerDef."""
    if not self.def_functions:
      return False  # (no factory known yet: a third of the questions)
    path = names.resolve(call.func)  # (once for both questions)
    function = self.callee_at(call, names, path)
    if function is not None:
      return function.node in self.def_functions
    func = call.func
    if path is not None or not isinstance(func, ast.Attribute) or (
        func.attr not in self._factory_names()):
      return False  # (no method of that name returns a definition)
    return self._methods_agree(self._method_candidates(call))

  def _factory_names(self) -> frozenset:
    """The names of the functions returning definitions (found so far)."""
    known, found = self._def_names
    if known != len(self.def_functions):  # (the set only grows)
      found = frozenset(node.name for node in self.def_functions)
      self._def_names = (len(self.def_functions), found)
    return found

  def _methods_agree(self, candidates) -> bool:
    """Every override a call may run returns a definition, or gives its
    caller nothing (an abstract base method), and one of them returns."""
    makers = [c for c in candidates if c.node in self.def_functions]
    return bool(makers) and all(
        c.node in self.def_functions or gives_nothing(c.node)
        for c in candidates)

  def _solve_factories(self):
    """Least fixpoint: a factory returns defs (or other factories' ones)."""
    everything = {id(f.node): f for f in self.functions.values()}
    for group in self.methods.values():
      everything.update({id(f.node): f for f in group})
    for function in everything.values():
      if function.node not in self._returns:
        self._returns[function.node] = _ReturnsOf(
            function.node.name, _names.own_returns(function.node))
    changed = True
    while changed:
      changed = False
      for function in everything.values():
        if function.node in self.def_functions:
          continue
        names = self.names[function.path]
        returns = self._returns[function.node].values
        if returns and all(r is not None and names.is_def(r)
                           for r in returns):
          self.def_functions.add(function.node)
          changed = True
      if changed:  # names bound to the new factories' definitions
        found = {self._returns[f].name for f in self.def_functions}
        for path, names in self.names.items():
          if any(name in self.sources[path].decode('utf-8', 'replace')
                 for name in found):
            names.collect()

  def _producers(self, function, seen=None) -> list:
    """(path, ``_links.Element``) of each flax.optim definition a factory
    returns (the call making it)."""
    seen = set() if seen is None else seen
    if function.node in seen:
      return []
    seen.add(function.node)
    names = self.names[function.path]
    found = []
    for value in self._returns[function.node].values:
      found += self._definitions_of(value, names, function, seen)
    return found

  def _definitions_of(self, value, names, function, seen) -> list:
    if isinstance(value, ast.Name):  # opt_def = optim.Adam(...); return it
      found = []
      # (statements only: an assignment is one, met in ast.walk's order)
      for node in _walk.statements(function.node):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == value.id
            for t in node.targets):
          found += self._definitions_of(node.value, names, function, seen)
      return found
    if not isinstance(value, ast.Call):
      return []
    inner = self.callee(value, names)
    if inner is not None:
      return self._producers(inner, seen)
    if names.resolve(value.func) is None and self._method_candidates(value):
      found = []
      for candidate in self._method_candidates(value):
        found += self._producers(candidate, seen)
      return found
    if names.legacy_class(value.func) is not None or names.user_rule(
        value.func):  # also a rule class of another module
      return [(function.path, _links.Element.of(value))]
    return []

  def _factory_producers(self, call, names) -> list:
    function = self.callee(call, names)
    candidates = [function] if function is not None else (
        self._method_candidates(call))
    found = []
    for candidate in candidates:
      key = id(candidate.node)
      if key not in self._producers_memo:
        self._producers_memo[key] = self._producers(candidate)
      found += self._producers_memo[key]
    return sorted(set(found))


def gives_nothing(function) -> bool:
  """An abstract base method, which hands its caller no value: every path
  raises (no return of its own, and the body ends in a ``raise``, so
  whatever runs before it ends there), or an ``@abc.abstractmethod`` whose
  body is only a docstring, ``pass`` or ``...`` (run only through
  ``super()``, whose None makes no override that returns it a factory)."""
  if _names.own_returns(function):
    return False
  if isinstance(function.body[-1], ast.Raise):
    return True
  abstract = any(ast.unparse(d).rpartition('.')[2] == 'abstractmethod'
                 for d in function.decorator_list)
  return abstract and all(
      isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(
          s.value, ast.Constant)) for s in function.body)
