"""RMSProp (optionally centered) with flax.optim's epsilon placement."""

from typing import Optional

from flax import struct

from flax_optim_rules import _legacy_layout
from flax_optim_rules import _rmsprop as _rules_rmsprop
from legacy_optim import _hyper
from legacy_optim import base


@struct.dataclass
class _RMSPropHyperParams:
  """RMSProp hyper-parameters (``centered`` is static configuration)."""
  learning_rate: Optional[float]  # None: given per step
  beta2: float
  eps: float
  centered: bool = struct.field(pytree_node=False)


@struct.dataclass
class _RMSPropParamState(_legacy_layout.RMSPropParamState):
  """RMSProp per-parameter state; ``mg`` is None unless centered."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
LegacyRMSPropState = _rules_rmsprop.LegacyRMSPropState
legacy_rmsprop = _rules_rmsprop.legacy_rmsprop


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
