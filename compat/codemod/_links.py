"""The links that tie the modules of one optimizer flow, and the
all-or-none check ``migrate`` runs over them.

A ``Link`` is data: the project's model (``_project.Model``) finds them,
``flow_violations`` tells which ones a set of planned rewrites breaks, and
``roll_back`` names the modules to plan again with their flows kept. A
link names the elements of the flow it joins (``Element``: the definition
made, its ``.create``, the MultiOptimizer or rule class use), and the check
asks each module's plan whether it rewrites that element (``Plan.migrated``),
never which of its edits happen to sit on a line. Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _multi

# What a factory's result meets at a call site that migrate can follow.

CREATED_HERE = _codes.note(_codes.CREATED_HERE)

# A user rule class's call or subclass in another module: it moves onto
# flax_optim_rules.RuleDef only together with the class.
RULE_USED_HERE = _codes.note(_codes.RULE_USED_HERE)

# What ``flow_violations`` asks of a field link's modules: whether each
# migrates its optimizer flow whole.
WHOLE_FLOW = 'flow'

# Links whose two modules' whole flows must agree: a class's optimizer
# field, and a module function that gives or takes an optimizer called
# from another module.
WHOLE_FLOW_KINDS = ('field', 'call')

# A link whose module's whole flow stays as it is, with every module linked
# to it (an optimizer field whose name another class declares otherwise).
HELD = 'held'

# How the reason of each link that keeps a module's flow starts.
KEPT_WITH_FLOW = _codes.note(_codes.KEPT_WITH_FLOW)

# The reason of a place holding a flow where an unsafe fix could migrate
# it (ruff's ``Applicability::Unsafe``): ``why`` it holds, what the fix
# assumes.
HIDDEN_FIX_REASON = _codes.HIDDEN_FIX_REASON
# The construct of a field link's line kept as it was, and of a value
# stored in such a field that is not provably an optimizer (a flow one:
# the module's flow stays with it).
HELD_IN_FIELD = 'optimizer_field'


class Element(NamedTuple):
  """One element of a module's optimizer flow, named as data: the kind of
  node and its span in the module read (the joined cells of a notebook).
  The project's model names a link's ends so, the planner the elements
  it rewrites (``Plan.migrated``): two nodes of one kind never share a
  span, so two constructs on one line stay apart."""
  kind: str
  line: int
  column: int
  end_line: int
  end_column: int

  @classmethod
  def of(cls, node: ast.AST) -> 'Element':
    return cls(type(node).__name__, node.lineno, node.col_offset,
               node.end_lineno, node.end_col_offset)


class Link(NamedTuple):
  """A definition made in one module and consumed in another.

  ``consumer_line`` is the ``.create(...)`` that must be rewritten with the
  producer, or None where the value goes somewhere migrate cannot follow
  (``reason`` says where); ``call_line``: the factory's call. The lines are
  what the report shows; the elements (``Element``) are what the check
  asks the plans about.
  """
  producer_path: str
  producer_line: int
  consumer_path: str
  consumer_line: Optional[int]
  call_line: int
  reason: str
  # 'definition': producer_line makes a definition, consumer_line is its
  # `.create`; 'field': producer_line declares a field annotated
  # `optim.Optimizer`, the consumer module makes, stores or uses what the
  # field holds (the two modules' whole flows must agree).
  kind: str = 'definition'
  # Of a definition link: the definition made (or the rule class), and
  # what must be rewritten with it in the consumer's module (its
  # ``.create``, the MultiOptimizer it goes into, the rule class's call or
  # subclass); None where the consumer is not followed (a return of
  # another factory) or there is none (``consumer_line`` None). Of a call
  # link (``call_link``): the function and its call.
  producer_element: Optional[Element] = None
  consumer_element: Optional[Element] = None
  # Where migrating across the link rests on an assumption (an unsafe fix,
  # ``migrate --unsafe-fixes``): what it assumes. Such a link holds the
  # flow only where unsafe fixes are not enabled (``assumed_away``).
  assumption: Optional[str] = None

  def describe(self, file_line=None) -> str:
    """``file_line(path, line)``: the line a user sees for a line of the
    module read (a notebook's file line for a line of its joined cells)."""
    shown = file_line or (lambda path, line: line)
    where = self.consumer_line or self.call_line
    if self.kind in WHOLE_FLOW_KINDS + (HELD,):
      return (f'{self.consumer_path}:{shown(self.consumer_path, where)} '
              f'{self.reason}')
    return (f'{self.producer_path}:'
            f'{shown(self.producer_path, self.producer_line)} makes the '
            f'definition, {self.consumer_path}:'
            f'{shown(self.consumer_path, where)}: {self.reason}')


def assumed_away(links, unsafe_fixes: bool) -> list:
  """``links`` less those resting on an assumption where unsafe fixes are
  enabled (each is then applied, and listed with its assumption)."""
  return [link for link in links
          if not (unsafe_fixes and link.assumption is not None)]


def call_link(path, call, function, reason) -> Link:
  """The whole-flow link of ``call`` in the module ``path`` to the project
  function it calls (``function``: its ``path`` and ``node``)."""
  return Link(function.path, function.node.lineno, path, call.lineno,
              call.lineno, reason, 'call', Element.of(function.node),
              Element.of(call))


def flow_violations(links, migrated) -> list:
  """Links whose two ends were not rewritten alike: a definition rewritten
  into an Optax transform meets a ``.create`` left as it was (or a
  ``TrainState.create`` meets a flax.optim definition).

  ``migrated(path, element)``: whether the planned result of ``path``
  rewrites ``element`` (an ``Element``; ``WHOLE_FLOW``: whether the
  module's optimizer flow is migrated, for field and call links). A link
  with no consumer line is violated as soon as its producer is rewritten.
  ``migrate`` calls this before anything is written and rolls back every
  module of a violated flow; any other writer of migrated code can call it
  the same way.
  """
  violations = []
  for link in links:
    if link.kind == HELD:
      if migrated(link.producer_path, WHOLE_FLOW):
        violations.append(link)
      continue
    if link.kind in WHOLE_FLOW_KINDS:
      if migrated(link.producer_path, WHOLE_FLOW) != migrated(
          link.consumer_path, WHOLE_FLOW):
        violations.append(link)
      continue
    made = migrated(link.producer_path, link.producer_element)
    if link.consumer_element is not None:
      used = migrated(link.consumer_path, link.consumer_element)
    elif link.consumer_line is None:
      used = False
    else:  # a return of another factory: linked through its own calls
      continue
    if made != used:
      violations.append(link)
  return violations


def _migrates(plan, element, flow_migrated) -> bool:
  if element == WHOLE_FLOW:
    return plan is not None and flow_migrated(plan)
  return plan is not None and element in plan.migrated


def roll_back(links, plan_of, flow_migrated=lambda plan: True,
              file_line=None):
  """Yields ``(path, blocked)`` for each module whose optimizer flow must
  stay as it was, until ``flow_violations`` finds none.

  ``plan_of(path)``: the module's current plan (None: not migrated; its
  ``migrated``: the elements it rewrites); ``flow_migrated(plan)``: whether
  that plan migrates the module's optimizer flow (nothing of it left as it
  was). The caller plans each yielded module again with ``blocked``
  (``(line, construct, reason)`` of every link of the flow there: where the
  report shows what holds it) before the next one is asked for: a
  rolled-back module may break another link, so the check runs again on
  the new plans. Whole components of linked
  modules roll back together; each module at most once. ``file_line``:
  see ``Link.describe``.
  """
  done: set[str] = set()
  while True:
    violated = flow_violations(
        links, lambda path, element: _migrates(plan_of(path), element,
                                               flow_migrated))
    component = _linked(links, {p for link in violated for p in (
        link.producer_path, link.consumer_path)}) - done
    if not component:
      return
    ends: list = [None, {}]  # (the links' count, _component_links of them)
    for path in sorted(component):
      if ends[0] != len(links):  # (the caller's plans may add links)
        ends[:] = [len(links), _component_links(links, component)]
      yield path, _blocked_here(ends[1].get(path, ()), path, file_line)
    done |= component


def sharing_optimizers(links, start) -> set:
  """The modules whose optimizers may meet those of the modules ``start``
  (linked to them by a field or call link, transitively: one holder kept
  in several modules, an optimizer passed to another module's function);
  a definition link shares a definition, not the optimizers made of it."""
  return _linked([link for link in links if link.kind in WHOLE_FLOW_KINDS],
                 start)


def _linked(links, start) -> set:
  """The modules linked to ``start``, transitively."""
  # (each module's neighbours listed once: not every link asked per module)
  neighbours: dict = {}
  for link in links:
    ends = (link.producer_path, link.consumer_path)
    for path in ends:
      neighbours.setdefault(path, set()).update(ends)
  found, frontier = set(start), list(start)
  while frontier:
    for other in neighbours.get(frontier.pop(), ()):
      if other not in found:
        found.add(other)
        frontier.append(other)
  return found


def _component_links(links, component) -> dict:
  """``{path: [link]}``: the links whose producer is in ``component``, in
  their order, by each module they end in (what ``_blocked_here`` reads
  for each module of the component, not every link for each)."""
  found: dict = {}
  for link in links:
    if link.producer_path in component:
      for path in dict.fromkeys((link.producer_path, link.consumer_path)):
        found.setdefault(path, []).append(link)
  return found


def _blocked_here(links, path, file_line=None) -> list:
  """``(line, construct, reason)`` of each of ``links`` (those of the
  rolled-back component ending in ``path``) there."""
  blocked = []
  for link in links:
    reason = KEPT_WITH_FLOW + link.describe(file_line)
    if link.kind in WHOLE_FLOW_KINDS + (HELD,):
      line = (link.producer_line if link.producer_path == path else
              link.consumer_line)
      blocked.append((line, HELD_IN_FIELD, reason))
      continue
    if link.producer_path == path:
      blocked.append((link.producer_line, 'algorithm', reason))
    if link.consumer_path == path:
      blocked.append((link.consumer_line or link.call_line,
                      'multi_optimizer' if link.reason == (
                          _multi.IN_MULTI_OPTIMIZER) else _members.CREATE,
                      reason))
  return blocked
