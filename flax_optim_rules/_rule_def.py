"""A user's own flax.optim rule, its methods kept verbatim, as Optax.

Research code often subclassed ``flax.optim.OptimizerDef`` (half-precision
state, gradient clipping, Adafactor variants). ``flax-optim-compat migrate``
keeps such a class as the user wrote it and changes only its base, to
``RuleDef``, and the state it builds by hand, ``flax.optim.OptimizerState(step
+ 1, new_param_states)``, to ``RuleState(step + 1, new_param_states)``::

  class Optimizer(flax_optim_rules.RuleDef):
    @flax.struct.dataclass
    class HyperParams: ...
    def __init__(self, learning_rate=None, beta=0.9):
      super().__init__(Optimizer.HyperParams(learning_rate, beta))
    def init_param_state(self, param): ...
    def apply_param_gradient(self, step, hyper_params, param, state, grad): ...

  tx = Optimizer(learning_rate=0.1).to_optax()

The hooks are flax.optim's: ``init_param_state(param)`` and
``apply_param_gradient(step, hyper_params, param, state, grad)`` per leaf, or
the whole tree's ``init_state(params)`` and ``apply_gradient(hyper_params,
params, state, grads)`` (by default the per-leaf hooks on every leaf).
``to_optax(**overrides)`` runs them as an ``optax.GradientTransformation``
whose state is ``LegacyRuleState(count, param_states)``: the legacy layout as
it was, so checkpoints keep their per-parameter fields.

``legacy_optim``'s ``OptimizerDef.to_optax()`` of a user subclass builds its
transform with the same functions (``init_per_leaf``, ``apply_per_leaf``,
``rule_transform``), so the kept rule and the shim's compute the same numbers.

Needs nothing but jax and optax.
"""

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
from jax.extend import core as jax_core
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics


class RuleState(NamedTuple):
  """The whole tree's state a rule's methods see (flax.optim's
  ``OptimizerState``): the step and one per-parameter state per leaf."""
  step: Any  # int32 scalar: the number of steps taken.
  param_states: Any  # params-shaped tree of the rule's per-parameter states.

  def replace(self, **changes) -> 'RuleState':
    """A copy with ``changes`` (flax.optim's ``OptimizerState.replace``)."""
    return self._replace(**changes)


class LegacyRuleState(NamedTuple):
  """Optax state of a rule run by its own methods: the legacy layout as is."""
  count: jax.Array  # type: ignore[assignment]  # int32: the legacy step.
  param_states: Any  # params-shaped tree of the rule's per-parameter states.


def init_per_leaf(init_param_state: Callable, params: Any,
                  make_state: Callable) -> Any:
  """flax.optim's ``init_state``: ``init_param_state`` on every leaf, step 0.

  ``make_state(step, param_states)`` builds the state object the rule's
  methods expect (``RuleState``, or legacy_optim's ``OptimizerState``).
  """
  param_states = jax.tree_util.tree_map(init_param_state, params)
  return make_state(jnp.asarray(0, dtype=jnp.int32), param_states)


def apply_per_leaf(apply_param_gradient: Callable, hyper_params: Any,
                   params: Any, state: Any, grads: Any,
                   make_state: Callable) -> tuple[Any, Any]:
  """flax.optim's ``apply_gradient``: the per-leaf rule on every leaf.

  Returns ``(new_params, make_state(state.step + 1, new_param_states))``.
  """
  treedef = jax.tree_util.tree_structure(params)
  results = [
      apply_param_gradient(state.step, hyper_params, p, s, g)
      for p, s, g in zip(treedef.flatten_up_to(params),
                         treedef.flatten_up_to(state.param_states),
                         treedef.flatten_up_to(grads))
  ]
  new_params = treedef.unflatten([r[0] for r in results])
  new_states = treedef.unflatten([r[1] for r in results])
  return new_params, make_state(state.step + 1, new_states)


def rule_transform(owner: str, hyper_params: Any, init_state: Callable,
                   apply_gradient: Callable,
                   make_state: Callable) -> optax.GradientTransformation:
  """An Optax transform running a rule's tree-level methods.

  ``init_state(params)`` and ``apply_gradient(hyper_params, params, state,
  grads)`` are the rule's (its own or the per-leaf defaults); schedules in
  ``hyper_params`` are evaluated at the step count first.

  ``optax.apply_updates`` adds the updates to the params, one rounding,
  while the rule computed its new params its own way; ``descent_updates``
  finds, for each leaf the rule computes as ``param - s`` (or ``param + s``)
  with ``s`` not depending on the params, the update ``-s`` (``s``), so that
  ``param + update`` is the rule's own operation, bit for bit, also where
  XLA fuses it the way it fused the rule (``param - lr * m`` into one
  multiply-add). Other leaves get ``new_param - param``: exact whenever old
  and new values are within a factor of two of each other (Sterbenz), i.e.
  for any ordinary step, and otherwise within one rounding of the update.
  """

  def init_fn(params):
    state = init_state(params)
    return LegacyRuleState(state.step, state.param_states)

  def update_fn(updates, state, params=None):
    _numerics.require_params(params, f'{owner}.to_optax()')
    hp = _numerics.resolve(hyper_params, state.count)
    rule_state = make_state(state.count, state.param_states)
    deltas, new_state = descent_updates(
        lambda p: apply_gradient(hp, p, rule_state, updates), params)
    return deltas, LegacyRuleState(
        jnp.asarray(new_state.step, jnp.int32), new_state.param_states)

  return optax.GradientTransformation(init_fn, update_fn)


def _independent_operand(eqn, param, depends):
  """``(sign, operand)`` where ``eqn`` is ``param - operand`` (-1) or
  ``param + operand`` (+1) with ``operand`` free of the params; else None."""
  name = eqn.primitive.name
  first, second = eqn.invars
  free = lambda v: isinstance(v, jax_core.Literal) or v not in depends
  if name == 'sub' and first is param and free(second):
    return -1, second
  if name == 'add' and first is param and free(second):
    return 1, second
  if name == 'add' and second is param and free(first):
    return 1, first
  return None


def descent_updates(step: Callable, params: Any) -> tuple[Any, Any]:
  """``(updates, new_state)`` of ``step(params) -> (new_params, new_state)``
  (see ``rule_transform``). Traced (jit, pmap), the step runs once, from
  its jaxpr, which also returns ``s`` of each leaf it computes as ``param -
  s`` (``param + s``): that leaf's update is ``-s`` (``s``), and XLA fuses
  ``param + update`` as it fused the rule's own operation."""
  if not any(isinstance(leaf, jax.core.Tracer)
             for leaf in jax.tree_util.tree_leaves(params)):
    # Eager: the step runs once, as the rule's own code (its hooks are
    # called once per step, as flax.optim called them); op by op nothing is
    # fused, and ``new_param - param`` serves.
    new_params, new_state = step(params)
    return jax.tree_util.tree_map(_numerics.update_to, new_params,
                                  params), new_state
  closed, shapes = jax.make_jaxpr(step, return_shape=True)(params)
  jaxpr = closed.jaxpr
  param_leaves, param_tree = jax.tree_util.tree_flatten(params)
  out_tree = jax.tree_util.tree_structure(shapes)
  depends = set(jaxpr.invars)
  made_by = {}
  for eqn in jaxpr.eqns:
    if any(not isinstance(v, jax_core.Literal) and v in depends
           for v in eqn.invars):
      depends.update(eqn.outvars)
    for var in eqn.outvars:
      made_by[var] = eqn
  descents = {}  # leaf index -> (sign, operand)
  for index, (param, var) in enumerate(zip(jaxpr.invars, jaxpr.outvars)):
    eqn = None if isinstance(var, jax_core.Literal) else made_by.get(var)
    if eqn is not None and len(eqn.invars) == 2:
      found = _independent_operand(eqn, param, depends)
      if found is not None:
        descents[index] = found
  operands = [o for _, o in descents.values()
              if not isinstance(o, jax_core.Literal)]
  extended = jax_core.ClosedJaxpr(
      jaxpr.replace(outvars=list(jaxpr.outvars) + operands,
                    debug_info=jaxpr.debug_info._replace(result_paths=None)),
      closed.consts)
  outs = jax_core.jaxpr_as_fun(extended)(*param_leaves)
  values = dict(zip(operands, outs[len(jaxpr.outvars):]))
  outs = outs[:len(jaxpr.outvars)]
  new_params, new_state = jax.tree_util.tree_unflatten(out_tree, outs)
  if jax.tree_util.tree_structure(new_params) != param_tree:
    raise TypeError(
        'the rule returned new params of another structure than the params: '
        f'{jax.tree_util.tree_structure(new_params)} != {param_tree}')
  updates = []
  for index, param in enumerate(param_leaves):
    if index not in descents:
      updates.append(_numerics.update_to(outs[index], param))
      continue
    sign, operand = descents[index]
    value = operand.val if isinstance(operand, jax_core.Literal) else (
        values[operand])
    updates.append(jax.lax.neg(value) if sign < 0 else value)
  return param_tree.unflatten(updates), new_state


def apply_overrides(hyper_params: Any, overrides: dict[str, Any],
                    owner: str) -> Any:
  """``hyper_params`` with ``overrides`` replaced; errors list the names."""
  if not overrides:
    return hyper_params
  if not dataclasses.is_dataclass(hyper_params) or isinstance(
      hyper_params, type):
    raise TypeError(
        f'{owner}: cannot override {", ".join(map(repr, sorted(overrides)))}'
        f' because its hyper_params is a {type(hyper_params).__name__}, not a'
        ' dataclass (pass hyper_params=... to replace them all).')
  valid = tuple(f.name for f in dataclasses.fields(hyper_params))
  unknown = sorted(set(overrides) - set(valid))
  if unknown:
    raise TypeError(
        f'{owner} has no hyper-parameter named {", ".join(map(repr, unknown))}'
        f'; valid names are: {", ".join(valid)} (or hyper_params=...).')
  return dataclasses.replace(hyper_params, **overrides)


class RuleDef:
  """Base of a rule written as a flax.optim ``OptimizerDef`` subclass.

  A subclass implements ``init_param_state`` and ``apply_param_gradient``
  (and may override ``init_state``/``apply_gradient`` for the whole tree);
  ``to_optax()`` turns it into an Optax transform.
  """

  def __init__(self, hyper_params: Any):
    self.hyper_params = hyper_params

  def init_param_state(self, param: Any) -> Any:
    """One parameter's initial state."""
    raise NotImplementedError(
        f'{type(self).__name__} must implement init_param_state(param) or '
        'init_state(params).')

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    """One parameter's update: returns ``(new_param, new_state)``."""
    raise NotImplementedError(
        f'{type(self).__name__} must implement apply_param_gradient(step, '
        'hyper_params, param, state, grad) or apply_gradient(hyper_params, '
        'params, state, grads).')

  def init_state(self, params: Any) -> RuleState:
    """The whole tree's initial state: ``init_param_state`` on every leaf."""
    return init_per_leaf(self.init_param_state, params, RuleState)

  def apply_gradient(self, hyper_params, params, state: RuleState, grads):
    """The whole tree's update: ``apply_param_gradient`` on every leaf."""
    return apply_per_leaf(self.apply_param_gradient, hyper_params, params,
                          state, grads, RuleState)

  def update_hyper_params(self, **overrides) -> Any:
    """The hyper-params with ``overrides`` (``hyper_params=`` replaces all)."""
    hyper_params = overrides.pop('hyper_params', self.hyper_params)
    return apply_overrides(hyper_params, overrides, type(self).__name__)

  def to_optax(self, **overrides) -> optax.GradientTransformation:
    """This rule as an Optax transform (state: ``LegacyRuleState``).

    Args:
      **overrides: hyper-params to replace, as flax.optim's
        ``apply_gradient(grads, name=value)``; a value may be a schedule (a
        callable of the step count).
    """
    return rule_transform(type(self).__name__,
                          self.update_hyper_params(**overrides),
                          self.init_state, self.apply_gradient, RuleState)

  def learning_rate_factory(self) -> Callable[..., Any]:
    """``learning_rate -> self.to_optax(learning_rate=...)``: what
    ``inject_learning_rate`` wraps to set the rate at each step."""

    own_rate = getattr(self.hyper_params, 'learning_rate', None)

    def with_learning_rate(learning_rate=own_rate):
      return self.to_optax(learning_rate=learning_rate)

    return with_learning_rate
