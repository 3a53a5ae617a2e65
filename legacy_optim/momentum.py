"""Heavy-ball and Nesterov momentum with L2 weight decay."""

from flax import struct
import numpy as np

from flax_optim_rules import _legacy_layout
from flax_optim_rules import _sgd as _rules_sgd
from legacy_optim import base


@struct.dataclass
class _MomentumHyperParams:
  learning_rate: np.ndarray
  beta: np.ndarray
  weight_decay: np.ndarray
  nesterov: bool = struct.field(pytree_node=False)


@struct.dataclass
class _MomentumParamState(_legacy_layout.MomentumParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


class Momentum(base.OptimizerDef):
  r"""Momentum (Polyak 1964; Nesterov variant as in Sutskever et al. 2013).

  .. math::
    g \leftarrow g + \lambda p,\quad
    m \leftarrow \beta m + g,\quad
    p \leftarrow p - \eta\,(g + \beta m \text{ if nesterov else } m)

  with :math:`\lambda` = ``weight_decay`` (coupled L2, added to the gradient
  before the momentum). Optax equivalent (bit-identical):
  ``optax.chain(optax.add_decayed_weights(wd), optax.trace(beta, nesterov),
  optax.scale_by_learning_rate(lr))``.
  """

  _param_state_cls = _MomentumParamState
  _host_arithmetic = True

  def __init__(self, learning_rate=None, beta=0.9, weight_decay=0,
               nesterov=False):
    """Args:
      learning_rate: the step size (may be given per step instead).
      beta: momentum decay (default 0.9).
      weight_decay: L2 coefficient added to the gradient (default 0).
      nesterov: use Nesterov momentum (static; default False).
    """
    super().__init__(_MomentumHyperParams(
        learning_rate, beta, weight_decay, nesterov))

  def _native_transform(self, hyper_params):
    return _rules_sgd.legacy_momentum(hyper_params, self._name)
