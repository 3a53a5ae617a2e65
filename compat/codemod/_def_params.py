"""Definitions passed as arguments: a method's parameter it makes its
optimizer from.

A class may make its optimizer from a definition its callers hand it
(jaxrl's ``Model.with_optimizer(self, optim_def)``, whose body runs
``optim_def.create(self.params)``; the learners pass
``optim.Adam(learning_rate=lr)``). Such a parameter is a definition where
every call of the method in the project passes one:

* the candidates are the methods of the project's classes with a
  parameter whose ``.create(...)`` the method's own body runs;
* every ``x.method`` the project spells (in the modules the model read;
  one in another module, or one that is not a call's callee, decides
  False) is a call whose receiver is typed, in its function, as an
  instance of a class running this very method (``_own_methods``), and
  whose argument for the parameter the caller's module flow proves a
  definition (``OptimizerFlow.is_def``); there is at least one call;
* each such call becomes a whole-flow link (kind 'call') between the
  caller's module and the method's: the definition migrates with the
  optimizer made from it, or neither does.

The verdicts are ``Model.def_param_verdicts[(path, line of the def,
parameter)]``; a module's flow asks them (``FlowHolding.is_def``) for a
name bound to a parameter. Stdlib only.
"""

import ast

from compat.codemod import _flow
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _own_methods
from compat.codemod import _walk


def created_parameters(function_node) -> list:
  """The parameters (after the instance's) whose ``.create(...)`` the
  method's own body runs."""
  positional = function_node.args.posonlyargs + function_node.args.args
  taken = [a.arg for a in positional[1:] + function_node.args.kwonlyargs]
  created = {node.func.value.id for node in _walk.scope_nodes(function_node)
             if isinstance(node, ast.Call) and isinstance(
                 node.func, ast.Attribute) and node.func.attr == (
                     _members.CREATE) and isinstance(node.func.value,
                                                     ast.Name)}
  return [name for name in taken if name in created]


def candidates(model) -> list:
  """``[(_Function, [parameter])]`` of the project's methods that make an
  optimizer from a parameter."""
  found = []
  for group in model.methods.values():
    for function in group:
      if function.is_method:
        created = created_parameters(function.node)
        if created:
          found.append((function, created))
  return found


def solve(model, spelling) -> list:
  """Fills ``model.def_param_verdicts``; ``spelling(words)`` gives the
  ``(path, tree)`` of each project module spelling one of the words.
  Returns the links ``(caller path, call, _Function)`` of the calls
  of a method whose parameters are all proven."""
  found = candidates(model)
  if not found:
    return []
  flows: dict = {}
  links = []
  for function, parameters in found:
    calls = _calls(model, function, spelling)
    for parameter in parameters:
      proven = bool(calls) and all(
          _passes_definition(model, flows, path, call, function, parameter)
          for path, call in calls)
      model.def_param_verdicts[(function.path, function.node.lineno,
                                parameter)] = proven
    if calls and all(model.def_param_verdicts[(
        function.path, function.node.lineno, p)] for p in parameters):
      links += [(path, call, function) for path, call in calls]
  return links


def _calls(model, function, spelling):
  """``[(path, Call)]``: every spelling of ``.method`` in the project,
  each a call running ``function``; None where one is not."""
  name = function.node.name
  calls = []
  for path, tree in spelling({name}):
    names = model.names.get(path)
    for node, enclosing, parent in _attributes(tree, name):
      if names is None or enclosing is None or not (
          isinstance(parent, ast.Call) and parent.func is node):
        return None
      dotted = _own_methods.class_read_in(enclosing, names, node.value)
      method = None if dotted is None else model.instance_method(dotted,
                                                                 name)
      if method is None or method.node is not function.node:
        return None
      calls.append((path, parent))
  return calls


def _attributes(tree, name):
  """``(Attribute, its innermost function or None, its parent)`` of each
  ``x.name`` in ``tree``."""
  stack = [(tree, None, None)]
  while stack:
    node, enclosing, parent = stack.pop()
    if isinstance(node, ast.Attribute) and node.attr == name:
      yield node, enclosing, parent
    inner = node if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef)) else enclosing
    stack.extend((child, inner, node)
                 for child in ast.iter_child_nodes(node))


def _passes_definition(model, flows, path, call, function, parameter):
  """``call`` (``x.method(...)`` of the method ``function``) passes a
  definition its module's flow proves as ``parameter``."""
  as_function = ast.Call(func=call.func, args=[call.func.value, *call.args],
                         keywords=call.keywords)  # (``C.method(x, ...)``)
  argument = _names.argument_for(function.node, parameter, as_function)
  if argument is None:
    return False
  flow = flows.get(path)
  if flow is None:
    flow = flows[path] = _flow.OptimizerFlow(model.trees[path],
                                             model.names[path])
  return flow.is_def(argument)
