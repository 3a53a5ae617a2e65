"""The module functions that give an optimizer to other modules, as a
greatest fixpoint where their proofs go round between modules (a part of
``_cross_flow.CrossModuleFlow``).

A module function gives an optimizer (or a tuple holding one) where its
module's flow proves every return so. That proof may rest on what another
module's function gives: dopamine's ``train(optimizer, ...)`` returns the
optimizer it steps, an optimizer where every caller passes one; a
subclass's module passes ``self.optimizer``, which holds what ``train``
returned. Asked in one pass from nothing, ``train`` waits on
``self.optimizer``, which waits on ``train``: neither is proven.

So a first pass proves what it can from nothing, each function from those
proven before it (as the model always did), noting which functions' giving
each module's flow asked (``CrossModuleFlow.reading``). A function that
pass left unproven, asked by a module that (through what the modules ask)
asks the function's own module, may be held by such a cycle: each of those
starts a giver of the kind its returns' shape allows (an optimizer, or a
tuple of them). A round then builds again the flows that asked a function
whose kind changed, with the model assuming those kinds, and keeps each
function at the kind its flow then proves; the rounds end when a round
proves exactly what it assumed. Each giver kept is then proven by its
module's flow given the others, each proven the same way: what a value
holds follows by induction over the program's run. A function whose proof
needed a kind that was not kept falls in a later round.

The model is solved again and again (``_params``' and ``_step_calls``'
rounds each ask it, a verdict turned False between them); a module's
flow built in one first pass serves the next while all it read stands
(``_Trace``): the rest of the model is as it was, and each giving and
verdict it read is as it saw it, and stays so while its module's
functions are proven (no function its module waits on is proven among
them).

The step factories (``make_update_fn(...)``) are proven in the same
passes. Where a round proves none of the functions it started
optimistically, or the rounds do not settle (a bound guards against a
cycle), the first pass's answer stands.

Stdlib only.
"""

import ast
import bisect
from typing import NamedTuple

from compat.codemod import _flow
from compat.codemod import _names

# Rounds before the fixpoint gives up; a round usually drops what the
# optimistic start assumed of a function that gives nothing.
_MAX_ROUNDS = 8


class Givers(NamedTuple):
  """What the model assumes, and a round proves."""
  optimizers: frozenset  # FunctionDef of the functions returning one
  tuples: dict  # FunctionDef -> the element kinds of the tuple returned
  steps: dict  # FunctionDef -> the StepSignature of the step returned

  def kind(self, node):
    return True if node in self.optimizers else self.tuples.get(node)


_NONE = Givers(frozenset(), {}, {})


class _Module(NamedTuple):
  """What a module's flow proved of its candidates, and what it asked."""
  proven: dict  # FunctionDef -> (kind, step)
  reads: set  # id(FunctionDef) of the functions whose giving it asked


def solve(model, candidates) -> None:
  """Sets ``model.optimizer_givers``, ``tuple_givers`` and
  ``step_factories`` over ``candidates`` (the ``_project`` functions whose
  modules spell what makes, steps or types an optimizer)."""
  modules = _first_pass(model, candidates)
  least = _collected(modules)
  cycling = _in_cycles(model, candidates, modules, least)
  if not cycling:
    return
  assumed = _with_guesses(least, cycling)
  # (the first pass's flows each saw the functions proven before it: the
  # first round takes every giver assumed for a change)
  before = _NONE
  for _ in range(_MAX_ROUNDS):
    _assume(model, assumed, _changed(before, assumed))
    modules = _round(model, candidates, modules, _changed(before, assumed))
    proven = _collected(modules)
    if proven == assumed:
      return
    if all(proven.kind(f.node) is None for f in cycling):
      break  # (none of them gives: the first pass's answer stands)
    before, assumed = assumed, proven
  _assume(model, least, _changed(before, least) | _changed(assumed, least))


def _flow_of(model, function, flows):
  """The flow of ``function``'s module, built once per pass (``flows``)."""
  flow = flows.get(function.path)
  if flow is None:
    flow = flows[function.path] = _flow.OptimizerFlow(
        model.trees[function.path], model.names[function.path])
  return flow


def value_of(model, key):
  """The value now of ``key``, a read of what changes between the solves
  (as ``CrossModuleFlow.tracing`` notes it)."""
  what, node = key[0], key[1]
  if what == 'giver':
    return (node in model.optimizer_givers, model.tuple_givers.get(node),
            model.step_factories.get(node))
  if what == 'tuples':
    return bool(node & {id(giver) for giver in model.tuple_givers})
  if what == 'followed':
    return node in model.followed_factories or any(
        holds for (factory, _), holds in model.step_call_verdicts.items()
        if factory is node)
  table = {'verdict': model.param_verdicts, 'step_param': model.step_params,
           'step_call': model.step_call_verdicts}[what]
  return table.get(key[1:])


class _Trace:
  """What a module's flow read of what changes between solves
  (``CrossModuleFlow.tracing``): each value it saw, by key."""

  def __init__(self, start):
    self.seen: dict = {}
    # False where it asked what the model does not trace (holding flows).
    self.reusable = True
    # The givings of its module's functions as its pass reached them
    # (``_Pass.start``): asked again in a pass, they change only where
    # this flow proves them.
    self.start = start

  def saw(self, key, value):
    if self.seen.setdefault(key, value) != value:
      self.reusable = False  # (a giving proven while it was read)


class _Kept(NamedTuple):
  """A module's flow of a first pass, for the next."""
  flow: _flow.OptimizerFlow
  trace: _Trace
  reads: set  # what ``reading`` noted while it was built and asked


class _Pass:
  """One first pass's flows: those kept from the last one that still
  stand, others built."""

  def __init__(self, model, candidates):
    self.model = model
    state = _state(model)
    memo = model.givers_memo
    self.kept = memo[1] if memo is not None and memo[0] == state else {}
    self.state = state
    self.flows: dict = {}
    self.traces: dict = {}
    # Where each function is proven in the pass, and where each module's
    # functions are: a giving read there may change while it is asked.
    self.positions: dict = {}
    self.spans: dict = {}
    self.own: dict = {}  # path -> its functions among the candidates
    for index, function in enumerate(candidates):
      self.positions.setdefault(id(function.node), []).append(index)
      first, _ = self.spans.get(function.path, (index, index))
      self.spans[function.path] = first, index
      self.own.setdefault(function.path, []).append(function.node)

  def flow_of(self, function):
    path = function.path
    if path not in self.flows:
      kept = self.kept.get(path)
      if kept is not None and self._stands(path, kept.trace):
        self.flows[path], self.traces[path] = kept.flow, kept.trace
        self.model.note_reads(kept.reads)
      else:
        self.traces[path] = _Trace(self.start(path))
        with self.model.tracing(self.traces[path]):
          _flow_of(self.model, function, self.flows)
    return self.flows[path]

  def start(self, path) -> dict:
    """The givings now of the functions of the module ``path``."""
    return {node: value_of(self.model, ('giver', node))
            for node in self.own[path]}

  def _stands(self, path, trace) -> bool:
    if not trace.reusable or trace.start != self.start(path):
      return False
    first, last = self.spans[path]
    own = {id(node) for node in self.own[path]}
    for key, value in trace.seen.items():
      ids = ({id(key[1])} if key[0] == 'giver' else
             key[1] if key[0] == 'tuples' else set())
      if ids & own:
        # (its own, proven by this flow from the same start: as it saw)
        if ids - own:
          return False
        continue
      if value_of(self.model, key) != value:
        return False
      for i in ids:
        at = self.positions.get(i, ())
        # (proven while its module's functions are: it changes there)
        if bisect.bisect_left(at, first) < bisect.bisect_right(at, last):
          return False
    return True

  def keep(self, modules):
    """Keeps the flows whose traces may stand for the next pass."""
    self.model.givers_memo = self.state, {
        path: _Kept(flow, self.traces[path], modules[path].reads)
        for path, flow in self.flows.items() if self.traces[path].reusable}


# The model's parts that change between the solves, or that no flow
# asks of it: a flow's trace notes those it reads (``tracing``), or it
# is not kept (the holding flows).
_UNTRACED = frozenset((
    'optimizer_givers', 'tuple_givers', 'step_factories', 'param_verdicts',
    'step_params', 'followed_factories', 'step_call_verdicts', 'param_why',
    'rate_setters', '_holding_flows', '_holding_reads', '_holding_open',
    '_reads_open', '_traces', 'givers_memo', '_rate_setters_of'))


def _state(model) -> dict:
  """The rest of the model by value, to compare with a pass before."""
  return {key: _frozen(value) for key, value in vars(model).items()
          if key not in _UNTRACED}


def _frozen(value):
  """``value`` with its containers copied as tuples (nested ones too)."""
  if isinstance(value, dict):
    return dict, tuple((key, _frozen(item)) for key, item in value.items())
  if isinstance(value, (list, tuple)):
    return type(value), tuple(_frozen(item) for item in value)
  if isinstance(value, (set, frozenset)):
    return set, tuple(_frozen(item) for item in value)
  return value


def _proven_in(flow, node):
  """``(kind, step)`` the module's ``flow`` proves of its function
  ``node`` (None, None where it is not the module's def of its name)."""
  if flow.functions.get(node.name) is not node:
    return None, None
  return flow.returned_kind(node), flow.step_signature(node.name)


def _first_pass(model, candidates) -> dict:
  """Path -> _Module: each function proven from those proven before it,
  the model's sets growing as it goes (from none: the flows asked what
  they hold that read a giver are built again)."""
  _assume(model, _NONE, _changed(Givers(
      frozenset(model.optimizer_givers), dict(model.tuple_givers),
      dict(model.step_factories)), _NONE))
  modules: dict = {}
  flows = _Pass(model, candidates)
  for function in candidates:
    node = function.node
    with model.reading() as reads:
      flow = flows.flow_of(function)
      with model.tracing(flows.traces[function.path]):
        kind, step = _proven_in(flow, node)
    module = modules.setdefault(function.path, _Module({}, set()))
    module.reads.update(reads)
    module.proven[node] = kind, step
    if kind is True:
      model.optimizer_givers.add(node)
    elif kind is not None:
      model.tuple_givers[node] = kind
    if step is not None:
      model.step_factories[node] = step
  flows.keep(modules)
  return modules


def _round(model, candidates, modules, changed) -> dict:
  """The modules again whose flows asked a function of ``changed``, the
  model assuming what it now does; the others as they were."""
  stale = {path for path, module in modules.items() if module.reads & changed}
  fresh: dict = {}
  flows: dict = {}
  for function in candidates:
    if function.path not in stale:
      continue
    with model.reading() as reads:
      proven = _proven_in(_flow_of(model, function, flows), function.node)
    module = fresh.setdefault(function.path, _Module({}, set()))
    module.reads.update(reads)
    module.proven[function.node] = proven
  return {**modules, **fresh}


def _collected(modules) -> Givers:
  optimizers, tuples, steps = set(), {}, {}
  for module in modules.values():
    for node, (kind, step) in module.proven.items():
      if kind is True:
        optimizers.add(node)
      elif kind is not None:
        tuples[node] = kind
      if step is not None:
        steps[node] = step
  return Givers(frozenset(optimizers), tuples, steps)


def _changed(before, after) -> set:
  """id() of the functions whose kind or step differs."""
  nodes = set(before.optimizers) | set(before.tuples) | set(before.steps) | (
      set(after.optimizers) | set(after.tuples) | set(after.steps))
  return {id(node) for node in nodes
          if before.kind(node) != after.kind(node) or
          before.steps.get(node) != after.steps.get(node)}


def _assume(model, givers, changed) -> None:
  """The model assumes ``givers``; the flows asked what they hold that
  asked a function of ``changed`` (ids; None: any) are built again."""
  model.optimizer_givers = set(givers.optimizers)
  model.tuple_givers = dict(givers.tuples)
  model.step_factories = dict(givers.steps)
  # (flows another module's flow asked, built on what was assumed before)
  model.forget_holding_flows(changed)


def _in_cycles(model, candidates, modules, least) -> list:
  """The candidates left unproven whose giving a flow asked what it holds
  asked (another module's flow asks those: an attribute kept on ``self``
  across modules, what a call from another module passes), asked by a
  module that asks, through what the modules' flows ask, the candidate's
  own module."""
  held = model.holding_reads()
  path_of = {id(f.node): f.path for f in candidates}
  asks = {path: {path_of[i] for i in module.reads if i in path_of}
          for path, module in modules.items()}
  return [f for f in candidates if least.kind(f.node) is None and (
      id(f.node) in held) and any(
          id(f.node) in module.reads and _reaches(asks, f.path, path)
          for path, module in modules.items())]


def _reaches(asks, start, goal) -> bool:
  seen, stack = {start}, [start]
  while stack:
    path = stack.pop()
    if path == goal:
      return True
    for other in asks.get(path, ()):
      if other not in seen:
        seen.add(other)
        stack.append(other)
  return False


def _with_guesses(least, cycling) -> Givers:
  """``least`` and each of ``cycling`` a giver of the kind the shape of
  its returns allows: a tuple of optimizers where each return is a tuple
  display of one length, else an optimizer; none where a return gives
  nothing."""
  optimizers, tuples = set(least.optimizers), dict(least.tuples)
  for function in cycling:
    returns = _names.own_returns(function.node)
    if not returns or None in returns:
      continue
    lengths = {len(r.elts) if isinstance(r, ast.Tuple) else None
               for r in returns}
    if lengths == {None}:
      optimizers.add(function.node)
    elif len(lengths) == 1:
      tuples[function.node] = (True,) * lengths.pop()
  return Givers(frozenset(optimizers), tuples, dict(least.steps))
