"""A factory's step proven by its calls in other modules.

Research code builds its update function in a module of helpers and steps
the optimizer in the training script: ``update_fn =
utils.create_update_fn(model, config)`` there, then ``opt, m =
update_fn(opt, lr, batch)`` (uncertainty-baselines, big_vision). The step
(``def update_fn(opt, ...)``, nested in the factory, maybe under
``@jax.pmap``) is never called in its own module, so that module's flow
proves nothing of its parameters, and the script's flow sees a step that
takes no optimizer: the whole flow stayed as it was.

Its callers are all known where the factory is *followed*
(``_step_values``: every reference from another module is a call bound
once to a name only called or handed to a step parameter). Then a
parameter of the step is an optimizer when every one of those calls
passes one there (``Model.step_call_verdicts``), as ``_params`` proves a
module function's parameters from its calls elsewhere:

* a greatest fixpoint: every parameter of the steps of the factories
  referenced from other modules starts True, and the factory is taken for
  followed while one of its verdicts holds; a round recomputes the
  model's step factories and followed factories (``resolve``), turns
  False each verdict a call refutes, and every verdict of a factory that
  is not followed after all;
* the callers' and the step's modules are linked by the factory call
  (``_project_links``), so they migrate together or not at all, and each
  caller checks again what it passes (``_escape_analysis``).

Stdlib only.
"""

import ast

from compat.codemod import _flow
from compat.codemod import _names

# Rounds before the fixpoint gives up (every verdict False: proves nothing).
_MAX_ROUNDS = 6


def solve(model, resolve) -> None:
  """Fills ``model.step_call_verdicts`` (``{(factory FunctionDef,
  parameter of its step): bool}``); ``resolve()`` recomputes the step
  factories and the followed ones under the current verdicts."""
  verdicts = model.step_call_verdicts
  steps = _candidate_steps(model)
  for factory, step in steps.items():
    for parameter in _names.parameter_names(step):
      verdicts[(factory, parameter)] = True
  if not verdicts:
    return
  for _ in range(_MAX_ROUNDS):
    resolve()
    flows: dict = {}
    changed = False
    for (factory, parameter), holds in list(verdicts.items()):
      if holds and not _every_call_passes(model, factory, steps[factory],
                                          parameter, flows):
        verdicts[(factory, parameter)] = False
        changed = True
    if not changed:
      return
  for key in verdicts:
    verdicts[key] = False
  resolve()


def _candidate_steps(model) -> dict:
  """``{factory FunctionDef: step FunctionDef}``: the module functions
  referenced from another module that return a nested step."""
  found = {}
  flows: dict = {}
  for function in model.functions.values():
    node = function.node
    if function.is_method or not model.referenced_elsewhere.get(id(node)):
      continue
    flow = flows.get(function.path)
    if flow is None:
      flow = flows[function.path] = _flow.OptimizerFlow(
          model.trees[function.path], model.names[function.path])
    step = flow.returned_steps.get(node.name)
    if step is not None and flow.functions.get(node.name) is node:
      found[node] = flow.functions[step[0]]
  return found


def _every_call_passes(model, factory, step, parameter, flows) -> bool:
  """Every call of ``factory``'s step from another module passes an
  optimizer as ``parameter`` (the factory followed, so those are all)."""
  if factory not in model.followed_factories:
    return False
  calls = []
  for reference in model.referenced_elsewhere.get(id(factory), ()):
    calls += _step_calls(model, _flow_of(model, reference.path, flows),
                         reference.call, step, flows)
  if not calls:
    return False
  for flow, call in calls:
    argument = _names.argument_for(step, parameter, call)
    if argument is None or not flow.is_optimizer(argument):
      return False
  return True


def _flow_of(model, path, flows):
  if path not in flows:
    flows[path] = _flow.OptimizerFlow(model.trees[path], model.names[path])
  return flows[path]


def _step_calls(model, flow, factory_call, step, flows) -> list:
  """``[(flow, Call)]``: the calls of the step that ``factory_call`` gives,
  through the name it is bound to and through the step parameters that
  name is handed to, each with the flow of its module."""
  binding = next(((scope, name) for (scope, name) in flow.foreign_steps
                  if any(value is factory_call
                         for value in scope.bindings.get(name, ()))), None)
  if binding is None:
    return []
  found = []
  for load in flow.loads_of(*binding):
    parent = flow.parent_of(load)
    if isinstance(parent, ast.Call) and parent.func is load:
      found.append((flow, parent))
      continue
    found += _calls_through_parameter(model, flow, load, step, flows)
  return found


def _calls_through_parameter(model, flow, load, step, flows) -> list:
  """``[(flow, Call)]``: the calls of the step parameter ``load`` is
  handed to (``_step_values``: that function only calls it)."""
  for (function, parameter), given in model.step_params.items():
    if not _flow.runs(given, step):
      continue
    home = model.function_of(function)
    if home is None:
      continue
    parent = flow.parent_of(load)
    call = flow.parent_of(parent) if isinstance(parent, ast.keyword) else (
        parent)
    if not isinstance(call, ast.Call) or _flow.parameter_of(
        function, call, load) != parameter:
      continue
    home_flow = _flow_of(model, home.path, flows)
    return [(home_flow, node) for node in ast.walk(function)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == parameter]
  return []
