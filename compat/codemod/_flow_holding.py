"""What holds an optimizer in a solved flow: a name, a field, an element of
a returned tuple, a dict kept as a tree. Stdlib only."""

import ast
from typing import Optional

from compat.codemod import _flow_queries
from compat.codemod import _flow_values
from compat.codemod import _legacy_trees
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _restores
from compat.codemod import _serialization_helpers
from compat.codemod import _walk


class FlowHolding(_flow_queries.FlowQueries):
  """Questions about values that hold (not only are) an optimizer. Part of
  ``_flow.OptimizerFlow``, whose ``__init__`` sets the state."""

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
    if isinstance(func, ast.Attribute) and func.attr in _members.COPY_METHODS:
      return self.holds_optimizer(func.value, scope)
    route = self.names.resolve(func)
    if route in _flow_values.SAME_KIND or route in _restores.ROUTES:
      # (a restore gives back its template's structure)
      kept = self._kept_argument(node) if route in _flow_values.SAME_KIND else (
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

  def runs_own_class_method(self, call) -> bool:
    """``call`` is ``self.method(...)`` in a method of a class of this
    module that defines ``method`` (``self`` its instance parameter, bound
    nowhere else in it): that class's own method, not another library's
    (``Trainer.restore_checkpoint`` called by its ``initialize_model``)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value,
                                                           ast.Name)):
      return False
    scope = self.scope_of(call)
    owner = self._method_class.get(id(scope.node))
    if owner is None or func.value.id != _names.instance_parameter(
        scope.node) or len(scope.bindings.get(func.value.id, ())) != 1:
      return False
    return any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and
               item.name == func.attr for item in owner.body)

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
            isinstance(n, _flow_values.OTHER_BINDINGS) and
            name in self._bound_names(n))
               for n in _walk.below(statement, self._children))

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
    if not self.is_module_function(function) or (
        function.name in self.escaped):
      return False
    model = self.names.model
    elsewhere = None if model is None else model.passes_holding(
        function, self.names.path, name)
    sites = self._sites(function.name)
    if elsewhere is False or sites is None or (not sites and not elsewhere):
      return False
    holds = self.holds_optimizer
    if _serialization_helpers.role_of(function, name, self.names):
      holds = self.holds_in_a_holder
    return _flow_values.every_site_passes(sites, function, name,
                                          binding.params[name], holds)

  def holds_in_a_holder(self, value, scope=None) -> bool:
    """``value`` holds an optimizer and is none itself: what a helper
    given an optimizer itself holds is flax.optim's tree of it."""
    return not self.is_optimizer(value, scope) and self.holds_optimizer(
        value, scope)

  def given_legacy_tree(self, node) -> bool:
    """``node`` reads a parameter of the function it is in that only goes
    to flax.serialization (``_serialization_helpers``), and a call in this
    module gives it an optimizer: flax.optim's tree of it, once migrated."""
    function = self.scope_of(node).node
    if not isinstance(node, ast.Name) or not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            _serialization_helpers.role_of(function, node.id, self.names)
            is None):
      return False
    return any(self.is_optimizer(argument, scope)
               for call, scope in self.calls.get(function.name, ())
               for argument in [_names.argument_for(function, node.id, call)]
               if argument is not None)

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
    if isinstance(node.value, ast.Attribute) and node.attr != _members.CREATE:
      return None  # (of a definition read from an optimizer: that read's)
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
    if isinstance(node, ast.Attribute):  # (``optimizer.optimizer_def``)
      return node.attr in _members.DEFINITION_READS and self.is_optimizer(
          node.value, scope)
    if not isinstance(node, ast.Name):
      return False
    binding = self._binding_scope(scope, node.id)
    if binding is None or (binding, node.id) in self._defs_open:
      return False  # unbound, or bound to itself (``a = b; b = a``)
    self._defs_open.add((binding, node.id))
    try:  # ``backbone_def = other_def``: the other name's definitions
      return all(self._is_def_binding(v, binding)
                 for v in binding.bindings[node.id])
    finally:
      self._defs_open.discard((binding, node.id))

  def _is_def_binding(self, value, binding) -> bool:
    """A binding of a name gives a definition: a call or name that is
    one, or a parameter every call in the project passes one as
    (``_def_params``)."""
    if isinstance(value, tuple) and value[0] == 'param':
      model = self.names.model
      return self.base is None and model is not None and (
          model.def_param_verdict(self.names, value[1], value[2]))
    return isinstance(value, (ast.Call, ast.Name)) and self.is_def(
        value, binding)

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
