"""AdaBelief: Adam with the second moment of the gradient's surprise."""


from flax import struct
import numpy as np

from flax_optim_rules import _adabelief as _rules_adabelief
from flax_optim_rules import _legacy_layout
from legacy_optim import base


@struct.dataclass
class _AdaBeliefHyperParams:
  learning_rate: np.ndarray
  beta1: np.ndarray
  beta2: np.ndarray
  eps: np.ndarray
  weight_decay: np.ndarray


@struct.dataclass
class _AdaBeliefParamState(_legacy_layout.AdaBeliefParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
LegacyAdaBeliefState = _rules_adabelief.LegacyAdaBeliefState
legacy_adabelief = _rules_adabelief.legacy_adabelief


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
