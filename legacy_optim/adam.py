"""Adam with flax.optim's learning-rate-scaled weight decay."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax import lax

from legacy_optim import _hyper
from legacy_optim import _transforms_adaptive as _adaptive
from legacy_optim import base


@struct.dataclass
class _AdamHyperParams:
  learning_rate: np.ndarray
  beta1: np.ndarray
  beta2: np.ndarray
  eps: np.ndarray
  weight_decay: np.ndarray


@struct.dataclass
class _AdamParamState:
  grad_ema: np.ndarray
  grad_sq_ema: np.ndarray


LegacyAdamState = _adaptive.state_class(
    'LegacyAdamState', _AdamParamState,
    'State of ``legacy_adam`` (and ``legacy_lamb``): the step ``count`` and '
    'the EMAs of g and g**2 (params-shaped, params\' dtypes).')


def update_moments(grads, state: LegacyAdamState, beta1, beta2):
  """Adam's moment updates: ``(grad_ema, grad_sq_ema)`` (legacy order)."""
  grad_ema = _adaptive.ema(beta1, state.grad_ema, grads)
  grad_sq_ema = _adaptive.ema(
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
    is not a static zero (see ``_transforms_adaptive.descent``), so it needs
    ``params`` in ``update`` in that case.

  Args:
    hyper_params: an ``_AdamHyperParams``; numeric fields may be traced
      values or schedules (callables of the step count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdamState``.

  References:
    Kingma & Ba, "Adam: A Method for Stochastic Optimization",
    https://arxiv.org/abs/1412.6980
  """

  def update_fn(updates, state, params=None):
    hp = _hyper.resolve(hyper_params, state.count)
    learning_rate = _hyper.require_learning_rate(hp.learning_rate, owner)
    grad_ema, grad_sq_ema = update_moments(updates, state, hp.beta1,
                                           hp.beta2)
    steps = adam_steps(
        learning_rate,
        _adaptive.bias_corrected(grad_ema, hp.beta1, state.count),
        _adaptive.bias_corrected(grad_sq_ema, hp.beta2, state.count), hp.eps)
    new_updates = _adaptive.descent(steps, params, learning_rate,
                                    hp.weight_decay, owner)
    return new_updates, LegacyAdamState(
        optax.safe_int32_increment(state.count), grad_ema, grad_sq_ema)

  def init_fn(params):
    return _adaptive.init_state(LegacyAdamState, params)

  return optax.GradientTransformation(init_fn, update_fn)


class Adam(base.OptimizerDef):
  r"""Adam (Kingma & Ba 2014), with flax.optim's weight decay.

  See ``legacy_adam`` for the rule. The weight decay is ``(eta * lambda) p``
  subtracted after the Adam step: decoupled from the moments, but scaled by
  the full learning rate (as in PyTorch's AdamW, unlike Loshchilov & Hutter's
  schedule-multiplier form).

  Optax form: ``legacy_adam(hyper_params)``; its ``LegacyAdamState`` holds the
  legacy ``grad_ema``/``grad_sq_ema`` trees. ``optax.adamw`` is the nearest
  stock rule but not bit-identical.
  """

  _param_state_cls = _AdamParamState

  def __init__(self, learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-8,
               weight_decay=0.0):
    """Args:
      learning_rate: the step size (may be given per step instead).
      beta1: decay of the gradient's moving average (default 0.9).
      beta2: decay of the squared gradient's moving average (default 0.999).
      eps: added to the root of the second moment estimate (default 1e-8).
      weight_decay: decay rate, multiplied by the learning rate (default 0).
    """
    super().__init__(_AdamHyperParams(learning_rate, beta1, beta2, eps,
                                      weight_decay))

  def _native_transform(self, hyper_params):
    return legacy_adam(hyper_params, self._name)
