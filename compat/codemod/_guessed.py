"""Usages judged only by names, where they cannot meet a proven flow.

A notebook run after others (its kernel imported flax.optim, jax... in
cells of another file) names flax.optim nowhere: scan reports its
``optimizer.apply_gradient(g)`` as likely (by names), and nothing in the
file can prove what ``optimizer`` is. The file may still read a proven
optimizer (a field of a state class, ``state.optimizer.target``), which
migrates with its flow across modules. Such a likely usage holds that flow
only where a migrated optimizer could reach it; it cannot when

* the module binds no flax.optim name (so no definition of its own is
  rewritten: every rewrite here is of a proven optimizer's attribute),
* no other scanned module imports from it (nobody else calls its
  functions with a migrated optimizer), and
* every proven optimizer in it is only read (``opt.target``) or bound to
  a name, itself proven, never passed on, returned or stored elsewhere.

The likely usage is then left as it is, listed with what to do by hand, and
the proven flow is rewritten. Stdlib only.
"""

import ast

from compat.codemod import _names


def cannot_reach_flow(planner) -> bool:
  """Whether the module's likely usages stay apart from its proven flows."""
  names = planner.names
  if planner.exported or names.star_flax_optim or any(
      _names.is_flax_optim(names.resolve(ast.Name(id=local)))
      for local in names.bindings):
    return False
  parents = planner.parents
  for node in ast.walk(planner.tree):
    if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(
        node.ctx, ast.Load) or not planner.flow.is_optimizer(node):
      continue
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
      continue  # read: rewritten with the flow
    if isinstance(parent, ast.Assign) and parent.value is node and all(
        isinstance(t, ast.Name) and planner.flow.is_optimizer(t)
        for t in parent.targets):
      continue  # bound to a proven name, whose uses are checked here too
    return False
  return True
