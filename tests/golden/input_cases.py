"""Input-kind cases: flax 0.5.3 given Python numbers, NumPy and int params.

Importable in both environments (the oracle venv with real flax 0.5.3, which
runs ``generate_inputs.py``, and today's stack, where
``tests/test_flax_behaviour.py`` compares the shim with ``inputs.json``).

Each case is one optimizer spec x one input kind x one route
(``Optimizer.apply_gradient`` or the def-level ``apply_gradient``) x eager or
jitted; def-level cases start either from ``init_state`` or from a state
built by hand the way flax's own tests did (Python ``int`` step, per-leaf
state of the params' own kind: ``'host'``).
"""

import itertools

import jax
import numpy as np

# name -> (class name, constructor kwargs). Small 1-D leaves: Adafactor stays
# unfactored, WeightNorm normalizes nothing it cannot.
OPTIMIZERS = {
    'GradientDescent': ('GradientDescent', {'learning_rate': 0.1}),
    'Momentum': ('Momentum', {'learning_rate': 0.1, 'beta': 0.2}),
    'Momentum_wd_nesterov': ('Momentum', {
        'learning_rate': 0.1, 'beta': 0.2, 'weight_decay': 0.1,
        'nesterov': True}),
    'Adam': ('Adam', {'learning_rate': 0.1, 'beta1': 0.2, 'beta2': 0.9,
                      'eps': 0.01, 'weight_decay': 0.0}),
    'Adam_wd': ('Adam', {'learning_rate': 0.1, 'weight_decay': 0.1}),
    'AdaBelief': ('AdaBelief', {'learning_rate': 0.1, 'beta1': 0.2,
                                'beta2': 0.9, 'eps': 0.01}),
    'Adadelta': ('Adadelta', {'learning_rate': 0.1, 'rho': 0.9, 'eps': 1e-6,
                              'weight_decay': 0.1}),
    'Adafactor': ('Adafactor', {'learning_rate': 0.1, 'decay_rate': 0.8,
                                'beta1': 0.5}),
    'Adagrad': ('Adagrad', {'learning_rate': 0.1, 'eps': 0.01}),
    'LAMB': ('LAMB', {'learning_rate': 0.1, 'weight_decay': 0.1}),
    'LARS': ('LARS', {'learning_rate': 0.1, 'beta': 0.9,
                      'weight_decay': 0.1}),
    'RMSProp': ('RMSProp', {'learning_rate': 0.1, 'beta2': 0.9, 'eps': 0.01}),
    'RMSProp_centered': ('RMSProp', {'learning_rate': 0.1, 'beta2': 0.9,
                                     'eps': 0.01, 'centered': True}),
}

# Input kinds: name -> (params, grads). Values are exact in float32.
INPUTS = {
    'python_float': ({'a': 1.0, 'b': -2.0}, {'a': -1.0, 'b': 0.5}),
    'python_int': ({'a': 1, 'b': 3}, {'a': 0.5, 'b': -1.0}),
    'numpy_f64': ({'w': np.array([1.0, -2.0, 0.3])},
                  {'w': np.array([0.5, 0.1, -4.0])}),
    'numpy_f32': ({'w': np.array([1.0, -2.0, 0.3], np.float32)},
                  {'w': np.array([0.5, 0.1, -4.0], np.float32)}),
    'numpy_int': ({'w': np.array([1, 2, 3])}, {'w': np.full(3, 0.5)}),
    'jax_int32': ({'w': np.array([1, 2, 3], np.int32)},
                  {'w': np.full(3, 0.5, np.float32)}),
    # Integer gradients, on integer and on float params.
    'python_int_int_grads': ({'a': 1, 'b': 3}, {'a': 2, 'b': -1}),
    'numpy_int_int_grads': ({'w': np.array([1, 2, 3])},
                            {'w': np.array([1, -2, 0])}),
    'jax_int32_int_grads': ({'w': np.array([1, 2, 3], np.int32)},
                            {'w': np.array([1, -2, 0], np.int32)}),
    'jax_f32_int_grads': ({'w': np.array([1.0, -2.0, 0.3], np.float32)},
                          {'w': np.array([1, -2, 0], np.int32)}),
}
# Kinds whose leaves are handed to flax as jax arrays (the others as given).
JAX_KINDS = ('jax_int32', 'jax_int32_int_grads', 'jax_f32_int_grads')

ROUTES = (('optimizer', None), ('def', 'init'), ('def', 'host'))


def _case_name(opt, inputs, route, state, jit):
  parts = [opt, inputs, route] + ([state] if state else [])
  return '|'.join(parts + ['jit' if jit else 'eager'])


CASES = [
    {'name': _case_name(opt, inputs, route, state, jit), 'optimizer': opt,
     'inputs': inputs, 'route': route, 'state': state, 'jit': jit}
    for opt, inputs, (route, state), jit in itertools.product(
        OPTIMIZERS, INPUTS, ROUTES, (False, True))
]


def build(optim_module, name: str):
  """The optimizer definition ``name`` from ``optim_module``'s classes."""
  cls_name, kwargs = OPTIMIZERS[name]
  return getattr(optim_module, cls_name)(**kwargs)


def make_inputs(kind: str):
  """Fresh (params, grads) of the input kind (never shared between runs)."""
  params, grads = INPUTS[kind]
  if kind in JAX_KINDS:
    return (jax.tree_util.tree_map(jax.numpy.asarray, params),
            jax.tree_util.tree_map(jax.numpy.asarray, grads))
  copy = lambda x: x.copy() if isinstance(x, np.ndarray) else x
  return ({k: copy(v) for k, v in params.items()},
          {k: copy(v) for k, v in grads.items()})


def run(optim_module, opt_def, case):
  """``(new_params, new_state)`` of one case with ``optim_module``'s API."""
  params, grads = make_inputs(case['inputs'])
  if case['route'] == 'optimizer':
    optimizer = opt_def.create(params)
    if case['jit']:
      new = jax.jit(lambda o, g: o.apply_gradient(g))(optimizer, grads)
    else:
      new = optimizer.apply_gradient(grads)
    return new.target, new.state
  state = opt_def.init_state(params)
  if case['state'] == 'host':
    state = host_state(state, case['inputs'], optim_module.OptimizerState)
  hyper_params = opt_def.hyper_params
  if case['jit']:
    return jax.jit(lambda p, s, g: opt_def.apply_gradient(
        hyper_params, p, s, g))(params, state, grads)
  return opt_def.apply_gradient(hyper_params, params, state, grads)


def host_state(state, kind: str, state_cls):
  """``state`` rebuilt by hand as flax's tests did: an ``int`` step and
  per-leaf states of the params' kind (Python floats for scalars, NumPy
  arrays of the params' float dtype otherwise)."""
  if kind.startswith('python'):
    convert = lambda x: float(x) if np.ndim(x) == 0 else np.asarray(
        x, np.float64)
  elif kind in ('numpy_f32', 'jax_f32_int_grads'):
    convert = lambda x: np.asarray(x, np.float32)
  elif kind == 'numpy_f64':
    convert = lambda x: np.asarray(x, np.float64)
  else:
    convert = np.asarray
  return state_cls(0, jax.tree_util.tree_map(convert, state.param_states))


def _kind(x) -> str:
  if isinstance(x, (bool, int, float, complex)):
    return 'python'
  if isinstance(x, (np.ndarray, np.generic)):
    return 'numpy'
  return 'jax'


def describe(tree, path=''):
  """Leaves of a state dict (dicts, lists, tuples, None) in a neutral form.

  Each leaf: ``[path, kind, type name, dtype, values]``; empty containers
  and None appear as ``[path, 'empty', type name, None, None]``.
  """
  if isinstance(tree, dict):
    if not tree:
      return [[path, 'empty', 'dict', None, None]]
    return [leaf for key in sorted(tree, key=str)
            for leaf in describe(tree[key], f'{path}/{key}')]
  if isinstance(tree, (list, tuple)):
    if not tree:
      return [[path, 'empty', type(tree).__name__, None, None]]
    return [leaf for i, item in enumerate(tree)
            for leaf in describe(item, f'{path}/{i}')]
  if tree is None:
    return [[path, 'empty', 'NoneType', None, None]]
  kind = _kind(tree)
  type_name = ('Array' if kind == 'jax' else type(tree).__name__)
  if kind == 'python':
    return [[path, kind, type_name, None, tree]]
  array = np.asarray(tree)
  return [[path, kind, type_name, array.dtype.name,
           array.astype(np.float64).tolist()]]
