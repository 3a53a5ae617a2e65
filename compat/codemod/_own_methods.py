"""Calls of the user's own methods named like the Optimizer's.

A class of the project may wrap its optimizer behind methods of the same
names (jaxrl's ``Model.apply_gradient(loss_fn)``, which steps the
``optimizer`` field inside). A call of such a method is no flax.optim
use: the method's body is the one (its field read through ``self`` is
rewritten with the field's flow), the call stays as it is. A call runs
the user's method where its receiver is typed as an instance of a
project class:

* ``x.method(...)``: every binding of ``x`` in its function gives an
  instance of one project class: a parameter annotated with it (``model:
  Model``), a construction (``model = Model(...)``), its ``replace(...)``
  (a ``flax.struct`` dataclass), an attribute its class annotates, an
  element of a tuple every return of a project function holds there
  (``models, v = get_value(models)``) (``_FunctionTypes``);
* ``x.attr.method(...)``: ``x`` is typed so and its class annotates
  ``attr`` with a project class (``sac.actor`` of ``sac: ActorCriticTemp``),
  or every class of the project declaring ``attr`` annotates it with one
  (``_classes._hierarchy_methods``);

and every class the call may run the method of, with all of its bases,
is a class of the project (``_classes.project_method``: a subclass of a
library's class, flax.optim's Optimizer among them, is no proof).
Stdlib only.
"""

import ast
from typing import Optional
import weakref

from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _project_index
from compat.codemod import _walk

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# (the module's calls and functions, filtered once per tree by
# ``_walk.nodes_of``: the passes here look at nothing else)
_CALLS = (ast.Call,)


def runs_own_method(model, names, call) -> bool:
  """``call`` (``receiver.method(...)``) provably runs a method of a class
  of the project, not one of a flax.optim Optimizer's."""
  func = call.func
  if model is None or not isinstance(func, ast.Attribute):
    return False
  dotted = _receiver_class(model, names, func.value)
  if dotted is not None:
    return model.instance_method(dotted, func.attr) is not None
  if isinstance(func.value, ast.Attribute):
    methods = model._hierarchy_methods(call)  # pylint: disable=protected-access
    return bool(methods) and all(
        model.project_method(m.node) for m in methods)
  return False


def _receiver_class(model, names, node) -> Optional[str]:
  """The dotted name of the project's class ``node`` is an instance of: a
  typed name (``_typed_names``), or ``x.attr`` where ``x``'s class
  annotates ``attr`` with a class (``sac.actor`` of ``sac:
  ActorCriticTemp``); None where migrate cannot tell."""
  if isinstance(node, ast.Name):
    return _typed_names(names).get(id(node))
  if isinstance(node, ast.Attribute):
    owner = _receiver_class(model, names, node.value)
    return None if owner is None else model.field_class(owner, node.attr)
  return None


def own_step_lines(names) -> frozenset:
  """The lines of the module of ``names`` holding a call of a method named
  like one of the Optimizer's steps that runs the user's own method: a
  scan of the migrated module alone, which has no project to type the
  receiver by, reports none of them as left."""
  model = getattr(names, 'model', None)
  if model is None:
    return frozenset()  # (a module alone: no class of a project to type by)
  return frozenset(
      node.lineno for node in _walk.nodes_of(names.tree, _CALLS)
      if isinstance(node.func, ast.Attribute)
      and node.func.attr in _members.STEP_METHODS and runs_own_method(
          model, names, node))


# ModuleNames -> their table: one table per module, held no longer than
# the names themselves (a strong key kept each project's whole model, every
# tree of it, alive after its run, for every later collection to walk); and
# the functions whose returns are being typed (a cycle of functions
# handing each other's results back types nothing).
_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_KEPT_TABLES = 64
_RETURNS_OPEN: set = set()


def _typed_names(names) -> dict:
  """id(Name read) -> the dotted class its value is an instance of, for
  each read of a name every binding of its function types alike
  (``_FunctionTypes``), in the functions that call a method named like an
  Optimizer step (the only reads asked); read once per module."""
  table = _TABLES.get(names)
  if table is None:
    table = _find_typed_names(names)
    if len(_TABLES) >= _KEPT_TABLES:
      _TABLES.clear()
    _TABLES[names] = table
  return table


def _find_typed_names(names) -> dict:
  found = {}
  calling = _functions_calling_a_step(names.tree)
  for function in _walk.nodes_of(names.tree, _FUNCTIONS):
    if function in calling:
      nodes = _function_nodes(function, names)
      types = _FunctionTypes(function, names, nodes)
      reads: dict = {}  # name -> [each read of it in the function]
      for read in nodes:
        if isinstance(read, ast.Name) and isinstance(read.ctx, ast.Load):
          reads.setdefault(read.id, []).append(read)
      for name in types.sources:
        dotted = types.class_of(name)
        if dotted is not None:
          found.update((id(read), dotted) for read in reads.get(name, ()))
  return found


def _functions_calling_a_step(tree) -> set:
  """The functions of ``tree`` holding (at any depth) a call of a method
  named like an Optimizer step: found from the calls up, not by walking
  each function (and each nested one again)."""
  parents = _walk.parents(tree)
  found = set()
  for node in _walk.nodes_of(tree, _CALLS):
    if isinstance(node.func, ast.Attribute) and (
        node.func.attr in _members.STEP_METHODS):
      holder = parents.get(node)
      while holder is not None:
        if isinstance(holder, _FUNCTIONS):
          found.add(holder)
        holder = parents.get(holder)
  return found


def _function_nodes(function, names) -> list:
  """Every node under ``function`` (itself included) but the leaves the
  parser shares (contexts, operators), in ``ast.walk``'s order, from the
  walk of its module's tree (``names.tree``)."""
  return _walk.under(function, names.tree)


class _FunctionTypes:
  """The class of each name all of whose bindings in a function (nested
  functions and lambdas included) give an instance of one class of the
  project: a parameter annotated with it; ``x = C(...)``; ``x =
  y.replace(...)`` of a typed ``y`` whose class is a ``flax.struct``
  dataclass (its ``replace`` keeps the class);
  ``x = y.attr`` (the class annotating ``attr``); ``a, x = f(...)`` of a
  project function each of whose returns is a tuple holding an instance of
  one class there."""

  def __init__(self, function, names, nodes=None):
    """``nodes``: ``_function_nodes(function, names)``, where the caller
    has them."""
    self._names, self._model = names, names.model
    if nodes is None:
      nodes = _function_nodes(function, names)
    self.sources: dict = {}  # name -> [its bindings' sources]
    arguments = function.args
    for argument in (arguments.posonlyargs + arguments.args +
                     arguments.kwonlyargs):
      self.sources.setdefault(argument.arg, []).append(
          None if argument.annotation is None else ('annotation',
                                                    argument.annotation))
    assigned = {}  # id(a Name stored) -> its source
    for node in nodes:
      if isinstance(node, ast.Assign) and len(node.targets) == 1:
        assigned.update(_assigned_sources(node.targets[0], node.value))
    own = {id(a) for a in ast.walk(arguments)}
    for node in nodes:
      if node is not function and id(node) not in own:
        for name in _bound_names(node):
          self.sources.setdefault(name, []).append(assigned.get(id(node)))
    self._open: set = set()

  def class_of(self, name) -> Optional[str]:
    """The class every binding of ``name`` gives; None where one gives
    none or two give different ones. A binding reading the name itself
    (``models = models.replace(rng=rng)``) agrees where the others' class
    is one ``replace`` keeps (``_OPEN``, ``_OPEN_REPLACED``)."""
    if name in self._open:
      return _OPEN
    sources = self.sources.get(name, ())
    if not sources or None in sources:
      return None
    self._open.add(name)
    try:
      found = {self._source_class(source) for source in sources}
    finally:
      self._open.discard(name)
    kept = {c[1] for c in found if isinstance(c, tuple)}  # _KEPT_BY
    classes = found - {_OPEN, _OPEN_REPLACED} - {(_KEPT_BY, m) for m in kept}
    if None in found or len(classes) != 1:
      return None
    dotted = classes.pop()
    if not all(self._keeps_class(dotted, method) for method in kept):
      return None
    return dotted if _OPEN_REPLACED not in found or (
        self._model.replaces_alike(dotted)) else None

  def _keeps_class(self, dotted, method) -> bool:
    """Every return of the method ``method`` instances of ``dotted`` run
    is the instance itself or its ``replace(...)`` (a ``flax.struct``
    dataclass's copy: ``return self.replace(params=None, ...)``)."""
    found = self._model.instance_method(dotted, method)
    positional = [] if found is None else found.node.args.posonlyargs + (
        found.node.args.args)
    if not positional:
      return False
    own = positional[0].arg
    returns = _names.own_returns(found.node)
    return bool(returns) and all(
        isinstance(r, ast.Name) and r.id == own or isinstance(
            r, ast.Call) and isinstance(r.func, ast.Attribute) and (
                r.func.attr == _REPLACE) and isinstance(
                    r.func.value, ast.Name) and r.func.value.id == own and (
                        self._model.replaces_alike(dotted))
        for r in returns)

  def _source_class(self, source) -> Optional[str]:
    kind, value = source[0], source[1]
    if kind == 'annotation':
      return self._project_class(_names.annotated_class(self._names, value))
    if kind == 'item':
      return self._returned_item_class(value, source[2])
    return self._value_class(value)

  def _project_class(self, node) -> Optional[str]:
    dotted = None if node is None else _project_index.dotted_name(
        node, self._names)
    return dotted if dotted in self._model.classes else None

  def _value_class(self, value) -> Optional[str]:
    if isinstance(value, ast.Name):
      return self.class_of(value.id)
    if isinstance(value, ast.Attribute):
      owner = self._value_class(value.value)
      return None if owner in (None, _OPEN, _OPEN_REPLACED) else (
          self._model.field_class(owner, value.attr))
    if not isinstance(value, ast.Call):
      return None
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr == _REPLACE:
      owner = self._value_class(func.value)
      if owner in (_OPEN, _OPEN_REPLACED):
        return _OPEN_REPLACED
      return owner if owner is not None and self._model.replaces_alike(
          owner) else None
    if isinstance(func, ast.Attribute) and func.attr in self._model.methods:
      # ``actor = actor.with_optimizer(d)``: a method giving its instance
      # back (``_keeps_class``), checked once the class is known.
      owner = self._value_class(func.value)
      if owner in (_OPEN, _OPEN_REPLACED):
        return (_KEPT_BY, func.attr)
      return owner if owner is not None and self._keeps_class(
          owner, func.attr) else None
    if not isinstance(func, (ast.Name, ast.Attribute)):
      return None
    return self._project_class(func) or self._returned_class(value)

  def _returned_class(self, call) -> Optional[str]:
    """The class every return of the project's module function ``call``
    runs is an instance of (``return Model(model_def, params=params)``)."""
    function = self._model.callee(call, self._names)
    names = None if function is None or function.is_method else (
        self._model.names.get(function.path))
    returns = [] if names is None else _names.own_returns(function.node)
    if not returns or None in returns or id(function.node) in _RETURNS_OPEN:
      return None
    _RETURNS_OPEN.add(id(function.node))
    try:
      types = _FunctionTypes(function.node, names)
      found = {types._value_class(r) for r in returns}  # pylint: disable=protected-access
    finally:
      _RETURNS_OPEN.discard(id(function.node))
    dotted = found.pop() if len(found) == 1 else None
    return dotted if isinstance(dotted, str) and dotted not in (
        _OPEN, _OPEN_REPLACED) else None

  def _returned_item_class(self, call, index) -> Optional[str]:
    function = self._model.callee(call, self._names)
    names = None if function is None else self._model.names.get(
        function.path)
    returns = [] if names is None else _names.own_returns(function.node)
    if not returns or id(function.node) in _RETURNS_OPEN or not all(
        isinstance(r, ast.Tuple) and len(r.elts) > index and isinstance(
            r.elts[index], ast.Name) for r in returns):
      return None
    _RETURNS_OPEN.add(id(function.node))
    try:
      types = _FunctionTypes(function.node, names)
      found = {types.class_of(r.elts[index].id) for r in returns}
    finally:
      _RETURNS_OPEN.discard(id(function.node))
    return found.pop() if len(found) == 1 else None


_REPLACE = 'replace'
# What a name whose class is being found gives where one of its bindings
# reads it: as it is, or through ``.replace``.
_OPEN = '<the name itself>'
_OPEN_REPLACED = '<the name itself, replaced>'
# (_KEPT_BY, method): the name itself, through a method of its class that
# gives the instance back.
_KEPT_BY = '<the name itself, through a method>'


def _assigned_sources(target, value) -> list:
  """``[(id(Name stored), source)]`` of an assignment of ``value`` to
  ``target``: the value itself, or ('item', call, index) for each name of
  a tuple target unpacking a call."""
  if isinstance(target, ast.Name):
    return [(id(target), ('value', value))]
  if isinstance(target, (ast.Tuple, ast.List)) and isinstance(
      value, ast.Call) and not any(isinstance(e, ast.Starred)
                                   for e in target.elts):
    return [(id(e), ('item', value, i)) for i, e in enumerate(target.elts)
            if isinstance(e, ast.Name)]
  return []


def _bound_names(node) -> list:
  """The names ``node`` binds (an assignment's or loop's target, a
  parameter of a nested function, an import, a global)."""
  if isinstance(node, ast.Name):
    return [] if isinstance(node.ctx, ast.Load) else [node.id]
  if isinstance(node, ast.arg):
    return [node.arg]
  if isinstance(node, (ast.Import, ast.ImportFrom)):
    return [(a.asname or a.name).partition('.')[0] for a in node.names]
  if isinstance(node, (ast.Global, ast.Nonlocal)):
    return list(node.names)
  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
    return [node.name]
  name = getattr(node, 'name', None)  # ``except E as x``, match patterns
  return [name] if isinstance(name, str) else []


def class_read_in(function, names, node) -> Optional[str]:
  """The dotted name of the project's class ``node``, read in
  ``function`` (a name, ``x.attr``, a call), is an instance of, by every
  binding of the names it reads there (``_FunctionTypes``); None where
  migrate cannot tell."""
  dotted = _FunctionTypes(function, names)._value_class(node)  # pylint: disable=protected-access
  return dotted if isinstance(dotted, str) and dotted not in (
      _OPEN, _OPEN_REPLACED) else None
