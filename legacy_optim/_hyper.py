"""Hyper-parameter handling shared by every OptimizerDef.

Hyper-params are flax struct dataclasses (``_AdamHyperParams`` ...). A field
may hold a number, a traced value (an override under ``jax.jit``) or, on the
Optax path, a schedule: a callable of the step count, as in
``compat.to_optax(optimizer, learning_rate=schedule)``.
"""

import dataclasses
from typing import Any

from flax_optim_rules import _numerics
from flax_optim_rules import _rule_def

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


# A user's rule kept on flax_optim_rules.RuleDef overrides the same way.
apply_overrides = _rule_def.apply_overrides
