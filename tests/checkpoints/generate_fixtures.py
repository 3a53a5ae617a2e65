"""Writes the legacy checkpoint fixtures with REAL flax 0.5.3 (oracle venv).

Run: ``tox -e checkpoint-fixtures`` or
``/opt/venvs/oracle/bin/python tests/checkpoints/generate_fixtures.py``.

For every case in ``CASES`` this creates an optimizer with ``flax.optim``,
applies ``STEPS`` updates on fixed numpy gradients, and writes

* ``<case>/checkpoint_<STEPS>``: ``serialization.to_bytes`` of the optimizer
  (or of a container holding it), exactly what
  ``flax.training.checkpoints.save_checkpoint(dir, target, STEPS)`` writes
  (that module does not import in this venv, so the file is written here
  under the same name);
* ``<case>/continuation.msgpack``: the legacy continuation, i.e. the next
  ``CONTINUE`` gradients, the params after each further step and the
  container's final state dict (every step runs under ``jax.jit``, as a
  training loop does);

and ``manifest.json`` describing every case (optimizer spec, params layout,
container), which the tests use to build templates.

Gradients and params come from numpy (seeded), never from a forward pass, so
both venvs see identical inputs. Optimizers are built from the same spec
strings the tests and ``python -m compat convert --optimizer`` use
(``compat.checkpoints._spec``, which imports neither jax nor flax).
"""

import json
import os
import pathlib
import sys
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import jax
import numpy as np

jax.interpreters.xla.DeviceArray = jax.Array  # flax 0.5.3 on jax 0.4.13.
warnings.simplefilter('ignore')

from flax import core
from flax import optim
from flax import serialization
from flax import struct
from flax.optim import dynamic_scale
import jax.numpy as jnp
import tree_paths

from compat.checkpoints import _spec

warnings.simplefilter('ignore')  # flax.optim re-enables its warnings.

STEPS = 3
CONTINUE = 3

# Param layouts: path -> (shape, dtype). Small, but with a >=2-D leaf (for
# factoring and weight norm), a 1-D leaf and a leaf MultiOptimizer leaves out.
NESTED = {
    'dense/bias': ((4,), 'float32'),
    'dense/kernel': ((3, 4), 'float32'),
    'embed/embedding': ((5, 3), 'float32'),
}
MIXED_DTYPES = {
    'a': ((3,), 'bfloat16'),
    'b': ((), 'float32'),
    'c': ((2, 2), 'float16'),
}

# name: (spec, layout, container, frozen target)
CASES = {
    'sgd': ('GradientDescent(learning_rate=0.1)', NESTED, 'optimizer', False),
    'sgd_mixed_dtypes': ('GradientDescent(learning_rate=0.1)', MIXED_DTYPES,
                         'optimizer', False),
    'momentum': ('Momentum(learning_rate=0.1, beta=0.9, weight_decay=0.001, '
                 'nesterov=True)', NESTED, 'optimizer', True),
    'adam': ('Adam(learning_rate=0.01, beta1=0.9, beta2=0.99, eps=1e-08, '
             'weight_decay=0.001)', NESTED, 'optimizer', True),
    'adabelief': ('AdaBelief(learning_rate=0.01, weight_decay=0.001)', NESTED,
                  'optimizer', False),
    'adadelta': ('Adadelta(learning_rate=1.0, rho=0.9, eps=1e-06, '
                 'weight_decay=0.001)', NESTED, 'optimizer', False),
    'adafactor_factored': ('Adafactor(learning_rate=0.01, '
                           'min_dim_size_to_factor=2)', NESTED, 'optimizer',
                           False),
    'adafactor_unfactored': ('Adafactor(learning_rate=0.01, factored=False, '
                             'beta1=0.9)', NESTED, 'optimizer', False),
    'adagrad': ('Adagrad(learning_rate=0.1, eps=1e-08)', NESTED, 'optimizer',
                False),
    'lamb': ('LAMB(learning_rate=0.01, weight_decay=0.001)', NESTED,
             'optimizer', False),
    'lars': ('LARS(learning_rate=0.1, beta=0.9, weight_decay=0.0005)', NESTED,
             'optimizer', False),
    'rmsprop_centered': ('RMSProp(learning_rate=0.01, beta2=0.9, '
                         'centered=True)', NESTED, 'optimizer', False),
    'rmsprop': ('RMSProp(learning_rate=0.01, beta2=0.9)', NESTED, 'optimizer',
                False),
    'weight_norm_adam': ('WeightNorm(Adam(learning_rate=0.01), '
                         'wn_decay=0.001)', NESTED, 'optimizer', False),
    'multi': ("MultiOptimizer(('kernel', Momentum(learning_rate=0.1, "
              "beta=0.9)), ('bias', Adam(learning_rate=0.01)))", NESTED,
              'optimizer', True),
    'tuple_ema': ('Momentum(learning_rate=0.1, beta=0.9)', NESTED, 'tuple_ema',
                  False),
    'dict_container': ('Adam(learning_rate=0.01)', NESTED, 'dict', False),
    'train_state': ('Adam(learning_rate=0.01)', NESTED, 'train_state', False),
}


@struct.dataclass
class TrainState:
  """The TrainState of flax 0.5.3-era examples (ImageNet, WMT)."""
  step: int
  optimizer: optim.Optimizer
  dynamic_scale: dynamic_scale.DynamicScale



def random_tree(layout, rng):
  return tree_paths.nest({
      path: jnp.asarray(rng.standard_normal(shape).astype(np.float32),
                        dtype=jnp.dtype(dtype))
      for path, (shape, dtype) in layout.items()
  })


def wrap(kind, optimizer, ema):
  if kind == 'optimizer':
    return optimizer
  if kind == 'tuple_ema':
    return (optimizer, ema)
  if kind == 'dict':
    return {'optimizer': optimizer, 'epoch': 7}
  if kind == 'train_state':
    scale = dynamic_scale.DynamicScale(
        fin_steps=jnp.asarray(5, jnp.int32),
        scale=jnp.asarray(1024.0, jnp.float32))
    return TrainState(step=STEPS, optimizer=optimizer, dynamic_scale=scale)
  raise ValueError(kind)


def generate_case(name, spec, layout, container, frozen):
  rng = np.random.RandomState(sorted(CASES).index(name))
  params = random_tree(layout, rng)
  if frozen:
    params = core.freeze(params)
  grads = [random_tree(layout, rng) for _ in range(STEPS + CONTINUE)]
  if frozen:
    grads = [core.freeze(g) for g in grads]
  optimizer = _spec.parse(spec).build(optim).create(params)
  # A training loop steps under jit, as the fidelity suite's golden data
  # does (XLA fuses p - lr * g; op-by-op eager steps round differently).
  step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  for g in grads[:STEPS]:
    optimizer = step(optimizer, g)
  ema = jax.tree_util.tree_map(lambda p: p * 0.5, optimizer.target)
  case_dir = HERE / name
  case_dir.mkdir(exist_ok=True)
  checkpoint = serialization.to_bytes(wrap(container, optimizer, ema))
  (case_dir / f'checkpoint_{STEPS}').write_bytes(checkpoint)

  targets = []
  for g in grads[STEPS:]:
    optimizer = step(optimizer, g)
    targets.append(optimizer.target)
  continuation = {
      'grads': {str(i): g for i, g in enumerate(grads[STEPS:])},
      'targets': {str(i): t for i, t in enumerate(targets)},
      'final': wrap(container, optimizer, ema),
  }
  (case_dir / 'continuation.msgpack').write_bytes(
      serialization.to_bytes(continuation))
  return {
      'spec': spec,
      'layout': {path: [list(shape), dtype]
                 for path, (shape, dtype) in layout.items()},
      'container': container,
      'frozen': frozen,
      'step': STEPS,
      'continue_steps': CONTINUE,
      'checkpoint': f'{name}/checkpoint_{STEPS}',
      'bytes': len(checkpoint),
  }


def main():
  import flax
  if flax.__version__ != '0.5.3':
    raise SystemExit(f'Run this with flax 0.5.3 (the oracle venv), not '
                     f'{flax.__version__}.')
  only = set(sys.argv[1:])
  manifest_path = HERE / 'manifest.json'
  manifest = (json.loads(manifest_path.read_text())
              if manifest_path.exists() else {'cases': {}})
  manifest['generator'] = {'flax': flax.__version__, 'jax': jax.__version__,
                           'numpy': np.__version__}
  for name, case in CASES.items():
    if only and name not in only:
      continue
    manifest['cases'][name] = generate_case(name, *case)
    print(f'{name}: {manifest["cases"][name]["bytes"]} bytes')
  manifest['cases'] = dict(sorted(manifest['cases'].items()))
  tmp = manifest_path.with_suffix('.json.tmp')
  tmp.write_text(json.dumps(manifest, indent=1) + '\n')
  os.replace(tmp, manifest_path)


if __name__ == '__main__':
  main()
