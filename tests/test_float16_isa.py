"""``_float16_isa``'s probe reads both roundings right on any machine.

Which outcome ``native_float16()`` sees depends on the CPU (AVX512-FP16 or
not); here the two roundings of the probe's ``p - lr * g`` are computed in
NumPy, independently of XLA, and each is classified.
"""

import _float16_isa
import numpy as np
import pytest

_PROBE = _float16_isa._PROBE  # noqa: SLF001 - the probe's inputs


def _probe_inputs():
  """The probe's float16 operands (a Python float becomes float16 in jax's
  float16 arithmetic)."""
  return tuple(np.float16(_PROBE[k])
               for k in ('param', 'learning_rate', 'grad'))


def test_rounding_after_each_op_is_not_fused():
  param, lr, grad = _probe_inputs()
  # float16 * float16 is exact in float32, and NumPy rounds each op's result
  # to float16: two roundings.
  per_op = param - lr * grad
  assert _float16_isa.is_fused(per_op) is False


def test_one_rounding_is_fused():
  param, lr, grad = _probe_inputs()
  # Exact in float64 (11-bit significands), then rounded once.
  fused = np.float16(np.float64(param) -
                     np.float64(lr) * np.float64(grad))
  assert _float16_isa.is_fused(fused) is True


def test_a_third_rounding_is_an_error():
  param, lr, grad = _probe_inputs()
  third = np.nextafter(param - lr * grad, np.float16(1))
  with pytest.raises(AssertionError, match='third way'):
    _float16_isa.is_fused(third)
