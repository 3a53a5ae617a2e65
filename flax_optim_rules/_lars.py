"""flax.optim's LARS: layer-wise adaptive rate scaling with momentum."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics


class ScaleByLegacyLarsState(NamedTuple):
  """State of ``scale_by_legacy_lars``: only the step count."""
  count: jax.Array  # int32 scalar: the legacy step.


def scale_by_legacy_lars(hyper_params: Any,
                         owner: str = 'LARS') -> optax.GradientTransformation:
  r"""Scales each leaf's gradient by its LARS learning rate (flax.optim order).

  For every leaf, with :math:`\eta` the learning rate at the current step,

  .. math::
    r = \begin{cases} 1 & \|g\| = 0 \text{ or } \|p\| = 0 \\
        \dfrac{c\,\|p\|}{\|g\| + \lambda \|p\| + \epsilon} & \text{otherwise}
        \end{cases},\qquad
    u = (\eta\, r)\,(g + \lambda p)

  (``c`` = ``trust_coefficient``, ``lambda`` = ``weight_decay``). The weight
  decay term is skipped for a static zero ``weight_decay``, as flax.optim did.

  .. warning::
    ``optax.lars`` measures the trust ratio against ``||g + lambda p||`` and
    applies the learning rate after the ratio; this transform uses
    ``||g|| + lambda ||p||`` and multiplies ``eta * r`` first, which is what
    flax.optim computed. The output has the sign of the gradient (a descent
    direction still needs negating).

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``lars``);
      numeric fields may be traced values or schedules (callables of the step
      count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` that needs ``params`` in ``update``.
  """

  def init_fn(params):
    del params
    return ScaleByLegacyLarsState(count=jnp.zeros([], jnp.int32))

  def update_fn(updates, state, params=None):
    _numerics.require_params(params, owner)
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    decay = hp.weight_decay
    skip_decay = _numerics.is_static_zero(decay)

    def leaf_update(grad, param):
      param_norm = jnp.linalg.norm(param)
      grad_norm = jnp.linalg.norm(grad)
      trust_ratio = hp.trust_coefficient * param_norm / (
          grad_norm + decay * param_norm + hp.eps)
      trust_ratio = jnp.where(
          jnp.logical_or(grad_norm == 0., param_norm == 0.), 1., trust_ratio)
      if not skip_decay:
        grad = grad + decay * param
      return (learning_rate * trust_ratio) * grad

    scaled = jax.tree_util.tree_map(leaf_update, updates, params)
    return scaled, ScaleByLegacyLarsState(
        count=optax.safe_int32_increment(state.count))

  return optax.GradientTransformation(init_fn, update_fn)


def legacy_trace(decay: Any, nesterov: bool) -> optax.GradientTransformation:
  r"""Heavy-ball momentum in flax.optim's operand order.

  .. math::
    m \leftarrow \beta m + u,\qquad
    u \leftarrow u + \beta m \text{ if nesterov else } m

  .. warning::
    The same math as ``optax.trace`` (state ``optax.TraceState``), which
    computes ``u + beta * m``. When ``u`` is itself a product (as LARS's
    scaled gradient is), XLA may fuse either multiplication into a
    fused multiply-add depending on the operand order, so only this order
    rounds like flax.optim under ``jax.jit``.
  """

  def init_fn(params):
    return optax.TraceState(trace=_numerics.zeros_like_tree(params))

  def update_fn(updates, state, params=None):
    del params
    new_trace = jax.tree_util.tree_map(lambda u, m: decay * m + u, updates,
                                       state.trace)
    if nesterov:
      updates = jax.tree_util.tree_map(lambda u, m: u + decay * m, updates,
                                       new_trace)
    else:
      updates = new_trace
    return updates, optax.TraceState(trace=new_trace)

  return optax.GradientTransformation(init_fn, update_fn)


def legacy_lars(hyper_params: Any,
                owner: str = 'LARS') -> optax.GradientTransformation:
  """flax.optim's LARS rule: ``chain(scale_by_legacy_lars(hp),
  legacy_trace(beta, nesterov), scale(-1))``; the trace holds the legacy
  ``momentum``. ``beta`` must be a constant (not a schedule)."""
  _numerics.require_constant(hyper_params, ('beta',), owner)
  nesterov = _numerics.static_bool(hyper_params.nesterov, 'nesterov', owner)
  return optax.chain(
      scale_by_legacy_lars(hyper_params, owner),
      legacy_trace(hyper_params.beta, nesterov),
      optax.scale(-1.0))


def lars(learning_rate=None, beta=0.9, weight_decay=0, trust_coefficient=0.001,
         eps=0, nesterov=False) -> optax.GradientTransformation:
  """flax.optim's ``LARS(...)`` as an Optax transform (``legacy_lars``).

  The same transform as ``LARS(...).to_optax()`` (see ``adam``).
  """
  return legacy_lars(_numerics.HyperParams(
      learning_rate=learning_rate, beta=beta, weight_decay=weight_decay,
      trust_coefficient=trust_coefficient, eps=eps, nesterov=nesterov))
