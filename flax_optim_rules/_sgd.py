"""flax.optim's GradientDescent and Momentum: stock Optax transforms."""

from typing import Any

import optax

from flax_optim_rules import _numerics


def legacy_gradient_descent(
    hyper_params: Any,
    owner: str = 'GradientDescent') -> optax.GradientTransformation:
  """``p <- p - learning_rate * g``: ``optax.scale_by_learning_rate``.

  Integer gradients are made floats first, as ``learning_rate * g`` made
  them in flax.optim (Optax scales in the gradient's dtype, truncating the
  rate to an integer).
  """
  return _numerics.with_float_grads(optax.scale_by_learning_rate(
      _numerics.learning_rate_schedule(hyper_params.learning_rate, owner)))


def legacy_momentum(hyper_params: Any,
                    owner: str = 'Momentum') -> optax.GradientTransformation:
  """Heavy-ball/Nesterov momentum with coupled L2 decay, as flax.optim.

  ``chain(add_decayed_weights(wd), trace(beta, nesterov),
  scale_by_learning_rate(lr))``; the decay term is left out for a static
  zero ``weight_decay``, as flax.optim skipped it (``g + 0 * p`` differs
  from ``g`` for ``p = inf`` or ``g = -0.0``). ``beta`` and ``weight_decay``
  must be constants (optax.trace takes no schedule).
  """
  _numerics.require_constant(hyper_params, ('beta', 'weight_decay'), owner)
  nesterov = _numerics.static_bool(hyper_params.nesterov, 'nesterov', owner)
  decay = (optax.identity() if _numerics.is_static_zero(
      hyper_params.weight_decay) else optax.add_decayed_weights(
          hyper_params.weight_decay))
  return optax.chain(
      decay,
      optax.trace(decay=hyper_params.beta, nesterov=nesterov),
      optax.scale_by_learning_rate(
          _numerics.learning_rate_schedule(hyper_params.learning_rate,
                                           owner)))


def sgd(learning_rate=None) -> optax.GradientTransformation:
  """flax.optim's ``GradientDescent(...)`` as an Optax transform."""
  return legacy_gradient_descent(
      _numerics.HyperParams(learning_rate=learning_rate))


def momentum(learning_rate=None, beta=0.9, weight_decay=0,
             nesterov=False) -> optax.GradientTransformation:
  """flax.optim's ``Momentum(...)`` as an Optax transform.

  ``optax.sgd(learning_rate, momentum=beta, nesterov=nesterov)`` (after
  ``optax.add_decayed_weights(weight_decay)``) computes the same numbers.
  """
  return legacy_momentum(_numerics.HyperParams(
      learning_rate=learning_rate, beta=beta, weight_decay=weight_decay,
      nesterov=nesterov))
