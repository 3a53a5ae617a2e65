"""flax.optim's Adagrad: accumulator from 0, eps outside the root."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics


class LegacyAdagradState(NamedTuple):
  """State of ``legacy_adagrad`` (legacy field names)."""
  count: jax.Array  # int32 scalar: the legacy step.
  G: optax.Updates  # sum of g**2 so far; params-shaped, params' dtypes.


def legacy_adagrad(hyper_params: Any,
                   owner: str = 'Adagrad') -> optax.GradientTransformation:
  r"""flax.optim's Adagrad update rule as one Optax transform.

  .. math::
    G \leftarrow G + g^2,\quad
    p \leftarrow p - \frac{\eta\, g}{\sqrt{G} + \epsilon}

  with :math:`G` starting at zero.

  .. warning::
    ``optax.adagrad`` starts the accumulator at
    ``initial_accumulator_value=0.1`` and puts ``eps`` inside the root
    (``g / sqrt(G + eps)``); this transform starts at 0 and adds ``eps``
    outside, as flax.optim did.

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``adagrad``);
      numeric fields may be traced values or schedules (callables of the step
      count).
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyAdagradState``.

  References:
    Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning
    and Stochastic Optimization", JMLR 12 (2011).
  """

  def init_fn(params):
    return _numerics.init_state(LegacyAdagradState, params)

  def update_fn(updates, state, params=None):
    del params
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    new_sum = jax.tree_util.tree_map(
        lambda acc, g: acc + jnp.square(g), state.G, updates)
    new_updates = jax.tree_util.tree_map(
        lambda g, acc: -(learning_rate * g / (jnp.sqrt(acc) + hp.eps)),
        updates, new_sum)
    return new_updates, LegacyAdagradState(
        optax.safe_int32_increment(state.count), new_sum)

  return optax.GradientTransformation(init_fn, update_fn)


def adagrad(learning_rate=None, eps=1e-8) -> optax.GradientTransformation:
  """flax.optim's ``Adagrad(...)`` as an Optax transform (``legacy_adagrad``).

  The same transform as ``Adagrad(...).to_optax()`` (see ``adam``).
  """
  return legacy_adagrad(_numerics.HyperParams(learning_rate=learning_rate,
                                              eps=eps))
