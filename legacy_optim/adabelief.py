"""AdaBelief: Adam with the second moment of the gradient's surprise."""

from typing import Any

import jax
import numpy as np
import optax
from flax import struct
from jax import lax

from legacy_optim import _hyper
from legacy_optim import _transforms_adaptive as _adaptive
from legacy_optim import adam
from legacy_optim import base


@struct.dataclass
class _AdaBeliefHyperParams:
  learning_rate: np.ndarray
  beta1: np.ndarray
  beta2: np.ndarray
  eps: np.ndarray
  weight_decay: np.ndarray


@struct.dataclass
class _AdaBeliefParamState:
  grad_ema: np.ndarray
  grad_sq_ema: np.ndarray


LegacyAdaBeliefState = _adaptive.state_class(
    'LegacyAdaBeliefState', _AdaBeliefParamState,
    'State of ``legacy_adabelief``: the step ``count``, the EMA of g and the '
    'EMA of (g - m)**2 plus eps (params-shaped, params\' dtypes).')


def legacy_adabelief(hyper_params: Any,
                     owner: str = 'AdaBelief') -> optax.GradientTransformation:
  r"""flax.optim's AdaBelief update rule as one Optax transform.

  .. math::
    m \leftarrow \beta_1 m + (1 - \beta_1) g,\quad
    s \leftarrow \beta_2 s + (1 - \beta_2)(g - m)^2 + \epsilon,\\
    \hat m = m / (1 - \beta_1^t),\quad \hat s = s / (1 - \beta_2^t),\\
    p \leftarrow \Big(p - \frac{\eta \hat m}{\sqrt{\hat s} + \epsilon}\Big)
      - (\eta\lambda)\, p

  (:math:`m` is the already updated moment in :math:`(g - m)^2`; ``eps``
  enters both inside the stored second moment and outside the root.)

  .. warning::
    ``optax.adabelief`` takes separate ``eps``/``eps_root`` and applies the
    learning rate after the division; it has no weight decay. The result
    rounds differently from flax.optim. With a non-zero weight decay
    ``update`` needs ``params`` (see ``_transforms_adaptive.descent``).

  Args:
    hyper_params: an ``_AdaBeliefHyperParams``; numeric fields may be traced
      values or schedules (callables of the step count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdaBeliefState``.

  References:
    Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in
    Observed Gradients", https://arxiv.org/abs/2010.07468
  """

  def init_fn(params):
    return _adaptive.init_state(LegacyAdaBeliefState, params)

  def update_fn(updates, state, params=None):
    hp = _hyper.resolve(hyper_params, state.count)
    learning_rate = _hyper.require_learning_rate(hp.learning_rate, owner)
    grad_ema = _adaptive.ema(hp.beta1, state.grad_ema, updates)
    surprise_sq = jax.tree_util.tree_map(
        lambda g, m: lax.square(g - m), updates, grad_ema)
    grad_sq_ema = jax.tree_util.tree_map(
        lambda s: s + hp.eps,
        _adaptive.ema(hp.beta2, state.grad_sq_ema, surprise_sq))
    steps = adam.adam_steps(
        learning_rate,
        _adaptive.bias_corrected(grad_ema, hp.beta1, state.count),
        _adaptive.bias_corrected(grad_sq_ema, hp.beta2, state.count), hp.eps)
    new_updates = _adaptive.descent(steps, params, learning_rate,
                                    hp.weight_decay, owner)
    return new_updates, LegacyAdaBeliefState(
        optax.safe_int32_increment(state.count), grad_ema, grad_sq_ema)

  return optax.GradientTransformation(init_fn, update_fn)


class AdaBelief(base.OptimizerDef):
  """AdaBelief (Zhuang et al. 2020), with flax.optim's weight decay.

  See ``legacy_adabelief`` for the rule: Adam whose second moment tracks
  ``(g - m)**2``, the gradient's deviation from its prediction. The weight
  decay is ``(eta * lambda) p``, subtracted after the step as in ``Adam``.

  Optax form: ``legacy_adabelief(hyper_params)``; ``optax.adabelief`` is the
  nearest stock rule but not bit-identical.
  """

  _param_state_cls = _AdaBeliefParamState

  def __init__(self, learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-16,
               weight_decay=0.0):
    """Args:
      learning_rate: the step size (may be given per step instead).
      beta1: decay of the gradient's moving average (default 0.9).
      beta2: decay of the moving average of ``(g - m)**2`` (default 0.999).
      eps: added inside the second moment and to its root (default 1e-16).
      weight_decay: decay rate, multiplied by the learning rate (default 0).
    """
    super().__init__(_AdaBeliefHyperParams(learning_rate, beta1, beta2, eps,
                                           weight_decay))

  def _native_transform(self, hyper_params):
    return legacy_adabelief(hyper_params, self._name)
