"""Adam with flax.optim's learning-rate-scaled weight decay."""


from flax import struct
import numpy as np

from flax_optim_rules import _adam as _rules_adam
from flax_optim_rules import _legacy_layout
from legacy_optim import base


@struct.dataclass
class _AdamHyperParams:
  learning_rate: np.ndarray
  beta1: np.ndarray
  beta2: np.ndarray
  eps: np.ndarray
  weight_decay: np.ndarray


@struct.dataclass
class _AdamParamState(_legacy_layout.AdamParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
LegacyAdamState = _rules_adam.LegacyAdamState
update_moments = _rules_adam.update_moments
adam_steps = _rules_adam.adam_steps
legacy_adam = _rules_adam.legacy_adam


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
