"""Overflow and half-precision edge cases: a few steps on explicit values.

The 100-step grid of ``cases.py`` feeds random, well-scaled gradients and
refuses cases whose params stop being finite, so it never reaches the edges of
a floating-point format. These cases do: every algorithm gets two steps on a
small tree whose leaves each hold one kind of edge value, in float32, float16
and bfloat16 at once. Like ``cases.py`` this module needs only Python and
NumPy, so real flax 0.5.3 (``generate_edges.py``) and ``legacy_optim``
(``tests/test_overflow_edges.py``) build the same inputs from it.

Leaves (one per edge kind, per dtype, each of shape (2, 3)):

  huge        gradients whose square overflows the dtype (float32 3e38,
              float16 300, bfloat16 1e20), beside ordinary ones;
  max         the largest finite gradient of the dtype (and its negative);
  tiny        subnormal gradients (their squares underflow to 0);
  zero        an all-zero gradient (zero-norm branches of LAMB/LARS);
  big_params  ordinary gradients on params near the dtype's maximum (weight
              decay, parameter norms and scales overflow).

Step 1 feeds the edge gradients, step 2 the same ordinary gradient everywhere
(what the state left by step 1 does next). Each case runs jitted, as training
code does, and eagerly (flax 0.5.3 dispatched op by op).
"""

import numpy as np

from golden import cases

STEPS = 2
MODES = ('jit', 'eager')
SHAPE = (2, 3)
DTYPES = ('float32', 'float16', 'bfloat16')
KINDS = ('huge', 'max', 'tiny', 'zero', 'big_params')

# Per dtype: a gradient whose square overflows, the largest finite value and
# a subnormal. Written as Python floats; each is exactly representable (or
# rounds to the intended value) in its dtype.
_EDGE_VALUES = {
    'float32': {'huge': 3e38, 'max': 3.4028234663852886e38, 'tiny': 1e-40},
    'float16': {'huge': 300.0, 'max': 65504.0, 'tiny': 1e-7},
    'bfloat16': {'huge': 1e20, 'max': 3.3895313892515355e38, 'tiny': 1e-40},
}
_ORDINARY_PARAMS = ((1.0, 2.0, -1.5), (0.5, -0.25, 3.0))
_ORDINARY_GRADS = ((0.1, -0.2, 0.3), (-0.05, 0.4, -0.6))


def _edge_leaf(kind: str, dtype: str):
  """``(params, step-1 gradient)`` of one leaf, as float64 nested lists."""
  edge = _EDGE_VALUES[dtype]
  if kind in ('huge', 'max'):
    value = edge[kind]
    return _ORDINARY_PARAMS, ((value, 0.1, -value), (0.3, value, -0.2))
  if kind == 'tiny':
    tiny = edge['tiny']
    return _ORDINARY_PARAMS, ((tiny, -tiny, 0.1), (tiny, 0.0, -tiny))
  if kind == 'zero':
    return _ORDINARY_PARAMS, ((0.0,) * 3,) * 2
  if kind == 'big_params':
    big = edge['max'] / 2
    return ((big, -big, 1.0), (big, 0.5, -2.0)), _ORDINARY_GRADS
  raise ValueError(f'unknown edge kind {kind!r}')


def leaves():
  """``[(path, dtype, params, grads)]``: grads of shape (STEPS, *SHAPE)."""
  out = []
  for dtype in DTYPES:
    for kind in KINDS:
      params, first = _edge_leaf(kind, dtype)
      grads = np.stack([np.asarray(first, np.float64),
                        np.asarray(_ORDINARY_GRADS, np.float64)])
      out.append((f'{dtype}/{kind}', dtype, np.asarray(params, np.float64),
                  grads))
  return out


def tree():
  """The leaf layout ``{dtype: {kind: SHAPE}}`` (for ``cases.unflatten``)."""
  return {dtype: {kind: SHAPE for kind in KINDS} for dtype in DTYPES}


def _edge_case(name, optimizer):
  return {'name': name, 'optimizer': optimizer, 'focus': None}


def _edge_grid():
  opt, c = cases.opt, _edge_case
  return [
      c('sgd', opt('GradientDescent', learning_rate=0.01)),
      c('momentum', opt('Momentum', learning_rate=0.01)),
      c('momentum_nesterov_wd', opt('Momentum', learning_rate=0.01, beta=0.8,
                                    weight_decay=1e-3, nesterov=True)),
      c('adam', opt('Adam', learning_rate=0.01)),
      c('adam_wd', opt('Adam', learning_rate=0.01, weight_decay=1e-3)),
      c('adabelief', opt('AdaBelief', learning_rate=0.01)),
      c('adadelta', opt('Adadelta', learning_rate=1.0, weight_decay=1e-3)),
      c('adafactor', opt('Adafactor', learning_rate=0.01, beta1=0.9,
                         min_dim_size_to_factor=2)),
      c('adafactor_unfactored',
        opt('Adafactor', learning_rate=0.01, factored=False,
            weight_decay_rate=1e-3)),
      c('adagrad', opt('Adagrad', learning_rate=0.01)),
      c('lamb', opt('LAMB', learning_rate=0.01)),
      c('lamb_wd', opt('LAMB', learning_rate=0.01, weight_decay=1e-3)),
      c('lars', opt('LARS', learning_rate=0.1, weight_decay=1e-3)),
      c('rmsprop', opt('RMSProp', learning_rate=0.01)),
      c('rmsprop_centered', opt('RMSProp', learning_rate=0.01,
                                centered=True)),
      c('weightnorm_adam', cases.weight_norm(opt('Adam', learning_rate=0.01))),
  ]


EDGE_CASES = _edge_grid()
EDGE_CASES_BY_NAME = {case['name']: case for case in EDGE_CASES}
if len(EDGE_CASES_BY_NAME) != len(EDGE_CASES):
  raise ValueError('duplicate case names in the edge grid')


def as_dtype(values, dtype: str) -> np.ndarray:
  """float64 values in ``dtype``, rounded once (NumPy's cast; ml_dtypes for
  bfloat16), the same in every environment."""
  if dtype == 'bfloat16':
    import ml_dtypes
    return np.asarray(values, np.float64).astype(ml_dtypes.bfloat16)
  return np.asarray(values, np.float64).astype(dtype)


def entry_name(case, mode: str) -> str:
  """The golden-data key of ``case`` run in ``mode`` ('jit' or 'eager')."""
  return f'{case["name"]}.{mode}'


def entry_spec(case, mode: str) -> dict:
  """What an entry's spec digest covers: the case, the mode, the inputs."""
  return dict(case, mode=mode, steps=STEPS,
              leaves=[(path, dtype, params.tolist(), grads.tolist())
                      for path, dtype, params, grads in leaves()])
