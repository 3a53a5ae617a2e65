"""The fidelity case grid: optimizers, trees and gradient sequences as data.

Importable with only Python and NumPy, in both environments: the oracle venv
(real flax 0.5.3, ``flax.optim``) and today's stack (``legacy_optim``). A case
is a plain dict:

  name       unique id (the pytest id and the golden-file key)
  optimizer  an optimizer spec (see ``opt``, ``weight_norm``, ``multi``)
  tree       nested dicts/lists of leaf shapes (tuples of ints)
  dtype      'float32' or 'bfloat16' (params and gradients)
  lr         None, or a per-step learning-rate formula passed to the jitted
             step as an argument (see ``learning_rates``)
  focus      None, or a traversal spec for ``create(target, focus=...)``
  grads      gradient options (see ``gradient_steps``)

Params and gradients come from ``numpy.random.default_rng(seed)`` with the
seed derived from the case name; the golden file stores a digest of the
arrays actually fed to the optimizer so a change in NumPy's stream (or in the
bfloat16 conversion) is reported instead of being silently compared.
"""

import hashlib
import math
import zlib

import numpy as np

STEPS = 100


# ---------------------------------------------------------------- specs
def opt(algo, **kwargs):
  """A built-in algorithm: ``getattr(optim, algo)(**kwargs)``."""
  return {'algo': algo, 'kwargs': kwargs}


def weight_norm(inner, **kwargs):
  return {'algo': 'WeightNorm', 'inner': inner, 'kwargs': kwargs}


def multi(*parts):
  """MultiOptimizer from ``(traversal_spec, optimizer_spec)`` pairs."""
  return {'algo': 'MultiOptimizer', 'parts': list(parts)}


def path_contains(*texts):
  """ModelParamTraversal selecting params whose path contains any of texts.

  Only path filters: flax 0.5.3's MultiOptimizer also runs the traversal over
  the per-parameter *states*, so a filter on the value (e.g. its rank) breaks
  there for any optimizer with state.
  """
  return {'kind': 'path_contains', 'texts': list(texts)}


# ---------------------------------------------------------------- trees
# Scalar to 4-D leaves, the usual layer names.
MIXED = {
    'conv': {'kernel': (3, 3, 2, 4), 'bias': (4,)},
    'proj': {'kernel': (2, 3, 5)},
    'head': {'kernel': (6, 3), 'bias': (3,)},
    'temperature': (),
}
# A list container inside dicts, and a list at the root.
NESTED = [{'layers': [{'w': (4, 3)}, {'w': (3, 2), 'b': (2,)}]}, (5,)]
# Adafactor: one leaf with both dims >= 128 (factored by default), small ones
# that are never factored.
FACTORED = {
    'embed': {'embedding': (128, 136)},
    'dense': {'kernel': (8, 16), 'bias': (16,)},
    'scale': (),
}
# A 3-D leaf factored over its two largest dims, with the batch-like dim
# first; plus a transposed 2-D one (rows < cols and rows > cols both seen).
FACTORED_3D = {
    'attn': {'kernel': (2, 128, 130)},
    'out': {'kernel': (132, 128)},
    'bias': (7,),
}
# Leaves small enough to factor only with min_dim_size_to_factor lowered.
SMALL_FACTOR = {
    'a': (12, 9),
    'b': (3, 10, 16),
    'c': (5, 4),
    'd': (6,),
}
# WeightNorm needs rank >= 1 leaves; rank-1 leaves are kept unnormalized.
WN_TREE = {
    'dense': {'kernel': (6, 4), 'bias': (4,)},
    'conv': {'kernel': (3, 2, 5)},
    'gain': (1,),
}


# ---------------------------------------------------------------- grid
def _case(name, optimizer, tree=None, dtype='float32', lr=None, focus=None,
          **grads):
  return {
      'name': name,
      'optimizer': optimizer,
      'tree': MIXED if tree is None else tree,
      'dtype': dtype,
      'lr': lr,
      'focus': focus,
      'grads': grads,
  }


WARMUP_COSINE = {'kind': 'warmup_cosine', 'base': 0.05, 'warmup': 10}
RSQRT = {'kind': 'rsqrt', 'base': 0.01, 'warmup': 10}


def _grid():
  c = _case
  return [
      # GradientDescent.
      c('sgd', opt('GradientDescent', learning_rate=0.1)),
      c('sgd_bf16', opt('GradientDescent', learning_rate=0.1),
        dtype='bfloat16'),
      c('sgd_lr_override', opt('GradientDescent'), lr=WARMUP_COSINE),
      c('sgd_bf16_lr_override_weak', opt('GradientDescent'),
        dtype='bfloat16', lr=dict(WARMUP_COSINE, arg='python')),
      c('sgd_nested_lists', opt('GradientDescent', learning_rate=0.05),
        tree=NESTED),
      # Momentum.
      c('momentum', opt('Momentum', learning_rate=0.05)),
      c('momentum_nesterov_wd',
        opt('Momentum', learning_rate=0.05, beta=0.8, weight_decay=1e-3,
            nesterov=True)),
      c('momentum_bf16', opt('Momentum', learning_rate=0.05, beta=0.7),
        dtype='bfloat16'),
      c('momentum_lr_override', opt('Momentum', beta=0.95, weight_decay=1e-4),
        lr=WARMUP_COSINE),
      c('momentum_nested_lists', opt('Momentum', learning_rate=0.02),
        tree=NESTED),
      # Adam.
      c('adam', opt('Adam', learning_rate=0.01)),
      c('adam_custom', opt('Adam', learning_rate=0.01, beta1=0.8, beta2=0.99,
                           eps=1e-6, weight_decay=1e-3)),
      c('adam_bf16', opt('Adam', learning_rate=0.02), dtype='bfloat16'),
      c('adam_lr_override', opt('Adam', weight_decay=1e-4), lr=RSQRT),
      # AdaBelief.
      c('adabelief', opt('AdaBelief', learning_rate=0.01)),
      c('adabelief_custom', opt('AdaBelief', learning_rate=0.01, beta1=0.85,
                                beta2=0.995, eps=1e-12, weight_decay=1e-2)),
      c('adabelief_lr_override', opt('AdaBelief'), lr=RSQRT),
      # Adadelta.
      c('adadelta', opt('Adadelta', learning_rate=1.0)),
      c('adadelta_custom', opt('Adadelta', learning_rate=0.5, rho=0.95,
                               eps=1e-5, weight_decay=1e-3)),
      c('adadelta_lr_override', opt('Adadelta', rho=0.8),
        lr=dict(WARMUP_COSINE, base=2.0)),
      # Adagrad.
      c('adagrad', opt('Adagrad', learning_rate=0.1)),
      c('adagrad_custom', opt('Adagrad', learning_rate=0.3, eps=1e-3)),
      c('adagrad_bf16', opt('Adagrad', learning_rate=0.1), dtype='bfloat16'),
      # LAMB.
      c('lamb', opt('LAMB', learning_rate=0.01)),
      c('lamb_custom', opt('LAMB', learning_rate=0.01, beta1=0.8, beta2=0.99,
                           weight_decay=1e-2, eps=1e-8)),
      c('lamb_lr_override', opt('LAMB', weight_decay=1e-3), lr=RSQRT),
      c('lamb_zero_grads', opt('LAMB', learning_rate=0.01, weight_decay=1e-3),
        zero_init=['head/bias'], zero_grad=['conv/bias', 'head/bias']),
      # LARS.
      c('lars', opt('LARS', learning_rate=0.1)),
      c('lars_nesterov_wd', opt('LARS', learning_rate=0.1, beta=0.8,
                                weight_decay=1e-4, trust_coefficient=0.01,
                                eps=1e-9, nesterov=True)),
      c('lars_lr_override', opt('LARS', weight_decay=1e-3),
        lr=dict(WARMUP_COSINE, base=0.5)),
      c('lars_zero_grads', opt('LARS', learning_rate=0.1, weight_decay=1e-3),
        zero_init=['head/bias'], zero_grad=['conv/bias', 'head/bias']),
      # RMSProp.
      c('rmsprop', opt('RMSProp', learning_rate=0.01)),
      c('rmsprop_centered', opt('RMSProp', learning_rate=0.01, beta2=0.95,
                                eps=1e-6, centered=True)),
      c('rmsprop_lr_override', opt('RMSProp', centered=True), lr=RSQRT),
      c('rmsprop_bf16', opt('RMSProp', learning_rate=0.01), dtype='bfloat16'),
      # Adafactor.
      c('adafactor', opt('Adafactor', learning_rate=0.01), tree=FACTORED),
      c('adafactor_unfactored', opt('Adafactor', learning_rate=0.01,
                                    factored=False), tree=FACTORED),
      c('adafactor_momentum', opt('Adafactor', learning_rate=0.01, beta1=0.9),
        tree=FACTORED),
      c('adafactor_momentum_bf16_buffers',
        opt('Adafactor', learning_rate=0.01, beta1=0.8,
            dtype_momentum='bfloat16'), tree=FACTORED),
      c('adafactor_no_param_scale',
        opt('Adafactor', learning_rate=0.003,
            multiply_by_parameter_scale=False), tree=FACTORED),
      c('adafactor_no_clipping',
        opt('Adafactor', learning_rate=0.01, clipping_threshold=None),
        tree=FACTORED),
      c('adafactor_weight_decay',
        opt('Adafactor', learning_rate=0.01, clipping_threshold=2.0,
            weight_decay_rate=1e-3), tree=FACTORED),
      # A negative step_offset: the decay schedule as if 20 steps were done
      # (a positive one needs a restored step count >= the offset).
      c('adafactor_custom',
        opt('Adafactor', learning_rate=0.02, decay_rate=0.7, step_offset=-20,
            epsilon1=1e-20, epsilon2=1e-2, min_dim_size_to_factor=8),
        tree=SMALL_FACTOR),
      c('adafactor_3d', opt('Adafactor', learning_rate=0.01, beta1=0.9),
        tree=FACTORED_3D),
      c('adafactor_bf16', opt('Adafactor', learning_rate=0.01),
        tree=FACTORED, dtype='bfloat16'),
      c('adafactor_lr_override', opt('Adafactor'), tree=FACTORED,
        lr=dict(RSQRT, base=0.05)),
      # WeightNorm.
      c('weightnorm_momentum', weight_norm(opt('Momentum', learning_rate=0.05)),
        tree=WN_TREE),
      c('weightnorm_adam',
        weight_norm(opt('Adam', learning_rate=0.01), wn_decay=1e-3,
                    wn_eps=1e-6), tree=WN_TREE),
      c('weightnorm_rmsprop',
        weight_norm(opt('RMSProp', learning_rate=0.01, centered=True),
                    wn_decay=1e-4), tree=WN_TREE),
      c('weightnorm_sgd_lr_override', weight_norm(opt('GradientDescent')),
        tree=WN_TREE, lr=WARMUP_COSINE),
      # MultiOptimizer (leaves no traversal selects stay frozen) and focus.
      c('multi_momentum_sgd_frozen',
        multi((path_contains('kernel'), opt('Momentum', learning_rate=0.05)),
              (path_contains('bias'), opt('GradientDescent',
                                          learning_rate=0.1)))),
      c('multi_sgd_momentum_hyper_params_override',
        multi((path_contains('kernel'), opt('Momentum', nesterov=True)),
              (path_contains('bias', 'temperature'),
               opt('GradientDescent'))),
        lr=dict(WARMUP_COSINE, per_sub_scale=[1.0, 0.5])),
      c('multi_lars_adam',
        multi((path_contains('kernel'), opt('LARS', learning_rate=0.1)),
              (path_contains('bias', 'temperature'),
               opt('Adam', learning_rate=0.01)))),
      c('multi_adafactor_rmsprop_frozen',
        multi((path_contains('embed'), opt('Adafactor', learning_rate=0.01)),
              (path_contains('dense'), opt('RMSProp', learning_rate=0.01))),
        tree=FACTORED),
      c('multi_adam_lr_override',
        multi((path_contains('conv'), opt('Adam')),
              (path_contains('head'), opt('AdaBelief', weight_decay=1e-3))),
        lr=RSQRT),
      c('focus_momentum', opt('Momentum', learning_rate=0.05, nesterov=True),
        focus=path_contains('kernel')),
      c('focus_sgd_lr_override', opt('GradientDescent'),
        focus=path_contains('head'), lr=WARMUP_COSINE),
      c('focus_adam', opt('Adam', learning_rate=0.01),
        focus=path_contains('proj', 'temperature')),
  ]


CASES = _grid()
CASES_BY_NAME = {case['name']: case for case in CASES}
if len(CASES_BY_NAME) != len(CASES):
  raise ValueError('duplicate case names in the fidelity grid')


def select(names) -> list:
  """The named cases (all of them for no names); ValueError for unknowns."""
  unknown = [name for name in names if name not in CASES_BY_NAME]
  if unknown:
    raise ValueError(f'unknown case(s): {", ".join(unknown)}; known: '
                     f'{", ".join(CASES_BY_NAME)}')
  return [CASES_BY_NAME[name] for name in names] if names else list(CASES)


def algorithms(case) -> list:
  """Every algorithm class name a case uses (its own, inner, sub)."""
  found = []

  def visit(spec):
    found.append(spec['algo'])
    if 'inner' in spec:
      visit(spec['inner'])
    for _, sub in spec.get('parts', ()):
      visit(sub)

  visit(case['optimizer'])
  return found


# ---------------------------------------------------------------- builder
def build_traversal(traverse_module, spec):
  """A ModelParamTraversal from ``traverse_module`` (either API)."""
  if spec['kind'] != 'path_contains':
    raise ValueError(f'unknown traversal kind {spec["kind"]!r}')
  texts = tuple(spec['texts'])
  return traverse_module.ModelParamTraversal(
      lambda path, _: any(text in path for text in texts))


def _build(optim_module, traverse_module, spec):
  algo = spec['algo']
  if algo == 'WeightNorm':
    inner = _build(optim_module, traverse_module, spec['inner'])
    return optim_module.WeightNorm(inner, **spec['kwargs'])
  if algo == 'MultiOptimizer':
    return optim_module.MultiOptimizer(*[
        (build_traversal(traverse_module, trav),
         _build(optim_module, traverse_module, sub))
        for trav, sub in spec['parts']
    ])
  kwargs = dict(spec['kwargs'])
  if 'dtype_momentum' in kwargs:
    import jax.numpy as jnp
    kwargs['dtype_momentum'] = jnp.dtype(kwargs['dtype_momentum'])
  return getattr(optim_module, algo)(**kwargs)


def build_optimizer_def(optim_module, traverse_module, case):
  """The case's OptimizerDef, from ``flax.optim`` or ``legacy_optim``."""
  return _build(optim_module, traverse_module, case['optimizer'])


def build_focus(traverse_module, case):
  if case['focus'] is None:
    return None
  return build_traversal(traverse_module, case['focus'])


# ---------------------------------------------------------------- data
def seed(case) -> int:
  return zlib.crc32(case['name'].encode('utf-8'))


def leaf_paths(tree, prefix=''):
  """``[(path, shape)]`` in sorted-key order ('a/0/w' for lists)."""
  if isinstance(tree, dict):
    out = []
    for key in sorted(tree):
      out += leaf_paths(tree[key], f'{prefix}{key}/')
    return out
  if isinstance(tree, list):
    out = []
    for i, sub in enumerate(tree):
      out += leaf_paths(sub, f'{prefix}{i}/')
    return out
  return [(prefix[:-1], tuple(tree))]


def unflatten(tree, values: dict, prefix=''):
  """Rebuilds ``tree``'s containers with ``values[path]`` at the leaves."""
  if isinstance(tree, dict):
    return {k: unflatten(tree[k], values, f'{prefix}{k}/') for k in tree}
  if isinstance(tree, list):
    return [unflatten(sub, values, f'{prefix}{i}/')
            for i, sub in enumerate(tree)]
  return values[prefix[:-1]]


def initial_params(case) -> dict:
  """``{path: float32 array}``: the start point (before dtype conversion)."""
  rng = np.random.default_rng([seed(case), 0])
  zero_init = set(case['grads'].get('zero_init', ()))
  out = {}
  for path, shape in leaf_paths(case['tree']):
    value = rng.standard_normal(shape, dtype=np.float64) * 0.5
    out[path] = (np.zeros(shape) if path in zero_init else value).astype(
        np.float32)
  return out


def gradient_steps(case) -> dict:
  """``{path: float32 array of shape (STEPS, *shape)}``.

  Gradient = a fixed direction per leaf plus fresh noise each step, so
  momentum-like state accumulates; ``zero_grad`` leaves get an exactly zero
  gradient every third step (exercises the zero-norm branches of LARS/LAMB).
  """
  rng = np.random.default_rng([seed(case), 1])
  zero_grad = set(case['grads'].get('zero_grad', ()))
  out = {}
  for path, shape in leaf_paths(case['tree']):
    direction = rng.standard_normal(shape, dtype=np.float64) * 0.5
    noise = rng.standard_normal((STEPS,) + shape, dtype=np.float64)
    grads = direction[None] + noise
    if path in zero_grad:
      grads[::3] = 0.0
    out[path] = grads.astype(np.float32)
  return out


def learning_rates(case):
  """The per-step learning rates (float64), or None without an override."""
  spec = case['lr']
  if spec is None:
    return None
  t = np.arange(STEPS, dtype=np.float64)
  warmup = np.minimum(1.0, (t + 1) / spec['warmup'])
  if spec['kind'] == 'warmup_cosine':
    decay = 0.5 * (1.0 + np.cos(math.pi * t / STEPS))
  elif spec['kind'] == 'rsqrt':
    decay = np.sqrt(spec['warmup'] / np.maximum(t + 1, spec['warmup']))
  else:
    raise ValueError(f'unknown learning-rate kind {spec["kind"]!r}')
  return spec['base'] * warmup * decay


def lr_argument(case, step):
  """The learning rate for ``step`` as passed to the jitted step function.

  A float32 NumPy scalar (strongly typed, like a schedule's output), or a
  Python float (weakly typed under jit) when the spec says ``arg='python'``.
  """
  value = learning_rates(case)[step]
  if case['lr'].get('arg', 'float32') == 'python':
    return float(np.float32(value))
  return np.float32(value)


# ---------------------------------------------------------------- digests
class Digest:
  """sha256 over (path, dtype, shape, bytes) of the arrays fed in."""

  def __init__(self):
    self._hash = hashlib.sha256()

  def update(self, path: str, array) -> None:
    array = np.ascontiguousarray(array)
    self._hash.update(
        f'{path}|{array.dtype.name}|{array.shape}|'.encode('utf-8'))
    self._hash.update(array.tobytes())

  def hexdigest(self) -> str:
    return self._hash.hexdigest()
