"""flax.optim's Adadelta: a learning rate and decoupled weight decay."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics


class LegacyAdadeltaState(NamedTuple):
  """State of ``legacy_adadelta`` (legacy field names)."""
  count: jax.Array  # int32 scalar: the legacy step.
  sq_avg: optax.Updates  # EMA of g**2; params-shaped, params' dtypes.
  acc_delta: optax.Updates  # EMA of the squared deltas; params-shaped.


def legacy_adadelta(hyper_params: Any,
                    owner: str = 'Adadelta') -> optax.GradientTransformation:
  r"""flax.optim's Adadelta update rule as one Optax transform.

  .. math::
    s \leftarrow \rho s + (1 - \rho) g^2,\quad
    \delta = \frac{\sqrt{a + \epsilon}}{\sqrt{s + \epsilon}}\, g,\\
    p \leftarrow (p - \eta \delta) - (\eta\lambda)\, p,\quad
    a \leftarrow \rho a + (1 - \rho) \delta^2

  (:math:`a` is ``acc_delta``; :math:`\delta` uses its value before the
  step.) The weight decay is decoupled: subtracted from the parameter after
  the step, scaled by the learning rate, never added to the gradient.

  .. warning::
    ``optax.adadelta`` adds ``weight_decay * p`` to the gradient before the
    statistics and scales by the learning rate last; the two rules differ
    whenever ``weight_decay`` is not zero, and round differently otherwise.
    The ratio of roots is computed as ``sqrt(a + eps) * (1 / sqrt(s + eps))``,
    which is how XLA compiled flax.optim's jitted division (see
    ``_numerics``). With a non-zero weight decay ``update`` needs
    ``params``.

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``adadelta``);
      numeric fields may be traced values or schedules (callables of the step
      count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdadeltaState``.

  References:
    Zeiler, "ADADELTA: An Adaptive Learning Rate Method",
    https://arxiv.org/abs/1212.5701
  """

  def init_fn(params):
    return _numerics.init_state(LegacyAdadeltaState, params)

  def update_fn(updates, state, params=None):
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    eps = hp.eps
    sq_avg = _numerics.ema(hp.rho, state.sq_avg,
                           jax.tree_util.tree_map(jnp.square, updates))
    deltas = jax.tree_util.tree_map(
        lambda acc, sq, g: _numerics.divide_by_root(
            jnp.sqrt(acc + eps), jnp.sqrt(sq + eps)) * g,
        state.acc_delta, sq_avg, updates)
    steps = jax.tree_util.tree_map(lambda d: learning_rate * d, deltas)
    new_updates = _numerics.descent(steps, params, learning_rate,
                                    hp.weight_decay, owner)
    acc_delta = _numerics.ema(hp.rho, state.acc_delta,
                              jax.tree_util.tree_map(jnp.square, deltas))
    return new_updates, LegacyAdadeltaState(
        optax.safe_int32_increment(state.count), sq_avg, acc_delta)

  return optax.GradientTransformation(init_fn, update_fn)


def adadelta(learning_rate=None, rho=0.9, eps=1e-6,
             weight_decay=0.0) -> optax.GradientTransformation:
  """flax.optim's ``Adadelta(...)`` as an Optax transform (``legacy_adadelta``).

  The same transform as ``Adadelta(...).to_optax()`` (see ``adam``).
  """
  return legacy_adadelta(_numerics.HyperParams(
      learning_rate=learning_rate, rho=rho, eps=eps,
      weight_decay=weight_decay))
