"""Adagrad with flax.optim's accumulator and epsilon placement."""

from typing import Optional

from flax import struct

from flax_optim_rules import _adagrad as _rules_adagrad
from flax_optim_rules import _legacy_layout
from legacy_optim import base


@struct.dataclass
class _AdagradHyperParams:
  """Adagrad hyper-parameters."""
  learning_rate: Optional[float]  # None: given per step
  eps: float


@struct.dataclass
class _AdagradParamState(_legacy_layout.AdagradParamState):
  """Adagrad per-parameter state: the sum of squared gradients."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
LegacyAdagradState = _rules_adagrad.LegacyAdagradState
legacy_adagrad = _rules_adagrad.legacy_adagrad


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
