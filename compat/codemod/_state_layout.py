"""flax.optim's state layout in migrated code: ``flax_optim_rules``' view.

Research code read and wrote flax.optim's state directly: it reset the
moments of some params (``opt.replace(state=reset(opt.state))`` with
``_AdamParamState(...)`` built by hand), and kept checkpoints keyed by
``{'target', 'state': {'step', 'param_states'}}``. ``flax_optim_rules``
gives that layout over a TrainState's ``step``, ``params`` and Optax
``opt_state`` (``flax_optim_rules/_legacy_layout.py``), so these links of a
flow are rewritten with it, as part of the flow (all or none):

  opt.state                      -> flax_optim_rules.optimizer_state(opt)
  opt.replace(state=s)           -> flax_optim_rules.replace_optimizer_state(
                                      opt, s)
  opt.replace(target=t, state=s) -> flax_optim_rules.replace_optimizer_state(
                                      opt.replace(params=t), s)
  opt.state_dict()               -> flax_optim_rules.state_dict(opt)
  opt.restore_state(d)           -> flax_optim_rules.restore_state(opt, d)
  flax.serialization.to_state_dict(opt)      -> (as opt.state_dict())
  flax.serialization.from_state_dict(opt, d) -> (as opt.restore_state(d))
  optim.OptimizerState            -> flax_optim_rules.OptimizerState
  optim.adam._AdamParamState      -> flax_optim_rules.AdamParamState
  optim.Optimizer(opt_def, state=s, target=t)
      -> flax_optim_rules.replace_optimizer_state(TrainState.create(
             apply_fn=None, params=t, tx=opt_def), s)

(``opt``: an expression proven to be a migrated optimizer.) A state dict
read back takes flax.optim's layout or the TrainState's, so checkpoints
either the old code or the migrated one wrote keep loading. Stdlib only.
"""

import ast
from typing import Optional

from compat import _lazy
from compat.codemod import _codes
from compat.codemod import _members

_CATALOGUE = _lazy.module_without_package('legacy_optim', 'catalogue')

# The Optimizer attributes this module rewrites.
LINKS = frozenset((_members.STATE, _members.REPLACE, _members.STATE_DICT,
                   _members.RESTORE_STATE))
STATE_CLASSES = ('flax.optim.OptimizerState', 'flax.optim.base.OptimizerState')
_TO_STATE_DICT = 'flax.serialization.to_state_dict'
_FROM_STATE_DICT = 'flax.serialization.from_state_dict'
# What ``plan_serialization`` rewrites, by the path the call resolves to.
SERIALIZATIONS = (_TO_STATE_DICT, _FROM_STATE_DICT)


def param_state_classes() -> dict:
  """flax.optim's per-parameter state class path -> flax_optim_rules' name:
  ``flax.optim.adam._AdamParamState`` -> ``AdamParamState``, for each
  algorithm of the catalogue with per-parameter state."""
  classes = {}
  for algorithm in _CATALOGUE.RULES:
    if algorithm.state_fields:
      name = f'{algorithm.name}ParamState'
      classes[f'flax.optim.{algorithm.module}._{name}'] = name
  return classes


# Definitions whose Optax state flax_optim_rules' view does not lay out.
_NOT_LAID_OUT = ('multi_optimizer', 'weight_norm')


def unsupported(planner, covered=()) -> Optional[str]:
  """Why this module's optimizers have no view of flax.optim's layout
  (``covered``: the definitions the caller's function lays out besides
  one rule's transform)."""
  if planner.tier != 'exact':
    return _codes.note(_codes.STOCK_TIER_LAYOUT)
  found = sorted({f.construct for f in planner.findings
                  if f.construct in _NOT_LAID_OUT and
                  f.construct not in covered})
  if found:
    return _codes.filled_note(_codes.DEFINITIONS_NOT_LAID_OUT,
                              kinds=' and '.join(found))
  return None


def plan_use(planner, node, parent, receiver, rules: str) -> Optional[str]:
  """Rewrites ``receiver.<node.attr>`` (a link in ``LINKS``); returns why
  not where it cannot."""
  called = isinstance(parent, ast.Call) and parent.func is node
  if node.attr != _members.REPLACE or any(
      k.arg == _members.STATE for k in getattr(parent, 'keywords', ())):
    why = unsupported(planner)
    if why:
      return why
  if node.attr == _members.STATE:
    if not isinstance(node.ctx, ast.Load):
      return _codes.note(_codes.STATE_ASSIGNED)
    planner.imports.append((rules, None, None))
    planner.edit(node, f'{rules}.optimizer_state({{receiver}})',
                 'optimizer_use', receiver=receiver)
    return None
  if not called:
    return _codes.filled_note(_codes.LAYOUT_MEMBER_NOT_CALLED,
                              attr=node.attr, rules=rules)
  if any(isinstance(a, ast.Starred) for a in parent.args) or any(
      k.arg is None for k in parent.keywords):
    return _codes.note(_codes.STARRED_ARGUMENTS)
  if node.attr == _members.REPLACE:
    return _plan_replace(planner, parent, receiver, rules)
  if node.attr == _members.STATE_DICT and not parent.args and (
      not parent.keywords):
    planner.imports.append((rules, None, None))
    planner.edit(parent, f'{rules}.state_dict({{receiver}})', 'optimizer_use',
                 receiver=receiver)
    return None
  if node.attr == _members.RESTORE_STATE and len(parent.args) == 1 and not (
      parent.keywords):
    planner.imports.append((rules, None, None))
    planner.edit(parent, f'{rules}.restore_state({{receiver}}, {{value}})',
                 'optimizer_use', receiver=receiver, value=parent.args[0])
    return None
  return _codes.filled_note(_codes.LAYOUT_MEMBER_ARGUMENTS, attr=node.attr)


def _plan_replace(planner, call, receiver, rules) -> Optional[str]:
  given = {k.arg: k.value for k in call.keywords}
  if call.args or _members.STATE not in given or (
      set(given) - {_members.STATE, _members.TARGET}):
    return _codes.note(_codes.REPLACE_UNMAPPED)
  planner.imports.append((rules, None, None))
  if _members.TARGET in given:
    planner.edit(call, f'{rules}.replace_optimizer_state({{receiver}}.replace('
                 'params={target}), {state})', 'optimizer_use',
                 receiver=receiver, target=given[_members.TARGET],
                 state=given[_members.STATE])
  else:
    planner.edit(call, f'{rules}.replace_optimizer_state({{receiver}}, '
                 '{state})', 'optimizer_use', receiver=receiver,
                 state=given[_members.STATE])
  return None


def plan_serialization(planner, call, rules: str,
                       path: Optional[str]) -> bool:
  """``flax.serialization.to_state_dict(opt)`` / ``from_state_dict(opt, d)``
  of a migrated optimizer: flax.optim's layout through ``rules``. True when
  rewritten (the checkpoint note does not apply then). ``path``: what the
  call's function resolves to (``_names.called``)."""
  if path not in SERIALIZATIONS or call.keywords or any(
      isinstance(a, ast.Starred) for a in call.args):
    return False
  arity = 1 if path == _TO_STATE_DICT else 2
  if len(call.args) != arity or not planner.flow.is_optimizer(
      call.args[0]) or unsupported(planner):
    return False
  planner.imports.append((rules, None, None))
  if path == _TO_STATE_DICT:
    planner.edit(call, f'{rules}.state_dict({{target}})', 'checkpoint',
                 target=call.args[0])
  else:
    planner.edit(call, f'{rules}.restore_state({{target}}, {{value}})',
                 'checkpoint', target=call.args[0], value=call.args[1])
  return True


# flax.optim's ``Optimizer`` fields, in their order.
_OPTIMIZER_FIELDS = (_members.OPTIMIZER_DEF, _members.STATE, _members.TARGET)


def hand_built_parts(call) -> Optional[dict]:
  """``{field: value}`` of ``optim.Optimizer(optimizer_def, state,
  target)`` given in full, or None."""
  if any(isinstance(a, ast.Starred) for a in call.args) or any(
      k.arg is None for k in call.keywords) or len(call.args) > 3:
    return None
  given = dict(zip(_OPTIMIZER_FIELDS, call.args))
  for keyword in call.keywords:
    if keyword.arg not in _OPTIMIZER_FIELDS or keyword.arg in given:
      return None
    given[keyword.arg] = keyword.value
  return given if len(given) == 3 else None


def plan_hand_built(planner, call, train_state_name,
                    rules: str) -> Optional[str]:
  """``optim.Optimizer(opt_def, state=s, target=t)`` ->
  ``rules.replace_optimizer_state(TrainState.create(apply_fn=None,
  params=t, tx=opt_def), s)``, where ``opt_def`` is a definition this
  flow rewrites; returns why not otherwise. ``train_state_name()``: the
  name flax.training.train_state is imported as (importing it)."""
  given = hand_built_parts(call)
  if given is None:
    return None
  if not planner.flow.is_def(given[_members.OPTIMIZER_DEF]):
    return _codes.note(_codes.HAND_BUILT_DEF_UNPROVEN)
  why = unsupported(planner)
  if why:
    return why
  planner.imports.append((rules, None, None))
  planner.edit(call, f'{rules}.replace_optimizer_state({train_state_name()}.'
               'TrainState.create(apply_fn=None, params={target}, '
               'tx={tx}), {state})', _members.CREATE,
               target=given[_members.TARGET],
               tx=given[_members.OPTIMIZER_DEF], state=given[_members.STATE])
  return None


def plan_reference(planner, node, path: str, rules: str) -> bool:
  """``optim.OptimizerState`` / ``optim.adam._AdamParamState`` (called, or
  in an annotation) -> ``rules``' class of flax.optim's fields. True when
  rewritten."""
  if path in STATE_CLASSES:
    name = _members.OPTIMIZER_STATE_CLASS  # (the same in rules)
  else:
    name = param_state_classes().get(path)
    if name is None:
      return False
  planner.imports.append((rules, None, None))
  planner.edit(node, f'{rules}.{name}', 'reference')
  return True
