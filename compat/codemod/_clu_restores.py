"""clu's ``Checkpoint.restore_or_initialize(state)`` reads both layouts.

clu's ``Checkpoint`` (and ``MultihostCheckpoint``) stores the flax state
with ``flax.serialization.to_bytes`` and restores it with ``from_bytes``
into the template given: a template holding a migrated TrainState meets a
file of flax.optim's layout and raises (no ``step`` field), so a migrated
program cannot resume what its original wrote. In a module that uses
flax.optim, where the checkpoint's name is bound only to clu's classes in
its function, migrate rewrites

  ckpt.restore_or_initialize(state)
      -> (flax_optim_rules.from_either_layout(state, ckpt.restore(None))
          if ckpt.get_latest_checkpoint_to_restore_from() is not None
          else ckpt.restore_or_initialize(state))

which is clu's own flow: with a checkpoint, its ``restore`` given no
template reads the raw state dict (and restores the TensorFlow state as
before), which ``from_either_layout`` fills the template with; without
one, ``restore_or_initialize`` writes the first checkpoint as before.
(``restore(None)`` and ``get_latest_checkpoint_to_restore_from`` are in
clu's releases since ``MultihostCheckpoint``; ``restore_dict`` is newer.)
Stdlib only.
"""

import ast
from typing import Optional

from compat.codemod import _codes

_CHECKPOINT_CLASSES = ('clu.checkpoint.Checkpoint',
                       'clu.checkpoint.MultihostCheckpoint')
METHOD = 'restore_or_initialize'
_TARGET_KEYWORD = 'state'


def target_of(planner, call) -> Optional[ast.AST]:
  """The template of ``call`` where it is clu's ``restore_or_initialize``
  on a name every binding of which (in its function) makes one of clu's
  checkpoints; None otherwise."""
  func = call.func
  if not (isinstance(func, ast.Attribute) and func.attr == METHOD and
          isinstance(func.value, ast.Name)):
    return None
  if not any(f.rule.startswith(_codes.FLAX_OPTIM) for f in planner.findings):
    return None  # (a module of no flax.optim: migrated already, say)
  if not _is_clu_checkpoint(planner, func.value):
    return None
  if len(call.args) + len(call.keywords) != 1 or any(
      isinstance(a, ast.Starred) for a in call.args):
    return None
  if call.keywords:
    keyword = call.keywords[0]
    return keyword.value if keyword.arg == _TARGET_KEYWORD else None
  return call.args[0]


def _is_clu_checkpoint(planner, name: ast.Name) -> bool:
  scope = planner.flow.binding_scope_of(name, name.id)
  values = scope.bindings.get(name.id, []) if scope is not None else []
  return bool(values) and all(
      isinstance(value, ast.Call) and
      planner.names.resolve(value.func) in _CHECKPOINT_CLASSES
      for value in values)


def rewrite(planner, call, target, rules: str) -> None:
  """Plans ``call``'s rewrite to read both layouts (module docstring)."""
  planner.edit(
      call,
      f'({rules}.from_either_layout({{target}}, {{checkpoint}}.restore('
      'None)) if {checkpoint}.get_latest_checkpoint_to_restore_from() is not '
      'None else {checkpoint}.restore_or_initialize({target}))',
      'checkpoint', target=target, checkpoint=call.func.value)
