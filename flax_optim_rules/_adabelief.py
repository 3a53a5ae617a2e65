"""flax.optim's AdaBelief: Adam with the second moment of the surprise."""

from typing import Any, NamedTuple

import jax
from jax import lax
import optax

from flax_optim_rules import _adam
from flax_optim_rules import _numerics


class LegacyAdaBeliefState(NamedTuple):
  """State of ``legacy_adabelief`` (legacy field names)."""
  count: jax.Array  # int32 scalar: the legacy step.
  grad_ema: optax.Updates  # EMA of g; params-shaped, params' dtypes.
  grad_sq_ema: optax.Updates  # EMA of (g - m)**2 plus eps; params-shaped.


def legacy_adabelief(hyper_params: Any,
                     owner: str = 'AdaBelief') -> optax.GradientTransformation:
  r"""flax.optim's AdaBelief update rule as one Optax transform.

  .. math::
    m \leftarrow \beta_1 m + (1 - \beta_1) g,\quad
    s \leftarrow \beta_2 s + (1 - \beta_2)(g - m)^2 + \epsilon,\\
    \hat m = m / (1 - \beta_1^t),\quad \hat s = s / (1 - \beta_2^t),\\
    p \leftarrow \Big(p - \frac{\eta \hat m}{\sqrt{\hat s} + \epsilon}\Big)
      - (\eta\lambda)\, p

  (:math:`m` is the already updated moment in :math:`(g - m)^2`; ``eps``
  enters both inside the stored second moment and outside the root.)

  .. warning::
    ``optax.adabelief`` takes separate ``eps``/``eps_root`` and applies the
    learning rate after the division; it has no weight decay. The result
    rounds differently from flax.optim. With a non-zero weight decay
    ``update`` needs ``params`` (see ``_numerics.descent``).

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``adabelief``);
      numeric fields may be traced values or schedules (callables of the step
      count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdaBeliefState``.

  References:
    Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in
    Observed Gradients", https://arxiv.org/abs/2010.07468
  """

  def init_fn(params):
    return _numerics.init_state(LegacyAdaBeliefState, params)

  def update_fn(updates, state, params=None):
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    grad_ema = _numerics.ema(hp.beta1, state.grad_ema, updates)
    surprise_sq = jax.tree_util.tree_map(
        lambda g, m: lax.square(g - m), updates, grad_ema)
    grad_sq_ema = jax.tree_util.tree_map(
        lambda s: s + hp.eps,
        _numerics.ema(hp.beta2, state.grad_sq_ema, surprise_sq))
    steps = _adam.adam_steps(
        learning_rate,
        _numerics.bias_corrected(grad_ema, hp.beta1, state.count),
        _numerics.bias_corrected(grad_sq_ema, hp.beta2, state.count), hp.eps)
    new_updates = _numerics.descent(steps, params, learning_rate,
                                    hp.weight_decay, owner)
    return new_updates, LegacyAdaBeliefState(
        optax.safe_int32_increment(state.count), grad_ema, grad_sq_ema)

  return optax.GradientTransformation(init_fn, update_fn)


def adabelief(learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-16,
              weight_decay=0.0) -> optax.GradientTransformation:
  """flax.optim's ``AdaBelief(...)`` as an Optax transform.

  The same transform as ``AdaBelief(...).to_optax()``
  (``legacy_adabelief``; see ``adam``).
  """
  return legacy_adabelief(_numerics.HyperParams(
      learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
      weight_decay=weight_decay))
