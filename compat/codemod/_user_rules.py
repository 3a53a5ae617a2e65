"""A user's own ``flax.optim.OptimizerDef`` subclass: kept, on a new base.

``flax_optim_rules.RuleDef`` (jax and optax only) runs flax.optim's hooks
(``init_param_state``, ``apply_param_gradient``, ``init_state``,
``apply_gradient``) as an Optax transform, so ``migrate`` keeps the user's
class verbatim and changes only what named flax.optim:

  class Rule(optim.OptimizerDef):  ->  class Rule(flax_optim_rules.RuleDef):
    optim.OptimizerState(s + 1, ps)  ->  flax_optim_rules.RuleState(s + 1, ps)
  Rule(...) (a definition)         ->  Rule(...).to_optax()
  Rule(...) (rate set per step)    ->  flax_optim_rules.inject_learning_rate(
                                         Rule(...))(learning_rate=0.0)

The rest of each flow (``.create``, ``apply_gradient``, ``.target``...) is a
built-in definition's. A class moves only where that is certain: it derives
from ``OptimizerDef`` alone, and its methods ask ``self``/``super()`` for
nothing but what they define or ``RuleDef`` has. The class and every call
of it are one flow across modules (``_project`` links them): all move or
none does. The report points to porting the rule by hand; ``PORT_TEST``
is the test module ``migrate --write`` puts beside the class's module to
prove such a port equal to the kept rule. Stdlib only.
"""

import ast
import os
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _multi
from compat.codemod import _names

# What migrated code names (flax_optim_rules' public surface).
RULE_BASE = 'RuleDef'
# The replacement of scan's finding on a construction of the user's rule
# class (``Rule(...)``), which ``plan_construction`` rewrites: the plan
# leaves such findings out of those it reports as left (it plans the
# construction from the tree).
CONSTRUCTION = _codes.USER_RULE_REPLACEMENT


def is_construction(finding) -> bool:
  """``finding`` is scan's on a construction of the user's rule class."""
  return finding.construct == _members.OPTIMIZER_DEF and (
      finding.replacement == CONSTRUCTION)
RULE_STATE = 'RuleState'
# What a subclass may ask ``self``/``super()`` for besides its own names.
RULE_DEF_API = frozenset((
    '__init__', *_members.DEF_HOOKS, 'to_optax',
    'learning_rate_factory', '__class__', '__dict__'))
_DEF_CLASSES = ('flax.optim.OptimizerDef', 'flax.optim.base.OptimizerDef')
# A MultiOptimizer subclass moves onto flax_optim_rules.MultiRuleDef, which
# has only what an override run when the optimizer is made asks for: its
# methods may ask ``self``/``super()`` for these besides their own names,
# and override none of flax.optim's other hooks (MultiRuleDef never runs
# them). What they get from ``self.traversals`` must be a filter only:
# a read named like flax.optim's Traversal API keeps the class.
MULTI_BASE = 'MultiRuleDef'
MULTI_BASE_API = frozenset(('__init__', 'traversals', _members.INIT_STATE,
                            'to_optax', '__class__', '__dict__'))
_MULTI_UNRUN_HOOKS = frozenset((
    '__init__', _members.INIT_PARAM_STATE, _members.APPLY_PARAM_GRADIENT,
    _members.APPLY_GRADIENT, _members.UPDATE_HYPER_PARAMS, _members.CREATE,
    _members.HYPER_PARAMS, 'sub_optimizers',
    'traversals'))
_TRAVERSAL_API = frozenset(('iterate', 'update', 'set', 'merge', 'compose'))
_STATE_CLASSES = ('flax.optim.OptimizerState', 'flax.optim.base.OptimizerState')
PORT_NOTE = _codes.PORT_KEPT_RULE  # (the rule table's note, by name)


def port_test_path(module_path: str, class_name: str = '') -> str:
  """Where a kept rule's port test goes: ``<dir>/<module>_port_test.py``
  (``<module>_<class>_port_test.py`` where the module keeps several)."""
  head, tail = os.path.split(module_path)
  stem = tail[:-len('.py')] + (f'_{class_name}' if class_name else '')
  return os.path.join(head, stem + '_port_test.py')


def _own_names(node: ast.ClassDef) -> set:
  """Names the class itself defines: its body's and ``self.x = ...``."""
  names = set()
  for item in node.body:
    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(item.name)
    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
      targets = item.targets if isinstance(item, ast.Assign) else [item.target]
      names.update(t.id for t in targets if isinstance(t, ast.Name))
  for sub in ast.walk(node):
    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and (
        isinstance(sub.value, ast.Name) and sub.value.id == 'self'):
      names.add(sub.attr)
  return names


def _asked_of_base(node: ast.ClassDef) -> set:
  """``x`` of every ``self.x`` read and ``super().x`` in the class."""
  asked = set()
  for sub in ast.walk(node):
    if not isinstance(sub, ast.Attribute) or isinstance(sub.ctx, ast.Store):
      continue
    receiver = sub.value
    if isinstance(receiver, ast.Name) and receiver.id == 'self':
      asked.add(sub.attr)
    elif isinstance(receiver, ast.Call) and isinstance(
        receiver.func, ast.Name) and receiver.func.id == 'super':
      asked.add(sub.attr)
  return asked


def is_multi_subclass(names, node: ast.ClassDef) -> bool:
  """The class derives from flax.optim's MultiOptimizer alone."""
  return len(node.bases) == 1 and not node.keywords and (
      names.legacy_class(node.bases[0]) == _multi.MULTI_OPTIMIZER)


def _why_not_multi(names, node: ast.ClassDef) -> Optional[str]:
  """Why a MultiOptimizer subclass cannot move onto ``MultiRuleDef``."""
  own = _own_names(node)
  overridden = sorted(own & _MULTI_UNRUN_HOOKS)
  missing = sorted(_asked_of_base(node) - own - MULTI_BASE_API)
  traversal_reads = sorted({
      sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)
      and sub.attr in _TRAVERSAL_API})
  by_hand = _codes.filled_note(_codes.USER_MULTI_BY_HAND, name=node.name)
  if overridden or missing:
    return _codes.filled_note(
        _codes.USER_MULTI_OVERRIDES, name=node.name,
        members=', '.join(overridden + missing), base=MULTI_BASE,
        by_hand=by_hand)
  if traversal_reads:
    return _codes.filled_note(_codes.USER_MULTI_TRAVERSAL, name=node.name,
                              reads=', .'.join(traversal_reads),
                              by_hand=by_hand)
  for method in node.body:
    if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
        method.name == _members.INIT_STATE) and not _returns_base_state(method):
      return _codes.filled_note(_codes.USER_MULTI_INIT_STATE, name=node.name,
                                base=MULTI_BASE, by_hand=by_hand)
  return None


def _returns_base_state(method) -> bool:
  """Every return of ``method`` is ``super().init_state(...)`` as it is,
  and ``super().init_state`` is read nowhere else in it."""
  returns = [n for n in ast.walk(method) if isinstance(n, ast.Return)]
  supers = [n for n in ast.walk(method) if isinstance(n, ast.Attribute) and
            n.attr == _members.INIT_STATE and isinstance(n.value, ast.Call) and
            isinstance(n.value.func, ast.Name) and
            n.value.func.id == 'super']
  returned = [r.value.func for r in returns if isinstance(
      r.value, ast.Call)]
  return bool(returns) and len(returned) == len(returns) == len(
      supers) and all(any(s is r for r in returned) for s in supers)


def _other_modules_multi(names, call) -> bool:
  """``call`` makes a MultiOptimizer subclass another module defines."""
  model = names.model
  dotted = names.resolve(call.func)
  rule = model.user_rules.get(dotted) if model and dotted else None
  return rule is not None and rule[0] in model.names and is_multi_subclass(
      model.names[rule[0]], rule[1])


def why_not_kept(names, node: ast.ClassDef) -> Optional[str]:
  """Why the class cannot move onto ``RuleDef`` (a MultiOptimizer
  subclass: ``MultiRuleDef``) with certainty, or None."""
  if is_multi_subclass(names, node):
    reason = _why_not_multi(names, node)
    if reason:
      return reason
  elif len(node.bases) != 1 or node.keywords or (
      names.resolve(node.bases[0]) not in _DEF_CLASSES):
    bases = ', '.join(ast.unparse(b) for b in node.bases)
    return _codes.filled_note(_codes.USER_RULE_BASES, name=node.name,
                              bases=bases)
  missing = sorted(_asked_of_base(node) - _own_names(node) - RULE_DEF_API)
  if missing and not is_multi_subclass(names, node):
    return _codes.filled_note(_codes.USER_RULE_MISSING, name=node.name,
                              members=', '.join(missing))
  if not _called_in_scanned_code(names, node) and not called_nowhere(
      names, node):
    where = names.model.mention(node, names.path) if (
        names.model is not None and names.path is not None) else None
    return _codes.filled_note(_codes.USER_RULE_CALLED_NOWHERE, name=node.name,
                              but=f' but {where}' if where else '')
  return None


def called_nowhere(names, node) -> bool:
  """Nothing in the project calls or names the undecorated class or
  function ``node`` of the module of ``names`` but its definition: dead
  code in the project, which migrate treats as one program (a module read
  alone is not one)."""
  model = names.model
  # A decorator (gin's and its kind) may hand it to callers elsewhere.
  return model is not None and names.path is not None and not (
      node.decorator_list) and model.mention(node, names.path) is None


def _called_in_scanned_code(names, node: ast.ClassDef) -> bool:
  """The class is called in its own module or, per the project's model, in
  another scanned one."""
  if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and
         n.func.id == node.name for n in ast.walk(names.tree)):
    return True
  model, module = names.model, names.package_module
  return model is not None and module is not None and (
      f'{module}.{node.name}' in model.called_rules)


def plan_class(planner, node: ast.ClassDef, rules_module: str
               ) -> Optional[str]:
  """Moves the class onto ``RuleDef``; returns why not, or None."""
  reason = why_not_kept(planner.names, node)
  if reason:
    return reason
  base = node.bases[0]
  planner.claimed.add(id(base))
  planner.edit(base, f'{rules_module}.' + (
      MULTI_BASE if is_multi_subclass(planner.names, node) else RULE_BASE),
               'algorithm_rule')
  # The edit counts at the class's line: where scan reports the class.
  planner.edits[-1] = planner.edits[-1]._replace(line=node.lineno)
  for sub in ast.walk(node):
    if isinstance(sub, (ast.Name, ast.Attribute)) and (
        planner.names.resolve(sub) in _STATE_CLASSES):
      planner.claimed.add(id(sub))
      planner.edit(sub, f'{rules_module}.{RULE_STATE}', 'algorithm_rule')
  planner.imports.append((rules_module, None, None))
  return None


def plan_construction(planner, call: ast.Call, rules_module: str,
                      inject: bool) -> Optional[str]:
  """``Rule(...)`` -> its Optax transform (the rate injected if set per
  step, as for a built-in rule); a MultiOptimizer subclass's call (its
  pairs as ``MultiOptimizer``'s, the rates its definitions') ->
  ``.to_optax()``. Returns why not, or None."""
  if _multi.is_multi(call, planner.names):
    reason = _multi.multi_problem(planner, call)
    if reason is None:
      planner.edit(call, '{rule}.to_optax()', 'algorithm', rule=call)
    return reason
  if _other_modules_multi(planner.names, call):
    return _codes.filled_note(_codes.USER_MULTI_OTHER_MODULE,
                              call=ast.unparse(call.func))
  if inject:
    planner.imports.append((rules_module, None, None))
    planner.edit(call, f'{rules_module}.inject_learning_rate({{rule}})('
                 'learning_rate=0.0)', 'algorithm', rule=call)
  else:
    planner.edit(call, '{rule}.to_optax()', 'algorithm', rule=call)
  return None


_PORT_TEST = '''\
"""{class_name}'s hand port to plain Optax, proven equal to the kept rule.

Written by ``flax-optim-compat migrate --write`` beside {module}, whose
{class_name} it kept on flax_optim_rules.RuleDef (the same numbers as under
flax.optim). Port the rule to an ``optax.GradientTransformation`` in
``port()`` below (or import yours there): this test then trains both for
{steps} steps on the same gradients and fails at the first differing leaf
(``compat.testing.assert_same_training``). Until ``port()`` returns a
transform it fails, saying so. Set ``RULE`` to the configuration you train
with, and ``PARAMS`` to shapes and dtypes like your model's.
"""

import jax
import jax.numpy as jnp
import optax

from compat import testing
from {package} import {module_name}

RULE = {module_name}.{class_name}({arguments})
PARAMS = {{'kernel': jnp.ones((8, 4)), 'bias': jnp.zeros((4,))}}


def port() -> optax.GradientTransformation:
  """Your plain Optax version of {class_name}."""
  raise NotImplementedError(
      'write the plain Optax port of {class_name} in port() (or return '
      'yours from here): this test proves it equal to the kept rule')


def _gradients(count):
  keys = jax.random.split(jax.random.PRNGKey(0), count)
  leaves, treedef = jax.tree_util.tree_flatten(PARAMS)
  for key in keys:
    parts = jax.random.split(key, len(leaves))
    yield treedef.unflatten([jax.random.normal(k, p.shape, p.dtype)
                             for k, p in zip(parts, leaves)])


def _train_step(tx):
  def step(state, grads):
    params, opt_state = state
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
  return jax.jit(step)


def test_port_trains_like_the_kept_rule():
  kept, ported = RULE.to_optax(), port()
  testing.assert_same_training(
      _train_step(kept), _train_step(ported),
      (PARAMS, kept.init(PARAMS)), (PARAMS, ported.init(PARAMS)),
      batches=_gradients({steps}))
'''


def port_test_source(module: str, node: ast.ClassDef) -> str:
  """The port's test module for class ``node`` of module ``module``
  (dotted import name)."""
  package, _, module_name = module.rpartition('.')
  init = next((item for item in node.body if isinstance(
      item, ast.FunctionDef) and item.name == '__init__'), None)
  rated = init is not None and 'learning_rate' in [
      a.arg for a in init.args.args + init.args.kwonlyargs]
  source = _PORT_TEST.format(
      class_name=node.name, module=module, module_name=module_name,
      package=package, steps=10,
      arguments='learning_rate=1e-2' if rated else '')
  if not package:
    source = source.replace(f'from  import {module_name}',
                            f'import {module_name}')
  return source


def port_tests(path: str, root: str, old: bytes, notes) -> list:
  """``[(test path, source)]`` for the rules a module's plan kept."""
  lines = {note.line for note in notes
           if note.construct == 'optimizer_def_subclass'}
  if not lines:
    return []
  modules = _names.module_names(path, root)
  if not modules:
    return []
  tree = ast.parse(old)
  kept = [node for node in tree.body
          if isinstance(node, ast.ClassDef) and node.lineno in lines]
  return [(port_test_path(path, node.name if len(kept) > 1 else ''),
           port_test_source(modules[0], node)) for node in kept]
