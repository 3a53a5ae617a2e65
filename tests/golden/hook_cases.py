"""What flax.optim's documented hooks receive: scenarios run on either side.

Each scenario builds user subclasses that override the hooks of flax 0.5.3's
classes (``OptimizerDef``, ``MultiOptimizer``, ``WeightNorm``, the
traversals), records every call (hook name, a description of its arguments
and of what the parent returned) and runs create, two eager steps (the second
with a ``learning_rate`` override), one jitted step, ``state_dict`` and
``restore_state``. ``generate_hooks.py`` runs them under REAL flax 0.5.3 into
``hooks.json``; ``tests/test_subclass_hooks.py`` runs them on the shim (served
as ``flax.optim``) and compares.

Trees are 2-3 leaves: flax 0.5.3 compiles per leaf.
"""

import dataclasses

from flax import optim
from flax import serialization
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

# Every recorded call, in order: [hook, {argument: description}].
_calls: list = []


def _is_array(x) -> bool:
  return isinstance(x, (np.ndarray, jax.Array, jax.core.Tracer))


def describe(x):
  """A JSON description: types, tree structure, shapes, dtypes, values."""
  if isinstance(x, jax.core.Tracer):
    return {'kind': 'traced', 'shape': list(x.shape), 'dtype': str(x.dtype)}
  if _is_array(x):
    return {'kind': 'ndarray' if isinstance(x, np.ndarray) else 'array',
            'shape': list(x.shape), 'dtype': str(x.dtype),
            'value': np.asarray(x, np.float64).ravel().tolist()}
  if x is None or isinstance(x, (bool, int, float, str)):
    return {'kind': type(x).__name__, 'value': x}
  if isinstance(x, tuple) and hasattr(type(x), '_fields'):
    return {'kind': type(x).__name__,
            'fields': {f: describe(getattr(x, f)) for f in x._fields}}
  if isinstance(x, (tuple, list)):
    return {'kind': type(x).__name__, 'items': [describe(v) for v in x]}
  if isinstance(x, dict) or type(x).__name__ == 'FrozenDict':
    return {'kind': type(x).__name__,
            'items': {str(k): describe(x[k]) for k in sorted(x)}}
  if dataclasses.is_dataclass(x):
    return {'kind': type(x).__name__,
            'fields': {f.name: describe(getattr(x, f.name))
                       for f in dataclasses.fields(x)}}
  return {'kind': type(x).__name__}


def record(hook, **arguments):
  _calls.append([hook, {k: describe(v) for k, v in arguments.items()}])


def params():
  return {'a': {'bias': jnp.array([0.5, -0.25, 1.0], jnp.float32),
                'kernel': jnp.array([[1.0, -2.0, 0.5], [0.25, 1.5, -1.0]],
                                    jnp.float32)},
          'b': jnp.array([2.0, -1.0], jnp.float32)}


def grads():
  return jax.tree_util.tree_map(lambda p: 0.1 * p + 0.05, params())


# ------------------------------------------------------------ recording defs
def _recording_tree_hooks(cls):
  """A subclass of ``cls`` whose tree-level hooks record and call super."""

  class Recording(cls):

    def init_state(self, params_):
      out = super().init_state(params_)
      record('init_state', params=params_, returned=out)
      return out

    def apply_gradient(self, hyper_params, params_, state, grads_):
      out = super().apply_gradient(hyper_params, params_, state, grads_)
      record('apply_gradient', hyper_params=hyper_params, params=params_,
             state=state, grads=grads_, returned=out)
      return out

    def update_hyper_params(self, **overrides):
      out = super().update_hyper_params(**overrides)
      record('update_hyper_params', overrides=overrides, returned=out)
      return out

    def state_dict(self, target, state):
      out = super().state_dict(target, state)
      record('state_dict', target=target, state=state, returned=out)
      return out

    def restore_state(self, opt_target, opt_state, state_dict):
      out = super().restore_state(opt_target, opt_state, state_dict)
      record('restore_state', opt_target=opt_target, opt_state=opt_state,
             state_dict=state_dict, returned=out)
      return out

  Recording.__name__ = f'Recording{cls.__name__}'
  return Recording


class RecordingAdam(_recording_tree_hooks(optim.Adam)):
  """A built-in with every hook overridden; each calls the parent."""

  def init_param_state(self, param):
    out = super().init_param_state(param)
    record('init_param_state', param=param, returned=out)
    return out

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    out = super().apply_param_gradient(step, hyper_params, param, state, grad)
    record('apply_param_gradient', step=step, hyper_params=hyper_params,
           param=param, state=state, grad=grad, returned=out)
    return out


class ScaledDescent(optim.OptimizerDef):
  """A user rule on the per-leaf API only (flax.optim's documented way)."""

  def __init__(self, learning_rate=0.1):
    super().__init__(optim.GradientDescent(learning_rate).hyper_params)

  def init_param_state(self, param):
    record('init_param_state', param=param)
    return jnp.zeros_like(param)

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    record('apply_param_gradient', step=step, hyper_params=hyper_params,
           param=param, state=state, grad=grad)
    return param - hyper_params.learning_rate * grad, state + grad


RecordingMulti = _recording_tree_hooks(optim.MultiOptimizer)
RecordingWeightNorm = _recording_tree_hooks(optim.WeightNorm)


class ResearchMulti(optim.MultiOptimizer):
  """Research-code style: reads the traversals in its own overrides."""

  def init_state(self, params_):
    for k, traversal in enumerate(self.traversals):
      record('own_iterate_in_init_state', k=k,
             selected=list(traversal.iterate(params_)))
    return super().init_state(params_)

  def apply_gradient(self, hyper_params, params_, state, grads_):
    for k, traversal in enumerate(self.traversals):
      record('own_iterate_in_apply_gradient', k=k,
             selected=list(traversal.iterate(grads_)),
             doubled=traversal.update(lambda x: 2 * x, grads_))
    return super().apply_gradient(hyper_params, params_, state, grads_)


class RecordingTraversal(traverse_util.ModelParamTraversal):
  """A user traversal: sees every iterate/update call MultiOptimizer makes."""

  def iterate(self, inputs):
    record('traversal_iterate', inputs=inputs)
    yield from super().iterate(inputs)

  def update(self, fn, inputs):
    out = super().update(fn, inputs)
    record('traversal_update', inputs=inputs, returned=out)
    return out


def _recording_filter(name):
  def filter_fn(path, value):
    record('filter', path=path, value=value)
    return name in path
  return filter_fn


# ----------------------------------------------------------------- scenarios
def _kernel_and_bias():
  return (traverse_util.ModelParamTraversal(lambda p, _: 'kernel' in p),
          traverse_util.ModelParamTraversal(lambda p, _: 'bias' in p))


def _make(name):
  """The OptimizerDef of scenario ``name``."""
  kernels, biases = _kernel_and_bias()
  if name == 'adam_all_hooks':
    return RecordingAdam(learning_rate=0.1)
  if name == 'per_leaf_rule':
    return ScaledDescent(0.1)
  if name == 'multi_tree_hooks':
    # Built-in sub-optimizers; leaf 'b' is selected by neither.
    return RecordingMulti((kernels, optim.Adam(0.1)),
                          (biases, optim.Momentum(0.1)))
  if name == 'multi_recording_subs':
    return RecordingMulti((kernels, RecordingAdam(0.1)),
                          (biases, ScaledDescent(0.1)))
  if name == 'multi_research_code':
    return ResearchMulti((kernels, optim.Adam(0.1)),
                         (biases, optim.Momentum(0.1)))
  if name == 'multi_user_traversal':
    return optim.MultiOptimizer(
        (RecordingTraversal(lambda p, _: 'kernel' in p), optim.Adam(0.1)),
        (biases, optim.Momentum(0.1)))
  if name == 'multi_filter_walk':
    return optim.MultiOptimizer(
        (traverse_util.ModelParamTraversal(_recording_filter('kernel')),
         RecordingAdam(0.1)),)
  if name == 'multi_filter_builtin':
    return optim.MultiOptimizer(
        (traverse_util.ModelParamTraversal(_recording_filter('kernel')),
         optim.Adam(0.1)),)
  if name == 'weight_norm_tree_hooks':
    return RecordingWeightNorm(optim.Adam(0.1), wn_decay=0.01)
  if name == 'weight_norm_recording_inner':
    return optim.WeightNorm(RecordingAdam(0.1), wn_decay=0.01)
  raise KeyError(name)


SCENARIOS = ('adam_all_hooks', 'per_leaf_rule', 'multi_tree_hooks',
             'multi_recording_subs', 'multi_research_code',
             'multi_user_traversal', 'multi_filter_walk',
             'multi_filter_builtin', 'weight_norm_tree_hooks',
             'weight_norm_recording_inner')

# The phases of a scenario, in order.
PHASES = ('create', 'eager_step', 'eager_step_override', 'jit_create',
          'jit_step', 'state_dict', 'restore_state')


def run(name) -> dict:
  """{phase: [[hook, {argument: description}], ...]} for scenario ``name``."""
  out = {}

  def phase(label, fn):
    del _calls[:]
    result = fn()
    out[label] = list(_calls)
    return result

  opt_def = _make(name)
  optimizer = phase('create', lambda: opt_def.create(params()))
  optimizer = phase('eager_step', lambda: optimizer.apply_gradient(grads()))
  optimizer = phase('eager_step_override',
                    lambda: optimizer.apply_gradient(grads(),
                                                     learning_rate=0.05))
  jitted = phase('jit_create', lambda: _make(name).create(params()))
  phase('jit_step', lambda: jax.jit(lambda o, g: o.apply_gradient(g))(
      jitted, grads()))
  state = phase('state_dict', lambda: serialization.to_state_dict(optimizer))
  phase('restore_state',
        lambda: serialization.from_state_dict(optimizer, state))
  return out
