"""flax.optim's Adam (and the moments LAMB shares with it)."""

from typing import Any, NamedTuple

import jax
from jax import lax
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics


class LegacyAdamState(NamedTuple):
  """State of ``legacy_adam`` and ``legacy_lamb`` (legacy field names)."""
  count: jax.Array  # int32 scalar: the legacy step.
  grad_ema: optax.Updates  # EMA of g; params-shaped, params' dtypes.
  grad_sq_ema: optax.Updates  # EMA of g**2; params-shaped, params' dtypes.


def update_moments(grads, state: LegacyAdamState, beta1, beta2):
  """Adam's moment updates: ``(grad_ema, grad_sq_ema)`` (legacy order)."""
  grad_ema = _numerics.ema(beta1, state.grad_ema, grads)
  grad_sq_ema = _numerics.ema(
      beta2, state.grad_sq_ema, jax.tree_util.tree_map(lax.square, grads))
  return grad_ema, grad_sq_ema


def adam_steps(learning_rate, grad_ema_corr, grad_sq_ema_corr, eps):
  """``learning_rate * m_hat / (sqrt(v_hat) + eps)``, leaf by leaf."""
  return jax.tree_util.tree_map(
      lambda m, v: learning_rate * m / (jnp.sqrt(v) + eps), grad_ema_corr,
      grad_sq_ema_corr)


def legacy_adam(hyper_params: Any,
                owner: str = 'Adam') -> optax.GradientTransformation:
  r"""flax.optim's Adam update rule as one Optax transform.

  With :math:`t` the 1-based step (in the parameter's dtype), :math:`\eta`
  the learning rate and :math:`\lambda` the weight decay:

  .. math::
    m \leftarrow \beta_1 m + (1 - \beta_1) g,\quad
    v \leftarrow \beta_2 v + (1 - \beta_2) g^2,\\
    \hat m = m / (1 - \beta_1^t),\quad \hat v = v / (1 - \beta_2^t),\\
    p \leftarrow \Big(p - \frac{\eta \hat m}{\sqrt{\hat v} + \epsilon}\Big)
      - (\eta\lambda)\, p

  evaluated in exactly that order (``eta * m_hat`` before the division).

  .. warning::
    ``optax.adamw`` decays by ``lr * wd * p`` too but adds it to the scaled
    update, and ``optax.chain(optax.scale_by_adam(), ...)`` divides before
    scaling by the learning rate; both round differently from flax.optim.
    This transform returns ``new_p - p`` as the update when the weight decay
    is not a static zero (see ``_numerics.descent``), so it needs
    ``params`` in ``update`` in that case.

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``adam``);
      numeric fields may be traced values or schedules (callables of the step
      count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdamState``.

  References:
    Kingma & Ba, "Adam: A Method for Stochastic Optimization",
    https://arxiv.org/abs/1412.6980
  """

  def update_fn(updates, state, params=None):
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    grad_ema, grad_sq_ema = update_moments(updates, state, hp.beta1,
                                           hp.beta2)
    steps = adam_steps(
        learning_rate,
        _numerics.bias_corrected(grad_ema, hp.beta1, state.count),
        _numerics.bias_corrected(grad_sq_ema, hp.beta2, state.count), hp.eps)
    new_updates = _numerics.descent(steps, params, learning_rate,
                                    hp.weight_decay, owner)
    return new_updates, LegacyAdamState(
        optax.safe_int32_increment(state.count), grad_ema, grad_sq_ema)

  def init_fn(params):
    return _numerics.init_state(LegacyAdamState, params)

  return optax.GradientTransformation(init_fn, update_fn)


def adam(learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-8,
         weight_decay=0.0) -> optax.GradientTransformation:
  """flax.optim's ``Adam(...)`` as an Optax transform (``legacy_adam``).

  The same transform as ``Adam(...).to_optax()``: bit-identical updates, the
  same ``LegacyAdamState``. Wrap it in ``optax.inject_hyperparams(adam,
  static_args=(...every name but learning_rate...))`` to set the learning
  rate per step.
  """
  return legacy_adam(_numerics.HyperParams(
      learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
      weight_decay=weight_decay))
