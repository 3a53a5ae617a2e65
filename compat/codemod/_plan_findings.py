"""Scan's findings from migrate's plan: one rule table, detection and fix.

``scan`` walks each module for the constructs it names (``scan._Visitor``);
``migrate`` plans its rewrites from those findings and from what the
project's model follows across modules (an optimizer passed as an argument,
returned by a function, kept in a dataclass field, linked to another
module's flow). A statement the plan edits or leaves for such a reason
may carry no finding of the walk (``opt = opt.replace(target=p)`` where
``opt`` came out of another module's ``CheckpointData``). ``findings``
turns the plan into findings: one for each edit and each leftover whose
lines no other finding names, with the code of the plan's construct, so
``scan`` reports every statement ``migrate`` changes or leaves (issue 38:
a rule detects and fixes; ``scan`` is the rules without their fixes).

The same findings decide what a ``# noqa`` or ``--ignore`` keeps in both
commands, as ruff's ``noqa`` keeps a diagnostic and its fix: ``scan`` does
not report one on a marked line, and ``migrate`` holds it (``held``), so
its flow stays as it is, all or none.

Stdlib only.
"""

import ast
import bisect
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _links
from compat.codemod import _members
from compat.codemod import _noqa
from compat.codemod import _plan_records
from compat.codemod import _rewrite_plan
from compat.codemod import _walk

# The plan's name of a construct -> the construct of scan's code table,
# where the plan names one differently (a definition, a field holding an
# optimizer other modules read).
_SCAN_CONSTRUCT = {
    'algorithm': _members.OPTIMIZER_DEF,
    'algorithm_rule': _members.OPTIMIZER_DEF,
    _links.HELD_IN_FIELD: _plan_records.ESCAPE,
}
# The other removed APIs' rows are each a finding of the walk already
# (``_removals``); one no finding names gets the group's general code.
_REMOVALS = frozenset(('removed_api', 'out_of_scope'))

EDITED = _codes.note(_codes.MIGRATE_REWRITES)


class PlanFinding(NamedTuple):
  line: int
  column: int  # 1-based
  construct: str  # of scan's code table
  replacement: str  # what migrate writes, or why it leaves the statement
  rule: str  # the stable code


def code_of(construct: str) -> str:
  """The code of a plan's edit or leftover of ``construct``."""
  if construct in _REMOVALS:
    return _codes.code_of('removed_api', '')
  return _codes.code_of(_SCAN_CONSTRUCT.get(construct, construct))


def plan(source: bytes, tree, names, walked, blocked=(), scanned=None):
  """The module's ``_plan_records.Plan``, planned as ``migrate`` plans it
  (``names``: the module's, seeing the project; ``walked``: scan's
  findings there; ``blocked``: as ``migrate_source``'s; ``scanned``: what
  the module's walk built, ``scan.ScannedModule.facts``), without the
  marks and the selection that keep findings as they are: a ``# noqa``
  hides its own line's findings in ``scan``, of the walk and of the plan
  alike."""
  return _rewrite_plan.Planner(source, tree, names, walked, blocked=blocked,
                               scanned=scanned).plan()


def plan_and_kept(source: bytes, tree, names, walked, scanned=None) -> tuple:
  """``(plan(...), kept)``: ``kept`` is the module's plan with its flow
  kept as it is (``Planner.plan_and_kept``), from which a roll-back's plan
  follows without planning again (``_plan_records.with_blocked``); None
  where making it failed (plan it again then: the failure is that
  plan's)."""
  planned, kept_of = _rewrite_plan.Planner(source, tree, names, walked,
                                           scanned=scanned).plan_and_kept()
  try:
    kept = kept_of()
  except Exception:  # pylint: disable=broad-except
    kept = None
  return planned, kept


def findings(plan, walked, source: bytes, tree: ast.Module) -> list:
  """``[PlanFinding]`` of ``plan`` (a ``_plan_records.Plan`` of ``tree``,
  parsed from ``source``, whose offsets index it): one per statement
  (``statement_spans``) an edit or a leftover touches that holds none of
  ``walked`` (the findings of scan's walk: anything with ``line``), at the
  first edit or leftover there."""
  items = sorted(_spans(plan, _plan_records.line_offsets(source),
                        source.decode('utf-8', 'replace').splitlines()))
  if not items:
    return []
  spans = sorted(statement_spans(tree))
  longest = max((s[1] - s[0] for s in spans), default=0)
  taken = {f.line for f in walked}
  done, found = set(), []
  for first, last, column, construct, why in items:
    statement = statement_holding(spans, first, longest) or (first, last)
    if statement in done or not taken.isdisjoint(
        range(statement[0], statement[1] + 1)):
      continue
    done.add(statement)
    construct = _SCAN_CONSTRUCT.get(construct, construct)
    found.append(PlanFinding(first, column, 'removed_api' if (
        construct in _REMOVALS) else construct, why, code_of(construct)))
  return found


def statement_spans(tree: ast.Module, counted=None) -> list:
  """``(first, last)`` line of each statement of ``tree`` (of those
  ``counted(node)`` accepts, if given): a compound statement's is its
  header (up to its first body statement or decorator), so a line of its
  body is the body statement's."""
  spans = []
  for node in _walk.statements(tree):
    if not isinstance(node, ast.stmt) or (counted and not counted(node)):
      continue
    body = getattr(node, 'body', None)
    last = node.end_lineno
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
      first_inner = min([body[0].lineno] + [
          d.lineno for d in getattr(node, 'decorator_list', ())])
      last = max(node.lineno, first_inner - 1)
    spans.append((node.lineno, last))
  return spans


def statement_holding(spans: list, line: int,
                      longest: Optional[int] = None):
  """The narrowest of ``spans`` holding ``line`` (None: none does; of two
  as narrow, the first). ``longest``: where ``spans`` are sorted, the most
  lines any runs after its first: then only the spans starting from
  ``line - longest`` to ``line`` are looked at (``findings`` asks once per
  edit and leftover, and a module has thousands of statements)."""
  if longest is not None:
    spans = spans[bisect.bisect_left(spans, (line - longest,)):
                  bisect.bisect_right(spans, (line, float('inf')))]
  holding = [s for s in spans if s[0] <= line <= s[1]]
  return min(holding, key=lambda s: s[1] - s[0]) if holding else None


def _spans(plan, offsets: list, lines: list):
  """``(first line, last line, column, construct, text)`` of each edit and
  leftover of ``plan``."""
  for edit in plan.edits:
    first, column = _position(offsets, edit.start)
    last, _ = _position(offsets, max(edit.start, edit.end - 1))
    yield first, last, column, edit.construct, EDITED
  for leftover in plan.leftovers:
    text = lines[leftover.line - 1] if leftover.line <= len(lines) else ''
    column = len(text) - len(text.lstrip()) + 1
    yield (leftover.line, leftover.line, column, leftover.construct,
           _codes.filled_note(_codes.LEFT_BY_MIGRATE,
                              reason=leftover.reason))


def _position(offsets: list, offset: int) -> tuple:
  """``(line, column)``, both 1-based, of a byte ``offset``."""
  line = max(1, bisect.bisect_right(offsets, offset))
  return line, offset - offsets[line - 1] + 1


def held(plan, walked, source: bytes, tree: ast.Module, chosen) -> set:
  """``{(line, code)}`` of the plan's findings (``findings``) that a
  ``# noqa`` or the selection keeps (``_noqa.held``): ``migrate`` holds
  them as ``scan`` does not report them."""
  if chosen is None and not _noqa.suppressions(source):
    return set()
  return _noqa.held(findings(plan, walked, source, tree), source, chosen)
