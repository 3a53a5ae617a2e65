"""Restores of state that held a migrated optimizer read both layouts.

A program migrated part way through an experiment resumes from checkpoints
its original wrote: flax.optim's layout (``{'target', 'state': {'step',
'param_states'}}``, alone or nested in the user's state), where the
migrated state holds a TrainState. flax's ``restore_checkpoint`` given a
template of another structure gives the template back, silently (step 0,
zero moments). So each restore whose target holds an optimizer the flow
migrates (``OptimizerFlow.holds_optimizer``) reads the file raw and fills
the template with ``flax_optim_rules.from_either_layout``, which takes
either layout and raises naming what fits neither:

  checkpoints.restore_checkpoint(d, state, step=s)
      -> flax_optim_rules.from_either_layout(
             state, checkpoints.restore_checkpoint(d, None, step=s))
  serialization.from_bytes(state, data)
      -> flax_optim_rules.from_either_layout(
             state, serialization.msgpack_restore(data))
  serialization.from_state_dict(state, d)
      -> flax_optim_rules.from_either_layout(state, d)
  ckpt.restore_or_initialize(state)   (clu's Checkpoint: _clu_restores)

(``from_state_dict`` of a bare optimizer is ``_state_layout``'s
``restore_state``, which reads both layouts too.) A restore this module
cannot rewrite, or whose target it cannot tell, is reported where the
flow migrates (``RESTORE_NOTE``), with the ``convert`` command that turns
the old files into the new layout. A module that builds WeightNorm
definitions, whose state in flax.optim's layout ``from_either_layout``
refuses (with an error naming the path), still gets the rewrite, noted
with that command (``REFUSES_NOTE``). Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _clu_restores
from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _state_layout

_RESTORE_CHECKPOINT = 'flax.training.checkpoints.restore_checkpoint'
_FROM_BYTES = 'flax.serialization.from_bytes'
_FROM_STATE_DICT = 'flax.serialization.from_state_dict'
# clu's Checkpoint.restore_or_initialize (found by its receiver's binding,
# not by an import: _clu_restores).
_CLU_RESTORE = 'clu.checkpoint.Checkpoint.restore_or_initialize'
# Each route migrate rewrites -> its target's position and keyword.
ROUTES = {
    _RESTORE_CHECKPOINT: (1, _members.CHECKPOINT_TARGET),
    _FROM_BYTES: (0, _members.CHECKPOINT_TARGET),
    _FROM_STATE_DICT: (0, _members.CHECKPOINT_TARGET),
}
# The keywords each route may be given besides its target, kept as they
# are (what restore_checkpoint reads: which file, how).
_OTHER_KEYWORDS = {
    _RESTORE_CHECKPOINT: ('ckpt_dir', 'step', 'prefix', 'parallel'),
    _FROM_BYTES: ('encoded_bytes',),
    _FROM_STATE_DICT: ('state',),
}
# What from_either_layout reads flax.optim's layout of besides one rule's
# transform (flax.optim's MultiOptimizer state; not WeightNorm's).
_EITHER_LAYOUT_COVERS = ('multi_optimizer',)
# What it refuses in flax.optim's layout, with an error naming the path:
# a module building one still gets the restore of both layouts (the
# migrated program's own files, old files of its other optimizers; never
# a silent template), noted with the convert command (``REFUSES_NOTE``).
_EITHER_LAYOUT_REFUSES = ('weight_norm',)
# Names of calls of other libraries that restore a template given to them
# (clu's Checkpoint.restore_or_initialize, Orbax's restore, a loader of
# the user's own that is not part of the scanned project).
_RESTORING_WORDS = ('restore', 'load')

# The notes on a restore left as it is, and on one rewritten that refuses
# some old files (the rule table's, by name).
RESTORE_NOTE = _codes.RESTORE_ONE_LAYOUT
REFUSES_NOTE = _codes.RESTORE_REFUSES


# The replacement of scan's finding on a restore that ``fills_flow``: its
# checkpoint finding (FOC114) where no optimizer is among the arguments
# (``state`` holding one in a field). The plan leaves such findings out of
# its checkpoint notes: this module plans and notes those restores itself.
TEMPLATE_RESTORE = _codes.EITHER_LAYOUT_REPLACEMENT


def is_template_restore(finding) -> bool:
  """``finding`` is scan's on a restore that ``fills_flow``."""
  return finding.construct == 'checkpoint' and (
      finding.replacement == TEMPLATE_RESTORE)


class Refuses(str):
  """The why of a restore rewritten to read both layouts that refuses
  some files of flax.optim's layout (noted as ``REFUSES_NOTE``)."""


def note(planner, why: str) -> str:
  """The report's note on a restore left as it is, or rewritten but
  refusing some old files (a ``Refuses``), for ``why``."""
  # --tier stock writes stock Optax states: the converted files must too.
  return _codes.filled_note(
      REFUSES_NOTE if isinstance(why, Refuses) else RESTORE_NOTE,
      why=why, stock=' --stock' if planner.tier == 'stock' else '')


class Restore(NamedTuple):
  """A restore into a template: the call, its route (None: another
  library's), the template."""
  call: ast.Call
  route: Optional[str]
  target: ast.AST


def _hidden(call) -> bool:
  return any(isinstance(a, ast.Starred) for a in call.args) or any(
      k.arg is None for k in call.keywords)


def target_of(call, route) -> Optional[ast.AST]:
  """The template ``call``, a restore of ``ROUTES``' ``route``, fills
  (None where none is given or ``*`` hides it)."""
  position, keyword = ROUTES[route]
  target = next((k.value for k in call.keywords if k.arg == keyword), None)
  if target is None and not _hidden(call) and position < len(call.args):
    target = call.args[position]
  return target


def planned(planner, call, callee: _names.Callee, rules: str) -> bool:
  """Whether ``call`` (calling ``callee``) is a restore into a template,
  planned: rewritten to read both layouts where the template holds an
  optimizer of the flow, else kept with the reason (noted where the flow
  migrates)."""
  if not may_restore(callee):
    return False  # (most calls: asked nothing)
  # (another library's is only noted: asked where the flow migrates)
  later = None if callee.path in (
      _names.OPTIMIZER_CLASSES) else planner.restores_later
  restore = restore_of(planner, call, later, callee)
  if restore is None:
    return False
  why = plan_restore(planner, restore, rules)
  if why:
    planner.restores_left.append((call, why))
  else:
    planner.legacy_layout_lines.add(call.lineno)
  return True


def restore_of(planner, call, later: Optional[list] = None,
               callee: Optional[_names.Callee] = None) -> Optional[Restore]:
  """``call`` as a restore into a template, or None: a route of
  ``ROUTES``, or a call of another library named like a restore and
  given an argument that may hold an optimizer the flow migrates
  (``another_librarys``). ``later``: where given, such a call is added to
  it instead, not asked about (None returned). ``callee``: what its
  function names (``_names.called``), where read already."""
  if callee is None:
    callee = _names.called(planner.names, call.func)
  route = callee.path
  if route in ROUTES:
    target = target_of(call, route)
    return None if target is None else Restore(call, route, target)
  if not may_restore(callee):
    return None  # (most calls: ``may_restore``)
  target = _clu_restores.target_of(planner, call)
  if target is not None:  # (clu's checkpoint holds the program's state)
    return Restore(call, _CLU_RESTORE, target)
  if _project_function(planner, call, callee):
    return None  # a function of the project: its own module's restore
  if later is not None:
    later.append(call)
    return None
  return another_librarys(planner, call)


def may_restore(callee: _names.Callee) -> bool:
  """Whether a call of ``callee`` may be a restore (``restore_of``): a
  route's, or one named like a restore (clu's ``restore_or_initialize``
  among them); most calls are neither."""
  return callee.path in ROUTES or named_like_restore(callee.word)


def named_like_restore(word: str) -> bool:
  """Whether a function called ``word`` is named like a restore."""
  lowered = word.lower()
  return any(part in lowered for part in _RESTORING_WORDS)


def another_librarys(planner, call) -> Optional[Restore]:
  """``call``, of another library and named like a restore, as a restore
  into its first argument that may hold an optimizer the flow migrates
  (the flow's ``may_hold_optimizer``); None where none may."""
  for argument in [*call.args, *(k.value for k in call.keywords)]:
    if planner.flow.may_hold_optimizer(argument):
      return Restore(call, None, argument)
  return None


def note_later_ones(planner, later, rules: str) -> None:
  """Each restore of another library among the calls ``later``
  (``restore_of``) into ``planner.restores_left``, with why it stays (only
  noted, where the flow migrates: so asked only then)."""
  for call in later:
    restore = another_librarys(planner, call)
    if restore is not None:
      planner.restores_left.append((call, plan_restore(planner, restore,
                                                       rules)))


def _project_function(planner, call, callee: _names.Callee) -> bool:
  model = planner.names.model
  return planner.flow.runs_module_function(call) or (
      planner.flow.runs_own_class_method(call)) or (
          model is not None and model.callee_at(
              call, planner.names, callee.path) is not None)


def fills_flow(planner, restore: Restore) -> bool:
  """Whether ``restore`` is a route migrate rewrites into a template that
  holds an optimizer of the flow (clu's: whatever its template): the
  restores ``plan_restore`` rewrites, or keeps with the reason, and
  ``scan`` reports (``TEMPLATE_RESTORE``)."""
  return restore.route is not None and (
      restore.route == _CLU_RESTORE or
      planner.flow.holds_optimizer(restore.target))


def plan_restore(planner, restore: Restore, rules: str) -> Optional[str]:
  """Rewrites ``restore`` to read both layouts where its target holds an
  optimizer the flow migrates; returns why not (None: rewritten, or
  nothing of the flow is restored there). A rewrite that refuses some old
  files is noted (a ``Refuses`` in ``planner.restores_left``)."""
  if restore.route is None:
    return _codes.filled_note(_codes.NOT_A_RESTORE,
                              call=planner.text(restore.call.func)[:60])
  if not fills_flow(planner, restore):
    # (clu's restore is rewritten whatever migrate sees of its template,
    # often the program's whole state, given from afar: where it holds no
    # TrainState, from_either_layout restores what clu's from_bytes does,
    # or raises naming the path)
    if isinstance(restore.target, ast.Constant):
      return None  # a raw restore (target=None): no template to fill
    if planner.flow.given_legacy_tree(restore.target):
      return None  # flax.optim's tree, restored as it was (its callers')
    return _codes.filled_note(_codes.RESTORE_TARGET_UNKNOWN,
                              target=planner.text(restore.target)[:60])
  why = _state_layout.unsupported(
      planner, covered=_EITHER_LAYOUT_COVERS + _EITHER_LAYOUT_REFUSES) or (
          _arguments_problem(restore))
  if why:
    return why
  refused = _state_layout.unsupported(planner, covered=_EITHER_LAYOUT_COVERS)
  if refused:
    planner.restores_left.append((restore.call, Refuses(refused)))
  planner.imports.append((rules, None, None))
  call, target = restore.call, restore.target
  if restore.route == _CLU_RESTORE:
    _clu_restores.rewrite(planner, call, target, rules)
  elif restore.route == _FROM_STATE_DICT:
    state = _argument(call, 1, 'state')
    planner.edit(call, f'{rules}.from_either_layout({{target}}, {{state}})',
                 'checkpoint', target=target, state=state)
  elif restore.route == _FROM_BYTES:
    data = _argument(call, 1, 'encoded_bytes')
    planner.edit(call, f'{rules}.from_either_layout({{target}}, '
                 '{module}.msgpack_restore({data}))', 'checkpoint',
                 target=target, module=call.func.value, data=data)
  else:  # the raw restore: the same call given no template
    start, end = planner.span(call)
    target_start, target_end = planner.span(target)
    planner.edit(call, f'{rules}.from_either_layout({{target}}, '
                 '{head}None{tail})', 'checkpoint', target=target,
                 head=(start, target_start), tail=(target_end, end))
  return None


def _argument(call, position, keyword):
  given = next((k.value for k in call.keywords if k.arg == keyword), None)
  return given if given is not None else call.args[position]


def _arguments_problem(restore: Restore) -> Optional[str]:
  call, route = restore.call, restore.route
  if route == _CLU_RESTORE:
    return None  # (_clu_restores.target_of takes only the template)
  if _hidden(call):
    return _codes.note(_codes.STARRED_ARGUMENTS)
  known = (_members.CHECKPOINT_TARGET, *_OTHER_KEYWORDS[route])
  unknown = [k.arg for k in call.keywords if k.arg not in known]
  if unknown:
    return _codes.filled_note(_codes.RESTORE_KEYWORDS,
                              names=', '.join(unknown))
  if route == _FROM_BYTES and not isinstance(call.func, ast.Attribute):
    return _codes.note(_codes.FROM_BYTES_BARE)
  binds = len(call.args) <= 5 if route == _RESTORE_CHECKPOINT else (
      len(call.args) + len(call.keywords) == 2)
  if not binds:
    return _codes.note(_codes.RESTORE_UNBOUND)
  return None
