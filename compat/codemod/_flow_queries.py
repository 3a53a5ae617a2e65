"""What a solved optimizer flow answers about one expression: is it an
optimizer, a dict saved as a tree, a step of another module. Stdlib only."""

import ast
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _flow_solve
from compat.codemod import _flow_values
from compat.codemod import _legacy_trees
from compat.codemod import _names
from compat.codemod import _serialization_helpers
from compat.codemod import _walk


class _Verdicts:
  """The ``_legacy_trees`` verdicts on the dicts of one module (its tree and
  names), shared by every flow of it: the project's phases build a
  module's flow again and again, and a verdict (whether a dict is only
  saved or loaded as a tree, followed through the functions it reaches)
  is the same for each. It reads the module and the project's functions,
  which change only where the project's model reads another module: then
  each is found anew (a flow keeps the ones it asked for)."""

  def __init__(self, tree, names):
    del tree  # (the entries are its nodes)
    self._names = names
    self._read = -1  # how many modules the model had read
    self._checker = _legacy_trees.Checker(names)
    self._found: dict = {}  # (dict node, key) -> the verdict

  def verdict(self, value, entry, parents):
    model = self._names.model
    read = 0 if model is None else len(model.names)
    if read != self._read:
      self._read, self._found = read, {}
      self._checker = _legacy_trees.Checker(self._names)
    if entry not in self._found:
      self._found[entry] = self._checker.verdict(value, entry[0], entry[1],
                                                 parents)
    return self._found[entry]


class FlowQueries(_flow_solve.FlowSolver):
  """Questions about single expressions, once the fixpoint is solved. Part of
  ``_flow.OptimizerFlow``, whose ``__init__`` sets the state."""

  # -------------------------------------------------------------- queries
  def scope_of(self, node) -> _flow_values.Scope:
    return self._scope_of.get(node) or next(
        s for s in self.scopes.values() if s.parent is None)

  def binding_scope_of(self, node, name) -> Optional[_flow_values.Scope]:
    """The scope whose binding of ``name`` a read at ``node`` sees."""
    return self._binding_scope(self.scope_of(node), name)

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
    return kind if _flow_values.holds_optimizer(kind) else None

  def returns_optimizer(self, function) -> bool:
    """Every return of the module function ``function`` is an optimizer
    (proven in this module; what its callers pass proves nothing here)."""
    return self.returned_kind(function) is True

  def is_optimizer(self, node, scope=None) -> bool:
    """True when ``node`` evaluates to a legacy ``Optimizer`` on every path."""
    if isinstance(node, ast.Name) and self._solved and (
        node.id not in self.alive_names):
      return False  # (whichever binding it reads, none is alive)
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
              node.value, node.attr, scope)) or (
                  self.self_attribute_holds(node)))
    if isinstance(node, ast.Call):
      return self._kind(node, scope) is True
    if isinstance(node, ast.Subscript):
      return self.base is None and (self._loaded_back(node, scope) or (
          self.dict_entry_holds(node, scope)))
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
      # (found once for every flow of the tree and names: ``_Verdicts``)
      shared = _walk.derived(self._tree, _Verdicts, self.names)
      self._tree_verdicts[entry] = shared.verdict(value, entry,
                                                  self._parents)
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
    entries = self._tree_entries(function).get(key.value, ())
    # The answer is an entry's ``is_optimizer``: where none is one (a read
    # by another key than an optimizer's, any read once the flow dropped
    # the names stored), no verdict is asked (it follows the dict through
    # the functions it reaches: the costly part).
    if not any(self.is_optimizer(value, scope) for value in entries):
      return False
    for value in entries:
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
          return _codes.filled_note(_codes.TREE_READ_NOT_BACK,
                                    read=ast.unparse(value)[:40],
                                    why=verdict.why)
    return None

  def _tree_entries(self, function) -> dict:
    """key -> the names and fields ``function`` puts into dicts under that
    constant key (where a read by the key may give one back)."""
    if function not in self._tree_entries_of:
      entries: dict = {}
      for node in _walk.scope_nodes(function, self._children):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(
            node.ctx, ast.Load):
          parent = self._parents.get(node)
          entry = _legacy_trees.entry_of(node, parent,
                                         self._parents.get(parent))
          if entry is not None:
            entries.setdefault(entry[1], []).append(node)
      self._tree_entries_of[function] = entries
    return self._tree_entries_of[function]

  def step_signature(
      self, factory_name) -> Optional[_flow_values.StepSignature]:
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
    overrides = any(_flow_values.sets_hyper_params(n)
                    for n in self._own_nodes(step))
    return _flow_values.StepSignature(step, kind, proven, overrides)

  def foreign_step_of(self, call) -> Optional[_flow_values.StepSignature]:
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
    parameter = _flow_values.parameter_of(step.node, call, argument)
    return None if parameter is None else parameter in step.proven

  def helper_passes(self, call, scope) -> list:
    """``_serialization_helpers.passed`` of ``call``: what it gives a
    function of the user's that only saves or restores it with
    flax.serialization."""
    return _serialization_helpers.passes_of(call, self._callee(call, scope),
                                            self.names)

  def call_kind(self, call):
    """What ``call`` gives: True (an optimizer: ``is_optimizer``), the
    element kinds of the tuple it returns, or None: one question for a
    reader asking both."""
    return self._kind(call, self.scope_of(call))

  def _kept_argument(self, call) -> Optional[ast.AST]:
    """The argument a ``_flow_values.SAME_KIND`` call gives back in kind (by its
    keyword or position), or None."""
    position, keyword = _flow_values.SAME_KIND[self.names.resolve(call.func)]
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
    if resolved not in _flow_values.SAME_KIND or any(
        isinstance(a, ast.Starred) for a in call.args):
      return False
    kept = self._kept_argument(call)
    if kept is argument:
      return True
    position = _flow_values.SAME_KIND[resolved][0]
    return resolved in _flow_values.SAME_KIND_REST and kept is not None and any(
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
    parameter = _flow_values.parameter_of(function, call, argument,
                             len(bound.args) if bound else 0)
    return parameter is not None and (self.scopes[function],
                                      parameter) in self.alive
