"""Where an optimizer goes that the rewrite cannot follow.

migrate rewrites an optimizer's uses where its flow proves them
(``_flow.OptimizerFlow``) and its ``.create`` into ``TrainState.create``.
A value the flow proves an optimizer can still go on to code that reads
it unproven: a dict or a list (``{'opt': opt}``), an attribute of an
object no class declares an optimizer field of (``self.opt = opt``), an
argument of a function whose parameter is not proven, a return of a
method or of a function whose callers migrate does not see. Those readers
stay as they were and would meet a TrainState (``bundle['opt'].target``:
AttributeError). Each such place is a leftover of the module's flow, so
the flow stays whole, as it was, with the reason.

Where the value goes that migrate follows (an expression's parent):

* an attribute of it (``opt.target``: rewritten, or left with a reason);
* a name whose every binding the flow proves (its reads are checked
  alike), a tuple unpacked into such names, a field of the user's classes
  annotated ``optim.Optimizer`` (linked across modules, ``_project``);
* an argument of a function of this module whose parameter the flow
  proves, or of another module's function the project links the call to
  (``_project.Link`` of kind 'call'), or of a step another module's
  factory returns, where that module proves the parameter (and what goes
  there from here must be an optimizer too); of a call that gives back what it
  is given (``jax_utils.replicate``, ``restore_checkpoint``: its result is
  checked in turn); of a checkpoint write (reported as such);
  of ``print`` or ``logging``; of a function of the user's that only
  saves or restores it with flax.serialization (``_serialization_helpers``:
  its result is checked in turn);
* a return of a module function (or a def nested in a function, called
  there by name) that only returns optimizers (its callers are proven by
  it, here and in other modules), or a tuple returned by such a function
  nothing outside its module names;
* a comparison, a test, an f-string or ``'...'.format``, an expression
  statement.

A pickle write (``pickle.dump(opt, f)``, also cloudpickle's and dill's) is
never followed: a TrainState's ``tx`` holds local functions, so the
migrated program would fail there; the flow stays, with what to do instead.

A dict saved or loaded as a tree through a generic tree walker
(``_tree_walkers``) is followed only on an assumption: that place is an
``Escape`` with the assumption, an *unsafe fix* the planner applies only
where asked (``migrate --unsafe-fixes``; ruff's ``Applicability::Unsafe``),
and otherwise reports as available. A walker proven to walk the tree as the
Optimizer (it first turns a dataclass node into its state dict) is no
assumption and no escape: the planner applies that safe fix and notes it.

Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _flow
from compat.codemod import _flow_values
from compat.codemod import _legacy_trees
from compat.codemod import _names
from compat.codemod import _walk

# Calls that only show a value (its text differs once it is a TrainState;
# nothing reads an attribute of it).
_SHOWN = ('print', 'repr', 'str')
_SHOWN_PREFIXES = ('logging.', 'absl.logging.')


# Writes that pickle their argument: a TrainState does not pickle (its
# ``tx`` holds functions), so an optimizer going there holds its flow.
PICKLE_WRITES = frozenset(f'{module}.{function}'
                          for module in ('pickle', 'cloudpickle', 'dill')
                          for function in ('dump', 'dumps'))


class Escape(NamedTuple):
  """A place where an optimizer goes on to code migrate cannot follow."""
  node: ast.AST
  why: str
  # Where migrate follows it on trust (an unsafe fix): what it assumes.
  assumption: Optional[str] = None


def escapes(module) -> list:
  """``[Escape]``: each place of ``module`` (a
  ``_module_model.ModuleModel``) where a value its flow proves an optimizer
  goes on to code migrate cannot follow, or follows only on an assumption.
  Found once per model and checkpoint lines (what it reads besides the
  flow): scan's check and the module's plan share the model."""
  key = ('escapes', module.checkpoint_lines)
  if key not in module.analyses:
    module.analyses[key] = _escapes(module)
  return list(module.analyses[key])


# The nodes the escape check asks about (the rest of a module's nodes,
# most of them, can neither be nor give an optimizer): filtered once per
# tree (``_walk.nodes_of``), in the walk's order.
_ASKED = (ast.Call, ast.Subscript, ast.Name, ast.Attribute)


def _escapes(module) -> list:
  found = []
  for node in _walk.nodes_of(module.tree, _ASKED):
    node_class = type(node)  # (a leaf class of ``ast``: told by identity)
    if node_class is ast.Call:
      found += [Escape(n, why)
                for n, why in _unproven_to_foreign_step(module, node)]
    elif node_class is ast.Subscript:
      if module.flow.dict_entry_holds(node, module.flow.scope_of(node)):
        why = _why_escapes(module, node, True)  # read back from a dict
        found += [Escape(node, why)] if why else []
      continue
    elif not isinstance(node.ctx, ast.Load):
      continue
    kind = _kind(module, node)
    if kind is None:
      continue
    why = _why_escapes(module, node, kind)
    if why:
      found.append(Escape(node, why))
    elif kind is True and isinstance(node, (ast.Name, ast.Attribute)):
      found += _assumed_walks(module, node)
  return found


def _assumed_walks(module, node) -> list:
  """``[Escape]`` with its assumption where the dict holding ``node`` is
  saved or loaded as a tree through a generic tree walker."""
  verdict = module.flow.tree_verdict(node)
  if verdict is None or verdict.why is not None or not verdict.assumptions:
    return []
  text = ast.unparse(node)[:60]
  return [Escape(node, _codes.fix_why(_codes.GENERIC_TREE_WALKER, text=text),
                 ' '.join(verdict.assumptions))]


def _unproven_to_foreign_step(module, call) -> list:
  """A step another module's factory returns migrates the parameters its
  module proves optimizers: what this module passes there must be one
  (the two modules are linked, so they migrate together or not at all)."""
  step = module.flow.foreign_step_of(call)
  if step is None:
    return []
  if any(isinstance(a, ast.Starred) for a in call.args) or any(
      k.arg is None for k in call.keywords):
    return [(call, _codes.filled_note(
        _codes.ESCAPE_STEP_STARRED, call=ast.unparse(call)[:60],
        step=step.node.name))]
  passed = {_flow.required(step, call, value): value
            for value in call.args + [k.value for k in call.keywords]}
  return [(value, _codes.filled_note(
      _codes.ESCAPE_STEP_UNPROVEN, value=ast.unparse(value)[:60], name=name,
      step=step.node.name))
          for name, value in passed.items()
          if name is not None and not module.flow.is_optimizer(value)]


def _kind(module, node):
  """True: ``node`` is an optimizer (plain or replicated); a tuple: a call
  returning a tuple with one; None: neither."""
  flow = module.flow
  if not isinstance(node, ast.Call):
    return True if flow.is_optimizer(node) or (
        module.replicated_beside.is_optimizer(node)) else None
  kind = flow.call_kind(node)  # (an optimizer, or a tuple's kinds, at once)
  if kind is True or module.replicated_beside.is_optimizer(node):
    return True
  return kind if isinstance(kind, tuple) and (
      _flow_values.holds_optimizer(kind)) else None


def _why_escapes(module, node, kind) -> Optional[str]:
  parent = module.parents.get(node)
  text = ast.unparse(node)[:60]
  giver = module.flow.returned_dict_giver(node) if kind is True else None
  if giver is not None and giver.why is None:
    return None  # read back by its key where the dict is (_dict_returns)
  verdict = module.flow.tree_verdict(node) if kind is True and isinstance(
      node, (ast.Name, ast.Attribute)) else None
  if verdict is not None:
    return _tree_problem(module, verdict, text)
  if isinstance(parent, ast.Attribute) and parent.value is node:
    return None if kind is True else _codes.filled_note(
        _codes.ESCAPE_TUPLE_ATTRIBUTE, text=text)
  if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod) and (
      isinstance(parent.left, ast.Constant)) and parent.left is not node:
    return None  # '%s' % x only shows it
  if isinstance(parent, (ast.Expr, ast.Compare, ast.BoolOp, ast.If,
                         ast.While, ast.IfExp, ast.Assert,
                         ast.FormattedValue, ast.UnaryOp)):
    if isinstance(parent, ast.IfExp) and parent.test is not node:
      return _goes_into(parent, text)
    return None
  if isinstance(parent, ast.Subscript) and parent.value is node:
    return None if kind is True else _indexed(parent, kind, text)
  if isinstance(parent, (ast.Assign, ast.AnnAssign)) and (
      parent.value is node):
    return _assigned(module, parent, node, kind, text)
  if isinstance(parent, ast.Tuple) and kind is True:
    return _in_tuple(module, parent, node, text)
  if isinstance(parent, ast.Return):
    return _returned(module, node, kind, text)
  if kind is not True:
    return _codes.filled_note(_codes.ESCAPE_TUPLE_GOES_INTO, text=text,
                              parent=ast.unparse(parent)[:60])
  if isinstance(parent, ast.keyword):
    call = module.parents.get(parent)
    return _passed(module, call, node, text)
  if isinstance(parent, ast.Call) and node in parent.args:
    return _passed(module, parent, node, text)
  if isinstance(parent, ast.Call) and parent.func is node:
    return None  # calling it fails alike
  return _goes_into(parent, text)


def _indexed(subscript, kind, text) -> Optional[str]:
  """A tuple holding an optimizer, indexed: only an element holding none
  may be taken (where the optimizer goes, migrate does not follow)."""
  index = subscript.slice
  if isinstance(index, ast.Constant) and type(index.value) is int and (
      -len(kind) <= index.value < len(kind)) and not (
          _flow_values.holds_optimizer(kind[index.value])):
    return None
  return _codes.filled_note(_codes.ESCAPE_TUPLE_INDEXED, text=text,
                            subscript=ast.unparse(subscript)[:60])


def _tree_problem(module, verdict, text) -> Optional[str]:
  """A dict holding the optimizer: migrated where it is only saved or
  loaded as a tree (``_legacy_trees``), and what it is read back into is
  an optimizer of the flow."""
  if verdict.why is None and not module.flow.is_optimizer(
      verdict.display.value):
    return _codes.filled_note(_codes.ESCAPE_REPLICATED_TREE, text=text)
  if verdict.why is not None:
    return _codes.filled_note(_codes.ESCAPE_TREE_UNPROVEN, text=text,
                              why=verdict.why)
  for read in verdict.display.loaded_back:
    for target in _legacy_trees.assigned_names(module.parents, read):
      if not module.flow.is_optimizer(target):
        return _codes.filled_note(
            _codes.ESCAPE_TREE_READ_BACK, target=ast.unparse(target)[:40],
            read=ast.unparse(read)[:40])
  return None


def _goes_into(parent, text) -> str:
  return _codes.filled_note(_codes.ESCAPE_GOES_INTO, text=text,
                            parent=ast.unparse(parent)[:60])


def _assigned(module, assign, node, kind, text) -> Optional[str]:
  targets = assign.targets if isinstance(assign, ast.Assign) else [
      assign.target]
  for target in targets:
    why = _target_problem(module, target, node, kind, text)
    if why:
      return why
  return None


def _target_problem(module, target, node, kind, text) -> Optional[str]:
  flow = module.flow
  if isinstance(target, ast.Name):
    if kind is True and (flow.is_optimizer(target) or
                         module.replicated_beside.is_optimizer(target) or
                         module.only_stored(target)):
      return None  # (or with a dict stand-in, only stored in a field)
    if kind is True:
      read = flow.tree_read_why(target)
      return _codes.filled_note(
          _codes.ESCAPE_NAME_ALSO_HOLDS, name=target.id, text=text,
          read=f' ({read})' if read else '')
    return _codes.filled_note(_codes.ESCAPE_NAME_HOLDS_TUPLE, name=target.id,
                              text=text)
  if isinstance(target, (ast.Tuple, ast.List)) and kind is not True:
    return _unpacked_problem(module, target, kind, text)
  if isinstance(target, ast.Attribute) and kind is True and (
      flow.is_optimizer(target)):
    return None  # a field of the user's class annotated optim.Optimizer
  why = flow.self_attribute_why(target)
  return _codes.filled_note(
      _codes.ESCAPE_STORED, text=text, target=ast.unparse(target)[:60],
      why=f' ({why})' if why else '')


def _unpacked_problem(module, target, kind, text) -> Optional[str]:
  """Why the tuple ``kind`` of ``text`` unpacked into ``target`` reaches
  names not provably optimizers (a tuple nested in it into a tuple nested
  there alike), or None."""
  flow = module.flow
  if len(target.elts) != len(kind) or any(
      isinstance(e, ast.Starred) for e in target.elts):
    return _codes.filled_note(_codes.ESCAPE_UNPACKED_COUNT, text=text)
  for element, holds in zip(target.elts, kind):
    if isinstance(holds, tuple):  # (a nested tuple holding an optimizer)
      why = _unpacked_problem(module, element, holds, text) if isinstance(
          element, (ast.Tuple, ast.List)) else _codes.filled_note(
              _codes.ESCAPE_UNPACKED_NESTED,
              element=ast.unparse(element)[:40], text=text)
      if why:
        return why
    if holds is True and not (isinstance(element, ast.Name) and (
        flow.is_optimizer(element)) or flow.self_attribute_holds(element)):
      why = flow.self_attribute_why(element)
      return _codes.filled_note(
          _codes.ESCAPE_UNPACKED_UNPROVEN, element=ast.unparse(element)[:40],
          text=text, why=f' ({why})' if why else '')
  return None


def _pickled(module, call, text) -> Optional[str]:
  """Why an optimizer written by ``call`` holds its flow, if ``call`` is a
  pickle write (``PICKLE_WRITES``)."""
  if module.names.resolve(call.func) not in PICKLE_WRITES:
    return None
  return _codes.filled_note(_codes.ESCAPE_PICKLED, text=text,
                            call=ast.unparse(call.func)[:50])


def _in_tuple(module, display, node, text) -> Optional[str]:
  """An optimizer in a tuple display: unpacked into proven names, or
  returned (also in a tuple nested in the one returned)."""
  outer, top = module.parents.get(display), display
  while isinstance(outer, (ast.Tuple, ast.List)):
    outer, top = module.parents.get(outer), outer
  if top is not display:
    return _returned(module, top, None, text) if isinstance(
        outer, ast.Return) else _goes_into(display, text)
  if isinstance(outer, ast.Return):
    return _returned(module, display, None, text)
  pickled = isinstance(outer, ast.Call) and _pickled(module, outer, text)
  if pickled:
    return pickled
  if isinstance(outer, ast.Call) and display in outer.args + [
      k.value for k in outer.keywords] and (
          outer.lineno in module.checkpoint_lines or
          module.flow.keeps_kind(outer, display)):
    return None  # a checkpoint of (opt, step): written or restored alike
  if isinstance(outer, ast.Assign) and outer.value is display and all(
      isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == len(
          display.elts) for t in outer.targets):
    index = display.elts.index(node)
    for target in outer.targets:
      element = target.elts[index]
      if module.flow.self_attribute_holds(element):
        continue  # ``self.<attr>`` followed in its class (_self_holders)
      if not (isinstance(element, ast.Name) and (
          module.flow.is_optimizer(element) or
          module.replicated_beside.is_optimizer(element))):
        return _codes.filled_note(
            _codes.ESCAPE_TUPLE_ELEMENT, element=ast.unparse(element)[:40],
            text=text)
    return None
  return _goes_into(display, text)


def _returned(module, value, kind, text) -> Optional[str]:
  """A return of ``value`` (an optimizer, or a tuple holding one)."""
  flow = module.flow
  function = flow.scope_of(value).node
  local = isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
      flow.local_home(function) is not None)
  if kind is True and flow.is_holding_property(function):
    return None  # read only as ``self.<property>``, proven alike
  if kind is None and flow.spread_into_proven(function, value):
    return None  # its elements go to proven parameters where it is read
  if flow.aux_followed(function):
    return None  # followed where the call differentiating it gives it
  if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
      not flow.is_module_function(function)):
    where = _codes.note(_codes.RETURNER_METHOD if _is_method(
        module, function) else _codes.RETURNER_NESTED)
    return _codes.filled_note(_codes.ESCAPE_RETURNED_UNFOLLOWED, text=text,
                              where=where)
  # Other modules reach the def the name is bound to once the module has
  # run (a script may redefine it section by section: ``defs_named``).
  named = flow.functions[function.name]
  if function.name in flow.escaped:
    return _codes.filled_note(_codes.ESCAPE_RETURNER_USED, text=text,
                              function=function.name)
  model = module.names.model
  path = module.names.path
  if model is not None and path is not None and not local:
    where = model.used_otherwise_elsewhere(named, path)
    if where:
      return _codes.filled_note(_codes.ESCAPE_RETURNER_USED_ELSEWHERE,
                                text=text, function=function.name,
                                where=where)
  if kind is True:
    if flow.returns_optimizer(function):
      return None
    return _codes.filled_note(_codes.ESCAPE_RETURNS_MIXED,
                              function=function.name, text=text)
  if local:
    return None  # called only where its def is bound: followed there
  if flow.is_followed_step(function):
    return None  # its callers elsewhere are followed and unpack it
  if model is not None and path is not None and model.gives_tuple(
      named, path):
    return None  # its callers elsewhere are linked and unpack it
  where = None if model is None or path is None else model.called_elsewhere(
      named, path)
  if where:
    return _codes.filled_note(_codes.ESCAPE_RETURNS_TUPLE,
                              function=function.name, text=text, where=where)
  return None


def _optimizer_class(module, node) -> bool:
  """``node`` names flax.optim's Optimizer class (also through a name bound
  to it once, ``Optimizer = optim.Optimizer``): rewritten with the flow."""
  if _names.is_optimizer_annotation(module.names, node):
    return True
  if not isinstance(node, ast.Name):
    return False
  scope = module.flow.binding_scope_of(node, node.id)
  values = [] if scope is None else scope.bindings.get(node.id, [])
  return len(values) == 1 and isinstance(values[0], ast.AST) and (
      _names.is_optimizer_annotation(module.names, values[0]))


def _is_method(module, function) -> bool:
  return isinstance(module.parents.get(function), ast.ClassDef)


def _passed(module, call, node, text) -> Optional[str]:
  """An argument: to a proven parameter, a call keeping its kind, a
  checkpoint write, or a call that only shows it."""
  if call is None:
    return _goes_into(node, text)
  pickled = _pickled(module, call, text)
  if pickled:
    return pickled
  flow, names = module.flow, module.names
  resolved = names.resolve(call.func)
  if resolved is None and isinstance(call.func, ast.Name) and (
      flow.binding_scope_of(call.func, call.func.id) is None):
    resolved = call.func.id  # a builtin (print, isinstance)
  if resolved is not None and (resolved in _SHOWN or resolved.startswith(
      _SHOWN_PREFIXES)):
    return None
  if resolved == 'isinstance' and len(call.args) == 2 and (
      call.args[0] is node) and _optimizer_class(module, call.args[1]):
    return None  # the class reference is rewritten with the flow
  if isinstance(call.func, ast.Attribute) and call.func.attr == 'format' and (
      isinstance(call.func.value, ast.Constant)):
    return None  # '... {}'.format(x) only shows it
  if flow.keeps_kind(call, node) or call.lineno in module.checkpoint_lines:
    return None
  if flow.argument_proven(call, node) or (
      module.replicated_beside.argument_proven(call, node)):
    return None
  if flow.bound_argument_proven(node):
    return None  # bound by partial to a differentiated def's parameter
  if flow.argument_to_foreign_step(call, node):
    return None  # the step's module is linked to this one
  if any(p.argument is node
         for p in flow.helper_passes(call, flow.scope_of(call))):
    return None  # saved or restored with flax.optim's tree of it
  model = names.model
  if model is not None and model.passes_linked(call, node, names):
    return None
  if any(value is node for _, value in module.field_stores):
    return None  # checked with the field's stores
  return _codes.filled_note(_codes.ESCAPE_PASSED, text=text,
                            call=ast.unparse(call.func)[:50])
