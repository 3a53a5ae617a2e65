"""Writes Orbax checkpoints with flax 0.5.3's OWN optim classes on today's flax.

Old training code that kept flax 0.5.3's ``flax/optim`` sources (vendored, or
loaded like this) and moved to today's jax/flax saves its Optimizer with
``flax.training.checkpoints.save_checkpoint``, whose default backend is now
Orbax. These are such checkpoints: flax 0.5.3's ``optim`` modules are loaded
from the oracle environment's site-packages under a private name
(``tests/golden/generate_floor.py``'s loader: nothing of them is copied into
this repository), a few steps are taken from fixed params and gradients, and
the Optimizer is saved through the default (Orbax) backend.

Each case directory holds ``checkpoint_<step>`` (the Orbax checkpoint) and
``expected.msgpack``: the same Optimizer's state dict, as flax 0.5.3's own
serialization registers it, written with ``flax.serialization.to_bytes``. The
tests read the expected values from that file, never from the code under
test.

Run with today's environment::

  python tests/checkpoints/orbax_053/generate.py [--python ORACLE_PYTHON]

(the oracle interpreter defaults to ``$ORACLE_PYTHON``).
"""

import argparse
import os
import pathlib
import shutil
import sys
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, for golden.*

from flax import serialization
from flax.training import checkpoints
from golden import generate_floor
import jax
import jax.numpy as jnp
import numpy as np

STEPS = 3


def _adam_on_kernels(optim):
  kernels = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
  return optim.MultiOptimizer((kernels, optim.Adam(learning_rate=0.1)))


# Case name -> the optimizer definition, built from a flax.optim-like module
# (flax 0.5.3's own here, ``legacy_optim`` in the tests).
CASES = {
    'adam': lambda optim: optim.Adam(learning_rate=0.1, weight_decay=0.01),
    'momentum': lambda optim: optim.Momentum(learning_rate=0.1, beta=0.9),
    'rmsprop': lambda optim: optim.RMSProp(learning_rate=0.1),  # mg is None
    'sgd': lambda optim: optim.GradientDescent(learning_rate=0.1),  # no state
    'multi_adam_on_kernels': _adam_on_kernels,  # bias state is None
}


def params():
  """Fixed, small params (two leaves)."""
  return {'dense': {
      'kernel': jnp.asarray(np.linspace(-1.0, 1.0, 6).reshape(2, 3),
                            jnp.float32),
      'bias': jnp.asarray([0.5, -0.25, 0.125], jnp.float32)}}


def grads(step: int):
  """Fixed gradients for step ``step`` (0-based)."""
  return jax.tree_util.tree_map(
      lambda p: jnp.cos(p * (step + 1.0)).astype(p.dtype), params())


def trained(optim, name: str):
  """The case's Optimizer after STEPS steps."""
  optimizer = CASES[name](optim).create(params())
  for step in range(STEPS):
    optimizer = optimizer.apply_gradient(grads(step))
  return optimizer


def main(argv) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--python', default=os.environ.get('ORACLE_PYTHON'),
                      help='the oracle interpreter (flax 0.5.3)')
  args = parser.parse_args(argv)
  if not args.python:
    parser.error('pass --python or set ORACLE_PYTHON')
  optim = generate_floor.load_legacy_optim(
      generate_floor.oracle_site_packages(args.python))
  # flax 0.5.3's optim/__init__ installs an 'always' filter; keep quiet.
  warnings.simplefilter('ignore', DeprecationWarning)
  for name in CASES:
    optimizer = trained(optim, name)
    directory = HERE / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    checkpoints.save_checkpoint(str(directory), optimizer, STEPS)
    (directory / 'expected.msgpack').write_bytes(
        serialization.to_bytes(optimizer))
    print(f'{name}: {type(optimizer).__module__}.'
          f'{type(optimizer).__qualname__} -> {directory}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
