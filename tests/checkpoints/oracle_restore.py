"""Checks, with REAL flax 0.5.3, legacy files written by ``--to legacy``.

Run in the oracle venv (test_checkpoints.py does it in a subprocess)::

  /opt/venvs/oracle/bin/python tests/checkpoints/oracle_restore.py \
      CASE=FILE [CASE=FILE ...]

For each file, flax 0.5.3 builds the case's optimizer (spec and params layout
from manifest.json) and restores the file with ``serialization.from_bytes``,
exactly as an old training script resuming from it would. flax 0.5.3 checks
nothing while restoring, so this script then checks what it got:

* the restored state dict has the template's structure, shapes and dtypes;
* re-serializing the restored optimizer gives the file back byte for byte;
* one more jitted training step runs and yields finite params.

Prints one JSON object: {case: [problems...]} (empty lists when all is well).
"""

import json
import pathlib
import sys
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import jax
import numpy as np

jax.interpreters.xla.DeviceArray = jax.Array  # flax 0.5.3 on jax 0.4.13.

from flax import core
from flax import optim
from flax import serialization
import jax.numpy as jnp
import tree_paths

from compat.checkpoints import _spec

warnings.simplefilter('ignore')



def _signature(tree):
  """path -> (dtype, shape) of a state dict, None/{} leaves included."""
  flat = {}

  def visit(node, path):
    if isinstance(node, dict) and node:
      for key, value in node.items():
        visit(value, path + (key,))
    elif node is None or isinstance(node, dict):
      flat['/'.join(path)] = repr(node)
    else:
      flat['/'.join(path)] = (np.asarray(node).dtype.name,
                              list(np.shape(node)))

  visit(tree, ())
  return flat


def check(case, data: bytes) -> list:
  layout = case['layout']
  params = tree_paths.nest({path: jnp.zeros(shape, jnp.dtype(dtype))
                  for path, (shape, dtype) in layout.items()})
  if case['frozen']:
    params = core.freeze(params)
  template = _spec.parse(case['spec']).build(optim).create(params)
  problems = []
  try:
    restored = serialization.from_bytes(template, data)
  except Exception as e:
    return [f'from_bytes failed: {type(e).__name__}: {e}']
  expected = _signature(serialization.to_state_dict(template))
  found = _signature(serialization.to_state_dict(restored))
  for path in sorted(set(expected) | set(found)):
    if expected.get(path) != found.get(path):
      problems.append(f'{path}: template {expected.get(path)}, restored '
                      f'{found.get(path)}')
  if serialization.to_bytes(restored) != data:
    problems.append('re-serializing the restored optimizer changes the bytes')
  grads = jax.tree_util.tree_map(jnp.ones_like, restored.target)
  stepped = jax.jit(lambda opt, g: opt.apply_gradient(g))(restored, grads)
  if not all(bool(jnp.all(jnp.isfinite(p)))
             for p in jax.tree_util.tree_leaves(stepped.target)):
    problems.append('a step from the restored state gives non-finite params')
  if int(stepped.state.step) != int(restored.state.step) + 1:
    problems.append('the step counter does not advance')
  return problems


def main(argv) -> int:
  manifest = json.loads((HERE / 'manifest.json').read_text())['cases']
  results = {}
  for arg in argv:
    name, _, path = arg.partition('=')
    results[name] = check(manifest[name], pathlib.Path(path).read_bytes())
  print(json.dumps(results))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
