"""Hyper-parameter handling shared by every OptimizerDef.

Hyper-params are flax struct dataclasses (``_AdamHyperParams`` ...). A field
may hold a number, a traced value (an override under ``jax.jit``) or, on the
Optax path, a schedule: a callable of the step count, as in
``compat.to_optax(optimizer, learning_rate=schedule)``.
"""

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp


def field_names(hyper_params: Any) -> tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(hyper_params))


def apply_overrides(hyper_params: Any, overrides: dict[str, Any],
                    owner: str) -> Any:
  """``hyper_params.replace(**overrides)`` with an error that lists names."""
  if not overrides:
    return hyper_params
  if not dataclasses.is_dataclass(hyper_params):
    raise TypeError(
        f'{owner}: cannot override {", ".join(map(repr, sorted(overrides)))}'
        f' because its hyper_params is a {type(hyper_params).__name__}, not a'
        ' dataclass (pass hyper_params=... to replace them all).')
  valid = field_names(hyper_params)
  unknown = sorted(set(overrides) - set(valid))
  if unknown:
    raise TypeError(
        f'{owner} has no hyper-parameter named {", ".join(map(repr, unknown))}'
        f'; valid names are: {", ".join(valid)} (or hyper_params=...).')
  return hyper_params.replace(**overrides)


def resolve(hyper_params: Any, count: Any) -> Any:
  """Evaluates schedule-valued fields at ``count``; other fields unchanged.

  A user's OptimizerDef may hold anything as hyper_params (flax.optim only
  looked inside them for overrides); only dataclass fields can be schedules.
  """
  if not dataclasses.is_dataclass(hyper_params):
    return hyper_params
  scheduled = {
      f.name: getattr(hyper_params, f.name)(count)
      for f in dataclasses.fields(hyper_params)
      if callable(getattr(hyper_params, f.name))
  }
  return hyper_params.replace(**scheduled) if scheduled else hyper_params


def require_learning_rate(learning_rate: Any, owner: str) -> Any:
  if learning_rate is None:
    raise ValueError(
        f'{owner}: no learning rate provided. Pass learning_rate=... to the '
        f'constructor or to apply_gradient(grads, learning_rate=...).')
  return learning_rate


def require_params(params: Any, owner: str) -> Any:
  """Rules that read the params need them passed to ``update``."""
  if params is None:
    raise ValueError(f'{owner} needs params: call '
                     'tx.update(grads, opt_state, params).')
  return params


def learning_rate_schedule(learning_rate: Any, owner: str) -> Callable:
  """A schedule (count -> rate) for a constant, traced or scheduled rate.

  The missing-rate check runs when the schedule is evaluated (inside the
  transform's update), so an optimizer can still be created without a rate
  and receive it as an override at each step, as flax.optim allowed.
  """
  def schedule(count):
    rate = require_learning_rate(learning_rate, owner)
    return rate(count) if callable(rate) else rate
  return schedule


def is_static_zero(value: Any) -> bool:
  """True only for a concrete Python/NumPy zero (never for a traced value)."""
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return value == 0
  if isinstance(value, jnp.ndarray) or hasattr(value, 'aval'):
    return False
  try:
    import numpy as np  # pylint: disable=g-import-not-at-top
    return isinstance(value, np.generic) and bool(value == 0)
  except TypeError:
    return False


def static_bool(value: Any, name: str, owner: str) -> bool:
  """A static configuration flag must be a Python bool, never traced."""
  if isinstance(value, bool):
    return value
  try:
    return bool(value)
  except Exception as e:  # pylint: disable=broad-except
    raise TypeError(
        f'{owner}: {name} selects the update rule and must be a Python bool, '
        f'not a traced value ({type(value).__name__}). Pass it to the '
        f'constructor instead of as a traced override.') from e


def require_constant(hyper_params: Any, names: tuple[str, ...],
                     owner: str) -> None:
  """Rejects schedules for fields the underlying stock Optax rule fixes."""
  for name in names:
    if callable(getattr(hyper_params, name)):
      raise ValueError(
          f'{owner}: only learning_rate may be a schedule; {name} was given '
          'a callable. Pass a number (or a traced value) instead.')
