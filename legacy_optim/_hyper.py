"""Hyper-parameter handling shared by every OptimizerDef.

Hyper-params are flax struct dataclasses (``_AdamHyperParams`` ...). A field
may hold a number, a traced value (an override under ``jax.jit``) or, on the
Optax path, a schedule: a callable of the step count, as in
``compat.to_optax(optimizer, learning_rate=schedule)``.
"""

import dataclasses
from typing import Any

from flax_optim_rules import _numerics

# The rules' own helpers (flax_optim_rules needs nothing but jax and optax).
resolve = _numerics.resolve
require_learning_rate = _numerics.require_learning_rate
require_params = _numerics.require_params
learning_rate_schedule = _numerics.learning_rate_schedule
is_static_zero = _numerics.is_static_zero
static_bool = _numerics.static_bool
require_constant = _numerics.require_constant


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
