"""WeightNorm: runs another optimizer on a (scale, direction) parametrization.

A leaf with more entries than its last dimension (a kernel whose output axis
is the last one) is written as ``w = g * v / ||v||`` with the norm over all
axes but the last; the wrapped optimizer updates ``v`` and ``g`` and ``w`` is
rebuilt from them. Other leaves (vectors, scalars) pass through unchanged.
"""

from typing import Any

from flax import struct
import jax.numpy as jnp
import numpy as np

from flax_optim_rules import _legacy_layout
from flax_optim_rules import _weight_norm
from legacy_optim import _hyper
from legacy_optim import _restore
from legacy_optim import base
from legacy_optim import catalogue

Array = Any
# The transform and its parametrization live in flax_optim_rules (jax and
# optax only: what migrated code imports); the legacy class builds on them.
is_normalized = _weight_norm.is_normalized
split = _weight_norm.split
merge = _weight_norm.merge
WeightNormState = _weight_norm.WeightNormState
weight_norm = _weight_norm.weight_norm


@struct.dataclass
class _WeightNormHyperParams:
  inner: Any
  wn_decay: Array
  wn_eps: Array


@struct.dataclass
class _WeightNormParamState:
  direction_state: Any  # the wrapped optimizer's state for ``direction``.
  scale_state: Any  # the wrapped optimizer's state for ``scale`` (or ()).
  direction: Array  # v (the leaf itself when not normalized).
  scale: Array  # g, shaped (1, ..., 1, n); () when not normalized.


# flax <= 0.3.6 kept ``mult`` (= g / ||v||, shaped like g) per leaf instead of
# ``direction`` and ``scale``, and rebuilt v and g from the param at each step.
_OLDER = catalogue.WEIGHT_NORM.older_state_fields or ('', ())
MULT_FIELDS = frozenset(_OLDER[1])


def _direction_and_scale(param, mult):
  """flax <= 0.3.6's ``(v, g)`` of a leaf from the param and its ``mult``."""
  # () in the checkpoint: the leaf is not normalized.
  if not _restore.is_array(mult):
    return param, mult
  w = jnp.asarray(param)
  norm = jnp.sqrt(jnp.square(w).sum(_weight_norm.reduced_axes(w),
                                    keepdims=True))
  return (np.asarray(w / mult, w.dtype),
          np.asarray(norm * jnp.sign(mult), w.dtype))


def _has_mult(param_states) -> bool:
  if not isinstance(param_states, dict):
    return False
  return set(param_states) == MULT_FIELDS or any(
      map(_has_mult, param_states.values()))


def _upgrade_leaves(target, param_states):
  if isinstance(param_states, dict) and set(param_states) == MULT_FIELDS:
    direction, scale = _direction_and_scale(target, param_states['mult'])
    return {'direction_state': param_states['direction_state'],
            'scale_state': param_states['scale_state'],
            'direction': direction, 'scale': scale}
  if isinstance(param_states, dict) and isinstance(target, dict):
    return {key: _upgrade_leaves(target.get(key), value)
            for key, value in param_states.items()}
  return param_states


def upgrade_mult(state_dict):
  """A WeightNorm state dict in flax <= 0.3.6's layout -> today's.

  Per leaf, ``{direction_state, scale_state, mult}`` (renamed in flax 0.4.0)
  becomes ``{direction_state, scale_state, direction, scale}`` with
  ``direction = w / mult`` and ``scale = ||w|| * sign(mult)``, which is how
  flax <= 0.3.6 recovered them from the param ``w`` before every step; the
  wrapped optimizer's states (the moments) are kept as they are. Any other
  state dict is returned as it is; the argument is never modified.
  """
  try:
    target = state_dict['target']
    param_states = state_dict['state']['param_states']
  except (KeyError, TypeError, IndexError):  # not that layout (an array...)
    return state_dict
  if not _has_mult(param_states):
    return state_dict
  return {**state_dict, 'state': {
      **state_dict['state'],
      'param_states': _upgrade_leaves(target, param_states)}}


class WeightNorm(base.OptimizerDef):
  """Adds weight normalization (Salimans & Kingma 2016) to an optimizer.

  See ``weight_norm`` for the math. The legacy per-parameter state is
  ``_WeightNormParamState(direction_state, scale_state, direction, scale)``;
  the step lives in the wrapped optimizer's state. Overrides other than
  ``wn_decay``/``wn_eps`` go to the wrapped optimizer (``hyper_params=``
  replaces its hyper-params), as in flax.optim. Kernels are assumed to have
  their output axis last (TensorFlow convention).
  """

  def __init__(self, wrapped_optimizer, wn_decay=0, wn_eps=1e-8):
    """Args:
      wrapped_optimizer: the OptimizerDef run on ``(v, g)``.
      wn_decay: L2 decay on the unnormalized direction ``v`` (default 0).
      wn_eps: added under the norm's square root (default 1e-8).
    """
    if not isinstance(wrapped_optimizer, base.OptimizerDef):
      raise TypeError('WeightNorm: wrapped_optimizer must be an OptimizerDef, '
                      f'got {type(wrapped_optimizer).__name__}.')
    base.require_per_parameter_state(wrapped_optimizer, 'WeightNorm')
    super().__init__(_WeightNormHyperParams(
        wrapped_optimizer.hyper_params, wn_decay, wn_eps))
    self.wrapped_optimizer = wrapped_optimizer

  def update_hyper_params(self, **hyper_param_overrides):
    own = {name: hyper_param_overrides.pop(name)
           for name in ('wn_decay', 'wn_eps') if name in hyper_param_overrides}
    inner = self.wrapped_optimizer.update_hyper_params(**hyper_param_overrides)
    return self.hyper_params.replace(inner=inner, **own)

  def _native_transform(self, hyper_params):
    _hyper.require_constant(hyper_params, ('wn_decay', 'wn_eps'), self._name)
    return weight_norm(
        self.wrapped_optimizer._transform(hyper_params.inner),
        hyper_params.wn_decay, hyper_params.wn_eps)

  # ------------------------------------------------ legacy <-> Optax state
  def _to_native_state(self, state, params):
    fields = _legacy_layout.split_param_states(
        state.param_states, params,
        _hyper.field_names(_WeightNormParamState))
    wn_params = {'direction': fields['direction'], 'scale': fields['scale']}
    inner = self.wrapped_optimizer.to_optax_state(
        base.OptimizerState(state.step, {
            'direction': fields['direction_state'],
            'scale': fields['scale_state']
        }), wn_params)
    return WeightNormState(fields['direction'], fields['scale'], inner)

  def _from_native_state(self, opt_state, params):
    wn_params = {'direction': opt_state.direction, 'scale': opt_state.scale}
    inner = self.wrapped_optimizer.from_optax_state(opt_state.inner_state,
                                                    wn_params)
    param_states = _legacy_layout.merge_param_states({
        'direction_state': inner.param_states['direction'],
        'scale_state': inner.param_states['scale'],
        'direction': opt_state.direction,
        'scale': opt_state.scale,
    }, params, _WeightNormParamState)
    return base.OptimizerState(inner.step, param_states)

  def restore_state(self, opt_target, opt_state, state_dict):
    """Restores today's layout and flax <= 0.3.6's (see ``upgrade_mult``)."""
    return super().restore_state(opt_target, opt_state,
                                 upgrade_mult(state_dict))

  # ------------------------------------------------------- per-leaf API
  def init_param_state(self, param):
    """The legacy state of one leaf (flax.optim had only the tree API)."""
    return self.init_state(param).param_states

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    """One leaf's update, as the tree API would do it for that leaf alone."""
    new_param, new_state = self.apply_gradient(
        hyper_params, param, base.OptimizerState(step, state), grad)
    return new_param, new_state.param_states
