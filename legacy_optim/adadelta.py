"""Adadelta with flax.optim's learning rate and weight decay."""

from typing import Optional

from flax import struct

from flax_optim_rules import _adadelta as _rules_adadelta
from flax_optim_rules import _legacy_layout
from legacy_optim import base


@struct.dataclass
class _AdadeltaHyperParams:
  learning_rate: Optional[float]  # None: given per step
  rho: float
  eps: float
  weight_decay: float


@struct.dataclass
class _AdadeltaParamState(_legacy_layout.AdadeltaParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
LegacyAdadeltaState = _rules_adadelta.LegacyAdadeltaState
legacy_adadelta = _rules_adadelta.legacy_adadelta


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
