"""The records a module's rewrite plan is made of (edits, leftovers, notes)
and the texts its report gives for them. Stdlib only."""

import ast
from typing import NamedTuple, Optional

from compat import _lazy
from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _project
from compat.codemod import _restores
from compat.codemod import _user_rules
from compat.codemod import _walk

# An optimizer going on to code the rewrite cannot follow
# (``_escape_analysis``).
ESCAPE = 'optimizer_escape'
# A fix that rests on an assumption the report states (ruff's
# ``Applicability::Unsafe``): applied only with ``--unsafe-fixes``
# (``UNSAFE_FIX``), else listed as available (``HIDDEN_UNSAFE_FIX``) while
# its place holds the flow as an escape.
UNSAFE_FIX = 'unsafe_fix'
HIDDEN_UNSAFE_FIX = 'hidden_unsafe_fix'
HIDDEN_FIX_REASON = _project.HIDDEN_FIX_REASON
# Constructs that are part of an optimizer's flow: all or none get rewritten.
FLOW_CONSTRUCTS = frozenset((
    'algorithm', _members.CREATE, _members.APPLY_GRADIENT,
    'apply_gradient_overrides', _members.COMPUTE_GRADIENT, _members.OPTIMIZE,
    _members.REPLICATE, 'multi_optimizer',
    'traversal', 'weight_norm', 'optimizer_def_subclass', 'optimizer_use',
    _members.OPTIMIZER_DEF, 'reexport', _project.HELD_IN_FIELD, ESCAPE))
# Findings that need no code change once the optimizer is a TrainState.
NOTE_CONSTRUCTS = frozenset(('checkpoint',))


def is_pickle(finding) -> bool:
  """Whether a checkpoint finding is a pickle write."""
  return finding.replacement == CATALOGUE.REPLACEMENTS['pickle'].text


def checkpoint_lines(findings) -> frozenset:
  """Lines of the checkpoint writes and reads an optimizer may go into
  as a TrainState. Not a pickle write: a TrainState does not pickle, and the
  escape analysis holds the flow there."""
  return frozenset(f.line for f in findings
                   if f.construct in NOTE_CONSTRUCTS and not is_pickle(f))


HELD_NOTE = _codes.note(_codes.HELD)

CHECKPOINT_NOTE = _codes.note(_codes.CHECKPOINT_LAYOUT)

# A pickle write of a value not proven an optimizer, in a migrated module.
PICKLE_NOTE = _codes.note(_codes.PICKLE_UNPROVEN)

# A rewrite of a flow that another of its links keeps as it was.
HELD_BY_ANOTHER_LINK = _codes.note(_codes.HELD_BY_ANOTHER_LINK)

# A definition nothing in the project calls, migrated with its flow.
CALLED_NOWHERE_NOTE = _codes.note(_codes.CALLED_NOWHERE)
# flax.optim's checkpoint keys (``Optimizer.state_dict()``'s layout).
LAYOUT_KEYS = (_members.TARGET, _members.PARAM_STATES)
LAYOUT_KEY_NOTE = _codes.note(_codes.LAYOUT_KEY)


def layout_key_reads(tree: ast.Module) -> list:
  """``(node, key)`` of each read of a nested dict by one of flax.optim's
  checkpoint keys (``state['optimizer']['target']``): one level below
  another subscript, so that ``batch['target']`` is not one."""
  return [(node, node.slice.value)
          for node in _walk.nodes_of(tree, (ast.Subscript,))
          if isinstance(node.value, ast.Subscript) and
          isinstance(node.slice, ast.Constant) and
          node.slice.value in LAYOUT_KEYS]


def unproven_store_why(holder, text: str, cause: str = '') -> str:
  """Why a value stored in an optimizer field (``text``: its source) keeps
  the flows reading that field as they are (``cause``: why the value is
  not proven, where migrate can say it)."""
  return _codes.filled_note(
      _codes.FIELD_STORE_UNPROVEN, text=text[:60], field=holder.field,
      holder=holder.name, cause=f' ({cause})' if cause else '')


def created_from_parameter(flow, value) -> str:
  """Why ``value`` is not proven an optimizer where it is made by
  ``.create`` of a definition its function takes as a parameter
  (``optimizer = optim_def.create(self.params)`` in ``with_optimizer(self,
  optim_def)``): migrate does not follow a definition passed as an
  argument; '' otherwise."""
  scope = flow.binding_scope_of(value, value.id) if isinstance(
      value, ast.Name) else None
  bound = [] if scope is None else scope.bindings.get(value.id, [])
  made = bound[0] if len(bound) == 1 else value
  if not (isinstance(made, ast.Call) and isinstance(
      made.func, ast.Attribute) and made.func.attr == _members.CREATE and
          isinstance(made.func.value, ast.Name)):
    return ''
  definition = made.func.value.id
  function = getattr(flow.scope_of(made), 'node', None)
  if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
      definition not in _names.parameter_names(function)):
    return ''
  return _codes.filled_note(_codes.CREATED_FROM_PARAMETER,
                            definition=definition, function=function.name)


def planned_from_tree(finding) -> bool:
  """``finding`` is scan's report of what a rule of the plan finds in the
  tree itself (``Planner``): a restore into a template, a construction of
  the user's rule class, an optimizer escaping."""
  return finding.construct == ESCAPE or _restores.is_template_restore(
      finding) or _user_rules.is_construction(finding)


def flow_migrated(plan) -> bool:
  """Whether ``plan`` migrates its module's optimizer flow: no part of it
  is left as it was (the flow is rewritten whole or not at all)."""
  return not any(l.construct in FLOW_CONSTRUCTS for l in plan.leftovers)


class Edit(NamedTuple):
  """Replace bytes ``[start, end)`` by ``template`` filled with ``parts``.

  A part is a ``(start, end)`` span of the original source (rendered with the
  edits inside it applied) or a literal string.
  """
  start: int
  end: int
  template: str
  parts: tuple  # ((name, (start, end) | str), ...)
  line: int
  construct: str


class Leftover(NamedTuple):
  line: int
  construct: str
  code: str
  reason: str


class Plan(NamedTuple):
  edits: list
  leftovers: list
  notes: list  # Leftover-shaped: line, construct, code, note
  imports: list  # (module, name or None, asname or None) to add
  removed_imports: list  # (module, name or None, asname) to drop if unused
  # Leftover-shaped (line, UNSAFE_FIX or HIDDEN_UNSAFE_FIX, code,
  # assumption): the unsafe fixes of the flow, enabled or not.
  unsafe: tuple = ()
  # Lines of calls of the user's own methods named like the Optimizer's
  # steps (``_own_methods``): no leftover where the output still has them.
  own_steps: frozenset = frozenset()
  # The elements of the flow (``_links.Element``: a definition made, a
  # ``.create``, a rule class...) this plan rewrites: what a link to
  # another module asks (``_links.flow_violations``). Empty where the flow
  # stays as it was.
  migrated: frozenset = frozenset()


def _carried_out(plan) -> bool:
  """``plan``'s flow migrated, and its file was not rolled back
  (``migrate.rolled_back``: no edit, a 'self_check' leftover)."""
  return flow_migrated(plan) and not any(
      l.construct == 'self_check' for l in plan.leftovers)


def unsafe_fixes_applied(plan) -> list:
  """The unsafe fixes ``plan`` carries out: enabled, and its flow
  migrated (a flow held by another link applies none)."""
  if plan is None or not _carried_out(plan):
    return []
  return [fix for fix in plan.unsafe if fix.construct == UNSAFE_FIX]


def unsafe_fixes_held(plan) -> list:
  """The unsafe fixes of ``plan`` enabled but not carried out: its flow
  stays for another of its links (or its file was rolled back)."""
  if plan is None or _carried_out(plan):
    return []
  return [fix for fix in plan.unsafe if fix.construct == UNSAFE_FIX]


def unsafe_fixes_hidden(plan) -> list:
  """The unsafe fixes of ``plan`` not enabled (no ``--unsafe-fixes``)."""
  return [] if plan is None else [
      fix for fix in plan.unsafe if fix.construct == HIDDEN_UNSAFE_FIX]


CATALOGUE = _lazy.module_without_package('legacy_optim', 'catalogue')
RULES_MODULE = CATALOGUE.RULES_MODULE
# Its submodule holding a TrainState that steps any pytree flax.optim
# stepped, a bare array included (the package does not import it: it needs
# flax).
RULES_TRAIN_STATE = 'train_state'


def makes_array_states(plan) -> bool:
  """Whether ``plan``'s creates make ``RULES_TRAIN_STATE``'s TrainState
  (its flow migrated: a flow kept drops its imports)."""
  return plan is not None and any(
      imported[:2] == (RULES_MODULE, RULES_TRAIN_STATE)
      for imported in plan.imports)
# The classes an ``-> optim.OptimizerDef`` (or ``MultiOptimizer``) names.
DEF_CLASSES = ('flax.optim.OptimizerDef', 'flax.optim.base.OptimizerDef',
                'flax.optim.MultiOptimizer')

# The rules migrate spells with their stock alias (the catalogue's
# ``EXACT_STOCK``; tests/test_migrate.py checks the two agree and trains
# both for several steps).
STOCK_EXACT = CATALOGUE.stock_exact()
RULE_NAMES = frozenset(a.name for a in CATALOGUE.RULES)


# The source ``source_line`` split last, and its lines: a plan asks for
# lines of one module again and again (each edit and leftover: 13,000
# splits of whole modules in a scan of /tmp/speed_tree).
_SPLIT: list = [b'', []]


def source_line(source: bytes, line: int) -> str:
  """Line ``line`` (1-based) of ``source``, stripped: a leftover's code."""
  if _SPLIT[0] is not source:
    _SPLIT[:] = [source, source.splitlines()]
  return _SPLIT[1][line - 1].decode('utf-8', 'replace').strip()


def blocked_leftovers(source: bytes, blocked) -> list:
  """The leftovers of ``blocked`` (``(line, construct, reason)`` of the
  links keeping a module's flow as it is; ``Planner``'s) in ``source``."""
  return [Leftover(line, construct, source_line(source, line), reason)
          for line, construct, reason in blocked]


def with_blocked(kept, source: bytes, blocked):
  """The plan a roll-back (``blocked``) gives a module whose plan with its
  flow kept as it is is ``kept`` (``Planner.plan_and_kept``): ``kept`` with
  the leftovers of ``blocked``; None where that is not the same as
  planning it again (no link, or one of a construct that does not keep
  the flow)."""
  if not blocked or any(construct not in FLOW_CONSTRUCTS
                        for _, construct, _ in blocked):
    return None
  return kept._replace(leftovers=sorted(
      set(kept.leftovers) | set(blocked_leftovers(source, blocked))))


def line_offsets(source: bytes) -> list:
  offsets, total = [0], 0
  for line in source.splitlines(keepends=True):
    total += len(line)
    offsets.append(total)
  return offsets


def literal_dict_keys(node, tree) -> Optional[set]:
  """The keys of the dict ``node`` names, where it is a name the module
  binds once, at its top level, to a dict literal of string keys, and only
  reads as ``**name`` or ``name[key]`` (so nothing changes it); else None:
  it may hold anything. Found once per tree and name (``_walk.derived``)."""
  if not isinstance(node, ast.Name):
    return None
  keys = _walk.derived(tree, _literal_dict_keys, node.id)
  return None if keys is None else set(keys)


# The statements that bind names by importing them.
_IMPORTS = (ast.Import, ast.ImportFrom)


def _literal_dict_keys(tree, name: str) -> Optional[frozenset]:
  """``literal_dict_keys`` of a read of ``name``: the cheaper tests first
  (its top-level assignments, the imports), then one walk of the tree."""
  values = [statement.value for statement in tree.body
            if isinstance(statement, ast.Assign) and [
                getattr(t, 'id', None) for t in statement.targets] == [name]]
  if len(values) != 1 or not isinstance(values[0], ast.Dict) or not all(
      isinstance(k, ast.Constant) and isinstance(k.value, str)
      for k in values[0].keys):
    return None  # a ``**`` inside, or a key known only at run time
  imported = {_names.binds(alias)
              for statement in _walk.nodes_of(tree, _IMPORTS)
              for alias in statement.names}
  if '*' in imported or name in imported:
    return None  # (a star import may bind it)
  read_whole = set()  # ids of the names read as ``**name`` or ``name[k]``
  stores = 0  # assignments, augmented ones, del, def, parameters...
  # (the walk is breadth first: a name's parent comes before it)
  for child in _walk.nodes(tree):
    if isinstance(child, ast.keyword) and child.arg is None:
      read_whole.add(id(child.value))
    elif isinstance(child, ast.Subscript) and isinstance(child.ctx, ast.Load):
      read_whole.add(id(child.value))
    if _names.bound_by(child) == name:
      stores += 1
    elif isinstance(child, ast.Name) and child.id == name and (
        id(child) not in read_whole):
      return None  # a method call, an argument: it may change it
    elif isinstance(child, (ast.Global, ast.Nonlocal)) and (
        name in child.names):
      return None
  if stores != 1:
    return None
  return frozenset(k.value for k in values[0].keys)


def literal_template(text: str) -> str:
  """``text`` as a literal part of an ``Edit`` template."""
  return text.replace('{', '{{').replace('}', '}}')


def is_pure(node) -> bool:
  """A name or attribute chain: evaluating it twice is harmless."""
  while isinstance(node, ast.Attribute):
    node = node.value
  return isinstance(node, ast.Name)
