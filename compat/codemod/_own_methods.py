"""Calls of the user's own methods named like the Optimizer's.

A class of the project may wrap its optimizer behind methods of the same
names (jaxrl's ``Model.apply_gradient(loss_fn)``, which steps the
``optimizer`` field inside). A call of such a method is no flax.optim
use: the method's body is (its field read through ``self`` is rewritten
with the field's flow), the call stays as it is. A call runs the user's
method where its receiver is typed as an instance of a project class:

* ``x.method(...)``: ``x`` is a parameter annotated with a project class
  (``model: Model``) or a name bound once, to a construction of one
  (``model = Model(...)``), and bound nowhere else in its function;
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
import functools
from typing import Optional

from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _project_index
from compat.codemod import _walk

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


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
    typed = _typed_names(names).get(id(node))
    return None if typed is None else _project_index.dotted_name(
        typed, names)
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
  return frozenset(
      node.lineno for node in _walk.nodes(names.tree)
      if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
      and node.func.attr in _members.STEP_METHODS and runs_own_method(
          model, names, node))


@functools.lru_cache(maxsize=8)
def _typed_names(names) -> dict:
  """id(Name read) -> the class expression its value is typed by, for
  each read of a name a function binds once: a parameter annotated with
  a class, or an assignment of a call of a class (read once per module)."""
  found = {}
  for function in _walk.nodes(names.tree):
    if isinstance(function, _FUNCTIONS):
      for name, cls in _typed_bindings(function, names).items():
        found.update((id(read), cls) for read in ast.walk(function)
                     if isinstance(read, ast.Name) and read.id == name and
                     isinstance(read.ctx, ast.Load))
  return found


def _typed_bindings(function, names) -> dict:
  """name -> class expression, for each name ``function`` binds exactly
  once (nested functions and lambdas included), so typed."""
  bindings: dict = {}
  arguments = function.args
  for argument in (arguments.posonlyargs + arguments.args +
                   arguments.kwonlyargs):
    bindings.setdefault(argument.arg, []).append(
        None if argument.annotation is None else
        _names.annotated_class(names, argument.annotation))
  constructed = {}  # id(the Name an ``x = C(...)`` stores) -> C
  for node in ast.walk(function):
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and (
        isinstance(node.targets[0], ast.Name)) and isinstance(
            node.value, ast.Call):
      constructed[id(node.targets[0])] = node.value.func
  own = {id(a) for a in ast.walk(arguments)}
  for node in ast.walk(function):
    if node is not function and id(node) not in own:
      for name in _bound_names(node):
        bindings.setdefault(name, []).append(constructed.get(id(node)))
  return {name: values[0] for name, values in bindings.items()
          if len(values) == 1 and isinstance(values[0], (ast.Name,
                                                         ast.Attribute))}


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
