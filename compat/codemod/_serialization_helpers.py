"""The user's own functions that save or restore a value with flax's
serialization, given an optimizer.

Agents kept their checkpoint code in small helpers of their own:

  def save_model(filename, model):
    with open(filename, 'wb') as fp:
      fp.write(serialization.to_bytes(model))

  def load_model(filename, model):
    with open(filename, 'rb') as fp:
      return serialization.from_bytes(model, fp.read())

and called them with an optimizer (``opt = load_model(f, opt)``). Such a
helper does nothing with its parameter but hand it to flax.serialization
(``to_bytes``/``to_state_dict`` of it; ``from_bytes``/``from_state_dict``
into it, returned), so migrate follows the optimizer through the call and
keeps the helper as it is: the call site gives it flax.optim's tree of the
TrainState and turns the tree it restores back into one, so the files keep
flax.optim's layout at both ends (old files load, new files are alike):

  save_model(f, opt)
      -> save_model(f, flax_optim_rules.legacy_tree(opt))
  opt = load_model(f, opt)
      -> opt = flax_optim_rules.from_legacy_tree(
             opt, load_model(f, flax_optim_rules.legacy_tree(opt)))

A helper's role is told from its own body (``role_of``), whatever its name
or module. Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _walk

SAVE, RESTORE = 'save', 'restore'
# What a module holding such a helper spells (``flax.serialization``, or
# ``from flax import serialization``): scan's model reads such modules.
MODULE_WORD = 'serialization'
# scan's finding on a call giving such a helper an optimizer (what
# migrate writes there).
THROUGH_HELPER = _codes.THROUGH_HELPER_REPLACEMENT
# flax.serialization's calls that read their first argument as a tree and
# give back what is made of its leaves alone (bytes, a state dict).
_WRITES = ('flax.serialization.to_bytes', 'flax.serialization.to_state_dict')
# Those that restore into their first argument (the template), by its
# keyword too.
_RESTORES = ('flax.serialization.from_bytes',
             'flax.serialization.from_state_dict')


class Passed(NamedTuple):
  """An argument of a call of a serialization helper, and what the helper
  does with it."""
  argument: ast.AST
  role: str  # SAVE or RESTORE


# The attribute of a FunctionDef caching its parameters' roles: the flow's
# fixpoint asks about each call of a function again on every round.
_ROLES = '_foc_serialization_roles'


def role_of(function, parameter, names) -> Optional[str]:
  """``RESTORE`` where ``function`` (a FunctionDef of the module of
  ``names``) reads ``parameter`` only as the template of flax.serialization
  restores it returns (each return returns one); ``SAVE`` where it reads
  it only as what ``to_bytes``/``to_state_dict`` is given; else None."""
  return _roles_once(function, names).get(parameter)


def _roles_once(function, names) -> dict:
  """``_roles`` of ``function``, found once."""
  roles = getattr(function, _ROLES, None)
  if roles is None:
    roles = _roles(function, names)
    setattr(function, _ROLES, roles)  # (a def has one module's names)
  return roles


def _roles(function, names) -> dict:
  """``{parameter: role}`` of ``function``'s parameters that have one."""
  calls = {} if function.decorator_list else {
      id(call): (path, call) for call in _walk.under(function, names.tree)
      if isinstance(call, ast.Call) and (
          path := names.resolve(call.func)) in _WRITES + _RESTORES}
  if not calls:
    return {}  # (most functions: no flax.serialization call at all)
  given = {}  # id(tree or template) -> the call given it
  for path, call in calls.values():
    if path in _WRITES and len(call.args) == 1 and not call.keywords:
      given[id(call.args[0])] = path
    elif path in _RESTORES and _template(call) is not None:
      given[id(_template(call))] = path
  returns = [node for node in ast.walk(function)
             if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom))]
  returns_restores = all(
      isinstance(node, ast.Return) and id(node.value) in calls and
      calls[id(node.value)][0] in _RESTORES for node in returns)
  roles = {}
  for parameter in _names.parameter_names(function):
    if _names.is_optimizer_annotation(names, _annotation(function, parameter)):
      continue  # an optimizer there: its module's flow migrates the body
    uses = [node for node in ast.walk(function)
            if isinstance(node, ast.Name) and node.id == parameter]
    paths = [given.get(id(use)) for use in uses]
    if not uses or None in paths or _binds(function, parameter):
      continue
    restored = [use for use, path in zip(uses, paths) if path in _RESTORES]
    if not restored:
      roles[parameter] = SAVE
    elif returns_restores and all(
        _template(node.value) in uses for node in returns):
      roles[parameter] = RESTORE
  return roles


def _annotation(function, parameter) -> Optional[ast.AST]:
  arguments = function.args
  return next((a.annotation for a in arguments.posonlyargs + arguments.args +
               arguments.kwonlyargs if a.arg == parameter), None)


def _binds(function, parameter) -> bool:
  """``parameter`` is not a plain parameter of ``function`` alone: rebound,
  declared global or nonlocal, or bound again by a nested scope."""
  for node in ast.walk(function):
    if isinstance(node, ast.Name) and node.id == parameter and not (
        isinstance(node.ctx, ast.Load)):
      return True
    if isinstance(node, (ast.Global, ast.Nonlocal)) and (
        parameter in node.names):
      return True
    if node is not function and isinstance(node, (
        ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      return True  # (a nested scope: its reads are not followed)
  return False


def _template(call) -> Optional[ast.AST]:
  """The template a flax.serialization restore is given, where it is
  certain (two arguments, no ``*``/``**``)."""
  if len(call.args) + len(call.keywords) != 2 or any(
      isinstance(a, ast.Starred) for a in call.args) or any(
          k.arg is None for k in call.keywords):
    return None
  given = next((k.value for k in call.keywords
                if k.arg == _members.CHECKPOINT_TARGET), None)
  return given if given is not None else (call.args[0] if call.args else None)


def passed(call, function, names) -> list:
  """``[Passed]``: each argument ``call`` gives a parameter that
  ``function`` (the FunctionDef it runs, of the module of ``names``) only
  saves or restores with flax.serialization."""
  if any(isinstance(a, ast.Starred) for a in call.args) or any(
      k.arg is None for k in call.keywords):
    return []
  roles = _roles_once(function, names)
  if not roles:
    return []  # (most functions: no parameter has a role)
  found = []
  for parameter in _names.parameter_names(function):
    role = roles.get(parameter)
    argument = None if role is None else _names.argument_for(
        function, parameter, call)
    if argument is not None:
      found.append(Passed(argument, role))
  return found


def passes_of(call, local, names) -> list:
  """``passed`` of ``call`` in the module of ``names``, which runs
  ``local`` (a FunctionDef of that module, or None: then the project
  function it runs by its import, where the project's model knows one)."""
  function, model = local, names.model
  if function is None and model is not None:
    found = model.callee(call, names)
    if found is None or found.is_method or found.path not in model.names:
      return []
    function, names = found.node, model.names[found.path]
  return [] if function is None else passed(call, function, names)


def restored(call, local, names) -> Optional[ast.AST]:
  """The one template ``call`` gives a helper that restores into it and
  returns the result (``passes_of``), or None."""
  templates = [p.argument for p in passes_of(call, local, names)
               if p.role == RESTORE]
  return templates[0] if len(templates) == 1 else None
