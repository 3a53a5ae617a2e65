"""``MultiOptimizer`` of ``ModelParamTraversal``s: the exact-tier rewrite.

flax.optim's ``MultiOptimizer((traversal, def), ...)`` with
``ModelParamTraversal(filter_fn)`` traversals becomes
``flax_optim_rules.multi_optimizer((traversal, tx), ...)`` with
``flax_optim_rules.ModelParamTraversal(filter_fn)``: only the two callees
change, so the pairs, the filters and the names they are bound to stay the
user's own text, and each definition is rewritten where it is made (here, or
in the factory of another module it comes from: ``_project`` links them).

Certain only where every traversal is a ``ModelParamTraversal`` call that
reaches nothing but the first element of a pair of a rewritten
``MultiOptimizer`` (the rules' traversal selects leaves; it cannot
iterate or update trees as flax.optim's could) and every second element is
an OptimizerDef on every path. Stdlib only.
"""

import ast
from typing import Optional

MULTI_OPTIMIZER = 'MultiOptimizer'
PARAM_TRAVERSAL = 'ModelParamTraversal'


def pair_of(node, parents) -> Optional[tuple]:
  """``(multi call, position in the pair)`` when ``node`` is an element of a
  ``(traversal, def)`` tuple passed positionally to a call; else None."""
  pair = parents.get(node)
  if not (isinstance(pair, ast.Tuple) and len(pair.elts) == 2):
    return None
  call = parents.get(pair)
  if not (isinstance(call, ast.Call) and pair in call.args):
    return None
  return call, pair.elts.index(node)


def _is_multi(call, names) -> bool:
  return names.legacy_class(call.func) == MULTI_OPTIMIZER


# What a definition made in another module meets in a MultiOptimizer pair.
IN_MULTI_OPTIMIZER = 'it goes into the MultiOptimizer here'


def definition_consumer(node, parents, names) -> Optional[ast.Call]:
  """The ``MultiOptimizer(...)`` call whose pair has ``node`` as its
  definition (second element), or None."""
  found = pair_of(node, parents)
  if found is None or found[1] != 1 or not _is_multi(found[0], names):
    return None
  return found[0]


def _reads(flow, assign_scope, name) -> list:
  """Every read of ``name`` that sees the binding of ``assign_scope``."""
  return [node for node in ast.walk(assign_scope.node)
          if isinstance(node, ast.Name) and node.id == name and
          isinstance(node.ctx, ast.Load) and
          flow.binding_scope_of(node, name) is assign_scope]


def traversal_problem(planner, node) -> Optional[str]:
  """Why ``optim.ModelParamTraversal(...)`` at ``node`` cannot be rewritten
  (None: it can)."""
  parents, names = planner.parents, planner.names
  if len(node.args) + len(node.keywords) != 1 or any(
      isinstance(a, ast.Starred) for a in node.args) or any(
          k.arg != 'filter_fn' for k in node.keywords):
    return 'ModelParamTraversal takes its filter as its one argument'
  uses = [node]
  parent = parents.get(node)
  if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and (
      isinstance(parent.targets[0], ast.Name)):
    name = parent.targets[0].id
    scope = planner.flow.binding_scope_of(parent, name)
    if scope is None or len(scope.bindings.get(name, ())) != 1:
      return f'`{name}` is bound more than once'
    uses = _reads(planner.flow, scope, name)
    if not uses:
      return f'`{name}` is never used'
  for use in uses:
    found = pair_of(use, parents)
    if found is None or found[1] != 0 or not _is_multi(found[0], names):
      where = ast.unparse(parents.get(use, use))[:80]
      return (f'the traversal reaches `{where}`, not only the first '
              'element of a MultiOptimizer pair (flax_optim_rules.'
              'ModelParamTraversal selects leaves for multi_optimizer; it '
              'does not iterate or update trees)')
  return None


def multi_problem(planner, node) -> Optional[str]:
  """Why ``optim.MultiOptimizer(...)`` at ``node`` cannot be rewritten."""
  if node.keywords or not node.args:
    return 'MultiOptimizer takes (traversal, definition) pairs positionally'
  for index, pair in enumerate(node.args):
    if not (isinstance(pair, ast.Tuple) and len(pair.elts) == 2):
      return (f'argument {index + 1} is not a literal (traversal, '
              'definition) pair')
    traversal, definition = pair.elts
    if not _is_traversal_value(planner, traversal):
      return (f'pair {index + 1}: `{ast.unparse(traversal)[:60]}` is not '
              'provably a ModelParamTraversal made in this module')
    if not planner.flow.is_def(definition):
      return (f'pair {index + 1}: `{ast.unparse(definition)[:60]}` is not '
              'provably a flax.optim OptimizerDef')
  return None


def _is_traversal_value(planner, node) -> bool:
  names = planner.names
  if isinstance(node, ast.Call):
    return names.legacy_class(node.func) == PARAM_TRAVERSAL
  if not isinstance(node, ast.Name):
    return False
  scope = planner.flow.binding_scope_of(node, node.id)
  values = [] if scope is None else scope.bindings.get(node.id, [])
  return len(values) == 1 and isinstance(values[0], ast.Call) and (
      names.legacy_class(values[0].func) == PARAM_TRAVERSAL)


def plan_multi(planner, node, rules_module) -> Optional[str]:
  """``optim.MultiOptimizer(*pairs)`` -> ``flax_optim_rules.multi_optimizer(
  *pairs)``; the definitions in the pairs are rewritten where made."""
  reason = multi_problem(planner, node)
  if reason:
    return reason
  planner.imports.append((rules_module, None, None))
  planner.edit(node.func, f'{rules_module}.multi_optimizer', 'algorithm')
  return None


def plan_traversal(planner, node, rules_module) -> Optional[str]:
  """``optim.ModelParamTraversal(f)`` -> the rules' ``ModelParamTraversal``."""
  reason = traversal_problem(planner, node)
  if reason:
    return reason
  planner.imports.append((rules_module, None, None))
  planner.edit(node.func, f'{rules_module}.{PARAM_TRAVERSAL}', 'traversal')
  return None
