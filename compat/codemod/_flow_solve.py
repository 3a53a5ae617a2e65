"""An optimizer flow's fixpoint: which bindings hold an optimizer on every
path, which functions return one, which names alias a step. Stdlib only."""

import ast
import collections
from typing import Optional

from compat.codemod import _flow_scopes
from compat.codemod import _flow_values
from compat.codemod import _members
from compat.codemod import _serialization_helpers
from compat.codemod import _state_layout
from compat.codemod import _walk


class FlowSolver(_flow_scopes.FlowScopes):
  """Solves the greatest fixpoint over the collected bindings. Part of
  ``_flow.OptimizerFlow``, whose ``__init__`` sets the state."""

  # ---------------------------------------------------------------- solve
  def _solve(self):
    parents = self._parents
    wrapped = self._collect_aliases() | self._followed_step_references()
    self._resolve_differentiated()
    for name in self._loads:
      parent = parents.get(name)
      if name not in wrapped and not (isinstance(parent, ast.Call) and
                                      parent.func is name):
        self.escaped.add(name.id)  # e.g. passed on to another function
    for function in self.functions.values():
      if not all(self._is_wrapper_decorator(d)
                 for each in self.defs_named(function.name)
                 for d in each.decorator_list):
        self.escaped.add(function.name)
    for (_, alias), bound in self.aliases.items():
      if alias in self.escaped:  # the alias itself goes where we cannot see
        self.escaped.add(bound.name)
    self._fixpoint()
    while self.refute_dict_givers():  # (rare: solved again without them)
      self._fixpoint()

  def _fixpoint(self):
    """Every binding starts alive; those not provably holding an
    optimizer drop out until none does."""
    self.alive = {(scope, name) for scope in self.scopes.values()
                  for name in scope.bindings}
    self._start_self_attributes()
    changed = True
    while changed:
      changed = self._prune_self_attributes()
      for scope in self.scopes.values():
        for name, values in scope.bindings.items():
          if (scope, name) in self.alive and not all(
              self._binding_holds(scope, name, v) for v in values):
            self.alive.discard((scope, name))
            changed = True
    self._end_self_attributes()

  def _factory_of_step(self, function) -> Optional[str]:
    """The name of the module function returning the step ``function``."""
    return next((factory for factory, (step, _) in self.returned_steps.items()
                 if self.functions.get(step) is function), None)

  def is_followed_step(self, function) -> bool:
    """``function`` is the step of a factory here whose calls in other
    modules are all followed (``_step_values``, ``_step_calls``)."""
    factory = self._factory_of_step(function)
    model = self.names.model
    return factory is not None and model is not None and (
        model.factory_followed(self.names, factory))

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
    consumed = set()
    for (scope, name), values in self._alias_groups().items():
      if len(values) > 1:
        bounds = self._alike_bounds(scope, values)
        if bounds:
          self.aliases[(scope, name)] = bounds[0]
          consumed.update(bound.reference for bound in bounds)
        continue
      value = values[0]
      if isinstance(value, ast.Name):
        continue  # a plain rebinding: the name escapes as before
      if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and (
          value.func.id in steps) and self._lookup(
              scope, value.func.id) is None:
        step, reference = steps[value.func.id]
        self.aliases[(scope, name)] = _flow_values.Bound(step, reference, (),
                                                         {})
        continue
      bound = self._unwrap(value, scope)
      if bound is not None:
        self.aliases[(scope, name)] = bound
        continue
      step = None if model is None or not isinstance(value, ast.Call) or (
          self._callee(value, scope) is not None) else model.foreign_step(
              value, self.names)
      if step is not None:
        self.foreign_steps[(scope, name)] = step
    return consumed | {bound.reference for bound in self.aliases.values()}

  def _followed_step_references(self) -> set:
    """The ``return step`` of each step factory here whose calls in other
    modules the project's model follows (``_step_values``): its callers
    are known, so it is no escape."""
    model = self.names.model
    if model is None:
      return set()
    return {reference for factory, (_, reference) in self.returned_steps.items()
            if model.factory_followed(self.names, factory)}

  def step_bound_to(self, name) -> Optional[_flow_values.StepSignature]:
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

  def _step_parameter(
      self, scope, name) -> Optional[_flow_values.StepSignature]:
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

  def _binding_scope(self, scope, name) -> Optional[_flow_values.Scope]:
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
      spread = self.spread_arguments(call, scope)
      if spread is None or any(k.arg is None for k in call.keywords):
        return None
      merged = dict(keywords)
      merged.update({k.arg: (k.value, scope) for k in call.keywords})
      resolved.append(_flow_values.Site(args + spread, merged))
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
    differentiated = self.differentiated_sites(function)
    if differentiated is not None:  # (told by its def, not its name)
      return _flow_values.every_site_passes(
          differentiated, function, name, self.scopes[function].params[name],
          self._value_holds)
    if function.name in self.escaped or function.name not in self.functions:
      return False
    if not self.is_module_function(function) or (
        _serialization_helpers.role_of(function, name, self.names)):
      return False  # (a helper's callers give it flax.optim's tree)
    # What the calls from other modules pass (the project's model: None
    # where no other module names the function).
    model = self.names.model
    elsewhere = None if model is None else model.param_verdict(
        self.names, function.name, name)
    factory = self._factory_of_step(function)
    if factory is not None and model is not None and (
        model.step_call_verdict(self.names, factory, name)):
      elsewhere = True  # a step's calls elsewhere (refuted: each one says)
    if elsewhere is False:
      return False
    sites = self._sites(function.name)
    if sites is None or (not sites and not elsewhere):
      return False
    return _flow_values.every_site_passes(sites, function, name,
                              self.scopes[function].params[name],
                              self._value_holds)

  def _value_holds(self, value, scope) -> bool:
    if isinstance(value, tuple) and value[0] == 'item':
      return self._kind(value, scope) is True
    return self.is_optimizer(value, scope)

  def _kind(self, value, scope):
    """True (an optimizer), a tuple of element kinds (a tuple holding an
    optimizer nested in it is one of them), or None (unknown)."""
    if isinstance(value, tuple) and value[0] == 'item':  # one unpacked
      return _flow_values.element_kind(self._kind(value[1], scope), value[2])
    if isinstance(value, (ast.Tuple, ast.List)):
      return tuple(self._element_kind(e, scope) for e in value.elts)
    if isinstance(value, ast.Call):
      differentiated = self.grad_call_kind(value)
      if differentiated is not False:
        return differentiated
      called = self.names.resolve(value.func)
      if called in _flow_values.SAME_KIND:
        argument = self._kept_argument(value)
        return None if argument is None else self._kind(argument, scope)
      restored = _serialization_helpers.restored(
          value, self._callee(value, scope), self.names)
      if restored is not None:  # the user's restore into an optimizer
        return True if self.base is None and self._kind(
            restored, scope) is True else None
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
      jitted = _flow_values.jitted_create(value, self.names)
      if jitted is not None:
        return True if self.base is None and self.is_def(
            jitted.value, scope) else None
      func = value.func
      if self.base is None and called in _flow_values.OPTIMIZER_CLASSES:
        # optim.Optimizer(opt_def, state, target): one, if opt_def is.
        given = _state_layout.hand_built_parts(value)
        return True if given is not None and self.is_def(
            given[_members.OPTIMIZER_DEF], scope) else None
      if isinstance(func, ast.Attribute) and func.attr == _members.CREATE:
        return True if self.base is None and self.is_def(
            func.value, scope) and _flow_values.creates_whole(value) else None
      if isinstance(func, ast.Attribute) and func.attr in (_members.REPLICATE,
                                                           _members.UNREPLICATE):
        # Both give an Optimizer; only .replicate() a replicated one.
        plain = (self.base or self).is_optimizer(func.value)
        if self.base is not None and func.attr == _members.UNREPLICATE:
          return None
        return True if plain else None
      if isinstance(func, ast.Attribute) and func.attr in (
          _members.APPLY_GRADIENT, _members.REPLACE, _members.RESTORE_STATE):
        # A step, a struct's copy with fields replaced, or one restored
        # from a state dict: an Optimizer.
        return True if self.is_optimizer(func.value, scope) else None
      return None
    return True if self.is_optimizer(value, scope) else None

  def _element_kind(self, element, scope):
    """An element's kind in a tuple display: True, the kind of a tuple
    display nested there holding an optimizer, else ``ANY``."""
    if self.is_optimizer(element, scope):
      return True
    if isinstance(element, (ast.Tuple, ast.List)):
      kind = self._kind(element, scope)
      if _flow_values.holds_optimizer(kind):
        return kind
    return _flow_values.ANY

  def _returned(self, call, scope):
    """What a call to a module function returns: True, a tuple, or None
    (the same of every def the call may run, ``defs_named``)."""
    function = self._callee(call, scope)
    if function is None:
      return None
    kinds = [self._returned_by(each)
             for each in self.defs_named(function.name)]
    return kinds[0] if all(k == kinds[0] for k in kinds) else None

  def _returned_by(self, function):
    """What every return of ``function`` gives: True, a tuple, or None.

    A function whose result flows back into itself (directly or through
    other functions: ``return get_mesh(x.sharding)``) is being asked about
    already; that inner question proves nothing (None), so the answer
    rests on its other returns and the walk ends.
    """
    if function in self._returns_open:
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

  def _own_nodes(self, function) -> list:
    """The nodes of ``function``'s own scope, walked once: the fixpoint
    asks for a function's returns again on every round."""
    found = self._own_nodes_of.get(function)
    if found is None:
      found = self._own_nodes_of[function] = list(
          _walk.scope_nodes(function, self._children))
    return found

  def _lookup(self, scope, name) -> Optional[_flow_values.Scope]:
    """The innermost scope (below module level) binding ``name``."""
    while scope is not None and scope.parent is not None:
      if name in scope.bindings:
        return scope
      scope = scope.parent
    return None
