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
escapes, e.g. into ``jax.pmap(functools.partial(step, ...))``, has unknown
callers). What survives is an optimizer on every path. Stdlib only.
"""

import ast
from typing import Optional

_ANY = object()  # an element of a returned tuple that is not an optimizer
# Decorators that keep a function's callers as they are.
_WRAPPERS = ('jax.jit', 'jax.named_call')
# Calls that return their first argument's kind (a pytree moved or
# replicated across devices): an optimizer in, an optimizer out.
_SAME_KIND = ('jax.device_put', 'flax.jax_utils.replicate',
              'flax.jax_utils.unreplicate')


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


class _Scope:

  def __init__(self, node, parent):
    self.node, self.parent = node, parent
    self.bindings: dict[str, list] = {}  # name -> [value or 'unknown']
    self.params: dict[str, int] = {}  # parameter name -> position
    self.annotated: dict[str, ast.AST] = {}


class OptimizerFlow:
  """Proves which expressions evaluate to a legacy ``Optimizer``."""

  def __init__(self, tree: ast.Module, names):
    self.names = names  # a _scan_names.ModuleNames
    self.scopes: dict[ast.AST, _Scope] = {}
    self.functions: dict[str, ast.AST] = {}  # module-level defs by name
    self.escaped: set[str] = set()  # functions used other than by a call
    self.calls: dict[str, list] = {}  # function name -> [(call, scope)]
    self.fields: dict[str, bool] = {}  # dataclass field -> is an optimizer
    self._scope_of: dict[ast.AST, _Scope] = {}
    self._loads: list[ast.Name] = []  # every name read: escape candidates
    self._collect(tree, None)
    self._solve()

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
    for child in self._body_nodes(node):
      self._scope_of[child] = scope
      self._collect_node(child, scope)

  def _body_nodes(self, node):
    """Nodes of ``node``'s own scope (nested functions become scopes)."""
    stack = list(ast.iter_child_nodes(node))
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      stack = list(node.body)
    while stack:
      child = stack.pop()
      yield child
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                            ast.Lambda, ast.ClassDef)):
        continue
      stack.extend(ast.iter_child_nodes(child))

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
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
          self._collect(item, scope)
    elif isinstance(child, ast.Lambda):
      self._collect_lambda(child, scope)
    elif isinstance(child, ast.Assign):
      pairs = []
      for target in child.targets:
        _simple_name_bindings(target, child.value, pairs)
      for name, value in pairs:
        if name is not None:
          scope.bindings.setdefault(name, []).append(value)
    elif isinstance(child, ast.AnnAssign) and isinstance(child.target,
                                                         ast.Name):
      if self._is_optimizer_annotation(child.annotation):
        scope.annotated[child.target.id] = child.annotation
      scope.bindings.setdefault(child.target.id, []).append(
          child.value if child.value is not None else 'unknown')
    elif isinstance(child, (ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                            ast.AsyncWith, ast.NamedExpr, ast.ExceptHandler,
                            ast.comprehension, ast.Import, ast.ImportFrom,
                            ast.Global, ast.Nonlocal, ast.Delete)):
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
    for child in self._body_nodes(node):
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
        ast.Delete: lambda n: n.targets,
        ast.With: lambda n: [i.optional_vars for i in n.items],
        ast.AsyncWith: lambda n: [i.optional_vars for i in n.items],
    }[type(node)](node)
    return [n.id for t in targets if t is not None for n in ast.walk(t)
            if isinstance(n, ast.Name)]

  def _is_optimizer_annotation(self, node) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      try:
        node = ast.parse(node.value, mode='eval').body
      except SyntaxError:
        return False
    return self.names.resolve(node) == 'flax.optim.Optimizer'

  # ---------------------------------------------------------------- solve
  def _solve(self):
    parents = {}
    for scope in self.scopes.values():
      for node in ast.walk(scope.node):
        for child in ast.iter_child_nodes(node):
          parents.setdefault(child, node)
    for name in self._loads:
      parent = parents.get(name)
      if not (isinstance(parent, ast.Call) and parent.func is name):
        self.escaped.add(name.id)  # e.g. functools.partial(step, ...)
    for function in self.functions.values():
      for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else (
            decorator)
        if self.names.resolve(target) not in _WRAPPERS:
          self.escaped.add(function.name)
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

  def _binding_holds(self, scope, name, value) -> bool:
    if name in scope.annotated and self._is_optimizer_annotation(
        scope.annotated[name]):
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
    calls = self.calls.get(function.name, [])
    if not calls:
      return False
    position = self.scopes[function].params[name]
    positional = len(function.args.posonlyargs) + len(function.args.args)
    for call, scope in calls:
      if any(isinstance(a, ast.Starred) for a in call.args) or any(
          k.arg is None for k in call.keywords):
        return False
      passed = next((k.value for k in call.keywords if k.arg == name), None)
      if passed is None and position < positional and position < len(
          call.args):
        passed = call.args[position]
      if passed is None or not self._value_holds(passed, scope):
        return False
    return True

  def _value_holds(self, value, scope) -> bool:
    if isinstance(value, tuple) and value[0] == 'item':
      _, inner, index = value
      if isinstance(inner, (ast.Tuple, ast.List)):
        return index < len(inner.elts) and self._value_holds(
            inner.elts[index], scope)
      returned = self._returned(inner, scope)
      return (isinstance(returned, tuple) and index < len(returned) and
              returned[index] is True)
    return self.is_optimizer(value, scope)

  def _returned(self, call, scope):
    """What a call to a module function returns: True, a tuple, or None."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
      return None
    function = self.functions.get(call.func.id)
    if function is None or self._lookup(scope, call.func.id) is not None:
      return None
    inner = self.scopes[function]
    returns = [n.value for n in self._own_nodes(function)
               if isinstance(n, ast.Return)]
    if not returns or any(r is None for r in returns):
      return None
    kinds = []
    for value in returns:
      if isinstance(value, ast.Tuple):
        kinds.append(tuple(self.is_optimizer(e, inner) or _ANY
                           for e in value.elts))
      else:
        kinds.append(self.is_optimizer(value, inner))
    first = kinds[0]
    return first if all(k == first for k in kinds) else None

  def _own_nodes(self, function):
    return list(self._body_nodes(function))

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
      return (self.fields.get(node.attr) is True and not isinstance(
          node.value, ast.Call))
    if isinstance(node, ast.Call):
      func = node.func
      if isinstance(func, ast.Attribute):
        if func.attr == 'create' and self.is_def(func.value, scope) and (
            not node.keywords and len(node.args) == 1):
          return True
        if func.attr == 'apply_gradient':
          return self.is_optimizer(func.value, scope)
      if self.names.resolve(func) in _SAME_KIND and len(node.args) == 1:
        return self.is_optimizer(node.args[0], scope)
      return self._returned(node, scope) is True
    return False

  def is_def(self, node, scope=None) -> bool:
    """True when ``node`` is a flax.optim OptimizerDef on every path."""
    if isinstance(node, ast.Call):
      return self.names.is_def(node)
    if not isinstance(node, ast.Name):
      return False
    scope = self.scope_of(node) if scope is None else scope
    while scope is not None:
      values = scope.bindings.get(node.id)
      if values is not None:
        return all(isinstance(v, ast.Call) and self.names.is_def(v)
                   for v in values)
      scope = scope.parent
    return False
