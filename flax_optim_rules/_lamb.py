"""flax.optim's LAMB: Adam steps rescaled per leaf by a trust ratio."""

from typing import Any

import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _adam
from flax_optim_rules import _numerics


def trust_ratio(param_norm: jax.Array, update_norm: jax.Array) -> jax.Array:
  """``|p| / |u|``, or 1 when both norms are zero (flax.optim's rule).

  As in flax.optim, a zero update on a non-zero parameter gives an infinite
  ratio (and a NaN step), and a zero parameter gets ratio 0 (it never moves).
  A true division: the norm's root has a second user (the test), so XLA did
  not turn it into a reciprocal square root in flax.optim's jitted step.
  """
  ratio = param_norm / update_norm
  return jnp.where(param_norm + update_norm > 0., ratio, 1.)


def legacy_lamb(hyper_params: Any,
                owner: str = 'LAMB') -> optax.GradientTransformation:
  r"""flax.optim's LAMB update rule as one Optax transform.

  Per leaf, with Adam's bias-corrected moments :math:`\hat m, \hat v`:

  .. math::
    u = \frac{\hat m}{\sqrt{\hat v} + \epsilon} + \lambda p,\quad
    r = \begin{cases} \|p\| / \|u\| & \|p\| + \|u\| > 0 \\ 1 & \text{else}
        \end{cases},\quad
    p \leftarrow p - (r\,\eta)\, u

  The ``lambda p`` term is skipped for a static zero ``weight_decay``, as
  flax.optim did.

  .. warning::
    ``optax.lamb`` uses a trust ratio of 1 when either norm is zero; this
    transform keeps flax.optim's rule (see ``trust_ratio``): a leaf whose
    update is exactly zero while its parameter is not becomes NaN, and an
    all-zero parameter never moves. ``m_hat / (sqrt(v_hat) + eps)`` is
    computed as ``m / ((1 - beta1**t) * (sqrt(v_hat) + eps))``, as XLA
    compiled flax.optim's jitted step (see ``_numerics``). This
    transform always needs ``params``.

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``lamb``);
      numeric fields may be traced values or schedules (callables of the step
      count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdamState``.

  References:
    You et al., "Large Batch Optimization for Deep Learning: Training BERT in
    76 minutes", https://arxiv.org/abs/1904.00962
  """

  def init_fn(params):
    return _numerics.init_state(_adam.LegacyAdamState, params)

  def update_fn(updates, state, params=None):
    _numerics.require_params(params, owner)
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    grad_ema, grad_sq_ema = _adam.update_moments(updates, state, hp.beta1,
                                                hp.beta2)
    directions = jax.tree_util.tree_map(
        lambda m, v_hat: _numerics.divide_twice(
            m, _numerics.bias_correction(hp.beta1, state.count, m.dtype),
            jnp.sqrt(v_hat) + hp.eps),
        grad_ema, _numerics.bias_corrected(grad_sq_ema, hp.beta2,
                                           state.count))
    if not _numerics.is_static_zero(hp.weight_decay):
      directions = jax.tree_util.tree_map(
          lambda u, p: u + hp.weight_decay * p, directions, params)

    def leaf_update(u, p):
      ratio = trust_ratio(jnp.linalg.norm(p), jnp.linalg.norm(u))
      return -(ratio * learning_rate * u)

    new_updates = jax.tree_util.tree_map(leaf_update, directions, params)
    return new_updates, _adam.LegacyAdamState(
        optax.safe_int32_increment(state.count), grad_ema, grad_sq_ema)

  return optax.GradientTransformation(init_fn, update_fn)


def lamb(learning_rate=None, beta1=0.9, beta2=0.999, weight_decay=0,
         eps=1e-6) -> optax.GradientTransformation:
  """flax.optim's ``LAMB(...)`` as an Optax transform (``legacy_lamb``).

  The same transform as ``LAMB(...).to_optax()`` (see ``adam``).
  """
  return legacy_lamb(_numerics.HyperParams(
      learning_rate=learning_rate, beta1=beta1, beta2=beta2,
      weight_decay=weight_decay, eps=eps))
