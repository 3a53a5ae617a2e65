"""Steps passed as values: a factory's step handed to another function.

Research code built its update function in one place and handed it to the
code that runs it: score_sde's ``optimize_fn = losses.optimization_manager(
config)`` is passed to ``losses.get_step_fn(..., optimize_fn=optimize_fn)``,
whose nested step calls ``optimize_fn(state, grad)`` and stores what it gives
(an optimizer) in the state. A factory's step (``_flow.StepSignature``) is
followed through such a parameter where the whole project shows where it
goes:

* a *step parameter* ``(function, parameter)``: every reference to the
  module function in the project is a call, each passing there a name bound
  once to a call of the same step factory of another module (or passing
  nothing, the default being None), and the function only calls the
  parameter (no other use of it, in nested functions neither). Calls through
  it give what the step gives (``_flow.OptimizerFlow.foreign_step_of``);
* a *followed factory*: every reference to it from another module is a call
  bound once to a name that module only calls or passes to step parameters
  of its step, and its own module only calls it to bind a name (an alias,
  whose uses that module's flow checks). Its step's own ``return step`` is
  then no escape: its callers
  are those calls (the step's module still proves its parameters only from
  its own calls, so what they take stays unproven unless proven there).

Anything else (a step passed on again, stored, a factory called and used
otherwise, a method) keeps today's answer: the step's callers are not
known. Stdlib only.
"""

import ast
from typing import Optional

from compat.codemod import _flow
from compat.codemod import _names
from compat.codemod import _walk


def solve(model) -> tuple[dict, set]:
  """``(step_params, followed)``: ``{(FunctionDef, parameter):
  StepSignature}`` and the FunctionDefs of the followed step factories
  (see the module's docstring)."""
  if not model.step_factories:
    return {}, set()
  flows: dict = {}

  def flow_of(path):
    if path not in flows:
      flows[path] = _flow.OptimizerFlow(model.trees[path], model.names[path])
    return flows[path]

  passed = _steps_passed(model, flow_of)
  step_params = {}
  for key, steps in passed.items():
    if steps is not None and len({id(s.node) for s in steps}) == 1 and (
        _only_called(model, *key)):
      step_params[key] = steps[0]
  followed = {factory for factory in model.step_factories
              if _followed(model, factory, step_params, flow_of)}
  return step_params, followed


def _steps_passed(model, flow_of) -> dict:
  """``{(FunctionDef, parameter): [StepSignature] or None}``: what each
  call of a module function in the project passes for a parameter that
  one call passes a factory's step to (None: a call passes something
  else, or the function is referenced otherwise)."""
  passed: dict = {}
  # Only a module that calls a step factory, so spells its name, binds a
  # name to its step.
  factories = [factory.name.encode() for factory in model.step_factories]
  for path, names in model.names.items():
    source = model.sources.get(path) or b''
    if isinstance(source, str):
      source = source.encode()
    if not any(name in source for name in factories):
      continue
    for call in ast.walk(model.trees[path]):
      if not isinstance(call, ast.Call):
        continue
      for argument in list(call.args) + [k.value for k in call.keywords]:
        if not isinstance(argument, ast.Name):
          continue
        step = flow_of(path).step_bound_to(argument)
        function = None if step is None else _module_function(
            model, call, names, path)
        if function is None:
          continue
        parameter = _flow.parameter_of(function.node, call, argument)
        if parameter is not None:
          passed.setdefault((function.node, parameter), [])
  for (node, parameter), steps in passed.items():
    for path, call in _calls_of(model, node):
      if call is None:
        passed[(node, parameter)] = None
        break
      argument = _names.argument_for(node, parameter, call)
      step = None if not isinstance(argument, ast.Name) else (
          flow_of(path).step_bound_to(argument))
      if argument is None and _defaults_to_none(node, parameter) and not (
          _hidden(call)):
        continue
      if step is None:
        passed[(node, parameter)] = None
        break
      steps.append(step)
  return passed


def _module_function(model, call, names, path):
  """The project's module function (not a method) ``call`` runs."""
  function = model.callee(call, names)
  if function is None and isinstance(call.func, ast.Name):
    function = model.functions.get(f'{names.package_module}.{call.func.id}')
    if function is not None and function.path != path:
      function = None
  return None if function is None or function.is_method else function


def _calls_of(model, node) -> list:
  """``[(path, Call or None)]``: every reference to the module function
  ``node`` in the project (None: not a call); its own module's by its
  name, the others' as ``_params`` found them."""
  function = model.function_of(node)
  found = [(r.path, r.call) for r in model.referenced_elsewhere.get(
      id(node), ())]
  tree = model.trees[function.path]
  parents = _walk.parents(tree)
  for name in _walk.nodes(tree):
    if isinstance(name, ast.Name) and name.id == node.name and isinstance(
        name.ctx, ast.Load):
      parent = parents.get(name)
      found.append((function.path, parent if isinstance(
          parent, ast.Call) and parent.func is name else None))
  return found


def _hidden(call) -> bool:
  return any(isinstance(a, ast.Starred) for a in call.args) or any(
      k.arg is None for k in call.keywords)


def _defaults_to_none(node, parameter) -> bool:
  arguments = node.args
  positional = arguments.posonlyargs + arguments.args
  defaults = dict(zip([a.arg for a in positional[len(positional) - len(
      arguments.defaults):]], arguments.defaults))
  defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs,
                                            arguments.kw_defaults) if d})
  value = defaults.get(parameter)
  return isinstance(value, ast.Constant) and value.value is None


def _only_called(model, node, parameter) -> bool:
  """The function reads ``parameter`` only to call it (its own body and
  the functions nested in it, where no inner binding hides it)."""
  for child in ast.walk(node):
    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                          ast.Lambda)) and child is not node and (
                              parameter in _bound_in(child)):
      return False  # an inner binding of the name: not followed
    if isinstance(child, ast.Name) and child.id == parameter and not (
        isinstance(child.ctx, ast.Load)):
      return False  # rebound
  # The module's one parent map: a name in the function has the same
  # parent there.
  parents = _walk.parents(model.trees[model.function_of(node).path])
  return all(isinstance(parents.get(n), ast.Call) and parents[n].func is n
             for n in ast.walk(node)
             if isinstance(n, ast.Name) and n.id == parameter)


def _bound_in(function) -> set:
  arguments = function.args
  return {a.arg for a in arguments.posonlyargs + arguments.args +
          arguments.kwonlyargs} | {
              a.arg for a in (arguments.vararg, arguments.kwarg) if a}


def _followed(model, factory, step_params, flow_of) -> bool:
  """Every reference to step factory ``factory`` from another module is a
  call bound once to a name used only by calling it or as an argument to
  a step parameter of its step."""
  references = model.referenced_elsewhere.get(id(factory))
  if not references or id(factory) not in model.reference_candidates or (
      not _only_aliased_at_home(model, factory, flow_of)):
    return False
  step = model.step_factories[factory]
  for reference in references:
    if reference.call is None:
      return False
    flow = flow_of(reference.path)
    binding = _binding_of(flow, reference.call)
    if binding is None:
      return False
    if not all(_use_follows(model, flow, load, step, step_params)
               for load in flow.loads_of(*binding)):
      return False
  return True


def _only_aliased_at_home(model, factory, flow_of) -> bool:
  """In its own module, ``factory`` is only called to bind a name to its
  step (an alias, whose every use that flow checks), if at all."""
  path = model.function_of(factory).path
  flow = flow_of(path)
  aliased = {id(bound.reference) for bound in flow.aliases.values()}
  calls = {id(value) for (scope, name) in flow.aliases
           for value in scope.bindings.get(name, ())}
  for load in flow.loads_of(flow.scopes[model.trees[path]], factory.name):
    parent = flow.parent_of(load)
    if id(load) in aliased:
      continue
    if not (isinstance(parent, ast.Call) and parent.func is load and (
        id(parent) in calls)):
      return False
  return True


def _binding_of(flow, call) -> Optional[tuple]:
  """``(scope, name)`` that ``call`` (of a step factory) is bound to as a
  foreign step, or None."""
  for (scope, name), _ in flow.foreign_steps.items():
    if any(value is call for value in scope.bindings.get(name, ())):
      return scope, name
  return None


def _use_follows(model, flow, load, step, step_params) -> bool:
  parent = flow.parent_of(load)
  if isinstance(parent, ast.Call) and parent.func is load:
    return True
  if not isinstance(parent, ast.Call) and not (
      isinstance(parent, ast.keyword) and isinstance(
          flow.parent_of(parent), ast.Call)):
    return False
  call = parent if isinstance(parent, ast.Call) else flow.parent_of(parent)
  function = _module_function(model, call, flow.names, flow.names.path)
  if function is None:
    return False
  parameter = _flow.parameter_of(function.node, call, load)
  given = step_params.get((function.node, parameter))
  return given is not None and _flow.runs(given, step.node)
