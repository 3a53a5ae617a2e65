"""DynamicScale: flax.optim's loss scaler (scale/finite/gradient sequence)."""

import _devices
import chex
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import legacy_optim
from legacy_optim import dynamic_scale

DynamicScale = legacy_optim.DynamicScale

# Cases needing 8 fake devices run in one child process (see _devices.py).
DEVICE_CASES = _devices.Cases(n_devices=8)


def test_public_names_and_fields():
  assert dynamic_scale.DynamicScale is DynamicScale
  ds = DynamicScale()
  assert (ds.growth_factor, ds.backoff_factor, ds.growth_interval,
          ds.fin_steps, ds.scale) == (2.0, 0.5, 2000, 0, 65536.0)
  # Only fin_steps and scale are pytree leaves; the factors are static.
  leaves, treedef = jax.tree_util.tree_flatten(
      DynamicScale(3.0, 0.25, 7, 1, 8.0))
  assert leaves == [1, 8.0]
  rebuilt = jax.tree_util.tree_unflatten(treedef, [2, 16.0])
  assert (rebuilt.growth_factor, rebuilt.backoff_factor,
          rebuilt.growth_interval) == (3.0, 0.25, 7)


def _loss(params, bad):
  """Finite for bad=False; for bad=True the gradient is inf * 0 = NaN."""
  loss = jnp.sum(params['w']**2) + params['b']
  return jnp.where(bad, jnp.inf, 1.0) * loss


def test_scale_sequence_growth_and_backoff():
  # Worked by hand from the rule: grow on the (N+1)-th finite step in a
  # row (N = growth_interval = 2), halve and restart the count otherwise.
  bad_steps = [False, False, False, True, False, False, False, False]
  expected_scale = [8, 8, 16, 8, 8, 8, 16, 16]
  expected_fin_steps = [1, 2, 0, 0, 1, 2, 0, 1]
  ds = DynamicScale(growth_interval=2, scale=8.0)
  params = {'w': jnp.asarray([1.0, -2.0]), 'b': jnp.asarray(0.5)}
  step = jax.jit(lambda ds, p, bad: ds.value_and_grad(_loss)(p, bad))
  for i, bad in enumerate(bad_steps):
    ds, finite, value, grad = step(ds, params, bad)
    assert bool(finite) == (not bad), i
    assert float(ds.scale) == expected_scale[i], i
    assert int(ds.fin_steps) == expected_fin_steps[i], i
    if not bad:
      np.testing.assert_allclose(value, 5.5, rtol=1e-6)
      chex.assert_trees_all_close(
          grad, {'w': jnp.asarray([2.0, -4.0]), 'b': jnp.asarray(1.0)},
          rtol=1e-6)


def test_float16_loss_backs_off_until_the_scaled_loss_fits():
  # The scaled loss is float16 (max 65504): scale * 6.5 overflows at 65536,
  # 32768 and 16384, fits at 8192. Same sequence as flax 0.5.3's
  # flax/optim/dynamic_scale.py on this function (checked against it).
  def loss16(p):
    return jnp.sum(jnp.asarray(p, jnp.float16)**2)

  p = jnp.asarray([0.5, -1.5, 2.0], jnp.float32)
  step = jax.jit(lambda ds, p: ds.value_and_grad(loss16)(p))
  ds = DynamicScale()
  for expected_scale in (32768.0, 16384.0, 8192.0):
    ds, finite, _, _ = step(ds, p)
    assert not bool(finite) and float(ds.scale) == expected_scale
  ds, finite, value, grad = step(ds, p)
  assert bool(finite) and int(ds.fin_steps) == 1
  assert float(ds.scale) == 8192.0
  assert value.dtype == jnp.float16 and grad.dtype == jnp.float32
  np.testing.assert_allclose(value, 6.5, rtol=1e-3)
  np.testing.assert_allclose(grad, 2 * np.asarray(p), rtol=1e-3)


def test_has_aux_and_argnums():
  def fun(x, y, scale):
    return jnp.sum(x * y) * scale, {'norm': jnp.sum(x)}

  x, y = jnp.asarray([1.0, 2.0]), jnp.asarray([3.0, -1.0])
  ds = DynamicScale(scale=4.0)
  _, finite, (value, aux), (gx, gy) = ds.value_and_grad(
      fun, argnums=(0, 1), has_aux=True)(x, y, 2.0)
  assert bool(finite)
  np.testing.assert_allclose(value, 2.0)
  np.testing.assert_allclose(aux['norm'], 3.0)
  np.testing.assert_allclose(gx, 2 * np.asarray(y))
  np.testing.assert_allclose(gy, 2 * np.asarray(x))
  with pytest.raises(TypeError, match='has_aux must be a bool'):
    ds.value_and_grad(fun, has_aux='yes')


def test_scale_stays_finite_and_nonzero():
  # flax.optim grew 2^127 to inf and halved the smallest normal float32 to
  # a denormal, then to 0; either way every later step was non-finite.
  f32 = np.finfo(np.float32)
  fun = lambda p: p * 1e-30
  big = DynamicScale(growth_interval=0, scale=jnp.float32(2.0**127))
  big, finite, _, _ = big.value_and_grad(fun)(jnp.float32(1.0))
  assert bool(finite) and float(big.scale) == f32.max
  small = DynamicScale(scale=jnp.float32(f32.tiny))
  small, finite, _, _ = small.value_and_grad(lambda p: p * jnp.inf)(
      jnp.float32(1.0))
  assert not bool(finite) and float(small.scale) == f32.tiny


@struct.dataclass
class _TrainState:
  params: dict
  dynamic_scale: DynamicScale


def test_inside_a_struct_dataclass_under_jit():
  state = _TrainState({'w': jnp.asarray([1.0, -2.0]), 'b': jnp.asarray(0.5)},
                      DynamicScale(growth_interval=1, scale=2.0))

  @jax.jit
  def train_step(state, bad):
    ds, finite, _, grad = state.dynamic_scale.value_and_grad(_loss)(
        state.params, bad)
    params = jax.tree_util.tree_map(
        lambda p, g: jnp.where(finite, p - 0.1 * g, p), state.params, grad)
    return state.replace(params=params, dynamic_scale=ds)

  for bad in (False, False, True):
    state = train_step(state, bad)
  # Two finite steps grew 2 -> 4, the non-finite one halved it.
  assert float(state.dynamic_scale.scale) == 2.0
  assert int(state.dynamic_scale.fin_steps) == 0
  chex.assert_trees_all_close(
      state.params, {'w': jnp.asarray([0.64, -1.28]),
                     'b': jnp.asarray(0.3)}, rtol=1e-6)


@DEVICE_CASES.register()
def pmap_averages_gradients():
  xs = jnp.arange(8.0).reshape(8, 1) + 1.0

  def loss(w, x, bad):
    return jnp.where(bad, jnp.inf, 1.0) * jnp.sum((w * x) ** 2)

  step = jax.pmap(
      lambda ds, w, x, bad: ds.value_and_grad(loss, axis_name='i')(
          w, x, bad), axis_name='i', in_axes=(None, None, 0, 0))
  ds = legacy_optim.DynamicScale(growth_interval=0, scale=4.0)
  w = jnp.asarray([1.5])
  ds8, finite, value, grad = step(ds, w, xs, jnp.zeros(8, bool))
  # d/dw (w x)^2 = 2 w x^2, averaged over the 8 replicas.
  expected = 2 * 1.5 * np.mean(np.arange(1.0, 9.0) ** 2)
  np.testing.assert_allclose(grad[:, 0], expected, rtol=1e-6)
  np.testing.assert_allclose(value[:, 0] if value.ndim > 1 else value,
                             (1.5 * np.arange(1.0, 9.0)) ** 2, rtol=1e-6)
  assert np.all(finite) and np.all(ds8.scale == 8.0), ds8.scale
  # One bad replica makes every replica see a non-finite mean gradient.
  bad = jnp.zeros(8, bool).at[3].set(True)
  ds8, finite, _, _ = step(ds, w, xs, bad)
  assert not np.any(finite) and np.all(ds8.scale == 2.0), ds8.scale
  assert np.all(ds8.fin_steps == 0)


outcomes, test_on_8_devices = DEVICE_CASES.pytest_items(__file__)


if __name__ == '__main__':
  DEVICE_CASES.main()
