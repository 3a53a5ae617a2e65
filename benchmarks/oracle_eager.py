"""Eager Adam steps with REAL flax 0.5.3 (run with the oracle venv's python).

  /opt/venvs/oracle/bin/python benchmarks/oracle_eager.py resnet50 small2000

Prints one JSON object: per workload, the first call's time (per-op
compilation included) and the median time of the following steps. Eager
only: flax 0.5.3 traces and compiles per leaf under jit, which takes tens of
minutes for thousands of leaves.
"""

import json
import os
import statistics
import sys
import time
import warnings

warnings.simplefilter('ignore')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from flax import optim
import jax
import jax.numpy as jnp
import workloads

LEARNING_RATE = 1e-3


def measure(name, steps):
  params = jax.tree_util.tree_map(jnp.asarray, workloads.make(name, 0))
  grads = jax.tree_util.tree_map(jnp.asarray, workloads.make(name, 1))
  opt = optim.Adam(LEARNING_RATE).create(params)
  jax.block_until_ready(opt)
  start = time.perf_counter()
  opt = opt.apply_gradient(grads)
  jax.block_until_ready(opt)
  first = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    opt = opt.apply_gradient(grads)
    jax.block_until_ready(opt)
    times.append(time.perf_counter() - start)
  return {'first_s': first, 'step_s': statistics.median(times),
          'steps': times, 'jax': jax.__version__}


def main(argv):
  steps = 3
  names = [a for a in argv if not a.startswith('--')]
  for a in argv:
    if a.startswith('--steps='):
      steps = int(a.split('=')[1])
  print(json.dumps({name: measure(name, steps) for name in names}))


if __name__ == '__main__':
  main(sys.argv[1:])
