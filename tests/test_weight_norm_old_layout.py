"""WeightNorm state written by flax <= 0.3.6 restores into today's WeightNorm.

flax 0.1-0.3.6 stored ``_WeightNormParamState(direction_state, scale_state,
mult)`` per leaf, ``mult = g / ||v||`` (shaped like ``g``, ``()`` for a leaf
that is not normalized), and rebuilt ``v = w / mult`` and
``g = ||w|| * sign(mult)`` from the param before every step (flax 0.3.6's
``WeightNorm._split_grad``). flax 0.4.0 keeps ``direction`` and ``scale``
instead. The state dict below is laid out as flax 0.3.6's
``serialization.to_state_dict`` wrote it (a dataclass becomes a dict of its
fields, ``()`` an empty dict).
"""

import warnings

import chex
from flax import serialization
import numpy as np
import pytest

import legacy_optim as optim
from legacy_optim import _restore

_RNG = np.random.default_rng(17)


def _f32(*shape):
  return _RNG.standard_normal(shape).astype(np.float32)


def _old_state_dict():
  """A hand-built flax 0.3.6 checkpoint of WeightNorm(Adam) after 3 steps."""
  return {
      'target': {'dense': {'kernel': _f32(2, 3), 'bias': _f32(3)}},
      'state': {
          'step': np.int32(3),
          'param_states': {'dense': {
              'kernel': {
                  'direction_state': {'grad_ema': _f32(2, 3),
                                      'grad_sq_ema': np.abs(_f32(2, 3))},
                  'scale_state': {'grad_ema': _f32(1, 3),
                                  'grad_sq_ema': np.abs(_f32(1, 3))},
                  'mult': np.array([[0.5, -2.0, 1.25]], np.float32),
              },
              'bias': {
                  'direction_state': {'grad_ema': _f32(3),
                                      'grad_sq_ema': np.abs(_f32(3))},
                  'scale_state': {},
                  'mult': {},
              },
          }},
      },
  }


def _template(opt_def):
  params = {'dense': {'kernel': np.zeros((2, 3), np.float32),
                      'bias': np.zeros(3, np.float32)}}
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    return opt_def.create(params)


def test_flax_0_3_state_restores_with_its_moments_bit_exact():
  old = _old_state_dict()
  template = _template(optim.WeightNorm(optim.Adam(0.1)))
  restored = serialization.from_state_dict(template, old)

  old_states = old['state']['param_states']['dense']
  states = restored.state.param_states['dense']
  assert int(restored.state.step) == 3
  chex.assert_trees_all_equal(restored.target, old['target'])
  for name in ('kernel', 'bias'):
    chex.assert_trees_all_equal(
        serialization.to_state_dict(states[name].direction_state),
        old_states[name]['direction_state'])
  chex.assert_trees_all_equal(
      serialization.to_state_dict(states['kernel'].scale_state),
      old_states['kernel']['scale_state'])
  assert states['bias'].scale_state == () and states['bias'].scale == ()
  np.testing.assert_array_equal(states['bias'].direction,
                                old['target']['dense']['bias'])

  # v and g as flax 0.3.6 recovered them before its next step.
  w = old['target']['dense']['kernel'].astype(np.float64)
  mult = old_states['kernel']['mult'].astype(np.float64)
  np.testing.assert_allclose(states['kernel'].direction, w / mult, rtol=1e-6)
  np.testing.assert_allclose(
      states['kernel'].scale,
      np.sqrt((w**2).sum(0, keepdims=True)) * np.sign(mult), rtol=1e-6)
  # ... so today's w(v, g) is the checkpoint's param.
  v, g = states['kernel'].direction, states['kernel'].scale
  np.testing.assert_allclose(
      g * v / np.sqrt((v.astype(np.float64)**2).sum(0, keepdims=True)), w,
      rtol=1e-6)


def test_restoring_never_modifies_the_checkpoint_dict():
  old = _old_state_dict()
  kernel_state = old['state']['param_states']['dense']['kernel']
  serialization.from_state_dict(
      _template(optim.WeightNorm(optim.Adam(0.1))), old)
  assert set(kernel_state) == {'direction_state', 'scale_state', 'mult'}


def test_restored_old_state_keeps_training():
  template = _template(optim.WeightNorm(optim.Adam(0.1)))
  restored = serialization.from_state_dict(template, _old_state_dict())
  grads = {'dense': {'kernel': _f32(2, 3), 'bias': _f32(3)}}
  stepped = restored.apply_gradient(grads)
  assert int(stepped.state.step) == 4
  for leaf in stepped.target['dense'].values():
    assert np.isfinite(leaf).all()


def test_old_layout_into_another_optimizer_names_weight_norm():
  with pytest.raises(_restore.RestoreMismatchError) as err:
    serialization.from_state_dict(_template(optim.Adam(0.1)),
                                  _old_state_dict())
  message = str(err.value)
  assert ('written by WeightNorm (the layout of flax <= 0.3.6), not by Adam'
          in message), message


def test_a_state_that_is_not_a_dict_names_the_path():
  # Found by the long checkpoint fuzz: the old-layout probe indexed an array.
  template = _template(optim.WeightNorm(optim.Adam(0.1)))
  state_dict = {**serialization.to_state_dict(template),
                'state': np.zeros((), np.float32)}
  with pytest.raises(_restore.RestoreMismatchError,
                     match=r'state: expected a dict .* found float32\[\]'):
    serialization.from_state_dict(template, state_dict)
