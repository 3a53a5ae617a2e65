"""Adadelta with flax.optim's learning rate and weight decay."""

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from legacy_optim import _hyper
from legacy_optim import _transforms_adaptive as _adaptive
from legacy_optim import base


@struct.dataclass
class _AdadeltaHyperParams:
  learning_rate: float
  rho: float
  eps: float
  weight_decay: float


@struct.dataclass
class _AdadeltaParamState:
  sq_avg: np.ndarray
  acc_delta: np.ndarray


LegacyAdadeltaState = _adaptive.state_class(
    'LegacyAdadeltaState', _AdadeltaParamState,
    'State of ``legacy_adadelta``: the step ``count``, the EMA of g**2 and '
    'the EMA of the squared deltas (params-shaped, params\' dtypes).')


def legacy_adadelta(hyper_params: Any,
                    owner: str = 'Adadelta') -> optax.GradientTransformation:
  r"""flax.optim's Adadelta update rule as one Optax transform.

  .. math::
    s \leftarrow \rho s + (1 - \rho) g^2,\quad
    \delta = \frac{\sqrt{a + \epsilon}}{\sqrt{s + \epsilon}}\, g,\\
    p \leftarrow (p - \eta \delta) - (\eta\lambda)\, p,\quad
    a \leftarrow \rho a + (1 - \rho) \delta^2

  (:math:`a` is ``acc_delta``; :math:`\delta` uses its value before the
  step.) The weight decay is decoupled: subtracted from the parameter after
  the step, scaled by the learning rate, never added to the gradient.

  .. warning::
    ``optax.adadelta`` adds ``weight_decay * p`` to the gradient before the
    statistics and scales by the learning rate last; the two rules differ
    whenever ``weight_decay`` is not zero, and round differently otherwise.
    The ratio of roots is computed as ``sqrt(a + eps) * (1 / sqrt(s + eps))``,
    which is how XLA compiled flax.optim's jitted division (see
    ``_transforms_adaptive``). With a non-zero weight decay ``update`` needs
    ``params``.

  Args:
    hyper_params: an ``_AdadeltaHyperParams``; numeric fields may be traced
      values or schedules (callables of the step count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdadeltaState``.

  References:
    Zeiler, "ADADELTA: An Adaptive Learning Rate Method",
    https://arxiv.org/abs/1212.5701
  """

  def init_fn(params):
    return _adaptive.init_state(LegacyAdadeltaState, params)

  def update_fn(updates, state, params=None):
    hp = _hyper.resolve(hyper_params, state.count)
    learning_rate = _hyper.require_learning_rate(hp.learning_rate, owner)
    eps = hp.eps
    sq_avg = _adaptive.ema(hp.rho, state.sq_avg,
                           jax.tree_util.tree_map(jnp.square, updates))
    deltas = jax.tree_util.tree_map(
        lambda acc, sq, g: _adaptive.divide_by_root(
            jnp.sqrt(acc + eps), jnp.sqrt(sq + eps)) * g,
        state.acc_delta, sq_avg, updates)
    steps = jax.tree_util.tree_map(lambda d: learning_rate * d, deltas)
    new_updates = _adaptive.descent(steps, params, learning_rate,
                                    hp.weight_decay, owner)
    acc_delta = _adaptive.ema(hp.rho, state.acc_delta,
                              jax.tree_util.tree_map(jnp.square, deltas))
    return new_updates, LegacyAdadeltaState(
        optax.safe_int32_increment(state.count), sq_avg, acc_delta)

  return optax.GradientTransformation(init_fn, update_fn)


class Adadelta(base.OptimizerDef):
  """Adadelta (Zeiler 2012), with a learning rate and decoupled weight decay.

  See ``legacy_adadelta`` for the rule. Optax form:
  ``legacy_adadelta(hyper_params)``; ``optax.adadelta`` couples the weight
  decay to the gradient instead.
  """

  _param_state_cls = _AdadeltaParamState

  def __init__(self, learning_rate: Optional[float] = None, rho: float = 0.9,
               eps: float = 1e-6, weight_decay: float = 0.0):
    """Args:
      learning_rate: the step size (may be given per step instead).
      rho: decay of both running averages (default 0.9).
      eps: added under both roots (default 1e-6).
      weight_decay: decay rate, multiplied by the learning rate (default 0).
    """
    super().__init__(_AdadeltaHyperParams(learning_rate, rho, eps,
                                          weight_decay))

  def _native_transform(self, hyper_params):
    return legacy_adadelta(hyper_params, self._name)
