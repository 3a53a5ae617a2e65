"""Adafactor (Shazeer & Stern 2018) exactly as flax.optim computed it.

Memory-light second moments: a leaf with two dimensions of at least
``min_dim_size_to_factor`` keeps only row and column averages of the squared
gradient; other leaves keep the full average. Unused legacy slots of the
per-parameter state hold zeros of shape ``(1,)``, as in flax.optim.
"""

from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from legacy_optim import _hyper
from legacy_optim import _transforms_adaptive as _adaptive
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
class _AdafactorParamState:
  v_row: np.ndarray  # factored leaves: row means of squared gradients.
  v_col: np.ndarray  # factored leaves: column means of squared gradients.
  v: np.ndarray  # other leaves: elementwise means of squared gradients.
  m: np.ndarray  # with beta1: momentum of the scaled update.


def _unused_slot():
  # flax.optim filled unused slots with default-dtype zeros of shape (1,).
  return jnp.zeros((1,))


def factored_dims(shape: Sequence[int], factored: bool,
                  min_dim_size_to_factor: int):
  """``(d1, d0)``: the second-largest and largest axes, or None.

  A leaf is factored when ``factored`` is set and its two largest dimensions
  are both at least ``min_dim_size_to_factor``. Ties keep the lower axis
  first (a stable order), as flax.optim's ``np.argsort`` did.
  """
  if not factored or len(shape) < 2:
    return None
  order = np.argsort(shape, kind='stable')
  if shape[order[-2]] < min_dim_size_to_factor:
    return None
  return int(order[-2]), int(order[-1])


def decay_rate_pow(i, exponent: float = 0.8):
  r"""Second-moment decay :math:`\hat\beta_{2,t} = 1 - t^{-c}`.

  :math:`t = \max(i, 0) + 1` in float32, where ``i`` is the step minus
  ``step_offset`` and ``c`` = ``decay_rate``. flax.optim had no ``max``: a
  step before ``step_offset`` gave NaN parameters. Here such steps use the
  schedule's first value (:math:`\hat\beta_2 = 0`: the second moment
  restarts from the current gradient) until ``step_offset`` is reached;
  steps at or after it are unchanged.
  """
  t = jnp.asarray(jnp.maximum(i, 0), jnp.float32) + 1.0
  return 1.0 - t**(-exponent)


LegacyAdafactorState = _adaptive.state_class(
    'LegacyAdafactorState', _AdafactorParamState,
    'State of ``scale_by_legacy_adafactor``: the step ``count`` and one '
    'params-shaped tree per ``_AdafactorParamState`` field (float32 '
    'statistics, ``dtype_momentum`` momentum, or (1,) zeros where unused).')

# The per-parameter state fields, in layout order.
_SLOTS = LegacyAdafactorState._fields[1:]


def scale_by_legacy_adafactor(
    hyper_params: _AdafactorHyperParams,
    dtype_momentum: Dtype = jnp.float32,
    owner: str = 'Adafactor',
    decay_schedule: Callable[..., Any] = decay_rate_pow,
) -> optax.GradientTransformation:
  r"""The flax.optim Adafactor update, in its operation order.

  Per leaf, with :math:`G = g^2 + \epsilon_1` (``g`` cast to float32),
  :math:`\hat\beta_2` from ``decay_rate_pow`` and step size
  :math:`\alpha = \eta \max(\mathrm{RMS}(p), \epsilon_2)` (just :math:`\eta`
  without ``multiply_by_parameter_scale``):

  .. math::
    \text{factored: } R \leftarrow \hat\beta_2 R + (1-\hat\beta_2)
    \operatorname{mean}_{d_0} G,\;
    C \leftarrow \hat\beta_2 C + (1-\hat\beta_2) \operatorname{mean}_{d_1} G,\;
    y = g \,(R / \operatorname{mean}_{d_1} R)^{-1/2}\, C^{-1/2}

    \text{otherwise: } V \leftarrow \hat\beta_2 V + (1-\hat\beta_2) G,\;
    y = g\, V^{-1/2}

  then :math:`y \leftarrow y / \max(1, \mathrm{RMS}(y)/d)` (``d`` =
  ``clipping_threshold``), :math:`s = \alpha y`, with ``beta1``
  :math:`m \leftarrow \beta_1 m + (1-\beta_1) s,\ s = m`, and
  :math:`p \leftarrow (1 - w) p - s` (``w`` = ``weight_decay_rate``).
  The transform returns the update ``-s``, or ``new_p - p`` when weight
  decay is on, so that ``optax.apply_updates`` lands on flax.optim's value.

  .. warning::
    ``optax.adafactor`` is a different rule (other epsilon placement, decay
    schedule and clipping); it is not interchangeable with this one.

  References:
    Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear
    Memory Cost", https://arxiv.org/abs/1804.04235

  Args:
    hyper_params: an ``_AdafactorHyperParams``; numeric fields may be traced
      values or schedules (callables of the step count); ``None`` for
      ``beta1``/``clipping_threshold``/``weight_decay_rate`` disables them.
    dtype_momentum: dtype of the stored momentum.
    owner: the optimizer name used in error messages.
    decay_schedule: ``(step - step_offset, decay_rate) -> beta2_hat``.

  Returns:
    An ``optax.GradientTransformation`` that needs ``params`` in ``update``.
  """
  factored = _hyper.static_bool(hyper_params.factored, 'factored', owner)
  scale_by_param = _hyper.static_bool(
      hyper_params.multiply_by_parameter_scale, 'multiply_by_parameter_scale',
      owner)
  min_dim = hyper_params.min_dim_size_to_factor

  def dims(shape):
    return factored_dims(shape, factored, min_dim)

  def init_fn(params):
    def slot(param, name):
      d = dims(param.shape)
      shape = np.shape(param)
      if name == 'v_row' and d is not None:
        return jnp.zeros(np.delete(shape, d[1]), jnp.float32)
      if name == 'v_col' and d is not None:
        return jnp.zeros(np.delete(shape, d[0]), jnp.float32)
      if name == 'v' and d is None:
        return jnp.zeros(shape, jnp.float32)
      if name == 'm' and hyper_params.beta1 is not None:
        return jnp.zeros(shape, dtype_momentum)
      return _unused_slot()

    def field(name):
      return jax.tree_util.tree_map(lambda p: slot(p, name), params)

    return LegacyAdafactorState(
        jnp.zeros([], jnp.int32), *map(field, _SLOTS))

  def update_fn(updates, state, params=None):
    _hyper.require_params(params, owner)
    hp = _hyper.resolve(hyper_params, state.count)
    learning_rate = _hyper.require_learning_rate(hp.learning_rate, owner)
    decay = decay_schedule(state.count - hp.step_offset, hp.decay_rate)
    mixing = 1.0 - decay

    def leaf(grad, param, v_row, v_col, v, m):
      grad = grad.astype(jnp.float32)
      step_size = learning_rate
      if scale_by_param:
        step_size = step_size * jnp.maximum(
            jnp.sqrt(jnp.mean(param * param)), hp.epsilon2)
      grad_sqr = grad * grad + hp.epsilon1
      new = dict.fromkeys(_SLOTS)
      d = dims(param.shape)
      if d is not None:
        d1, d0 = d
        new['v_row'] = decay * v_row + mixing * jnp.mean(grad_sqr, axis=d0)
        new['v_col'] = decay * v_col + mixing * jnp.mean(grad_sqr, axis=d1)
        row_axis = d1 - 1 if d1 > d0 else d1
        row_mean = jnp.mean(new['v_row'], axis=row_axis, keepdims=True)
        row_factor = (new['v_row'] / row_mean)**-0.5
        col_factor = new['v_col']**-0.5
        y = (grad * jnp.expand_dims(row_factor, axis=d0) *
             jnp.expand_dims(col_factor, axis=d1))
      else:
        new['v'] = decay * v + mixing * grad_sqr
        y = grad * new['v']**-0.5
      if hp.clipping_threshold is not None:
        y = y / jnp.maximum(
            1.0, jnp.sqrt(jnp.mean(y * y)) / hp.clipping_threshold)
      step = step_size * y
      if hp.beta1 is not None:
        step = hp.beta1 * m + (1.0 - hp.beta1) * step
        new['m'] = step.astype(dtype_momentum)
      if hp.weight_decay_rate is not None:
        update = _adaptive.update_to(
            (1.0 - hp.weight_decay_rate) * param - step, param)
      else:
        update = -step
      slots = tuple(_unused_slot() if new[k] is None else new[k]
                    for k in _SLOTS)
      return (update,) + slots

    out = jax.tree_util.tree_map(leaf, updates, params, state.v_row,
                                 state.v_col, state.v, state.m)

    def column(i):
      return jax.tree_util.tree_map(lambda _, r: r[i], updates, out)

    return column(0), LegacyAdafactorState(
        optax.safe_int32_increment(state.count),
        *(column(i + 1) for i in range(len(_SLOTS))))

  return optax.GradientTransformation(init_fn, update_fn)


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
    factored = _hyper.static_bool(factored, 'factored', 'Adafactor')
    multiply_by_parameter_scale = _hyper.static_bool(
        multiply_by_parameter_scale, 'multiply_by_parameter_scale',
        'Adafactor')
    if isinstance(min_dim_size_to_factor, bool) or not isinstance(
        min_dim_size_to_factor, (int, np.integer)):
      raise TypeError(
          'Adafactor: min_dim_size_to_factor must be a Python int, got '
          f'{min_dim_size_to_factor!r}.')
    self.dtype_momentum = jax.dtypes.canonicalize_dtype(dtype_momentum)
    super().__init__(_AdafactorHyperParams(
        learning_rate, factored, multiply_by_parameter_scale, beta1,
        decay_rate, step_offset, clipping_threshold, weight_decay_rate,
        int(min_dim_size_to_factor), epsilon1, epsilon2))

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
