"""The links that tie the modules of one optimizer flow, and the
all-or-none check ``migrate`` runs over them.

A ``Link`` is data: the project's model (``_project.Model``) finds them,
``flow_violations`` tells which ones a set of planned rewrites breaks, and
``roll_back`` names the modules to plan again with their flows kept.
Stdlib only.
"""

from typing import NamedTuple, Optional

from compat.codemod import _members
from compat.codemod import _multi

# What a factory's result meets at a call site that migrate can follow.

CREATED_HERE = 'its `.create(...)` is here'

# A user rule class's call or subclass in another module: it moves onto
# flax_optim_rules.RuleDef only together with the class.
RULE_USED_HERE = 'the rule class is called or subclassed here'

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
KEPT_WITH_FLOW = ('kept as it was with its whole flow across modules (a '
                  'definition, its optimizer and every use are rewritten '
                  'together or not at all): ')

# The reason of a place holding a flow where an unsafe fix could migrate
# it (ruff's ``Applicability::Unsafe``): ``why`` it holds, what the fix
# assumes.
HIDDEN_FIX_REASON = ('{why}; an unsafe fix is available, hidden without '
                     '--unsafe-fixes: {assumption}')
# The construct of a field link's line kept as it was, and of a value
# stored in such a field that is not provably an optimizer (a flow one:
# the module's flow stays with it).
HELD_IN_FIELD = 'optimizer_field'


class Link(NamedTuple):
  """A definition made in one module and consumed in another.

  ``consumer_line`` is the ``.create(...)`` that must be rewritten with the
  producer, or None where the value goes somewhere migrate cannot follow
  (``reason`` says where); ``call_line``: the factory's call.
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


def flow_violations(links, rewritten) -> list:
  """Links whose two ends were not rewritten alike: a definition rewritten
  into an Optax transform meets a ``.create`` left as it was (or a
  ``TrainState.create`` meets a flax.optim definition).

  ``rewritten(path, line, construct)``: whether the planned result of
  ``path`` rewrites ``construct`` at ``line`` (``WHOLE_FLOW``, line None:
  whether the module's optimizer flow is migrated, for field links). A
  link with no consumer line is violated as soon as its producer is
  rewritten. ``migrate`` calls this before anything is written and rolls
  back every module of a violated flow; any other writer of migrated code
  can call it the same way.
  """
  violations = []
  for link in links:
    if link.kind == HELD:
      if rewritten(link.producer_path, None, WHOLE_FLOW):
        violations.append(link)
      continue
    if link.kind in WHOLE_FLOW_KINDS:
      if rewritten(link.producer_path, None, WHOLE_FLOW) != rewritten(
          link.consumer_path, None, WHOLE_FLOW):
        violations.append(link)
      continue
    made = rewritten(link.producer_path, link.producer_line, 'algorithm')
    if link.consumer_line is None:
      used = False
    elif link.reason == CREATED_HERE:
      used = rewritten(link.consumer_path, link.consumer_line, _members.CREATE)
    elif link.reason in (RULE_USED_HERE, _multi.IN_MULTI_OPTIMIZER):
      # A rule's use, a definition in a MultiOptimizer: rewritten with it.
      used = rewritten(link.consumer_path, link.consumer_line, 'algorithm')
    else:  # a return of another factory: linked through its own calls
      continue
    if made != used:
      violations.append(link)
  return violations


def _rewrites(plan, line, construct, flow_migrated) -> bool:
  if construct == WHOLE_FLOW:
    return plan is not None and flow_migrated(plan)
  return plan is not None and any(
      e.line == line and e.construct.startswith(construct)
      for e in plan.edits)


def roll_back(links, plan_of, flow_migrated=lambda plan: True,
              file_line=None):
  """Yields ``(path, blocked)`` for each module whose optimizer flow must
  stay as it was, until ``flow_violations`` finds none.

  ``plan_of(path)``: the module's current plan (None: not migrated);
  ``flow_migrated(plan)``: whether that plan migrates the module's
  optimizer flow (nothing of it left as it was). The
  caller plans each yielded module again with ``blocked`` (``(line,
  construct, code, reason)`` of every link of the flow there) before the
  next one is asked for: a rolled-back module may break another link, so
  the check runs again on the new plans. Whole components of linked
  modules roll back together; each module at most once. ``file_line``:
  see ``Link.describe``.
  """
  done: set[str] = set()
  while True:
    violated = flow_violations(
        links, lambda path, line, construct: _rewrites(
            plan_of(path), line, construct, flow_migrated))
    component = _linked(links, {p for link in violated for p in (
        link.producer_path, link.consumer_path)}) - done
    if not component:
      return
    for path in sorted(component):
      yield path, _blocked_here(links, component, path, file_line)
    done |= component


def _linked(links, start) -> set:
  """The modules linked to ``start``, transitively."""
  found, frontier = set(start), list(start)
  while frontier:
    path = frontier.pop()
    for link in links:
      ends = (link.producer_path, link.consumer_path)
      if path in ends:
        for other in ends:
          if other not in found:
            found.add(other)
            frontier.append(other)
  return found


def _blocked_here(links, component, path, file_line=None) -> list:
  blocked = []
  for link in links:
    if link.producer_path not in component:
      continue
    reason = KEPT_WITH_FLOW + link.describe(file_line)
    if link.kind in WHOLE_FLOW_KINDS + (HELD,):
      if path in (link.producer_path, link.consumer_path):
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
