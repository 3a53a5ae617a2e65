"""An optimizer flow's first part: a module's scopes and their bindings,
the dataclass fields that hold an optimizer, the functions reached
through wrappers and partials. Stdlib only."""

import ast
import copy
from typing import Optional

from compat.codemod import _flow_values
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _walk

# The nodes that bind a name, define a scope or declare a field
# (``FlowScopes._collect_binding``).
_BINDERS = frozenset((
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
    ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor,
    ast.With, ast.AsyncWith, ast.NamedExpr, ast.ExceptHandler,
    ast.comprehension, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal))


def _spelled(bound_values) -> tuple:
  """Bound arguments ((node, scope), ...) as their code and scope."""
  return tuple((ast.dump(node), id(scope)) for node, scope in bound_values)


# What ``_collect`` fills in: a module's scopes with their bindings, each
# node's scope, the names read, the calls, the classes' fields, the defs.
_COLLECTED = ('scopes', '_scope_of', '_loads', 'calls', '_grad_candidates',
              '_alias_candidates', 'fields', 'holder_classes',
              '_method_class', '_module_defs', 'functions')


class FlowScopes:
  """Collects each scope's bindings (``OptimizerFlow`` solves them). Part of
  ``_flow.OptimizerFlow``, whose ``__init__`` sets the state."""

  # -------------------------------------------------------------- collect
  def _collect_module(self, tree):
    """``_collect`` of the whole module, done once per tree and names
    (``_walk.derived``: the project's phases build a flow of a module
    again and again, each collecting the same), each flow given its own
    copy of the tables (the scopes are shared: nothing changes them once
    collected). The replicated flow collects its own."""
    if self.base is not None:
      self._collect(tree, None)
      return
    collected = _walk.derived(tree, _Collection, self.names)
    for table in _COLLECTED:
      setattr(self, table, copy.copy(getattr(collected, table)))

  def _collect(self, node, parent):
    scope = _flow_values.Scope(node, parent)
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
    for child in _walk.scope_nodes(node, self._children):
      self._scope_of[child] = scope
      self._collect_node(child, scope)


  def _collect_node(self, child, scope):
    kind = type(child)  # (most nodes read, call or bind nothing: by class)
    if kind is ast.Name:
      if isinstance(child.ctx, ast.Load):
        self._loads.append(child)
      return
    if kind is ast.Call:
      if isinstance(child.func, ast.Name):
        self.calls.setdefault(child.func.id, []).append((child, scope))
      elif isinstance(child.func, ast.Call):  # ``jax.grad(f)(x)``?
        self._grad_candidates.append((child, scope))
      return
    if kind in _BINDERS:
      self._collect_binding(child, scope)

  def _collect_binding(self, child, scope):
    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
      scope.bindings.setdefault(child.name, []).append('unknown')
      if scope.parent is None:
        self._add_module_def(child)
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
        _flow_values.simple_name_bindings(target, child.value, pairs)
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

  def _collect_lambda(self, node, parent):
    scope = _flow_values.Scope(node, parent)
    self.scopes[node] = scope
    for arg in node.args.args + node.args.kwonlyargs:
      scope.bindings.setdefault(arg.arg, []).append('unknown')
    for child in _walk.scope_nodes(node, self._children):
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
    if isinstance(func, ast.Attribute) and func.attr in _members.COPY_METHODS:
      return self.holds_field(func.value, field, scope)
    if field in self._class_fields(func):
      return True  # the holder's class called
    if self.names.resolve(func) in _flow_values.SAME_KIND:
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

  def _unwrap(self, node, scope) -> Optional[_flow_values.Bound]:
    """The module function ``node`` wraps (partials, jit, pmap), or None."""
    if isinstance(node, ast.Name):
      if self._sees_function(scope, node.id):
        return _flow_values.Bound(node.id, node, (), {})
      return None
    if not isinstance(node, ast.Call) or not node.args or any(
        isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords):
      return None
    wrapper = self.names.resolve(node.func)
    if wrapper in _flow_values.WRAPPERS:
      return self._unwrap(node.args[0], scope)
    if wrapper != _flow_values.PARTIAL:
      return None
    inner = self._unwrap(node.args[0], scope)
    if inner is None:
      return None
    keywords = dict(inner.keywords)
    keywords.update({k.arg: (k.value, scope) for k in node.keywords})
    return inner._replace(
        args=inner.args + tuple((a, scope) for a in node.args[1:]),
        keywords=keywords)

  def _alias_groups(self) -> dict:
    """{(scope, name): [value, ...]} of the names each of whose bindings
    is a plain ``name = value`` (an alias candidate)."""
    groups: dict = {}
    for scope, name, value in self._alias_candidates:
      groups.setdefault((scope, name), []).append(value)
    return {key: values for key, values in groups.items()
            if len(values) == len(key[0].bindings[key[1]])}

  def _alike_bounds(self, scope, values) -> list:
    """The functions ``values`` wrap where every one wraps the same module
    function with the same spelled arguments (``train_pstep =
    jax.pmap(train_step, ...)`` once per section of a script): a call of
    the name then runs that function whichever binding it sees; else []."""
    if any(isinstance(value, ast.Name) for value in values):
      return []  # plain rebindings: the name escapes as before
    bounds = [self._unwrap(value, scope) for value in values]
    if any(b is None for b in bounds):
      return []
    spelled = {(b.name, _spelled(b.args), _spelled(b.keywords.values()),
                tuple(b.keywords)) for b in bounds}
    return bounds if len(spelled) == 1 else []

  def _add_module_def(self, node):
    """Registers a def of the top level; of several under one name, the
    last in the source is the one the name holds once the module has run
    (the walk meets them in any order)."""
    defs = self._module_defs.setdefault(node.name, [])
    defs.append(node)
    defs.sort(key=lambda d: d.lineno)
    self.functions[node.name] = defs[-1]

  def defs_named(self, name) -> list:
    """The module functions a call of ``name`` may run: the one registered
    under it, or every def of a name the module's top level binds by defs
    alone (a script redefining ``train_step`` section by section): which
    one a read sees depends on where it is, so what is proven of such a
    call must hold of each."""
    registered = self.functions.get(name)
    if registered is None:
      return []
    defs = self._module_defs.get(name, [])
    if len(defs) < 2 or registered is not defs[-1] or len(
        self._scope_of[registered].bindings.get(name, ())) != len(defs):
      return [registered]  # (a nested def registered, or another binding)
    return defs

  def is_module_function(self, function) -> bool:
    """``function`` is one a call of its name may run (``defs_named``)."""
    return any(d is function for d in self.defs_named(function.name))

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
          self.names.resolve(value.func) in _flow_values.WRAPPERS):
        value = value.args[0]
      if not isinstance(value, ast.Name):
        return None
      references.append(value)
    nested = {n.name: n for n in scope.node.body
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if not references or len({r.id for r in references}) != 1:
      return None
    name = references[0].id
    if name not in nested or scope.bindings.get(name) != ['unknown'] or not (
        all(self._is_wrapper_decorator(d)
            for d in nested[name].decorator_list)):
      return None  # (``@jax.pmap`` keeps what it is called with)
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

  def _is_wrapper_decorator(self, decorator) -> bool:
    """``@jax.jit``, ``@jax.pmap(...)``, ``@functools.partial(jax.jit, ..)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    path = self.names.resolve(target)
    if path == _flow_values.PARTIAL and isinstance(decorator, ast.Call):
      return bool(decorator.args) and self.names.resolve(
          decorator.args[0]) in _flow_values.WRAPPERS
    return path in _flow_values.WRAPPERS


class _Collection(FlowScopes):
  """A module's ``_collect``, on its own: what every flow of the module
  starts from (``FlowScopes._collect_module``)."""

  def __init__(self, tree, names):
    self.names = names
    self._children = _walk.children(tree)
    for table in _COLLECTED:
      setattr(self, table, [] if table in (
          '_loads', '_grad_candidates', '_alias_candidates') else {})
    self._collect(tree, None)
