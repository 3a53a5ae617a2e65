"""The module functions that give an optimizer to other modules, as a
greatest fixpoint (a part of ``_cross_flow.CrossModuleFlow``).

A module function gives an optimizer (or a tuple holding one) where its
module's flow proves every return so. That proof may rest on what another
module's function gives: dopamine's ``train(optimizer, ...)`` returns the
optimizer it steps, an optimizer where every caller passes one; a
subclass's module passes ``self.optimizer``, which holds what ``train``
returned. Asked in one pass from nothing, ``train`` waits on
``self.optimizer``, which waits on ``train``: neither is proven.

So the answer is the greatest fixpoint. Every candidate starts a giver of
the kind its returns' shape allows (an optimizer, or a tuple of them); a
round builds every candidate's module flow with the model assuming those
kinds, and keeps each function at the kind its flow then proves (none
where it proves none); the rounds end when a round proves exactly what it
assumed. Each giver kept is then proven by its module's flow given the
others, each of which is proven the same way: what a value holds follows
by induction over the program's run. A function whose proof needed a
kind that was not kept falls in a later round.

The step factories (``make_update_fn(...)``) are proven in the same rounds.
Where the rounds do not settle (a bound guards against a cycle), one pass
from nothing decides instead: each function proven there is proven from
those proven before it.

Stdlib only.
"""

import ast
from typing import NamedTuple

from compat.codemod import _flow
from compat.codemod import _names

# Rounds before the fixpoint gives up; a round usually drops what the
# optimistic start assumed of every function that gives nothing.
_MAX_ROUNDS = 8


class Givers(NamedTuple):
  """What the model assumes, and a round proves."""
  optimizers: frozenset  # FunctionDef of the functions returning one
  tuples: dict  # FunctionDef -> the element kinds of the tuple returned
  steps: dict  # FunctionDef -> the StepSignature of the step returned


def solve(model, candidates) -> None:
  """Sets ``model.optimizer_givers``, ``tuple_givers`` and
  ``step_factories`` over ``candidates`` (the ``_project`` functions whose
  modules spell what makes, steps or types an optimizer)."""
  assumed = _optimistic(candidates)
  for _ in range(_MAX_ROUNDS):
    proven = _round(model, candidates, assumed)
    if proven == assumed:
      return
    assumed = proven
  _assume(model, Givers(frozenset(), {}, {}))
  _round(model, candidates, None)


def _optimistic(candidates) -> Givers:
  """Every candidate a giver of the kind the shape of its returns allows:
  a tuple of optimizers where each return is a tuple display of one
  length, else an optimizer; nothing where a return gives nothing."""
  optimizers, tuples = set(), {}
  for function in candidates:
    returns = _names.own_returns(function.node)
    if not returns or None in returns:
      continue
    lengths = {len(r.elts) if isinstance(r, ast.Tuple) else None
               for r in returns}
    if lengths == {None}:
      optimizers.add(function.node)
    elif len(lengths) == 1:
      tuples[function.node] = (True,) * lengths.pop()
  return Givers(frozenset(optimizers), tuples, {})


def _assume(model, givers) -> None:
  model.optimizer_givers = set(givers.optimizers)
  model.tuple_givers = dict(givers.tuples)
  model.step_factories = dict(givers.steps)
  # (flows another module's flow asked: built on what was assumed before)
  model.forget_holding_flows()


def _round(model, candidates, assumed) -> Givers:
  """What each candidate's module flow proves with the model assuming
  ``assumed``; with None, from nothing, each function proven there assumed
  at once by the flows built after it."""
  if assumed is not None:
    _assume(model, assumed)
  optimizers, tuples, steps = set(), {}, {}
  flows: dict = {}
  for function in candidates:
    node = function.node
    flow = flows.get(function.path)
    if flow is None:
      flow = flows[function.path] = _flow.OptimizerFlow(
          model.trees[function.path], model.names[function.path])
    if flow.functions.get(node.name) is not node:
      continue
    kind = flow.returned_kind(node)
    if kind is True:
      optimizers.add(node)
    elif kind is not None:
      tuples[node] = kind
    step = flow.step_signature(node.name)
    if step is not None:
      steps[node] = step
    if assumed is None:  # (the sets the flows built next read)
      model.optimizer_givers, model.tuple_givers = optimizers, tuples
      model.step_factories = steps
  return Givers(frozenset(optimizers), tuples, steps)
