"""LAMB: Adam steps rescaled per layer by a trust ratio."""


from flax import struct
import numpy as np

from flax_optim_rules import _lamb as _rules_lamb
from flax_optim_rules import _legacy_layout
from legacy_optim import base


@struct.dataclass
class _LAMBHyperParams:
  learning_rate: np.ndarray
  beta1: np.ndarray
  beta2: np.ndarray
  weight_decay: np.ndarray
  eps: np.ndarray


@struct.dataclass
class _LAMBParamState(_legacy_layout.AdamParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
trust_ratio = _rules_lamb.trust_ratio
legacy_lamb = _rules_lamb.legacy_lamb


class LAMB(base.OptimizerDef):
  """Layer-wise adaptive moments (You et al. 2019).

  See ``legacy_lamb`` for the rule. Optax form: ``legacy_lamb(hyper_params)``
  with ``adam.LegacyAdamState``; ``optax.lamb`` differs in the zero-norm
  cases and rounds differently.
  """

  _param_state_cls = _LAMBParamState

  def __init__(self, learning_rate=None, beta1=0.9, beta2=0.999,
               weight_decay=0, eps=1e-6):
    """Args:
      learning_rate: the step size (may be given per step instead).
      beta1: decay of the gradient's moving average (default 0.9).
      beta2: decay of the squared gradient's moving average (default 0.999).
      weight_decay: coefficient of ``p`` added to the Adam direction
        (default 0).
      eps: added to the root of the second moment (default 1e-6).
    """
    super().__init__(_LAMBHyperParams(learning_rate, beta1, beta2,
                                      weight_decay, eps))

  def _native_transform(self, hyper_params):
    return legacy_lamb(hyper_params, self._name)
