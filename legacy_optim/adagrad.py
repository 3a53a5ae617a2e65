"""Adagrad with flax.optim's accumulator and epsilon placement."""

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
class _AdagradHyperParams:
  """Adagrad hyper-parameters."""
  learning_rate: float
  eps: float


@struct.dataclass
class _AdagradParamState:
  """Adagrad per-parameter state: the sum of squared gradients."""
  G: np.ndarray  # pylint: disable=invalid-name


LegacyAdagradState = _adaptive.state_class(
    'LegacyAdagradState', _AdagradParamState,
    'State of ``legacy_adagrad``: the step ``count`` and ``G``, the sum of '
    'g**2 so far (params-shaped, params\' dtypes).')


def legacy_adagrad(hyper_params: Any,
                   owner: str = 'Adagrad') -> optax.GradientTransformation:
  r"""flax.optim's Adagrad update rule as one Optax transform.

  .. math::
    G \leftarrow G + g^2,\quad
    p \leftarrow p - \frac{\eta\, g}{\sqrt{G} + \epsilon}

  with :math:`G` starting at zero.

  .. warning::
    ``optax.adagrad`` starts the accumulator at
    ``initial_accumulator_value=0.1`` and puts ``eps`` inside the root
    (``g / sqrt(G + eps)``); this transform starts at 0 and adds ``eps``
    outside, as flax.optim did.

  Args:
    hyper_params: an ``_AdagradHyperParams``; numeric fields may be traced
      values or schedules (callables of the step count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdagradState``.

  References:
    Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning
    and Stochastic Optimization", JMLR 12 (2011).
  """

  def init_fn(params):
    return _adaptive.init_state(LegacyAdagradState, params)

  def update_fn(updates, state, params=None):
    del params
    hp = _hyper.resolve(hyper_params, state.count)
    learning_rate = _hyper.require_learning_rate(hp.learning_rate, owner)
    new_sum = jax.tree_util.tree_map(
        lambda acc, g: acc + jnp.square(g), state.G, updates)
    new_updates = jax.tree_util.tree_map(
        lambda g, acc: -(learning_rate * g / (jnp.sqrt(acc) + hp.eps)),
        updates, new_sum)
    return new_updates, LegacyAdagradState(
        optax.safe_int32_increment(state.count), new_sum)

  return optax.GradientTransformation(init_fn, update_fn)


class Adagrad(base.OptimizerDef):
  """Adagrad (Duchi et al. 2011): steps scaled by the root of past squares.

  See ``legacy_adagrad`` for the rule. Optax form:
  ``legacy_adagrad(hyper_params)``; ``optax.adagrad`` differs in the
  accumulator's start value and in where ``eps`` goes.
  """

  _param_state_cls = _AdagradParamState

  def __init__(self, learning_rate: Optional[float] = None, eps=1e-8):
    """Args:
      learning_rate: the step size (may be given per step instead).
      eps: added to the root of the accumulator (default 1e-8).
    """
    super().__init__(_AdagradHyperParams(learning_rate, eps))

  def _native_transform(self, hyper_params):
    return legacy_adagrad(hyper_params, self._name)
