"""flax.optim's WeightNorm as an Optax transform wrapping another one.

A leaf with more entries than its last dimension (a kernel whose output axis
is the last one) is written as ``w = g * v / ||v||`` with the norm over all
axes but the last; the wrapped transform updates ``v`` and ``g`` and ``w`` is
rebuilt from them. Other leaves (vectors, scalars) pass through unchanged.
Optax has no weight normalization transform; ``legacy_optim.WeightNorm``
builds this one (its ``to_optax()``), and ``migrate`` writes it.
"""

from typing import Any, NamedTuple

import jax
from jax import lax
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics

Array = Any


def is_normalized(leaf) -> bool:
  """Whether WeightNorm reparametrizes ``leaf``: more entries than columns.

  flax.optim raised IndexError for a 0-d leaf; here a scalar is, like a
  vector, left as it is.
  """
  return jnp.ndim(leaf) > 0 and jnp.size(leaf) > jnp.shape(leaf)[-1]


def reduced_axes(leaf):
  return tuple(range(jnp.ndim(leaf) - 1))


def split(params, eps):
  """``w -> (v, g)`` with ``g = sqrt(sum(w^2) + eps)``, ``v = w / g``."""

  def leaf(w):
    if not is_normalized(w):
      return w, ()
    norm = jnp.sqrt(
        jnp.square(w).sum(reduced_axes(w), keepdims=True) + eps)
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
    norm = jnp.square(v).sum(reduced_axes(v), keepdims=True) + eps
    return v * (g * lax.rsqrt(norm))

  return jax.tree_util.tree_map(leaf, direction, scale)


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
    _numerics.require_params(params, 'weight_norm')
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
