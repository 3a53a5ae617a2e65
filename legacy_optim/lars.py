"""LARS: layer-wise adaptive rate scaling with heavy-ball momentum."""


from flax import struct
import numpy as np

from flax_optim_rules import _lars as _rules_lars
from flax_optim_rules import _legacy_layout
from legacy_optim import base


@struct.dataclass
class _LARSHyperParams:
  learning_rate: np.ndarray
  beta: np.ndarray
  weight_decay: np.ndarray
  trust_coefficient: np.ndarray
  eps: np.ndarray
  nesterov: bool = struct.field(pytree_node=False)


@struct.dataclass
class _LARSParamState(_legacy_layout.LARSParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
ScaleByLegacyLarsState = _rules_lars.ScaleByLegacyLarsState
scale_by_legacy_lars = _rules_lars.scale_by_legacy_lars
legacy_trace = _rules_lars.legacy_trace
legacy_lars = _rules_lars.legacy_lars


class LARS(base.OptimizerDef):
  r"""Layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017).

  Per leaf (see ``scale_by_legacy_lars`` for the trust ratio ``r``):

  .. math::
    s = (\eta\, r)(g + \lambda p),\quad
    m \leftarrow \beta m + s,\quad
    p \leftarrow p - (s + \beta m \text{ if nesterov else } m)

  Optax form: ``optax.chain(scale_by_legacy_lars(hp), legacy_trace(beta,
  nesterov), optax.scale(-1))``; the trace holds the legacy ``momentum``.
  ``legacy_trace`` is ``optax.trace`` with flax.optim's operand order.
  ``optax.lars`` is close but not the same rule (see the warning on
  ``scale_by_legacy_lars``).

  References:
    You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks",
    https://arxiv.org/abs/1708.03888
  """

  _param_state_cls = _LARSParamState

  def __init__(self, learning_rate=None, beta=0.9, weight_decay=0,
               trust_coefficient=0.001, eps=0, nesterov=False):
    """Args:
      learning_rate: the step size (may be given per step instead).
      beta: momentum decay (default 0.9).
      weight_decay: L2 coefficient; enters the trust ratio and the gradient.
      trust_coefficient: ``c`` in the trust ratio (default 0.001).
      eps: added to the trust ratio's denominator (default 0).
      nesterov: use Nesterov momentum (static; default False).
    """
    super().__init__(_LARSHyperParams(learning_rate, beta, weight_decay,
                                      trust_coefficient, eps, nesterov))

  def _native_transform(self, hyper_params):
    return legacy_lars(hyper_params, self._name)
