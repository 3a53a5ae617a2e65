"""Adafactor (Shazeer & Stern 2018) exactly as flax.optim computed it.

Memory-light second moments: a leaf with two dimensions of at least
``min_dim_size_to_factor`` keeps only row and column averages of the squared
gradient; other leaves keep the full average. Unused legacy slots of the
per-parameter state hold zeros of shape ``(1,)``, as in flax.optim.
"""

from typing import Any, Optional

from flax import struct
import jax
import jax.numpy as jnp

from flax_optim_rules import _adafactor as _rules_adafactor
from flax_optim_rules import _legacy_layout
from legacy_optim import base

Dtype = Any

# Static fields that fix the shapes of the per-parameter state.
_LAYOUT_FIELDS = ('factored', 'min_dim_size_to_factor')

@struct.dataclass
class _AdafactorHyperParams:
  learning_rate: Optional[float]
  factored: bool = struct.field(pytree_node=False)
  multiply_by_parameter_scale: bool = struct.field(pytree_node=False)
  beta1: Optional[float]
  decay_rate: float
  step_offset: int
  clipping_threshold: Optional[float]
  weight_decay_rate: Optional[float]
  min_dim_size_to_factor: int = struct.field(pytree_node=False)
  epsilon1: float
  epsilon2: float


@struct.dataclass
class _AdafactorParamState(_legacy_layout.AdafactorParamState):
  """flax.optim's class; its fields are flax_optim_rules'."""


# The rule itself lives in flax_optim_rules (jax and optax only), which
# migrated code imports; re-exported here under its old names.
factored_dims = _rules_adafactor.factored_dims
decay_rate_pow = _rules_adafactor.decay_rate_pow
LegacyAdafactorState = _rules_adafactor.LegacyAdafactorState
scale_by_legacy_adafactor = _rules_adafactor.scale_by_legacy_adafactor


class Adafactor(base.OptimizerDef):
  """Adafactor (https://arxiv.org/abs/1804.04235), flax.optim's variant.

  The rule is ``scale_by_legacy_adafactor`` (see its docstring for the math).
  ``factored``, ``multiply_by_parameter_scale`` and
  ``min_dim_size_to_factor`` are static configuration; ``factored`` and
  ``min_dim_size_to_factor`` fix the state's shapes and cannot be overridden
  per step. Differences from flax 0.5.3: a step before ``step_offset`` no
  longer produces NaN (see ``decay_rate_pow``), and a per-step override of
  ``multiply_by_parameter_scale`` is honoured (flax.optim ignored it).
  """

  _param_state_cls = _AdafactorParamState
  _keeps_integer_params = True

  def __init__(self,
               learning_rate: Optional[float] = None,
               factored: bool = True,
               multiply_by_parameter_scale: bool = True,
               beta1: Optional[float] = None,
               decay_rate: float = 0.8,
               step_offset: int = 0,
               clipping_threshold: Optional[float] = 1.0,
               weight_decay_rate: Optional[float] = None,
               min_dim_size_to_factor: int = 128,
               epsilon1: float = 1e-30,
               epsilon2: float = 1e-3,
               dtype_momentum: Dtype = jnp.float32):
    """Args:
      learning_rate: the step size (may be given per step instead); not
        rescaled by 1/sqrt(hidden size) as Adam's often is.
      factored: factor the second moments of large 2+-D leaves (static).
      multiply_by_parameter_scale: scale the step by the leaf's RMS, at least
        ``epsilon2`` (static).
      beta1: momentum coefficient; None (default) keeps no momentum.
      decay_rate: exponent ``c`` of the decay schedule ``1 - t^-c``.
      step_offset: step at which the decay schedule starts (fine-tuning).
      clipping_threshold: clip the update's RMS to this; None disables.
      weight_decay_rate: decoupled weight decay; None disables.
      min_dim_size_to_factor: factor only when two dimensions are at least
        this large (static).
      epsilon1: added to squared gradients.
      epsilon2: lower bound of the parameter scale.
      dtype_momentum: dtype of the stored momentum.
    """
    factored, multiply_by_parameter_scale, min_dim_size_to_factor = (
        _rules_adafactor.adafactor_config(
            factored, multiply_by_parameter_scale, min_dim_size_to_factor))
    self.dtype_momentum = jax.dtypes.canonicalize_dtype(dtype_momentum)
    super().__init__(_AdafactorHyperParams(
        learning_rate, factored, multiply_by_parameter_scale, beta1,
        decay_rate, step_offset, clipping_threshold, weight_decay_rate,
        min_dim_size_to_factor, epsilon1, epsilon2))

  def update_hyper_params(self, **hyper_param_overrides):
    hp = super().update_hyper_params(**hyper_param_overrides)
    for name in _LAYOUT_FIELDS:
      value = getattr(hp, name)
      if (isinstance(value, jax.core.Tracer) or
          value != getattr(self.hyper_params, name)):
        raise ValueError(
            f'Adafactor: {name} fixes the shapes of the optimizer state and '
            f'cannot be overridden (got {getattr(hp, name)!r}, created with '
            f'{getattr(self.hyper_params, name)!r}); create a new Adafactor '
            'instead.')
    return hp

  # flax.optim's hook for the decay schedule; a subclass may replace it.
  _decay_rate_pow = staticmethod(decay_rate_pow)

  def _native_transform(self, hyper_params):
    return scale_by_legacy_adafactor(hyper_params, self.dtype_momentum,
                                     self._name, self._decay_rate_pow)
