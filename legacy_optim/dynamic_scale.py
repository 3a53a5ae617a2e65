"""Dynamic loss scaling for mixed-precision gradients (flax.optim's).

``flax.optim.DynamicScale`` (exported up to flax 0.4.0) lives on as
``flax.training.dynamic_scale.DynamicScale``; this is the legacy class, with
its fields and its scale/finite/gradient sequence.
"""

import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

from flax import struct
import jax
from jax import lax
import jax.numpy as jnp

from legacy_optim import deprecation

Array = Any

# The scale is a float32 value: keep it finite and non-zero.
_MAX_SCALE = float(jnp.finfo(jnp.float32).max)
_MIN_SCALE = float(jnp.finfo(jnp.float32).tiny)


class DynamicScaleResult(NamedTuple):
  dynamic_scale: 'DynamicScale'
  finite: Array
  aux: Any
  grad: Any


class DynamicScale(struct.PyTreeNode):
  r"""Dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision
  Training", https://arxiv.org/abs/1710.03740).

  The loss is multiplied by ``scale`` before differentiation and the
  gradients (cast to float32) divided by it afterwards. With
  :math:`k` = ``fin_steps``, :math:`N` = ``growth_interval``:

  .. math::
    \text{finite}: \; s \leftarrow \begin{cases} \gamma s & k = N \\
    s & k < N\end{cases},\;
    k \leftarrow \begin{cases} 0 & k = N \\ k + 1 & k < N \end{cases}
    \qquad \text{non-finite}: \; s \leftarrow \beta s,\; k \leftarrow 0

  (:math:`\gamma` = ``growth_factor``, :math:`\beta` = ``backoff_factor``), so
  the scale grows on the ``N + 1``-th finite step in a row.

  Example::

    dyn_scale = DynamicScale(growth_interval=10)
    step = jax.jit(lambda ds, p: ds.value_and_grad(loss_fn)(p))
    dyn_scale, is_finite, loss, grad = step(dyn_scale, params)
    params = jax.tree_util.tree_map(
        lambda p, g: jnp.where(is_finite, p - 0.01 * g, p), params, grad)

  .. warning::
    flax.optim let the scale overflow to ``inf`` or underflow to ``0``, after
    which every step was non-finite for good. Here growth stops at float32's
    largest value and backoff at its smallest normal value; every other step
    matches flax.optim. ``flax.training.dynamic_scale.DynamicScale`` (the
    replacement) behaves the same way and adds a ``minimum_scale`` field.

  Attributes:
    growth_factor: scale multiplier after ``growth_interval`` finite steps
      (static; default 2).
    backoff_factor: scale multiplier after a non-finite step (static;
      default 0.5).
    growth_interval: finite steps before the scale grows (static; default
      2000).
    fin_steps: finite steps in a row so far.
    scale: the current loss scale.
  """

  growth_factor: float = struct.field(pytree_node=False, default=2.0)
  backoff_factor: float = struct.field(pytree_node=False, default=0.5)
  growth_interval: int = struct.field(pytree_node=False, default=2000)
  fin_steps: Array = 0
  scale: Array = 65536.0

  def value_and_grad(
      self,
      fun: Callable[..., Any],
      argnums: Union[int, Sequence[int]] = 0,
      has_aux: bool = False,
      axis_name: Optional[str] = None,
  ) -> Callable[..., DynamicScaleResult]:
    """Like ``jax.value_and_grad(fun, argnums, has_aux)``, with loss scaling.

    Args:
      fun: the function to differentiate; returns a scalar loss, or
        ``(loss, aux)`` with ``has_aux``.
      argnums: which positional argument(s) to differentiate (default 0).
      has_aux: whether ``fun`` returns ``(loss, aux)``.
      axis_name: a pmap axis to average the gradients over (default None).

    Returns:
      A function of ``fun``'s arguments returning ``DynamicScaleResult(
      dynamic_scale, finite, value, grad)``: the updated ``DynamicScale``,
      whether every gradient entry is finite, the (unscaled) value as
      ``jax.value_and_grad`` returns it and the float32 gradients.
    """
    deprecation.warn_legacy_use('DynamicScale', self)
    if not isinstance(has_aux, bool):
      raise TypeError(f'DynamicScale.value_and_grad: has_aux must be a bool, '
                      f'got {has_aux!r}.')

    @functools.wraps(fun)
    def scaled_fun(*args):
      out = fun(*args)
      if has_aux:
        return self.scale * out[0], out[1]
      return self.scale * out

    grad_fn = jax.value_and_grad(scaled_fun, argnums, has_aux)

    def wrapped(*args):
      value, grad = grad_fn(*args)
      if has_aux:
        value = (value[0] / self.scale, value[1])
      else:
        value = value / self.scale
      grad = jax.tree_util.tree_map(
          lambda g: jnp.asarray(g, jnp.float32) / self.scale, grad)
      if axis_name is not None:
        grad = lax.pmean(grad, axis_name)
      finite = functools.reduce(
          jnp.logical_and,
          [jnp.all(lax.is_finite(g)) for g in jax.tree_util.tree_leaves(grad)],
          jnp.array(True))
      grow = self.fin_steps == self.growth_interval
      grown = jnp.minimum(self.scale * self.growth_factor, _MAX_SCALE)
      backed_off = jnp.maximum(self.scale * self.backoff_factor, _MIN_SCALE)
      new_scale = jnp.where(
          finite, jnp.where(grow & finite, grown, self.scale), backed_off)
      new_fin_steps = jnp.where(grow | ~finite, 0, self.fin_steps + 1)
      new_self = self.replace(fin_steps=new_fin_steps, scale=new_scale)
      return DynamicScaleResult(new_self, finite, value, grad)

    return wrapped
