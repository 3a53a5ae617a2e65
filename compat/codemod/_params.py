"""Parameters proven through their call sites in every module of the project.

A module's own flow (``_flow.OptimizerFlow``) proves an unannotated
parameter from the calls it sees: its own module's. A module function is
also called from other modules (a trainer's ``train_utils.step(opt, g)``, a
test, a notebook), and those calls decide too: the parameter is an optimizer
only if every call in the project passes one, whichever module makes it.
So, for the module functions of the modules the project's model reads:

* every reference to one from another module is found (the modules that
  spell its name are read for it, as are the modules whose functions the
  modules read call): a call, whose arguments that module's flow must
  prove, or anything else (``jax.jit(train_utils.step)``, a list, a
  callback), after which its callers are not known;
* ``Model.param_verdicts[(function, parameter)]`` says whether all those
  calls pass an optimizer (False where a reference is not a call). The
  flow of the function's module asks it, beside its own calls: a function
  called only from other modules is proven by them, one called from one
  unprovable place is not (its uses stay, with the flow they belong to);
  a function called nowhere in the project has callers migrate cannot see,
  and proves nothing;
* a greatest fixpoint, as each module's flow is: every verdict starts
  True; a round computes the flows of the modules involved with the
  current verdicts (and the functions that return an optimizer), turns
  False each verdict a call refutes, and ends when nothing changes;
* each call from another module that passes a parameter its function's
  flow proves becomes a whole-flow link (``_project.Link``, kind 'call'):
  the caller's optimizer and the callee's uses of it migrate together or
  not at all.

A module the model never reads (nothing in it names flax.optim, a factory,
a function of a module read, or is called by one) has no verdicts: its own
calls alone prove its functions' parameters, as before.

Stdlib only.
"""

import ast
import itertools
import re
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _flow
from compat.codemod import _names
from compat.codemod import _walk

# Rounds of the fixpoint before it gives up. Verdicts only turn False, but
# each round recomputes the functions that return an optimizer from them,
# so the bound guards against a cycle; past it every verdict is False,
# which proves nothing.
_MAX_ROUNDS = 8


class _Reference(NamedTuple):
  """A reference to a module function from another module."""
  path: str  # the referring module
  node: ast.AST  # the Name/Attribute naming the function
  call: Optional[ast.Call]  # the Call it is the callee of, or None


def _candidates(model) -> dict:
  """``{id(FunctionDef): _Function}`` of the module functions (not methods)
  of the modules the model has read, with one parameter or more."""
  found = {}
  for function in model.functions.values():
    node = function.node
    if function.is_method or not (node.args.posonlyargs + node.args.args +
                                  node.args.kwonlyargs):
      continue
    found[id(node)] = function
  return found


def _references(model, candidates) -> dict:
  """``{id(FunctionDef): [_Reference]}`` from modules other than the
  function's own."""
  found: dict = {}
  for path, names in model.names.items():
    tree = model.trees[path]
    for node, parent, dotted in itertools.chain(
        _names.references(tree, names),
        model.alias_references(tree, names)):
      _add_reference(model, candidates, found, path, node, parent,
                     model.functions.get(dotted))
  return found


def _add_reference(model, candidates, found, path, node, parent, function):
  """Records ``node`` (in ``path``) as a reference to ``function`` where
  that is a candidate of another module."""
  if function is None or id(function.node) not in candidates or (
      function.path == path):
    return
  call = parent if isinstance(parent, ast.Call) and (
      parent.func is node) else None
  found.setdefault(id(function.node), []).append(_Reference(path, node, call))


def callee_modules(model, called=None) -> set:
  """The paths of the project's modules, not read yet, whose functions the
  modules read so far call. ``called``: path -> the modules its calls may
  run a function of, kept between the calls of one reading (a module's
  names resolve alike while others are read)."""
  path_of = {dotted: path for path, dotteds in model.module_names_of.items()
             for dotted in dotteds}
  called = {} if called is None else called
  found = set()
  for path, names in list(model.names.items()):
    if path not in called:
      called[path] = _called_modules(model, path, names)
    for module in called[path]:
      callee = path_of.get(module)
      if callee is not None and callee not in model.names:
        found.add(callee)
  return found


def _called_modules(model, path, names) -> list:
  """The modules the calls of the module ``path`` may run a function of."""
  aliases = model.module_aliases(names)
  modules = []
  # (the calls filtered once per tree: the links' passes read them too)
  for node in _walk.nodes_of(model.trees[path], (ast.Call,)):
    dotted = names.resolve(node.func)
    modules += [dotted.rpartition('.')[0]] if dotted else (
        _aliased_modules(aliases, node.func))
  return modules


def _aliased_modules(aliases, func) -> tuple:
  """The modules a call of ``alias.f`` may run ``f`` of."""
  if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
    return aliases.get(func.value.id, ())
  return ()


def function_names(model) -> set:
  """The names of the candidate functions: the modules that spell one may
  call it."""
  return {f.node.name for f in _candidates(model).values()}


def solve(model, solve_givers) -> list:
  """Fills ``model.param_verdicts`` over the modules the model has read
  (``Model._read_calls`` read the callers and callees first);
  ``solve_givers()`` computes the functions returning an optimizer from
  the current verdicts (each round). Returns the whole-flow links
  ``(caller path, call, function)`` of calls passing a parameter the
  function's flow proves."""
  candidates = _candidates(model)
  if not candidates:
    solve_givers()
    return []
  references = _references(model, candidates)
  model.referenced_elsewhere = references
  model.reference_candidates = set(candidates)
  verdicts, why = model.param_verdicts, model.param_why
  for key, found in references.items():
    function = candidates[key].node
    escaped = [r for r in found if r.call is None]
    for parameter in _names.parameter_names(function):
      verdicts[(function, parameter)] = not escaped
      if escaped:
        why[(function, parameter)] = _codes.filled_note(
            _codes.PARAMETER_FUNCTION_USED, function=function.name,
            where=f'{escaped[0].path}:{escaped[0].node.lineno}')
  flows = {}
  for _ in range(_MAX_ROUNDS):
    solve_givers()
    flows = {}
    changed = False
    refuted: set = set()
    for key, found in references.items():
      function = candidates[key].node
      for parameter in _names.parameter_names(function):
        if not verdicts[(function, parameter)]:
          continue
        for reference in found:
          argument = _names.argument_for(function, parameter, reference.call)
          flow = flows.get(reference.path)
          if flow is None:
            flow = flows[reference.path] = _flow.OptimizerFlow(
                model.trees[reference.path], model.names[reference.path])
          if argument is None or not flow.is_optimizer(argument):
            verdicts[(function, parameter)] = False
            refuted.add((function, parameter))
            passed = 'nothing' if argument is None else (
                f'`{ast.unparse(argument)[:60]}`')
            why[(function, parameter)] = _codes.filled_note(
                _codes.PARAMETER_PASSED_UNPROVEN,
                where=f'{reference.path}:{reference.call.lineno}',
                passed=passed, parameter=parameter, function=function.name)
            changed = True
            break
    if not changed:
      break
    # (the flows asked what they hold that read one of them are stale)
    model.forget_refuted(refuted)
  else:
    for key in verdicts:
      verdicts[key] = False
    model.forget_holding_flows()
    solve_givers()
    return []
  # The last round changed no verdict: its flows saw the model as it is.
  return _links(model, candidates, references, flows)


def why_unproven(model, names, tree, line, code) -> str:
  """Why the parameters ``code`` reads attributes of, in the module
  function of ``tree`` around ``line``, are not optimizers by their calls
  from other modules: what one of them passes, or a use that is not a
  call ('' where none is)."""
  if model is None:
    return ''
  reasons = []
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
        node.lineno <= line <= (node.end_lineno or node.lineno)):
      for parameter in _names.parameter_names(node):
        if re.search(rf'\b{parameter}\s*\.', code) and model.param_verdict(
            names, node.name, parameter) is False:
          reasons.append(model.param_why_of(names, node.name, parameter))
  return '; '.join(r for r in reasons if r)


def _links(model, candidates, references, flows) -> list:
  """``(caller path, call, function)`` per call from another module
  passing a parameter that the function's own flow proves; ``flows``:
  those the fixpoint's last round built, by path (the model has not
  changed since)."""
  links = []
  own_flows = dict(flows)
  for key, found in references.items():
    function = candidates[key]
    flow = own_flows.get(function.path)
    if flow is None:
      flow = own_flows[function.path] = _flow.OptimizerFlow(
          model.trees[function.path], model.names[function.path])
    scope = flow.scopes[function.node]
    proven = [p for p in _names.parameter_names(function.node)
              if model.param_verdicts.get((function.node, p)) and
              (scope, p) in flow.alive]
    if not proven:
      continue
    links += [(r.path, r.call, function) for r in found]
  return links
