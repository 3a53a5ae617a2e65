"""How this machine's XLA rounds float16, and the slack that follows from it.

flax 0.5.3's golden data was written where XLA's CPU backend had no float16
arithmetic: it computed each float16 op in float32 and rounded after every
op. On CPUs with AVX512-FP16, today's XLA computes float16 natively and fuses
``p - lr * g`` into one multiply-add (one rounding instead of two), so a
float16 result can land a few ulps away from flax 0.5.3's although the rule
is the same. bfloat16 has no such arithmetic on x86 and is not affected.

``native_float16()`` measures which case this machine is in (a jitted
``p - lr * g`` on inputs where the two roundings differ); tests hold float16
leaves to flax 0.5.3's bits where XLA rounds per op, and within
``float16_slack`` (one rounding of the largest operand per step taken)
where it fuses. Run the half-precision tests both natively and with
``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` to see both code paths.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

# p - lr * g in float16: rounding lr * g first gives the first value, one
# fused multiply-add the second.
_PROBE = {'param': -0.04932, 'learning_rate': 0.1, 'grad': -0.5176}
_PER_OP_ROUNDING = np.float16(0.002441)
_FUSED = np.float16(0.002428)


@functools.lru_cache(maxsize=None)
def native_float16() -> bool:
  """True where jitted float16 ``p - lr * g`` is fused (one rounding)."""
  param = jnp.asarray([_PROBE['param']], jnp.float16)
  grad = jnp.asarray([_PROBE['grad']], jnp.float16)
  return is_fused(np.asarray(jax.jit(
      lambda p, g: p - _PROBE['learning_rate'] * g)(param, grad))[0])


def is_fused(found: np.float16) -> bool:
  """Which rounding the probe's result ``found`` shows (apart so that each
  outcome is tested on any machine)."""
  if found == _PER_OP_ROUNDING:
    return False
  if found == _FUSED:
    return True
  raise AssertionError(
      f'float16 p - lr * g gave {found}, neither {_PER_OP_ROUNDING} (rounded '
      f'per op) nor {_FUSED} (fused); this XLA rounds float16 in a third way.')


def float16_slack(magnitude: np.ndarray, steps: int) -> np.ndarray:
  """The absolute difference fusing may cause after ``steps`` steps: one
  float16 ulp of ``magnitude`` (the larger of the value before and after a
  step, which bounds ``|lr * g|``) per step."""
  return steps * np.spacing(np.abs(magnitude).astype(np.float16)).astype(
      np.float64)
