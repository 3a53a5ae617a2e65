"""Which expressions of a module hold a legacy ``Optimizer``, with certainty.

``ModuleNames`` guesses from names (``optimizer``, ``opt``) and tracks plain
assignments; that is enough to report a usage but not to rewrite one. This
module proves it instead, for the flows a training script has: a name, a
function parameter, a function's return value (also one element of a returned
tuple), and a dataclass field annotated ``optim.Optimizer``.

It is a greatest fixpoint over the module's bindings (flow-insensitive, per
scope): every name starts as "maybe an optimizer"; a binding whose value is
not provably an optimizer removes its name; a parameter needs an annotation
or call sites in this module that all pass an optimizer (a function that
escapes, e.g. into a list or another module's call, has unknown callers).
What survives is an optimizer on every path. Stdlib only.

A name bound once to ``jax.pmap(functools.partial(step, a, k=v), ...)`` (or
``jax.jit``, ``jax.pmap(step)``, nested partials) is an alias of ``step``:
its calls are ``step``'s calls with the bound arguments put first, its
results are ``step``'s results (these wrappers keep a pytree's classes).
"""

import ast
import collections
from typing import NamedTuple, Optional

from compat.codemod import _legacy_trees
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _removals
from compat.codemod import _restores
from compat.codemod import _state_layout
from compat.codemod import _walk

_ANY = object()  # an element of a returned tuple that is not an optimizer
# Statements binding a name no stored ``ast.Name`` shows (a def, class or
# handler binds its ``name``).
_OTHER_BINDINGS = (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)
# Wrappers (also as decorators, also through functools.partial) whose
# result takes the function's arguments and returns its values, pytree
# classes kept.
_WRAPPERS = ('jax.jit', 'jax.pmap', 'jax.named_call')
_PARTIAL = 'functools.partial'
OPTIMIZER_CLASSES = _names.OPTIMIZER_CLASSES
# Calls that return one argument's kind (a pytree moved or replicated across
# devices, a checkpoint restored into the target's classes): an optimizer in,
# an optimizer out; a tuple of them in, the same tuple out. The argument's
# position and keyword.
_SAME_KIND = {
    'jax.device_put': (0, 'x'),
    'flax.jax_utils.replicate': (0, 'tree'),
    'flax.jax_utils.unreplicate': (0, 'tree'),
    'flax.training.checkpoints.restore_checkpoint': (
        1, _members.CHECKPOINT_TARGET),
    'flax.serialization.from_state_dict': (0, _members.CHECKPOINT_TARGET),
    # A leaf-wise map keeps its first tree's structure and classes
    # (``jnp.where(is_finite, new, old)`` over two optimizers).
    'jax.tree_util.tree_map': (1, 'tree'),
    # Every leaf fetched to the host, the tree's classes kept.
    'jax.device_get': (0, 'x'),
    # A copy is of the original's class.
    'copy.copy': (0, 'x'),
    'copy.deepcopy': (0, 'x'),
}
# Removed spellings (``jax.tree_map``, ``jax.tree_multimap``...) call what
# replaced them: the removals table says which.
_SAME_KIND.update({old: _SAME_KIND[name] for name in tuple(_SAME_KIND)
                   for old in _removals.removed_spellings(name)})
# Of those, the calls whose later positional arguments are trees of the
# first one's structure (``tree_map(f, new, old)``): of its kind too.
_SAME_KIND_REST = frozenset(
    ('jax.tree_util.tree_map',
     *_removals.removed_spellings('jax.tree_util.tree_map')))


# What ``jax.jit`` may be given besides the function where a jitted
# ``.create`` is followed: where the computation runs (the created arrays'
# device), nothing that changes which values it makes.
_JIT_PLACEMENT = ('backend', 'device')


def jitted_create(call, names) -> Optional[ast.Attribute]:
  """``d.create`` where ``call`` is ``jax.jit(d.create, backend=...)(p)``.

  jit keeps a pytree's classes, so this makes what ``d.create(p)`` makes
  (on the device named); whether ``d`` is a definition is the caller's
  question. None for any other call (more arguments to either call, other
  jit options, another wrapper).
  """
  jit = call.func
  if not isinstance(jit, ast.Call) or names.resolve(jit.func) != 'jax.jit':
    return None
  if len(jit.args) != 1 or any(k.arg not in _JIT_PLACEMENT
                               for k in jit.keywords):
    return None
  create = jit.args[0]
  if not (isinstance(create, ast.Attribute) and create.attr == _members.CREATE):
    return None
  if call.keywords or len(call.args) != 1 or isinstance(call.args[0],
                                                         ast.Starred):
    return None
  return create


def create_arguments(call) -> Optional[dict]:
  """``{'target': node[, 'focus': node]}`` that ``definition.create(...)``
  passes to flax.optim's ``create(target, focus=None)``; None where ``*`` or
  ``**`` hide them, or they do not bind."""
  if any(isinstance(a, ast.Starred) for a in call.args) or len(
      call.args) > 2:
    return None
  given = dict(zip((_members.TARGET, 'focus'), call.args))
  for keyword in call.keywords:
    if keyword.arg not in (_members.TARGET, 'focus') or keyword.arg in given:
      return None
    given[keyword.arg] = keyword.value
  return given if _members.TARGET in given else None


def is_none(value) -> bool:
  """``value`` (a node, a source text, or None for an argument not
  passed) is None."""
  if isinstance(value, ast.Constant):
    return value.value is None
  return value in (None, 'None')


def creates_whole(call) -> bool:
  """``definition.create(...)`` optimizes every parameter: its target
  binds and it selects none (no ``focus``)."""
  given = create_arguments(call)
  return given is not None and is_none(given.get('focus'))


def parameter_of(function, call, argument, bound=0) -> Optional[str]:
  """The parameter of ``function`` that ``call`` passes ``argument`` to
  (``bound``: positional arguments an alias bound first); None where
  ``*``/``**`` hide it or it binds none."""
  if any(isinstance(a, ast.Starred) for a in call.args):
    return None
  for keyword in call.keywords:
    if keyword.value is argument:
      return keyword.arg
  positions = [i for i, a in enumerate(call.args) if a is argument]
  named = function.args.posonlyargs + function.args.args
  if not positions or positions[0] + bound >= len(named):
    return None
  return named[positions[0] + bound].arg


def sets_hyper_params(node) -> bool:
  """``node`` is a step overriding hyper-parameters
  (``opt.apply_gradient(g, learning_rate=lr)``)."""
  return isinstance(node, ast.Call) and isinstance(
      node.func, ast.Attribute) and (
          node.func.attr == _members.APPLY_GRADIENT) and bool(node.keywords)


def _simple_name_bindings(target, value, out):
  """(name, value-or-element-path) pairs of one assignment target."""
  if isinstance(target, ast.Name):
    out.append((target.id, value))
  elif isinstance(target, (ast.Tuple, ast.List)):
    for index, element in enumerate(target.elts):
      if isinstance(element, ast.Starred):
        out.append((None, None))
        continue
      _simple_name_bindings(element, ('item', value, index), out)


class _Bound(NamedTuple):
  """A function reached through partials/wrappers, with its bound arguments."""
  name: str  # the module-level function
  reference: ast.Name  # where the expression names it
  args: tuple  # ((value node, scope), ...) bound positionally first
  keywords: dict  # parameter -> (value node, scope)


class StepSignature(NamedTuple):
  """What a step a module factory returns takes and gives (its module's
  flow proves it): seen from another module that calls the factory."""
  node: ast.AST  # the step's FunctionDef (in its own module's tree)
  kind: object  # what it returns: True, a tuple of kinds, or None
  proven: tuple  # those its module proves optimizers
  # It overrides hyper-parameters per step (``apply_gradient(g,
  # learning_rate=lr)``): the definitions of what it is given take the rate
  # as an injected hyper-parameter, wherever they are made.
  overrides: bool = False


class _Site(NamedTuple):
  """One call of a module function: directly or through an alias."""
  args: tuple  # ((value node, scope), ...)
  keywords: dict  # parameter -> (value node, scope)


class _Scope:

  def __init__(self, node, parent):
    self.node, self.parent = node, parent
    self.bindings: dict[str, list] = {}  # name -> [value or 'unknown']
    self.params: dict[str, int] = {}  # parameter name -> position
    self.annotated: dict[str, ast.AST] = {}


class OptimizerFlow:
  """Proves which expressions evaluate to a legacy ``Optimizer``."""

  def __init__(self, tree: ast.Module, names, replicated_of=None):
    """``replicated_of``: this module's plain flow; given, this flow proves
    instead which expressions hold an optimizer made by ``.replicate()`` (a
    ReplicatedOptimizer: annotations and fields do not say so)."""
    self.names = names  # a _names.ModuleNames
    self.base = replicated_of
    self.scopes: dict[ast.AST, _Scope] = {}
    self.functions: dict[str, ast.AST] = {}  # module-level defs by name
    # A def nested in a function, bound once there and the module's only
    # def of its name (``def update_fn`` in ``main``): called like a module
    # function where a read sees that binding. Name -> that scope.
    self._local_homes: dict[str, _Scope] = {}
    # {factory name: (step name, reference)}: the steps module factories
    # return (``_add_returned_steps``).
    self.returned_steps: dict = {}
    # (scope, name) -> the StepSignature of another module's step factory
    # whose call the name is bound to once (``update = train.make_update(
    # ...)``): its calls give what that step gives.
    self.foreign_steps: dict = {}
    self.escaped: set[str] = set()  # functions used other than by a call
    self.calls: dict[str, list] = {}  # function name -> [(call, scope)]
    self.aliases: dict[tuple, _Bound] = {}  # (scope, name) -> the function
    self._alias_candidates: list = []  # (scope, name, value) to check
    self.fields: dict[str, bool] = {}  # dataclass field -> is an optimizer
    # This module's classes with a field annotated optim.Optimizer (holders)
    # -> those fields; each method -> its class (``self`` in a holder's
    # methods is one).
    self.holder_classes: dict[str, set] = {}
    self._method_class: dict[int, ast.ClassDef] = {}
    self._receivers_open: set = set()  # (scope, name, field) being typed
    self._holding_open: set = set()  # names, parameters, functions asked
    self._parents: dict = {}  # each node -> the node holding it
    self._scope_of: dict[ast.AST, _Scope] = {}
    self._loads: list[ast.Name] = []  # every name read: escape candidates
    self._factories_open: set = set()  # factories being checked (recursion)
    self._defs_open: set = set()  # (scope, name) being checked (recursion)
    self._returns_open: set = set()  # functions whose returns are asked
    # Answers of _returned once the fixpoint is solved (they no longer
    # change), asked outside any other question.
    self._returned_memo: dict = {}
    # Dicts holding an optimizer saved or loaded as trees (_legacy_trees):
    # (dict node, key) -> the verdict, asked for lazily.
    self._tree_checker = _legacy_trees.Checker(names)
    self._tree_verdicts: dict = {}
    self._tree_entries_of: dict = {}  # function -> _tree_entries
    self._solved = False
    self._collect(tree, None)
    self._solve()
    self._solved = True

  # -------------------------------------------------------------- collect
  def _collect(self, node, parent):
    scope = _Scope(node, parent)
    self.scopes[node] = scope
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
      for position, arg in enumerate(args):
        scope.params[arg.arg] = position
        if arg.annotation is not None:
          scope.annotated[arg.arg] = arg.annotation
        scope.bindings.setdefault(arg.arg, []).append(('param', node,
                                                       arg.arg))
      for extra in (node.args.vararg, node.args.kwarg):
        if extra is not None:
          scope.bindings.setdefault(extra.arg, []).append('unknown')
    for child in _walk.scope_nodes(node):
      self._scope_of[child] = scope
      self._collect_node(child, scope)


  def _collect_node(self, child, scope):
    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
      scope.bindings.setdefault(child.name, []).append('unknown')
      if scope.parent is None:
        self.functions[child.name] = child
      self._collect(child, scope)
    elif isinstance(child, ast.ClassDef):
      scope.bindings.setdefault(child.name, []).append('unknown')
      for item in child.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target,
                                                          ast.Name):
          is_opt = self._is_optimizer_annotation(item.annotation)
          field = item.target.id
          self.fields[field] = self.fields.get(field, True) and is_opt
          if is_opt:
            self.holder_classes.setdefault(child.name, set()).add(field)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
          self._method_class[id(item)] = child
          self._collect(item, scope)
        for name in _names.other_attribute_declarations(item):
          self.fields[name] = False
    elif isinstance(child, ast.Lambda):
      self._collect_lambda(child, scope)
    elif isinstance(child, ast.Assign):
      pairs = []
      for target in child.targets:
        _simple_name_bindings(target, child.value, pairs)
      for name, value in pairs:
        if name is not None:
          scope.bindings.setdefault(name, []).append(value)
      if len(child.targets) == 1 and isinstance(child.targets[0], ast.Name):
        self._alias_candidates.append((scope, child.targets[0].id,
                                       child.value))
    elif isinstance(child, ast.AnnAssign) and isinstance(child.target,
                                                         ast.Name):
      if self._is_optimizer_annotation(child.annotation):
        scope.annotated[child.target.id] = child.annotation
      scope.bindings.setdefault(child.target.id, []).append(
          child.value if child.value is not None else 'unknown')
    # ``del name`` binds nothing: a read after it fails, so it holds no
    # other value (``del optimizer`` once it is stored in a state class).
    elif isinstance(child, (ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                            ast.AsyncWith, ast.NamedExpr, ast.ExceptHandler,
                            ast.comprehension, ast.Import, ast.ImportFrom,
                            ast.Global, ast.Nonlocal)):
      # (``del x`` gives ``x`` no value: a read after it fails, so the
      # name's other bindings decide.)
      for name in self._bound_names(child):
        scope.bindings.setdefault(name, []).append('unknown')
    if isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
      self.calls.setdefault(child.func.id, []).append((child, scope))
    if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
      self._loads.append(child)

  def _collect_lambda(self, node, parent):
    scope = _Scope(node, parent)
    self.scopes[node] = scope
    for arg in node.args.args + node.args.kwonlyargs:
      scope.bindings.setdefault(arg.arg, []).append('unknown')
    for child in _walk.scope_nodes(node):
      self._scope_of[child] = scope
      self._collect_node(child, scope)

  @staticmethod
  def _bound_names(node):
    if isinstance(node, ast.ExceptHandler):
      return [node.name] if node.name else []
    if isinstance(node, (ast.Global, ast.Nonlocal)):
      return list(node.names)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      return [(a.asname or a.name).partition('.')[0] for a in node.names]
    targets = {
        ast.AugAssign: lambda n: [n.target],
        ast.For: lambda n: [n.target],
        ast.AsyncFor: lambda n: [n.target],
        ast.NamedExpr: lambda n: [n.target],
        ast.comprehension: lambda n: [n.target],
        ast.With: lambda n: [i.optional_vars for i in n.items],
        ast.AsyncWith: lambda n: [i.optional_vars for i in n.items],
    }[type(node)](node)
    return [n.id for t in targets if t is not None for n in ast.walk(t)
            if isinstance(n, ast.Name)]

  def _is_optimizer_annotation(self, node) -> bool:
    return _names.is_optimizer_annotation(self.names, node)

  def _field_holds(self, attr) -> bool:
    """Every class declaring field ``attr`` (here, and in the project's
    other modules) annotates it ``optim.Optimizer``."""
    here = self.fields.get(attr)
    model = self.names.model
    there = None if model is None else model.fields.get(attr)
    if here is None and there is None:
      return False
    return here is not False and there is not False

  def _contested(self, attr) -> bool:
    """A holder's optimizer field ``attr`` that another class of this
    module or of the project declares otherwise: ``x.<attr>`` is the
    holder's only where ``x`` is typed as one (``holds_field``)."""
    model = self.names.model
    there = None if model is None else model.fields.get(attr)
    return False in (self.fields.get(attr), there) and (
        any(attr in fields for fields in self.holder_classes.values()) or (
            model is not None and any(h.field == attr
                                      for h in model.holders)))

  def holds_field(self, node, field, scope=None) -> bool:
    """``node`` is, on every path, an instance of a class whose ``field`` is
    annotated ``optim.Optimizer`` (a holder): a parameter annotated with
    one (or ``self`` in its own methods), a call of its class, the
    ``.replace(...)`` of one, what a call that keeps its argument's kind
    (``replicate``) or a function annotated to return one gives, or an
    attribute every class of the project annotates with one."""
    scope = self.scope_of(node) if scope is None else scope
    if isinstance(node, ast.Name):
      binding = self._binding_scope(scope, node.id)
      if binding is None:
        return False
      key = (binding, node.id, field)
      if key in self._receivers_open:
        return True  # rebound from itself: ``state = state.replace(...)``
      self._receivers_open.add(key)
      try:
        return all(self._bound_holds_field(value, binding, field)
                   for value in binding.bindings[node.id])
      finally:
        self._receivers_open.discard(key)
    model = self.names.model
    if isinstance(node, ast.Attribute):
      return model is not None and field in model.attribute_fields(node.attr)
    if not isinstance(node, ast.Call):
      return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ('replace',
                                                         '_replace'):
      return self.holds_field(func.value, field, scope)
    if field in self._class_fields(func):
      return True  # the holder's class called
    if self.names.resolve(func) in _SAME_KIND:
      kept = self._kept_argument(node)
      return kept is not None and self.holds_field(kept, field, scope)
    function = self._callee(node, scope)
    if function is not None:
      return function.returns is not None and field in self._class_fields(
          function.returns)
    return model is not None and field in model.returned_fields(node,
                                                                self.names)

  def _bound_holds_field(self, value, binding, field) -> bool:
    if isinstance(value, tuple) and value[0] == 'param':
      _, function, name = value
      annotation = binding.annotated.get(name)
      if annotation is not None:
        return field in self._class_fields(annotation)
      return field in self._own_class_fields(function, name)
    return isinstance(value, ast.AST) and self.holds_field(value, field,
                                                           binding)

  def _own_class_fields(self, function, name) -> set:
    """The optimizer fields of the holder class of which ``function`` is a
    method taking its instance as ``name`` (``self``), else none."""
    owner = self._method_class.get(id(function))
    if owner is None or _names.instance_parameter(function) != name:
      return set()
    return self.holder_classes.get(owner.name, set())

  def _class_fields(self, node) -> frozenset:
    """The optimizer fields of the holder class ``node`` (an annotation or
    a called name) names: one of this module's, or of the project's."""
    node = _names.annotated_class(self.names, node)
    if isinstance(node, ast.Name) and node.id not in self.names.bindings and (
        node.id in self.holder_classes):
      return frozenset(self.holder_classes[node.id])
    model = self.names.model
    if node is None or model is None:
      return frozenset()
    return model.annotation_fields(node, self.names)

  def _unwrap(self, node, scope) -> Optional[_Bound]:
    """The module function ``node`` wraps (partials, jit, pmap), or None."""
    if isinstance(node, ast.Name):
      if self._sees_function(scope, node.id):
        return _Bound(node.id, node, (), {})
      return None
    if not isinstance(node, ast.Call) or not node.args or any(
        isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords):
      return None
    wrapper = self.names.resolve(node.func)
    if wrapper in _WRAPPERS:
      return self._unwrap(node.args[0], scope)
    if wrapper != _PARTIAL:
      return None
    inner = self._unwrap(node.args[0], scope)
    if inner is None:
      return None
    keywords = dict(inner.keywords)
    keywords.update({k.arg: (k.value, scope) for k in node.keywords})
    return inner._replace(
        args=inner.args + tuple((a, scope) for a in node.args[1:]),
        keywords=keywords)

  def _is_wrapper_decorator(self, decorator) -> bool:
    """``@jax.jit``, ``@jax.pmap(...)``, ``@functools.partial(jax.jit, ..)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    path = self.names.resolve(target)
    if path == _PARTIAL and isinstance(decorator, ast.Call):
      return bool(decorator.args) and self.names.resolve(
          decorator.args[0]) in _WRAPPERS
    return path in _WRAPPERS

  # ---------------------------------------------------------------- solve
  def _solve(self):
    parents = {}
    # The module's scope comes first and holds every other: walking each
    # scope again would only revisit nodes (once per enclosing scope). In
    # ``ast.walk``'s order, each node's children listed once.
    todo = collections.deque([next(iter(self.scopes.values())).node])
    while todo:
      node = todo.popleft()
      for child in ast.iter_child_nodes(node):
        parents.setdefault(child, node)
        todo.append(child)
    self._parents = parents
    wrapped = self._collect_aliases() | self._followed_step_references()
    for name in self._loads:
      parent = parents.get(name)
      if name not in wrapped and not (isinstance(parent, ast.Call) and
                                      parent.func is name):
        self.escaped.add(name.id)  # e.g. passed on to another function
    for function in self.functions.values():
      if not all(self._is_wrapper_decorator(d)
                 for d in function.decorator_list):
        self.escaped.add(function.name)
    for (_, alias), bound in self.aliases.items():
      if alias in self.escaped:  # the alias itself goes where we cannot see
        self.escaped.add(bound.name)
    self.alive = {(scope, name) for scope in self.scopes.values()
                  for name in scope.bindings}
    changed = True
    while changed:
      changed = False
      for scope in self.scopes.values():
        for name, values in scope.bindings.items():
          if (scope, name) in self.alive and not all(
              self._binding_holds(scope, name, v) for v in values):
            self.alive.discard((scope, name))
            changed = True

  def _returned_step(self, factory) -> Optional[ast.Name]:
    """The reference to a nested function that every return of module
    function ``factory`` gives back (through jit/pmap), or None.

    ``return jax.pmap(update_fn, ...)`` with ``def update_fn`` nested once
    in ``factory``: a name bound to ``factory(...)`` is then an alias of
    ``update_fn`` (its calls are the step's calls, its results the step's).
    """
    scope = self.scopes[factory]
    references = []
    for value in _names.own_returns(factory):
      while isinstance(value, ast.Call) and value.args and (
          self.names.resolve(value.func) in _WRAPPERS):
        value = value.args[0]
      if not isinstance(value, ast.Name):
        return None
      references.append(value)
    nested = {n.name: n for n in scope.node.body
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if not references or len({r.id for r in references}) != 1:
      return None
    name = references[0].id
    if name not in nested or scope.bindings.get(name) != ['unknown'] or (
        nested[name].decorator_list):
      return None
    return references[0] if len(references) == 1 else None

  def _add_returned_steps(self) -> dict:
    """Makes each nested step a factory returns callable by its name here
    (as module functions are); ``{factory name: (step name, reference)}``."""
    steps = {}
    for factory in list(self.functions.values()):
      reference = self._returned_step(factory)
      if reference is None:
        continue
      nested = next(n for n in factory.body if isinstance(
          n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name ==
                    reference.id)
      if nested.name in self.functions:
        continue  # the name is a module function's (or another step's)
      self.functions[nested.name] = nested
      steps[factory.name] = (nested.name, reference)
    return steps

  def _add_local_functions(self):
    """Registers the defs nested in a function that are called like module
    functions (``_local_homes``): bound once in their function, by the def,
    and the module's only def of that name (a module function or a
    factory's returned step of the name comes first)."""
    counts = collections.Counter(
        node.name for node in self.scopes
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    for node in self.scopes:
      home = self._scope_of.get(node)
      if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
          home is None or home.parent is None or not isinstance(
              home.node, (ast.FunctionDef, ast.AsyncFunctionDef))):
        continue
      if counts[node.name] == 1 and node.name not in self.functions and (
          home.bindings.get(node.name) == ['unknown']):
        self.functions[node.name] = node
        self._local_homes[node.name] = home

  def local_home(self, function) -> Optional[ast.AST]:
    """The function a nested def registered as callable is bound in."""
    home = self._local_homes.get(function.name)
    return home.node if home is not None and self.functions.get(
        function.name) is function else None

  def _sees_function(self, scope, name) -> bool:
    """A read of ``name`` in ``scope`` sees the function registered under
    it: a module function no local name shadows, or a nested def where its
    own binding is the one seen."""
    if name not in self.functions:
      return False
    home = self._local_homes.get(name)
    if home is not None:
      return self._binding_scope(scope, name) is home
    return self._lookup(scope, name) is None

  def _collect_aliases(self) -> set:
    """Fills ``aliases`` (and ``foreign_steps``); returns the function
    references they consume."""
    steps = self.returned_steps = self._add_returned_steps()
    self._add_local_functions()
    model = self.names.model
    for scope, name, value in self._alias_candidates:
      if isinstance(value, ast.Name):
        continue  # a plain rebinding: the name escapes as before
      if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and (
          value.func.id in steps) and self._lookup(
              scope, value.func.id) is None and len(scope.bindings[name]) == 1:
        step, reference = steps[value.func.id]
        self.aliases[(scope, name)] = _Bound(step, reference, (), {})
        continue
      bound = self._unwrap(value, scope)
      if bound is not None and len(scope.bindings[name]) == 1:
        self.aliases[(scope, name)] = bound
        continue
      step = None if model is None or not isinstance(value, ast.Call) or (
          self._callee(value, scope) is not None) else model.foreign_step(
              value, self.names)
      if step is not None and len(scope.bindings[name]) == 1:
        self.foreign_steps[(scope, name)] = step
    return {bound.reference for bound in self.aliases.values()}

  def _followed_step_references(self) -> set:
    """The ``return step`` of each step factory here whose calls in other
    modules the project's model follows (``_step_values``): its callers
    are known, so it is no escape."""
    model = self.names.model
    if model is None:
      return set()
    return {reference for factory, (_, reference) in self.returned_steps.items()
            if model.factory_followed(self.names, factory)}

  def step_bound_to(self, name) -> Optional['StepSignature']:
    """The step of another module's factory that the name read ``name`` is
    bound to (once, by a call of the factory), or None."""
    scope = self._binding_scope(self.scope_of(name), name.id)
    return self.foreign_steps.get((scope, name.id))

  def loads_of(self, scope, name) -> list:
    """Every read of ``name`` that sees its binding in ``scope``."""
    return [load for load in self._loads if load.id == name and (
        self._binding_scope(self.scope_of(load), name) is scope)]

  def parent_of(self, node):
    return self._parents.get(node)

  def _step_parameter(self, scope, name) -> Optional['StepSignature']:
    """The step every call of this module function passes as its
    parameter ``name`` (``_step_values``), or None."""
    model = self.names.model
    bound = scope.bindings.get(name, [])
    if model is None or len(bound) != 1 or not isinstance(
        bound[0], tuple) or bound[0][0] != 'param':
      return None
    function = bound[0][1]
    if self.functions.get(function.name) is not function or (
        function.name in self._local_homes):
      return None
    return model.step_param(self.names, function.name, name)

  def _binding_scope(self, scope, name) -> Optional[_Scope]:
    """The scope whose binding of ``name`` a read in ``scope`` sees."""
    while scope is not None:
      if name in scope.bindings:
        return scope
      scope = scope.parent
    return None

  def _sites(self, function_name) -> Optional[list]:
    """Every call of a module function in this module, or None if opaque."""
    sites = []
    for call, scope in self.calls.get(function_name, []):
      if not self._sees_function(scope, function_name):
        continue  # a local name shadows the function there
      sites.append((call, scope, (), {}))
    for (alias_scope, alias), bound in self.aliases.items():
      if bound.name != function_name:
        continue
      for call, scope in self.calls.get(alias, []):
        if self._binding_scope(scope, alias) is alias_scope:
          sites.append((call, scope, bound.args, bound.keywords))
    resolved = []
    for call, scope, args, keywords in sites:
      if any(isinstance(a, ast.Starred) for a in call.args) or any(
          k.arg is None for k in call.keywords):
        return None
      merged = dict(keywords)
      merged.update({k.arg: (k.value, scope) for k in call.keywords})
      resolved.append(_Site(args + tuple((a, scope) for a in call.args),
                            merged))
    return resolved

  def _binding_holds(self, scope, name, value) -> bool:
    if self.base is None and name in scope.annotated and (
        self._is_optimizer_annotation(scope.annotated[name])):
      return True
    if isinstance(value, str):  # 'unknown'
      return False
    if isinstance(value, tuple) and value[0] == 'param':
      return self._param_holds(value[1], value[2])
    return self._value_holds(value, scope)

  def _param_holds(self, function, name) -> bool:
    if function.name in self.escaped or function.name not in self.functions:
      return False
    if self.functions[function.name] is not function:
      return False
    # What the calls from other modules pass (the project's model: None
    # where no other module names the function).
    model = self.names.model
    elsewhere = None if model is None else model.param_verdict(
        self.names, function.name, name)
    if elsewhere is False:
      return False
    sites = self._sites(function.name)
    if sites is None or (not sites and not elsewhere):
      return False
    return _every_site_passes(sites, function, name,
                              self.scopes[function].params[name],
                              self._value_holds)

  def _value_holds(self, value, scope) -> bool:
    if isinstance(value, tuple) and value[0] == 'item':
      _, inner, index = value
      kind = self._kind(inner, scope)
      return (isinstance(kind, tuple) and index < len(kind) and
              kind[index] is True)
    return self.is_optimizer(value, scope)

  def _kind(self, value, scope):
    """True (an optimizer), a tuple of element kinds, or None (unknown)."""
    if isinstance(value, (ast.Tuple, ast.List)):
      return tuple(self.is_optimizer(e, scope) or _ANY for e in value.elts)
    if isinstance(value, ast.Call):
      if self.names.resolve(value.func) in _SAME_KIND:
        argument = self._kept_argument(value)
        return None if argument is None else self._kind(argument, scope)
      returned = self._returned(value, scope)
      if returned is not None:
        return returned
      foreign = self.foreign_step_of(value)
      if foreign is not None and self.base is None:
        return foreign.kind
      model = self.names.model
      given = None if self.base is not None or model is None else (
          model.returned_kind(value, self.names))
      if given is not None:
        return given  # another module's function, proven there
      jitted = jitted_create(value, self.names)
      if jitted is not None:
        return True if self.base is None and self.is_def(
            jitted.value, scope) else None
      func = value.func
      if self.base is None and self.names.resolve(func) in OPTIMIZER_CLASSES:
        # optim.Optimizer(opt_def, state, target): one, if opt_def is.
        given = _state_layout.hand_built_parts(value)
        return True if given is not None and self.is_def(
            given[_members.OPTIMIZER_DEF], scope) else None
      if isinstance(func, ast.Attribute) and func.attr == _members.CREATE:
        return True if self.base is None and self.is_def(
            func.value, scope) and creates_whole(value) else None
      if isinstance(func, ast.Attribute) and func.attr in (_members.REPLICATE,
                                                           _members.UNREPLICATE):
        # Both give an Optimizer; only .replicate() a replicated one.
        plain = (self.base or self).is_optimizer(func.value)
        if self.base is not None and func.attr == _members.UNREPLICATE:
          return None
        return True if plain else None
      if isinstance(func, ast.Attribute) and func.attr in (
          _members.APPLY_GRADIENT, 'replace', _members.RESTORE_STATE):
        # A step, a struct's copy with fields replaced, or one restored
        # from a state dict: an Optimizer.
        return True if self.is_optimizer(func.value, scope) else None
      return None
    return True if self.is_optimizer(value, scope) else None

  def _returned(self, call, scope):
    """What a call to a module function returns: True, a tuple, or None.

    A function whose result flows back into itself (directly or through
    other functions: ``return get_mesh(x.sharding)``) is being asked about
    already; that inner question proves nothing (None), so the answer
    rests on its other returns and the walk ends.
    """
    function = self._callee(call, scope)
    if function is None or function in self._returns_open:
      return None
    if function in self._returned_memo:
      return self._returned_memo[function]
    self._returns_open.add(function)
    try:
      inner = self.scopes[function]
      returns = [n.value for n in self._own_nodes(function)
                 if isinstance(n, ast.Return)]
      if not returns or any(r is None for r in returns):
        kind = None
      else:
        kinds = [self._kind(value, inner) for value in returns]
        kind = kinds[0] if all(k == kinds[0] for k in kinds) else None
    finally:
      self._returns_open.discard(function)
    if not self._returns_open and self._solved:
      self._returned_memo[function] = kind
    return kind

  def returned_kind(self, function):
    """True where every return of the module function ``function`` is an
    optimizer, the tuple of element kinds where every return is a tuple
    of those kinds holding one (proven in this module), else None."""
    returns = _names.own_returns(function)
    if not returns or None in returns:
      return None
    kinds = [self._kind(value, self.scopes[function]) for value in returns]
    kind = kinds[0]
    if not all(k == kind for k in kinds):
      return None
    return kind if kind is True or (isinstance(kind, tuple) and
                                    True in kind) else None

  def returns_optimizer(self, function) -> bool:
    """Every return of the module function ``function`` is an optimizer
    (proven in this module; what its callers pass proves nothing here)."""
    return self.returned_kind(function) is True

  def _callee(self, call, scope):
    """The module function a call runs (directly or via an alias), or None."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
      return None
    name = call.func.id
    binding = self._binding_scope(scope, name)
    bound = self.aliases.get((binding, name))
    if bound is not None:
      return self.functions[bound.name]
    # (a local name shadows any module function)
    return self.functions[name] if self._sees_function(scope, name) else None

  @staticmethod
  def _own_nodes(function):
    return list(_walk.scope_nodes(function))

  def _lookup(self, scope, name) -> Optional[_Scope]:
    """The innermost scope (below module level) binding ``name``."""
    while scope is not None and scope.parent is not None:
      if name in scope.bindings:
        return scope
      scope = scope.parent
    return None

  # -------------------------------------------------------------- queries
  def scope_of(self, node) -> _Scope:
    return self._scope_of.get(node) or next(
        s for s in self.scopes.values() if s.parent is None)

  def binding_scope_of(self, node, name) -> Optional[_Scope]:
    """The scope whose binding of ``name`` a read at ``node`` sees."""
    return self._binding_scope(self.scope_of(node), name)

  def is_optimizer(self, node, scope=None) -> bool:
    """True when ``node`` evaluates to a legacy ``Optimizer`` on every path."""
    if scope is None:
      scope = self.scope_of(node)
    if isinstance(node, ast.Name):
      while scope is not None:
        if node.id in scope.bindings:
          return (scope, node.id) in self.alive
        scope = scope.parent
      return False
    if isinstance(node, ast.Attribute):
      # Also of a call's result (``jax.device_get(state).optimizer``): every
      # class declaring the field says what it holds, whatever gives it.
      return self.base is None and (self._field_holds(node.attr) or (
          self._contested(node.attr) and self.holds_field(
              node.value, node.attr, scope)))
    if isinstance(node, ast.Call):
      return self._kind(node, scope) is True
    if isinstance(node, ast.Subscript):
      return self.base is None and self._loaded_back(node, scope)
    return False

  # ------------------------------------------------ dicts saved as trees
  def tree_verdict(self, value):
    """The ``_legacy_trees`` verdict on the dict entry ``value`` is (None
    where it is no constant-keyed entry of a dict)."""
    parent = self._parents.get(value)
    entry = _legacy_trees.entry_of(value, parent, self._parents.get(parent))
    if entry is None:
      return None
    if entry not in self._tree_verdicts:
      self._tree_verdicts[entry] = self._tree_checker.verdict(
          value, entry[0], entry[1], self._parents)
    return self._tree_verdicts[entry]

  def _loaded_back(self, subscript, scope) -> bool:
    """``loaded['opt']`` read back out of a tree made from a dict holding
    an optimizer (``_legacy_trees``): an optimizer once rewritten."""
    key = subscript.slice
    function = scope.node
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and
            isinstance(subscript.value, ast.Name) and isinstance(
                function, (ast.FunctionDef, ast.AsyncFunctionDef))):
      return False
    for value in self._tree_entries(function).get(key.value, ()):
      verdict = self.tree_verdict(value)
      if verdict.display is not None and any(
          read is subscript for read in verdict.display.loaded_back):
        return self.is_optimizer(value, scope)
    return False

  def tree_read_why(self, name_node) -> Optional[str]:
    """Why a read by key bound to ``name_node``'s name is not the
    optimizer read back out of a dict saved as a tree, where its function
    puts an optimizer into a dict under that key (else None)."""
    scope = self.binding_scope_of(name_node, name_node.id)
    if scope is None or not isinstance(scope.node, (ast.FunctionDef,
                                                    ast.AsyncFunctionDef)):
      return None
    reads = []
    for value in scope.bindings.get(name_node.id, ()):
      if isinstance(value, tuple) and value[0] == 'item':
        value = value[1]
      if isinstance(value, ast.AST):
        reads += [n for n in ast.walk(value) if isinstance(n, ast.Subscript)
                  and isinstance(n.slice, ast.Constant)]
    for value in reads:
      if self._loaded_back(value, scope):
        continue
      for entry in self._tree_entries(scope.node).get(value.slice.value, ()):
        verdict = self.tree_verdict(entry)
        if verdict.why is not None:
          return (f'`{ast.unparse(value)[:40]}` is not read back from a dict '
                  f'saved as a tree: {verdict.why}')
    return None

  def _tree_entries(self, function) -> dict:
    """key -> the names and fields ``function`` puts into dicts under that
    constant key (where a read by the key may give one back)."""
    if function not in self._tree_entries_of:
      entries: dict = {}
      for node in _walk.scope_nodes(function):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(
            node.ctx, ast.Load):
          parent = self._parents.get(node)
          entry = _legacy_trees.entry_of(node, parent,
                                         self._parents.get(parent))
          if entry is not None:
            entries.setdefault(entry[1], []).append(node)
      self._tree_entries_of[function] = entries
    return self._tree_entries_of[function]

  def step_signature(self, factory_name) -> Optional['StepSignature']:
    """What the step module factory ``factory_name`` returns takes and
    gives, where that involves an optimizer; else None."""
    if factory_name not in self.returned_steps:
      return None
    step = self.functions[self.returned_steps[factory_name][0]]
    kind = self.returned_kind(step)
    arguments = step.args.posonlyargs + step.args.args
    proven = tuple(a.arg for a in arguments
                   if (self.scopes[step], a.arg) in self.alive)
    if kind is None and not proven:
      return None
    overrides = any(sets_hyper_params(n) for n in self._own_nodes(step))
    return StepSignature(step, kind, proven, overrides)

  def foreign_step_of(self, call) -> Optional['StepSignature']:
    """The signature of another module's step that ``call`` runs through
    a name bound to its factory's call."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
      return None
    scope = self._binding_scope(self.scope_of(call), call.func.id)
    step = self.foreign_steps.get((scope, call.func.id))
    if step is None and scope is not None and self.base is None:
      step = self._step_parameter(scope, call.func.id)
    return step

  def argument_to_foreign_step(self, call, argument) -> Optional[bool]:
    """For a call of another module's step: whether ``argument`` goes to
    a parameter that module proves an optimizer (None: not such a call,
    or the argument binds no parameter)."""
    step = self.foreign_step_of(call)
    if step is None:
      return None
    parameter = parameter_of(step.node, call, argument)
    return None if parameter is None else parameter in step.proven

  def tuple_kind(self, call) -> Optional[tuple]:
    """The element kinds of the tuple ``call`` returns, or None."""
    kind = self._kind(call, self.scope_of(call))
    return kind if isinstance(kind, tuple) else None

  def _kept_argument(self, call) -> Optional[ast.AST]:
    """The argument a ``_SAME_KIND`` call gives back in kind (by its
    keyword or position), or None."""
    position, keyword = _SAME_KIND[self.names.resolve(call.func)]
    argument = next((k.value for k in call.keywords if k.arg == keyword),
                    None)
    if argument is None and position < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[:position + 1]):
      argument = call.args[position]
    return argument

  def keeps_kind(self, call, argument) -> bool:
    """``argument`` is what ``call`` gives back in kind (``replicate(x)``,
    ``restore_checkpoint(d, x)``): its result is an optimizer in turn."""
    resolved = self.names.resolve(call.func)
    if resolved not in _SAME_KIND or any(
        isinstance(a, ast.Starred) for a in call.args):
      return False
    kept = self._kept_argument(call)
    if kept is argument:
      return True
    position = _SAME_KIND[resolved][0]
    return resolved in _SAME_KIND_REST and kept is not None and any(
        a is argument for a in call.args[position + 1:]) and (
            self.is_optimizer(kept))

  def argument_proven(self, call, argument) -> bool:
    """``argument`` of ``call`` goes to a parameter of a function of this
    module (called by name or through a jit/pmap/partial alias) that this
    flow proves an optimizer: its uses there are rewritten with it."""
    scope = self.scope_of(call)
    function = self._callee(call, scope)
    if function is None:
      return False
    bound = self.aliases.get((self._binding_scope(scope, call.func.id),
                              call.func.id))
    parameter = parameter_of(function, call, argument,
                             len(bound.args) if bound else 0)
    return parameter is not None and (self.scopes[function],
                                      parameter) in self.alive

  # ------------------------------------------- what holds an optimizer
  def holds_optimizer(self, node, scope=None) -> bool:
    """``node`` is an optimizer, or holds one, on every path: an element
    of a tuple, list or dict display (not an entry kept in flax.optim's
    layout as a tree, ``_legacy_trees``), a holder with an optimizer
    field (``holds_field``), followed through names, ``.replace``, calls
    that keep their argument's kind, the returns of this module's
    functions and the parameters every call in this module passes such a
    value to. What a restore into it gives back holds a migrated
    optimizer."""
    scope = self.scope_of(node) if scope is None else scope
    if self.base is not None:
      return False
    if self.is_optimizer(node, scope):
      return True
    if isinstance(node, (ast.Tuple, ast.List)):
      return any(self.holds_optimizer(e, scope) for e in node.elts)
    if isinstance(node, ast.Dict):
      return any(v is not None and not self._kept_as_tree(v) and
                 self.holds_optimizer(v, scope) for v in node.values)
    if any(self.holds_field(node, field, scope)
           for field in self._optimizer_fields()):
      return True
    if isinstance(node, ast.Name):
      binding = self._binding_scope(scope, node.id)
      if binding is None:
        return False
      reaching = self._reaching_value(node, binding)
      if reaching is not None:
        return self.holds_optimizer(reaching, binding)
      return self._asking((binding, node.id), lambda: all(
          self._binding_holds_optimizer(binding, value)
          for value in binding.bindings[node.id]))
    if not isinstance(node, ast.Call):
      return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ('replace',
                                                         '_replace'):
      return self.holds_optimizer(func.value, scope)
    route = self.names.resolve(func)
    if route in _SAME_KIND or route in _restores.ROUTES:
      # (a restore gives back its template's structure)
      kept = self._kept_argument(node) if route in _SAME_KIND else (
          _restores.target_of(node, route))
      return kept is not None and self.holds_optimizer(kept, scope)
    return self._returns_holding(node, scope, None)

  def may_hold_optimizer(self, node) -> bool:
    """``node`` holds an optimizer on some path (``holds_optimizer``;
    for a name, one of its bindings): what a restore given it may have
    to read from a checkpoint of flax.optim's layout."""
    if self.holds_optimizer(node):
      return True
    binding = isinstance(node, ast.Name) and self.binding_scope_of(
        node, node.id)
    return bool(binding) and any(
        self._binding_holds_optimizer(binding, value)
        for value in binding.bindings[node.id])

  def runs_module_function(self, call) -> bool:
    """``call`` runs a function of this module (by name or an alias)."""
    return self._callee(call, self.scope_of(call)) is not None

  def _reaching_value(self, read, binding) -> Optional[ast.AST]:
    """The value the name ``read`` has where it is read, where one
    assignment gives it there: ``name = value`` earlier in the block of
    the read's statement or of a statement holding it (an ``if``, a
    ``with``, a ``try``'s body: not a loop, where a later binding may
    reach it), in its
    function, and nothing between binds the name (``state =
    TrainState(...); ...; restore(d, state)``, whatever the name holds
    later). None otherwise."""
    statement = _legacy_trees.statement_of(self._parents, read)
    if statement is None or self._scope_of.get(statement) is not binding:
      return None  # (the name is bound in another function than read)
    while True:
      block = self._parents.get(statement)
      field = next((f for f in ('body', 'orelse') if statement in getattr(
          block, f, ())), None)
      if field is None:
        return None
      body = getattr(block, field)
      for earlier in reversed(body[:body.index(statement)]):
        if isinstance(earlier, ast.Assign) and len(earlier.targets) == 1 and (
            isinstance(earlier.targets[0], ast.Name)) and (
                earlier.targets[0].id == read.id):
          return earlier.value
        if self._may_bind(earlier, read.id):
          return None  # bound (or possibly bound) between
      # Up to the statement holding the block, where nothing of it ran
      # before: an ``if``'s test, a ``with``'s items, a ``try``'s body.
      if isinstance(block, ast.If):
        ran_before = [block.test]
      elif isinstance(block, (ast.With, ast.AsyncWith)):
        ran_before = block.items
      elif isinstance(block, ast.Try) and field == 'body':
        ran_before = []
      else:
        return None  # a loop's body, a function's, the module's
      if any(self._may_bind(node, read.id) for node in ran_before):
        return None
      statement = block

  def _may_bind(self, statement, name) -> bool:
    """``statement`` (or one nested in it) may bind ``name``."""
    return any((isinstance(n, ast.Name) and n.id == name and not isinstance(
        n.ctx, ast.Load)) or getattr(n, 'name', None) == name or (
            isinstance(n, _OTHER_BINDINGS) and name in self._bound_names(n))
               for n in ast.walk(statement))

  def _asking(self, key, question) -> bool:
    """``question()``, or True where it is being asked already (a value
    flowing back into itself: its other sources decide)."""
    if key in self._holding_open:
      return True
    self._holding_open.add(key)
    try:
      return question()
    finally:
      self._holding_open.discard(key)

  def _kept_as_tree(self, value) -> bool:
    verdict = self.tree_verdict(value)
    return verdict is not None and verdict.display is not None

  def _optimizer_fields(self) -> frozenset:
    """The optimizer fields of this module's and the project's holders."""
    model = self.names.model
    fields = {f for found in self.holder_classes.values() for f in found}
    if model is not None:
      fields |= {holder.field for holder in model.holders}
    return frozenset(fields)

  def _returns_holding(self, call, scope, index) -> bool:
    """Every return of the module function ``call`` runs holds an
    optimizer (``index``: its element of the tuple returned)."""
    function = self._callee(call, scope)
    if function is None:
      model = self.names.model
      return model is not None and model.returns_holding(call, self.names,
                                                         index)
    return self.function_returns_holding(function, index)

  def function_returns_holding(self, function, index=None) -> bool:
    """Every return of this module's ``function`` holds an optimizer
    (``index``: its element of the tuple returned)."""
    returns = _names.own_returns(function)
    inner = self.scopes[function]
    return bool(returns) and None not in returns and self._asking(
        (function, index), lambda: all(
            self._element_holds(value, inner, index) for value in returns))

  def _element_holds(self, value, scope, index) -> bool:
    if index is None:
      return self.holds_optimizer(value, scope)
    if isinstance(value, (ast.Tuple, ast.List)):
      return index < len(value.elts) and not isinstance(
          value.elts[index], ast.Starred) and self.holds_optimizer(
              value.elts[index], scope)
    return isinstance(value, ast.Call) and self._returns_holding(
        value, scope, index)

  def _binding_holds_optimizer(self, binding, value) -> bool:
    if isinstance(value, str):  # 'unknown'
      return False
    if isinstance(value, tuple) and value[0] == 'item':
      _, inner, index = value
      return self._element_holds(inner, binding, index)
    if isinstance(value, tuple) and value[0] == 'param':
      return self._parameter_holding(binding, value[1], value[2])
    return self.holds_optimizer(value, binding)

  def _parameter_holding(self, binding, function, name) -> bool:
    """Every call of the module function ``function`` passes a value
    holding an optimizer as its parameter ``name``; none is elsewhere."""
    if (binding, name) in self.alive:
      return True  # proven an optimizer (annotated, or by its calls)
    annotation = binding.annotated.get(name)
    if annotation is not None:
      return bool(self._class_fields(annotation))
    if self.functions.get(function.name) is not function or (
        function.name in self.escaped):
      return False
    model = self.names.model
    elsewhere = None if model is None else model.passes_holding(
        function, self.names.path, name)
    sites = self._sites(function.name)
    if elsewhere is False or sites is None or (not sites and not elsewhere):
      return False
    return _every_site_passes(sites, function, name, binding.params[name],
                              self.holds_optimizer)

  def optimizer_or_dict(self, node) -> bool:
    """``node`` is an optimizer or a dict display on every path (a name:
    each of its bindings is one or the other).

    A dict stored where an optimizer goes (``{'target': params}`` as a
    restored checkpoint's stand-in) is read only as a dict: none of the
    Optimizer attributes migrate rewrites exists on a dict, so its readers
    do the same before and after.
    """
    if isinstance(node, ast.Dict) or self.is_optimizer(node):
      return True
    if not isinstance(node, ast.Name):
      return False
    scope = self._binding_scope(self.scope_of(node), node.id)
    if scope is None:
      return False
    return all(isinstance(value, ast.Dict) or self._binding_holds(
        scope, node.id, value) for value in scope.bindings[node.id])

  def member_use(self, node: ast.Attribute, called: bool) -> Optional[str]:
    """The construct of the attribute ``node`` where it reads a legacy
    object this flow proves (``called``: it is a call's callee): a member
    of an Optimizer (``optimizer_use``), of a definition (``optimizer_def``)
    or a definition's ``create`` passed as a value (``create``); None for
    anything else. scan reports each; migrate rewrites or leaves each."""
    if self.is_optimizer(node.value):
      return _members.OPTIMIZER_USE
    if not self.is_def(node.value):
      return None
    if node.attr != _members.CREATE:
      return _members.OPTIMIZER_DEF
    return None if called else _members.CREATE

  def is_def(self, node, scope=None) -> bool:
    """True when ``node`` is a flax.optim OptimizerDef on every path."""
    scope = self.scope_of(node) if scope is None else scope
    if isinstance(node, ast.Call):
      function = self._callee(node, scope)
      if function is not None:  # a factory of this module
        return self._returns_def(function)
      if isinstance(node.func, ast.Name) and (
          node.func.id in self.names.def_factories):
        return False  # a local name shadows the factory
      return self.names.is_def(node)
    if not isinstance(node, ast.Name):
      return False
    binding = self._binding_scope(scope, node.id)
    if binding is None or (binding, node.id) in self._defs_open:
      return False  # unbound, or bound to itself (``a = b; b = a``)
    self._defs_open.add((binding, node.id))
    try:  # ``backbone_def = other_def``: the other name's definitions
      return all(isinstance(v, (ast.Call, ast.Name)) and self.is_def(
          v, binding) for v in binding.bindings[node.id])
    finally:
      self._defs_open.discard((binding, node.id))

  def _returns_def(self, function) -> bool:
    """Every return of a module function is an OptimizerDef."""
    if function in self._factories_open:
      return False  # recursion proves nothing
    self._factories_open.add(function)
    try:
      returns = _names.own_returns(function)
      return bool(returns) and all(
          r is not None and self.is_def(r, self.scopes[function])
          for r in returns)
    finally:
      self._factories_open.discard(function)


def _every_site_passes(sites, function, name: str, position: int,
                       holds) -> bool:
  """Each call in ``sites`` passes ``function``'s parameter ``name`` (at
  ``position``), by keyword or by position, a value ``holds(value, scope)``
  accepts."""
  positional = len(function.args.posonlyargs) + len(function.args.args)
  for site in sites:
    passed = site.keywords.get(name)
    if passed is None and position < positional and position < len(
        site.args):
      passed = site.args[position]
    if passed is None or not holds(*passed):
      return False
  return True
