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
an OptimizerDef on every path.

A rate per part and step, ``(hp0, hp1) = opt.optimizer_def.hyper_params``
then ``opt.apply_gradient(g, hyper_params=[hp0.replace(learning_rate=a),
hp1.replace(learning_rate=b)])``, becomes ``opt.replace(opt_state=
flax_optim_rules.set_learning_rates(opt.opt_state, [a, b])).apply_gradients(
grads=g)`` (the unpacking is deleted), where the unpacked names are read only
there, each in its own position (``hps = opt.optimizer_def.hyper_params``
read only as ``hps[0]``, ``hps[1]``, ... in those positions is the same),
and only their learning rate is replaced: the other hyper-parameters stay
the definition's, as they did. Stdlib only.
"""

import ast
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _names

MULTI_OPTIMIZER = _members.MULTI_OPTIMIZER_CLASS
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


def is_multi(call, names) -> bool:
  """A call of flax.optim's MultiOptimizer, or of a class of this module
  that derives from it alone (its pairs are MultiOptimizer's)."""
  name = names.legacy_class(call.func)
  if name == MULTI_OPTIMIZER:
    return True
  return name is not None and any(
      isinstance(node, ast.ClassDef) and node.name == name and
      len(node.bases) == 1 and not node.keywords and
      names.legacy_class(node.bases[0]) == MULTI_OPTIMIZER
      for node in names.tree.body)


# What a definition made in another module meets in a MultiOptimizer pair.
IN_MULTI_OPTIMIZER = _codes.note(_codes.IN_MULTI_OPTIMIZER)


def definition_consumer(node, parents, names) -> Optional[ast.Call]:
  """The ``MultiOptimizer(...)`` call whose pair has ``node`` as its
  definition (second element), or None."""
  found = pair_of(node, parents)
  if found is None or found[1] != 1 or not is_multi(found[0], names):
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
    return _codes.note(_codes.TRAVERSAL_ARGUMENTS)
  uses = [node]
  parent = parents.get(node)
  if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and (
      isinstance(parent.targets[0], ast.Name)):
    name = parent.targets[0].id
    scope = planner.flow.binding_scope_of(parent, name)
    if scope is None or len(scope.bindings.get(name, ())) != 1:
      return _codes.filled_note(_codes.TRAVERSAL_BOUND_TWICE, name=name)
    uses = _reads(planner.flow, scope, name)
    if not uses:
      return _codes.filled_note(_codes.TRAVERSAL_UNUSED, name=name)
  for use in uses:
    found = pair_of(use, parents)
    if found is None or found[1] != 0 or not is_multi(found[0], names):
      where = ast.unparse(parents.get(use, use))[:80]
      return _codes.filled_note(_codes.TRAVERSAL_REACHES, where=where)
  return None


def multi_problem(planner, node) -> Optional[str]:
  """Why ``optim.MultiOptimizer(...)`` at ``node`` cannot be rewritten."""
  if node.keywords or not node.args:
    return _codes.note(_codes.MULTI_KEYWORDS)
  for index, pair in enumerate(node.args):
    if not (isinstance(pair, ast.Tuple) and len(pair.elts) == 2):
      return _codes.filled_note(_codes.MULTI_NOT_PAIR, index=index + 1)
    traversal, definition = pair.elts
    if not _is_traversal_value(planner, traversal):
      return _codes.filled_note(_codes.MULTI_TRAVERSAL_UNPROVEN,
                                index=index + 1,
                                traversal=ast.unparse(traversal)[:60])
    if not planner.flow.is_def(definition):
      return _codes.filled_note(_codes.MULTI_DEFINITION_UNPROVEN,
                                index=index + 1,
                                definition=ast.unparse(definition)[:60])
  return None


# flax.optim's ModelParamTraversal was flax.traverse_util's, re-exported.
_TRAVERSE_UTIL = 'flax.traverse_util.' + PARAM_TRAVERSAL


def is_param_traversal(names, func) -> bool:
  """``func`` names ModelParamTraversal: flax.optim's, or the same class
  from flax.traverse_util (flax.optim re-exported it)."""
  return names_traversal(_names.called(names, func))


def names_traversal(callee: _names.Callee) -> bool:
  """``is_param_traversal`` of the function ``callee`` was read of."""
  return callee.name == PARAM_TRAVERSAL or callee.path == _TRAVERSE_UTIL


def _is_traversal_value(planner, node) -> bool:
  names = planner.names
  if isinstance(node, ast.Call):
    return is_param_traversal(names, node.func)
  if not isinstance(node, ast.Name):
    return False
  scope = planner.flow.binding_scope_of(node, node.id)
  values = [] if scope is None else scope.bindings.get(node.id, [])
  return len(values) == 1 and isinstance(values[0], ast.Call) and (
      is_param_traversal(names, values[0].func))


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


def _hyper_params_of_optimizer(planner, value) -> bool:
  """``value`` is ``<optimizer>.optimizer_def.hyper_params``."""
  return (isinstance(value, ast.Attribute) and
          value.attr == _members.HYPER_PARAMS and
          isinstance(value.value, ast.Attribute) and
          value.value.attr == _members.OPTIMIZER_DEF and
          planner.flow.is_optimizer(value.value.value))


def _bound_once(planner, name_node):
  """The one value ``name_node``'s name is bound to where it is read (an
  unpacked element as ``('item', value, index)``), or None."""
  scope = planner.flow.binding_scope_of(name_node, name_node.id)
  values = [] if scope is None else scope.bindings.get(name_node.id, [])
  return values[0] if len(values) == 1 else None


def _part_index(node) -> Optional[int]:
  """``k`` of ``hps[k]`` (a literal index, not negative), else None."""
  if not (isinstance(node, ast.Subscript) and isinstance(
      node.value, ast.Name) and isinstance(node.slice, ast.Constant)):
    return None
  index = node.slice.value
  return index if type(index) is int and index >= 0 else None


def _unpacked_from(planner, part):
  """``(assign, index)`` when ``part`` reads one sub-optimizer's
  hyper-parameters of an optimizer: a name bound once, by the unpacking
  ``(hp0, hp1, ...) = <optimizer>.optimizer_def.hyper_params``, or
  ``hps[k]`` where ``hps`` is bound once to that list; else None."""
  index = _part_index(part)
  if index is not None:
    value = _bound_once(planner, part.value)
    assign = planner.parents.get(value)
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and
            isinstance(assign.targets[0], ast.Name) and
            _hyper_params_of_optimizer(planner, value)):
      return None
    return assign, index
  if not isinstance(part, ast.Name):
    return None
  value = _bound_once(planner, part)
  if not (isinstance(value, tuple) and value[0] == 'item'):
    return None
  _, value, index = value
  assign = planner.parents.get(value)
  if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and
          isinstance(assign.targets[0], (ast.Tuple, ast.List)) and
          all(isinstance(t, ast.Name) for t in assign.targets[0].elts)):
    return None
  if not _hyper_params_of_optimizer(planner, value):
    return None
  return assign, index


def _rate_of(element):
  """``E`` of a list element ``hp.replace(learning_rate=E)`` (``hp`` a name
  or ``hps[k]``), or None."""
  if not (isinstance(element, ast.Call) and isinstance(
      element.func, ast.Attribute) and element.func.attr == _members.REPLACE and
          isinstance(element.func.value, (ast.Name, ast.Subscript)) and
          not element.args and
          [k.arg for k in element.keywords] == ['learning_rate']):
    return None
  return element.keywords[0].value


def _in_override_list(planner, part, position, parts) -> Optional[ast.AST]:
  """The ``hyper_params=[...]`` list where ``part`` is read as
  ``part.replace(learning_rate=...)`` at ``position`` (of ``parts``
  elements, when known), else None."""
  replace = planner.parents.get(part)
  element = planner.parents.get(replace)
  listed = planner.parents.get(element)
  keyword = planner.parents.get(listed)
  if not (isinstance(listed, (ast.List, ast.Tuple)) and
          isinstance(keyword, ast.keyword) and
          keyword.arg == _members.HYPER_PARAMS and
          _rate_of(element) is not None and
          parts in (None, len(listed.elts)) and
          listed.elts.index(element) == position):
    return None
  return listed


def _override_lists(planner, assign) -> Optional[list]:
  """The ``hyper_params=[...]`` lists that read what ``assign`` binds,
  each sub-optimizer's part in its own position and only as
  ``.replace(learning_rate=...)``; None if any read is another.

  Unpacked names give the number of parts; ``hps[k]`` reads do not, and
  each list holds its own ``hps[0]``, ``hps[1]``, ... in order (a list
  of another length than the optimizer's parts fails in the rewrite as
  the unpacking did)."""
  lists = []
  target = assign.targets[0]
  if isinstance(target, ast.Name):
    scope = planner.flow.binding_scope_of(target, target.id)
    for read in _reads(planner.flow, scope, target.id):
      subscript = planner.parents.get(read)
      index = _part_index(subscript)
      listed = None if index is None else _in_override_list(
          planner, subscript, index, None)
      if listed is None:
        return None
      lists.append(listed)
    return lists
  names = target.elts
  for position, name in enumerate(names):
    scope = planner.flow.binding_scope_of(name, name.id)
    for read in _reads(planner.flow, scope, name.id):
      listed = _in_override_list(planner, read, position, len(names))
      if listed is None:
        return None
      lists.append(listed)
  return lists


def hyper_params_unpacking(planner, node) -> Optional[ast.Assign]:
  """The statement ``(hp0, ...) = node.hyper_params`` (or ``hps =
  node.hyper_params``) when ``node`` (an optimizer's ``.optimizer_def``)
  is read only for it and what it binds only feeds
  ``hyper_params=[hp0.replace(learning_rate=...), ...]``."""
  value = planner.parents.get(node)
  assign = planner.parents.get(value)
  if not (isinstance(value, ast.Attribute) and
          value.attr == _members.HYPER_PARAMS and isinstance(assign, ast.Assign)
          and assign.value is value and len(assign.targets) == 1):
    return None
  target = assign.targets[0]
  if isinstance(target, ast.Name):
    if _bound_once(planner, target) is not value:
      return None
  elif not (isinstance(target, (ast.Tuple, ast.List)) and target.elts and
            all(isinstance(p, ast.Name) and _unpacked_from(planner, p)
                is not None for p in target.elts)):
    return None
  return assign if _override_lists(planner, assign) else None


def plan_hyper_params(planner, call, receiver, grads,
                      rules_module) -> Optional[str]:
  """``opt.apply_gradient(g, hyper_params=[hp0.replace(learning_rate=a),
  ...])`` -> the rates set in the multi_optimizer state, then the step."""
  listed = call.keywords[0].value
  why = _codes.note(_codes.HYPER_PARAMS_LIST)
  if not isinstance(listed, (ast.List, ast.Tuple)) or not listed.elts:
    return why
  rates = {}
  for position, element in enumerate(listed.elts):
    rate = _rate_of(element)
    found = None if rate is None else _unpacked_from(planner,
                                                     element.func.value)
    if found is None or found[1] != position:
      return why
    assign, _ = found
    source = assign.value.value.value  # <optimizer>.optimizer_def
    if ast.dump(source) != ast.dump(receiver) or hyper_params_unpacking(
        planner, assign.value.value) is None:
      return why
    rates[f'rate{position}'] = rate
  planner.imports.append((rules_module, None, None))
  listed_rates = ', '.join('{%s}' % name for name in rates)
  planner.edit(
      call, '{receiver}.replace(opt_state=%s.set_learning_rates('
      '{receiver}.opt_state, [%s])).apply_gradients(grads=%s)' % (
          rules_module, listed_rates, grads), 'apply_gradient_overrides',
      receiver=receiver, grads=call.args[0], **rates)
  return None
