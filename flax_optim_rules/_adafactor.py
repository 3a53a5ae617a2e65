"""flax.optim's Adafactor (Shazeer & Stern 2018), in its operation order.

Memory-light second moments: a leaf with two dimensions of at least
``min_dim_size_to_factor`` keeps only row and column averages of the squared
gradient; other leaves keep the full average. Unused legacy slots of the
per-parameter state hold zeros of shape ``(1,)``, as in flax.optim.
"""

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from flax_optim_rules import _numerics


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


class LegacyAdafactorState(NamedTuple):
  """State of ``scale_by_legacy_adafactor`` (legacy field names)."""
  count: jax.Array  # int32 scalar: the legacy step.
  # Each field: one leaf per parameter, zeros of shape (1,) where unused.
  v_row: optax.Updates  # factored leaves: row means of g**2 (float32).
  v_col: optax.Updates  # factored leaves: column means of g**2 (float32).
  v: optax.Updates  # other leaves: means of g**2 (float32).
  m: optax.Updates  # with beta1: momentum (``dtype_momentum``).

# The per-parameter state fields, in layout order.
_SLOTS = LegacyAdafactorState._fields[1:]


def scale_by_legacy_adafactor(
    hyper_params: Any,
    dtype_momentum: Any = jnp.float32,
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
    hyper_params: the hyper-parameters (attributes named as in ``adafactor``);
      numeric fields may be traced values or schedules (callables of the step
      count); ``None`` for ``beta1``, ``clipping_threshold`` or
      ``weight_decay_rate`` disables it.
    dtype_momentum: dtype of the stored momentum.
    owner: the optimizer name used in error messages.
    decay_schedule: ``(step - step_offset, decay_rate) -> beta2_hat``.

  Returns:
    An ``optax.GradientTransformation`` that needs ``params`` in ``update``.
  """
  factored = _numerics.static_bool(hyper_params.factored, 'factored', owner)
  scale_by_param = _numerics.static_bool(
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
    _numerics.require_params(params, owner)
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
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
        update = _numerics.update_to(
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


def adafactor_config(factored: Any, multiply_by_parameter_scale: Any,
                     min_dim_size_to_factor: Any, owner: str = 'Adafactor'):
  """The static layout settings, checked: ``(bool, bool, int)``."""
  factored = _numerics.static_bool(factored, 'factored', owner)
  multiply_by_parameter_scale = _numerics.static_bool(
      multiply_by_parameter_scale, 'multiply_by_parameter_scale', owner)
  if isinstance(min_dim_size_to_factor, bool) or not isinstance(
      min_dim_size_to_factor, (int, np.integer)):
    raise TypeError(
        f'{owner}: min_dim_size_to_factor must be a Python int, got '
        f'{min_dim_size_to_factor!r}.')
  return factored, multiply_by_parameter_scale, int(min_dim_size_to_factor)


def adafactor(learning_rate=None, factored=True,
              multiply_by_parameter_scale=True, beta1=None, decay_rate=0.8,
              step_offset=0, clipping_threshold=1.0, weight_decay_rate=None,
              min_dim_size_to_factor=128, epsilon1=1e-30, epsilon2=1e-3,
              dtype_momentum=jnp.float32) -> optax.GradientTransformation:
  """flax.optim's ``Adafactor(...)`` as an Optax transform.

  The same transform as ``Adafactor(...).to_optax()``
  (``scale_by_legacy_adafactor``; see ``adam``). ``factored``,
  ``multiply_by_parameter_scale``, ``min_dim_size_to_factor`` and
  ``dtype_momentum`` are static arguments.
  """
  factored, multiply_by_parameter_scale, min_dim_size_to_factor = (
      adafactor_config(factored, multiply_by_parameter_scale,
                       min_dim_size_to_factor))
  return scale_by_legacy_adafactor(
      _numerics.HyperParams(
          learning_rate=learning_rate, factored=factored,
          multiply_by_parameter_scale=multiply_by_parameter_scale,
          beta1=beta1, decay_rate=decay_rate, step_offset=step_offset,
          clipping_threshold=clipping_threshold,
          weight_decay_rate=weight_decay_rate,
          min_dim_size_to_factor=min_dim_size_to_factor, epsilon1=epsilon1,
          epsilon2=epsilon2),
      jax.dtypes.canonicalize_dtype(dtype_momentum))
