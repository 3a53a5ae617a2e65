"""flax.optim's RMSProp (optionally centered), eps outside the root."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from flax_optim_rules import _numerics


class LegacyRMSPropState(NamedTuple):
  """State of ``legacy_rmsprop`` (legacy field names)."""
  count: jax.Array  # int32 scalar: the legacy step.
  v: optax.Updates  # EMA of g**2; params-shaped, params' dtypes.
  # EMA of g when centered, else a params-shaped tree of None.
  mg: optax.Updates


def legacy_rmsprop(hyper_params: Any,
                   owner: str = 'RMSProp') -> optax.GradientTransformation:
  r"""flax.optim's RMSProp update rule as one Optax transform.

  .. math::
    v \leftarrow \beta_2 v + (1 - \beta_2) g^2,\quad
    \bar g \leftarrow \beta_2 \bar g + (1 - \beta_2) g \text{ (centered)},\\
    p \leftarrow p - \frac{\eta\, g}{\sqrt{v - \bar g^2} + \epsilon}
    \quad(\text{or } \sqrt{v} + \epsilon \text{ uncentered})

  Uncentered, ``mg`` is not kept: it is None in flax.optim's per-parameter
  state, a tree of None here.

  .. warning::
    ``optax.rmsprop`` puts ``eps`` inside the root (``g / sqrt(v + eps)``)
    and applies the learning rate after the division; this transform adds
    ``eps`` outside and multiplies ``eta * g`` first, as flax.optim did.

  Args:
    hyper_params: the hyper-parameters (attributes named as in ``rmsprop``);
      numeric fields may be traced values or schedules (callables of the step
      count); ``centered`` must be a Python bool.
    owner: the optimizer name used in error messages.

  Returns:
    An ``optax.GradientTransformation`` with ``LegacyRMSPropState``.

  References:
    Tieleman & Hinton, Lecture 6.5 of "Neural Networks for Machine Learning"
    (2012); Graves, "Generating Sequences With Recurrent Neural Networks",
    https://arxiv.org/abs/1308.0850 (centered form).
  """
  centered = _numerics.static_bool(hyper_params.centered, 'centered', owner)

  def init_fn(params):
    state = _numerics.init_state(LegacyRMSPropState, params)
    if centered:
      return state
    return state._replace(mg=jax.tree_util.tree_map(lambda _: None, params))

  def update_fn(updates, state, params=None):
    del params
    hp = _numerics.resolve(hyper_params, state.count)
    learning_rate = _numerics.require_learning_rate(hp.learning_rate, owner)
    new_v = _numerics.ema(hp.beta2, state.v,
                          jax.tree_util.tree_map(jnp.square, updates))
    if centered:
      if not jax.tree_util.tree_leaves(state.mg) and jax.tree_util.tree_leaves(
          updates):
        raise ValueError(
            f'{owner}: centered=True needs the mean gradient state mg, but '
            'the state was initialised with centered=False.')
      new_mg = _numerics.ema(hp.beta2, state.mg, updates)
      variance = jax.tree_util.tree_map(
          lambda v, mg: v - jnp.square(mg), new_v, new_mg)
    else:
      new_mg, variance = state.mg, new_v
    new_updates = jax.tree_util.tree_map(
        lambda g, var: -(learning_rate * g / (jnp.sqrt(var) + hp.eps)),
        updates, variance)
    return new_updates, LegacyRMSPropState(
        optax.safe_int32_increment(state.count), new_v, new_mg)

  return optax.GradientTransformation(init_fn, update_fn)


def rmsprop(learning_rate=None, beta2=0.9, eps=1e-8,
            centered=False) -> optax.GradientTransformation:
  """flax.optim's ``RMSProp(...)`` as an Optax transform (``legacy_rmsprop``).

  The same transform as ``RMSProp(...).to_optax()`` (see ``adam``);
  ``centered`` must be a Python bool (a static argument).
  """
  return legacy_rmsprop(_numerics.HyperParams(
      learning_rate=learning_rate, beta2=beta2, eps=eps,
      centered=_numerics.static_bool(centered, 'centered', 'RMSProp')))
