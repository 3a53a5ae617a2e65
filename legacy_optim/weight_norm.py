"""WeightNorm: runs another optimizer on a (scale, direction) parametrization.

A leaf with more entries than its last dimension (a kernel whose output axis
is the last one) is written as ``w = g * v / ||v||`` with the norm over all
axes but the last; the wrapped optimizer updates ``v`` and ``g`` and ``w`` is
rebuilt from them. Other leaves (vectors, scalars) pass through unchanged.
"""

from typing import Any, NamedTuple

from flax import struct
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import optax

from flax_optim_rules import _numerics
from legacy_optim import _field_trees
from legacy_optim import _hyper
from legacy_optim import _restore
from legacy_optim import base
from legacy_optim import catalogue

Array = Any


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


def is_normalized(leaf) -> bool:
  """Whether WeightNorm reparametrizes ``leaf``: more entries than columns.

  flax.optim raised IndexError for a 0-d leaf; here a scalar is, like a
  vector, left as it is.
  """
  return jnp.ndim(leaf) > 0 and jnp.size(leaf) > jnp.shape(leaf)[-1]


def _reduced_axes(leaf):
  return tuple(range(jnp.ndim(leaf) - 1))


def split(params, eps):
  """``w -> (v, g)`` with ``g = sqrt(sum(w^2) + eps)``, ``v = w / g``."""

  def leaf(w):
    if not is_normalized(w):
      return w, ()
    norm = jnp.sqrt(
        jnp.square(w).sum(_reduced_axes(w), keepdims=True) + eps)
    return w / norm, norm

  pairs = jax.tree_util.tree_map(leaf, params)
  return (jax.tree_util.tree_map(lambda _, vg: vg[0], params, pairs),
          jax.tree_util.tree_map(lambda _, vg: vg[1], params, pairs))


def merge(direction, scale, eps):
  """``(v, g) -> w = v * g / sqrt(sum(v^2) + eps)``; other leaves as they are.

  ``scale`` is params-shaped up to ``()`` at leaves that are not normalized.
  """

  def leaf(v, g):
    if not is_normalized(v):
      return v
    norm = jnp.square(v).sum(_reduced_axes(v), keepdims=True) + eps
    return v * (g * lax.rsqrt(norm))

  return jax.tree_util.tree_map(leaf, direction, scale)


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
  norm = jnp.sqrt(jnp.square(w).sum(_reduced_axes(w), keepdims=True))
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


class WeightNormState(NamedTuple):
  """State of ``weight_norm``: the parametrization and the inner state."""
  direction: Any  # params-shaped: v, or the leaf itself if not normalized.
  scale: Any  # params-shaped up to (): g of shape (1, ..., 1, n), or ().
  inner_state: Any  # inner transform's state for {'direction', 'scale'}.


def weight_norm(inner: optax.GradientTransformation, wn_decay: Array = 0,
                wn_eps: Array = 1e-8) -> optax.GradientTransformation:
  r"""Runs ``inner`` on the weight-normalized parametrization (flax.optim's).

  .. math::
    w = g\,\frac{v}{\sqrt{\textstyle\sum v^2 + \epsilon}},\qquad
    \nabla_v \mathrel{+}= \lambda v

  (sums over all axes but the last; ``lambda`` = ``wn_decay``). Gradients
  with respect to ``w`` are pulled back to ``(v, g)`` by the chain rule,
  ``inner`` updates the tree ``{'direction': v, 'scale': g}``, and the
  update returned is ``w(v', g') - w``. The parametrization lives in the
  state (``w`` alone does not determine it), initialised with
  ``g = sqrt(sum(w^2) + eps)``, ``v = w / g``.

  Optax has no weight normalization transform.

  References:
    Salimans & Kingma, "Weight Normalization: A Simple Reparameterization to
    Accelerate Training of Deep Neural Networks",
    https://arxiv.org/abs/1602.07868

  Args:
    inner: the transform to run on ``{'direction': v, 'scale': g}``.
    wn_decay: L2 decay on ``v`` (may be traced).
    wn_eps: added under the square root of the norm (may be traced).

  Returns:
    An ``optax.GradientTransformation`` that needs ``params`` in ``update``.
  """

  def init_fn(params):
    direction, scale = split(params, wn_eps)
    return WeightNormState(direction, scale, inner.init(
        {'direction': direction, 'scale': scale}))

  def update_fn(updates, state, params=None):
    _hyper.require_params(params, 'WeightNorm')
    _, pullback = jax.vjp(lambda v, g: merge(v, g, wn_eps), state.direction,
                          state.scale)
    dir_grad, scale_grad = pullback(updates)
    dir_grad = jax.tree_util.tree_map(
        lambda v, dv: dv + wn_decay * v if is_normalized(v) else dv,
        state.direction, dir_grad)
    wn_params = {'direction': state.direction, 'scale': state.scale}
    inner_updates, inner_state = inner.update(
        {'direction': dir_grad, 'scale': scale_grad}, state.inner_state,
        wn_params)
    new = optax.apply_updates(wn_params, inner_updates)
    new_params = merge(new['direction'], new['scale'], wn_eps)
    deltas = jax.tree_util.tree_map(_numerics.update_to, new_params, params)
    return deltas, WeightNormState(new['direction'], new['scale'],
                                   inner_state)

  return optax.GradientTransformation(init_fn, update_fn)


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
    fields = _field_trees.split_param_states(
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
    param_states = _field_trees.merge_param_states({
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
