"""Two call forms an optimizer goes through that its flow follows.

* A function differentiated where it is called: ``jax.grad(f,
  has_aux=True)(x)`` (or ``jax.value_and_grad``; ``f`` also through
  ``functools.partial(f, a, k=v)``), where ``f`` is a def nested in a
  function, bound there once, by its def, undecorated, and every read of
  its name there is the function of such a call. jax runs ``f`` once with
  the bound arguments first and the call's own after (those it
  differentiates as tracers), so each such call is a call of ``f`` (its
  parameters are proven by them), and gives back the auxiliary part of
  what ``f`` returns, the second element of a pair, as it is: ``(grads,
  aux)``, or ``((value, aux), grads)``. An optimizer in that part is
  followed where the call's result goes (unpacked into proven names).
* A property's tuple spread into a call: ``step(*self.args, batch)`` in a
  method, where ``args`` is a read-only property of the method's class
  that ``_self_holders`` follows (nothing outside the class's methods
  names it) and returns one tuple display: its elements are the call's
  arguments there, each in its place.

Anything else stays as before: the differentiated function's name read
otherwise, a ``*`` of anything else, a property returning otherwise.
Part of ``_flow.OptimizerFlow``. Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _flow_values

# The differentiating wrappers -> whether they give the value too.
_DIFFERENTIATE = {'jax.grad': False, 'jax.value_and_grad': True}
# Their options besides the function: none changes which arguments reach
# it or what they give back in place of its auxiliary output.
_GRAD_OPTIONS = ('argnums', 'has_aux', 'holomorphic', 'allow_int',
                 'reduce_axes')


class GradCall(NamedTuple):
  """A call of a differentiated function: ``jax.grad(f, ...)(x)``."""
  function: ast.AST  # the def differentiated
  has_aux: bool
  with_value: bool  # ``jax.value_and_grad``: ((value, aux), grads)


class FlowCallForms:
  """The flow's part for differentiated functions and spread properties.
  ``_collect`` records the candidates, ``_solve`` resolves them first."""

  def _init_call_forms(self):
    self._grad_candidates: list = []  # (a call of a call, its scope)
    self._differentiated: dict = {}  # def -> [Site]: its calls
    self._grad_calls: dict = {}  # the outer call -> GradCall
    # id(an argument bound by partial there) -> (def, its parameter)
    self._partial_bound: dict = {}

  # ----------------------------------------------- differentiated defs
  def _resolve_differentiated(self):
    """Fills the tables above with each nested def every read of which is
    differentiated and called at once."""
    found: dict = {}
    for call, scope in self._grad_candidates:
      read = self._differentiation(call, scope)
      if read is not None:
        found.setdefault(read[0].function, []).append((call, *read))
    for function, reads in found.items():
      references = {id(read[3]) for read in reads}
      home = self._scope_of[function]
      if any(id(load) not in references
             for load in self.loads_of(home, function.name)):
        continue  # its name goes elsewhere too: its callers are unknown
      self._differentiated[function] = [read[2] for read in reads]
      for call, grad, _, _, bound in reads:
        self._grad_calls[call] = grad
        self._partial_bound.update(bound)

  def _differentiation(self, call, scope) -> Optional[tuple]:
    """``(GradCall, Site, reference, bound)`` where ``call`` is ``jax.grad(
    [partial(]f[, ...)], ...)(...)`` of a nested def ``f`` (``bound``: id
    of each argument partial binds -> (def, parameter)), else None."""
    grad = call.func
    with_value = _DIFFERENTIATE.get(self.names.resolve(grad.func))
    if with_value is None or len(grad.args) != 1 or any(
        k.arg not in _GRAD_OPTIONS for k in grad.keywords) or any(
            isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords):
      return None
    has_aux = next((k.value for k in grad.keywords if k.arg == 'has_aux'),
                   ast.Constant(False))
    parts = self._partial_parts(grad.args[0], scope)
    if parts is None or not isinstance(has_aux, ast.Constant) or (
        has_aux.value not in (True, False)):
      return None
    reference, args, keywords = parts
    function = self._nested_def(reference, scope)
    if function is None:
      return None
    keywords = dict(keywords)
    keywords.update({k.arg: (k.value, scope) for k in call.keywords})
    site = _flow_values.Site(args + tuple((a, scope) for a in call.args),
                             keywords)
    named = [a.arg for a in function.args.posonlyargs + function.args.args]
    bound = {id(node): (function, named[index])
             for index, (node, _) in enumerate(args) if index < len(named)}
    bound.update({id(node): (function, name)
                  for name, (node, _) in parts[2].items()
                  if name in self.scopes[function].params})
    return (GradCall(function, has_aux.value, with_value), site, reference,
            bound)

  def _partial_parts(self, node, scope) -> Optional[tuple]:
    """``(name, args, keywords)`` of ``partial(...(partial(name, ...)))``
    (bound arguments as (node, scope)); ``(node, (), {})`` for a name."""
    if isinstance(node, ast.Name):
      return node, (), {}
    if not isinstance(node, ast.Call) or not node.args or (
        self.names.resolve(node.func) != _flow_values.PARTIAL) or any(
            isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
      return None
    inner = self._partial_parts(node.args[0], scope)
    if inner is None:
      return None
    keywords = dict(inner[2])
    keywords.update({k.arg: (k.value, scope) for k in node.keywords})
    return (inner[0], inner[1] + tuple((a, scope) for a in node.args[1:]),
            keywords)

  def _nested_def(self, reference, scope) -> Optional[ast.AST]:
    """The undecorated def nested in a function that a read ``reference``
    sees, where that def is its name's only binding there."""
    home = self._binding_scope(scope, reference.id)
    if home is None or home.parent is None or not isinstance(
        home.node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            home.bindings.get(reference.id) != ['unknown']):
      return None
    defs = [n for n in self._own_nodes(home.node)
            if isinstance(n, ast.FunctionDef) and n.name == reference.id]
    return defs[0] if len(defs) == 1 and not defs[0].decorator_list else (
        None)

  def differentiated_sites(self, function) -> Optional[list]:
    """The calls of the differentiated def ``function`` (``Site``s), or
    None where it is none."""
    return self._differentiated.get(function)

  def grad_call_kind(self, call):
    """What the call of a differentiated function gives, where it is one:
    the auxiliary part of the pair the function returns in its place (a
    tuple kind), or None; ``False`` where ``call`` is no such call."""
    grad = self._grad_calls.get(call)
    if grad is None:
      return False
    kind = self._returned_by(grad.function) if grad.has_aux else None
    if not isinstance(kind, tuple) or len(kind) != 2:
      return None  # (its first element is the value differentiated: a
      # scalar, never an optimizer, where the program runs)
    given = (_flow_values.ANY, kind[1])
    return (given, _flow_values.ANY) if grad.with_value else given

  def aux_followed(self, function) -> bool:
    """``function`` is differentiated, and every call of it gives back its
    auxiliary output in place (followed where the call's result goes)."""
    grads = [g for c, g in self._grad_calls.items() if g.function is function]
    return bool(grads) and all(g.has_aux for g in grads) and (
        self.grad_call_kind(next(c for c, g in self._grad_calls.items()
                                 if g.function is function)) is not None)

  def bound_argument_proven(self, argument) -> bool:
    """``argument`` is bound by ``partial`` to a differentiated def's
    parameter that this flow proves an optimizer."""
    bound = self._partial_bound.get(id(argument))
    return bound is not None and (self.scopes[bound[0]], bound[1]) in (
        self.alive)

  # ------------------------------------------------- spread properties
  def spread_arguments(self, call, scope) -> Optional[tuple]:
    """``call``'s positional arguments as (node, scope), each
    ``*self.<property>`` followed spread into its tuple's elements; None
    where a ``*`` hides them."""
    spread = []
    for argument in call.args:
      if not isinstance(argument, ast.Starred):
        spread.append((argument, scope))
        continue
      display = self.self_attributes.spread_display(argument.value)
      if display is None:
        return None
      inner = self.scope_of(display)
      spread += [(element, inner) for element in display.elts]
    return tuple(spread)

  def spread_into_proven(self, function, display) -> bool:
    """``display`` is the one return of the property ``function``, read
    only spread into calls of this module's functions, each optimizer in
    it going to a parameter this flow proves one."""
    reads = self.self_attributes.spread_reads(display)
    if not reads:
      return False
    for read in reads:
      starred = self._parents.get(read)
      call = self._parents.get(starred)
      if not (isinstance(starred, ast.Starred) and isinstance(call, ast.Call)
              and starred in call.args) or not self._spread_proven(
                  call, display):
        return False
    return function in self.scopes

  def _spread_proven(self, call, display) -> bool:
    scope = self.scope_of(call)
    callee = self._callee(call, scope)
    spread = self.spread_arguments(call, scope)
    if callee is None or spread is None:
      return False
    bound = self.aliases.get((self._binding_scope(scope, call.func.id),
                              call.func.id))
    named = callee.args.posonlyargs + callee.args.args
    first = len(bound.args) if bound else 0
    for position, (node, inner) in enumerate(spread, start=first):
      if not any(node is e for e in display.elts):
        continue
      kind = self._element_kind(node, inner)
      if kind is _flow_values.ANY:
        continue
      if kind is not True or position >= len(named) or (
          self.scopes[callee], named[position].arg) not in self.alive:
        return False  # (a tuple holding one goes in unproven)
    return True
