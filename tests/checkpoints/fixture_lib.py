"""Shared helpers for the checkpoint tests: the fixtures and their templates.

``manifest.json`` (written by generate_fixtures.py under flax 0.5.3) lists
each case's optimizer spec, params layout and container; these helpers build
the matching templates with ``legacy_optim`` and read the legacy
continuation. Arrays are read with flax's own ``msgpack_restore`` so the
expected values never pass through the code under test.
"""

import json
import math
import pathlib
import warnings

from flax import core
from flax import nnx
from flax import serialization
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
import tree_paths

from compat.checkpoints import _spec
from compat.testing import _compare
import legacy_optim

HERE = pathlib.Path(__file__).resolve().parent
MANIFEST = json.loads((HERE / 'manifest.json').read_text())
CASES = sorted(MANIFEST['cases'])
BARE_CASES = [c for c in CASES if MANIFEST['cases'][c]['container'] ==
              'optimizer']

# Algorithms whose update flax-optim-compat reproduces bit for bit; the
# others are held, element by element, to the ulp distance that flax 0.5.3's
# own rules reach on today's JAX (floors.json, measure_floors.py), times 1.5.
# A continuation of a few steps moves params very little, so the fidelity
# suite's relative error of the accumulated update is ill-conditioned here: a
# single last-bit flip dominates it. Per-element ulps are not (0 ulps still
# means bit-identical).
BITWISE = {'GradientDescent', 'Momentum', 'Adagrad', 'RMSProp'}


def case(name: str) -> dict:
  return MANIFEST['cases'][name]


def checkpoint_path(name: str) -> pathlib.Path:
  return HERE / case(name)['checkpoint']


def checkpoint_bytes(name: str) -> bytes:
  return checkpoint_path(name).read_bytes()



def zero_params(name: str):
  params = tree_paths.nest({path: jnp.zeros(shape, jnp.dtype(dtype))
                 for path, (shape, dtype) in case(name)['layout'].items()})
  return core.freeze(params) if case(name)['frozen'] else params


def spec(name: str) -> _spec.Spec:
  return _spec.parse(case(name)['spec'])


def one_rule_cases() -> list:
  """The bare-optimizer cases of one update rule (no MultiOptimizer or
  WeightNorm): those flax_optim_rules' view of flax.optim's layout covers."""
  return [name for name in BARE_CASES
          if not set(spec(name).algorithms()) & {'MultiOptimizer',
                                                 'WeightNorm'}]


def is_bitwise(name: str) -> bool:
  return set(spec(name).algorithms()) - {'MultiOptimizer'} <= BITWISE


def ulp_bound(name: str) -> int:
  floors = json.loads((HERE / 'floors.json').read_text())['floor_ulps']
  return math.ceil(1.5 * floors[name])


def optimizer_def(name: str):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    return spec(name).build(legacy_optim)


def template_optimizer(name: str):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    return optimizer_def(name).create(zero_params(name))


@struct.dataclass
class TrainState:
  """The flax 0.5.3-era example TrainState (as in generate_fixtures.py)."""
  step: int
  optimizer: legacy_optim.Optimizer
  dynamic_scale: legacy_optim.DynamicScale


def template(name: str):
  """A template of the whole checkpoint (the optimizer or its container)."""
  optimizer = template_optimizer(name)
  kind = case(name)['container']
  if kind == 'optimizer':
    return optimizer
  if kind == 'tuple_ema':
    return (optimizer, zero_params(name))
  if kind == 'dict':
    return {'optimizer': optimizer, 'epoch': 0}
  if kind == 'train_state':
    return TrainState(step=0, optimizer=optimizer,
                      dynamic_scale=legacy_optim.DynamicScale())
  raise ValueError(kind)


def optimizer_in(name: str, restored):
  kind = case(name)['container']
  return {'optimizer': lambda r: r, 'tuple_ema': lambda r: r[0],
          'dict': lambda r: r['optimizer'],
          'train_state': lambda r: r.optimizer}[kind](restored)


def optimizer_path(name: str) -> tuple:
  return {'optimizer': (), 'tuple_ema': ('0',), 'dict': ('optimizer',),
          'train_state': ('optimizer',)}[case(name)['container']]


def continuation(name: str) -> dict:
  """The oracle's continuation: grads, targets after each step, final state."""
  data = serialization.msgpack_restore(
      (HERE / name / 'continuation.msgpack').read_bytes())
  n = case(name)['continue_steps']
  return {'grads': [data['grads'][str(i)] for i in range(n)],
          'targets': [data['targets'][str(i)] for i in range(n)],
          'final': data['final']}


def like(template_tree, state_dict):
  """``state_dict`` restored into ``template_tree``'s containers."""
  return serialization.from_state_dict(template_tree, state_dict)


def _leaf_bytes(x):
  x = np.asarray(x)
  return (x.dtype.name, x.shape, x.tobytes())


def assert_identical(expected, found, what='state dict'):
  """Same structure (None and {} included), dtypes, shapes and bits."""
  is_leaf = lambda x: x is None
  exp_paths = jax.tree_util.tree_flatten_with_path(expected, is_leaf)
  got_paths = jax.tree_util.tree_flatten_with_path(found, is_leaf)
  assert exp_paths[1] == got_paths[1], (
      f'{what}: structure differs\n  {exp_paths[1]}\n  {got_paths[1]}')
  for (path, e), (_, g) in zip(exp_paths[0], got_paths[0]):
    if e is None or g is None:
      assert e is g, f'{what}{jax.tree_util.keystr(path)}: {e!r} vs {g!r}'
      continue
    assert _leaf_bytes(e) == _leaf_bytes(g), (
        f'{what}{jax.tree_util.keystr(path)}: expected {np.asarray(e)!r}, '
        f'found {np.asarray(g)!r}')


def max_ulp_error(oracle, ours) -> int:
  """The largest per-element ulp distance between two trees' float leaves."""
  worst = 0
  for o, g in zip(jax.tree_util.tree_leaves(oracle),
                  jax.tree_util.tree_leaves(ours)):
    o, g = np.asarray(o), np.asarray(g)
    if not np.issubdtype(o.dtype, np.inexact) and o.dtype.kind != 'V':
      continue
    g = g.astype(o.dtype)
    if o.size:
      worst = max(worst, int(_compare.ulp_distance(o.reshape(-1),
                                                   g.reshape(-1)).max()))
  return worst


# nnx models whose params have the fixtures' paths, as a user would write.


class _Dense(nnx.Module):

  def __init__(self, n_in, n_out):
    self.kernel = nnx.Param(jnp.zeros((n_in, n_out)))
    self.bias = nnx.Param(jnp.zeros((n_out,)))


class _Embed(nnx.Module):

  def __init__(self, n, d):
    self.embedding = nnx.Param(jnp.zeros((n, d)))


class NestedModel(nnx.Module):
  """dense/{bias,kernel}, embed/embedding (the NESTED layout)."""

  def __init__(self):
    self.dense = _Dense(3, 4)
    self.embed = _Embed(5, 3)


class MixedModel(nnx.Module):
  """a (bfloat16), b (scalar), c (float16): the MIXED_DTYPES layout."""

  def __init__(self):
    self.a = nnx.Param(jnp.zeros((3,), jnp.bfloat16))
    self.b = nnx.Param(jnp.zeros((), jnp.float32))
    self.c = nnx.Param(jnp.zeros((2, 2), jnp.float16))


def nnx_model(name: str) -> nnx.Module:
  paths = set(case(name)['layout'])
  if paths == {'dense/bias', 'dense/kernel', 'embed/embedding'}:
    return NestedModel()
  if paths == {'a', 'b', 'c'}:
    return MixedModel()
  raise ValueError(f'no nnx model for the layout of {name}')
