"""RMSProp (optionally centered) with flax.optim's epsilon placement."""

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
class _RMSPropHyperParams:
  """RMSProp hyper-parameters (``centered`` is static configuration)."""
  learning_rate: float
  beta2: float
  eps: float
  centered: bool = struct.field(pytree_node=False)


@struct.dataclass
class _RMSPropParamState:
  """RMSProp per-parameter state; ``mg`` is None unless centered."""
  v: np.ndarray
  mg: np.ndarray


LegacyRMSPropState = _adaptive.state_class(
    'LegacyRMSPropState', _RMSPropParamState,
    'State of ``legacy_rmsprop``: the step ``count``, ``v`` the EMA of g**2 '
    'and ``mg`` the EMA of g when centered, a tree of None otherwise '
    '(params-shaped, params\' dtypes).')


def legacy_rmsprop(hyper_params: Any,
                   owner: str = 'RMSProp') -> optax.GradientTransformation:
  r"""flax.optim's RMSProp update rule as one Optax transform.

  .. math::
    v \leftarrow \beta_2 v + (1 - \beta_2) g^2,\quad
    \bar g \leftarrow \beta_2 \bar g + (1 - \beta_2) g \text{ (centered)},\\
    p \leftarrow p - \frac{\eta\, g}{\sqrt{v - \bar g^2} + \epsilon}
    \quad(\text{or } \sqrt{v} + \epsilon \text{ uncentered})

  Uncentered, ``mg`` is not kept: it is None in flax.optim's per-parameter
  state, a tree of None here.

  .. warning::
    ``optax.rmsprop`` puts ``eps`` inside the root (``g / sqrt(v + eps)``)
    and applies the learning rate after the division; this transform adds
    ``eps`` outside and multiplies ``eta * g`` first, as flax.optim did.

  Args:
    hyper_params: an ``_RMSPropHyperParams``; numeric fields may be traced
      values or schedules (callables of the step count); ``centered`` must be
      a Python bool.
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyRMSPropState``.

  References:
    Tieleman & Hinton, Lecture 6.5 of "Neural Networks for Machine Learning"
    (2012); Graves, "Generating Sequences With Recurrent Neural Networks",
    https://arxiv.org/abs/1308.0850 (centered form).
  """
  centered = _hyper.static_bool(hyper_params.centered, 'centered', owner)

  def init_fn(params):
    state = _adaptive.init_state(LegacyRMSPropState, params)
    if centered:
      return state
    return state._replace(mg=jax.tree_util.tree_map(lambda _: None, params))

  def update_fn(updates, state, params=None):
    del params
    hp = _hyper.resolve(hyper_params, state.count)
    learning_rate = _hyper.require_learning_rate(hp.learning_rate, owner)
    new_v = _adaptive.ema(hp.beta2, state.v,
                          jax.tree_util.tree_map(jnp.square, updates))
    if centered:
      if not jax.tree_util.tree_leaves(state.mg) and jax.tree_util.tree_leaves(
          updates):
        raise ValueError(
            f'{owner}: centered=True needs the mean gradient state mg, but '
            'the state was initialised with centered=False.')
      new_mg = _adaptive.ema(hp.beta2, state.mg, updates)
      variance = jax.tree_util.tree_map(
          lambda v, mg: v - jnp.square(mg), new_v, new_mg)
    else:
      new_mg, variance = state.mg, new_v
    new_updates = jax.tree_util.tree_map(
        lambda g, var: -(learning_rate * g / (jnp.sqrt(var) + hp.eps)),
        updates, variance)
    return new_updates, LegacyRMSPropState(
        optax.safe_int32_increment(state.count), new_v, new_mg)

  return optax.GradientTransformation(init_fn, update_fn)


class RMSProp(base.OptimizerDef):
  """RMSProp (Tieleman & Hinton 2012), optionally centered (Graves 2013).

  See ``legacy_rmsprop`` for the rule. Optax form:
  ``legacy_rmsprop(hyper_params)``; ``optax.rmsprop(lr, decay=beta2,
  eps=eps, centered=...)`` is the nearest stock rule but puts ``eps`` inside
  the root.
  """

  _param_state_cls = _RMSPropParamState

  def __init__(self, learning_rate: Optional[float] = None, beta2=0.9,
               eps=1e-8, centered=False):
    """Args:
      learning_rate: the step size (may be given per step instead).
      beta2: decay of the squared gradient's moving average (default 0.9).
      eps: added to the root of the second moment (default 1e-8).
      centered: normalise by the estimated variance instead of the second
        moment (static Python bool; default False).
    """
    super().__init__(_RMSPropHyperParams(
        learning_rate, beta2, eps,
        _hyper.static_bool(centered, 'centered', 'RMSProp')))

  def _native_transform(self, hyper_params):
    return legacy_rmsprop(hyper_params, self._name)
