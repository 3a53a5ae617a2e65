"""How much a jitted step's time moves between fresh processes.

  python benchmarks/process_spread.py [--workload small2000] [--runs 4]
                                      [--steps 100] [--variants shim native]

Starts ``--runs`` processes per variant (orders rotated), each timing
``--steps`` donated jitted steps after a warm-up, and prints every process's
median step time, then the spread within each variant next to the ratio
between variants. A ratio smaller than the spread of one variant against
itself is not a measurement of the shim. Compiled executables come from a
persistent compilation cache in a temporary folder (the first process of a
variant compiles).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(workload, variant, steps):
  sys.path.insert(0, HERE)
  import jax
  import run

  state, jitted, grads = run.warmed_up_step(workload, variant, 3)
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    state = jitted(state, grads)
    jax.block_until_ready(state)
    times.append(time.perf_counter() - start)
  print(statistics.median(times) * 1e3)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workload', default='small2000')
  parser.add_argument('--runs', type=int, default=4)
  parser.add_argument('--steps', type=int, default=100)
  parser.add_argument('--variants', nargs='+', default=['shim', 'native'])
  parser.add_argument('--child', nargs=3, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    _child(args.child[0], args.child[1], int(args.child[2]))
    return
  sys.path.insert(0, HERE)
  import run
  medians = {v: [] for v in args.variants}
  with tempfile.TemporaryDirectory(prefix='jax-cache-') as cache:
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0')
    for index in range(args.runs):
      for variant in run.rotated(args.variants, index):
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), '--child',
             args.workload, variant, str(args.steps)],
            env=env, check=True, capture_output=True, text=True)
        medians[variant].append(float(out.stdout.split()[-1]))
        print(f'process {index + 1}: {variant:<8} '
              f'{medians[variant][-1]:8.2f} ms/step', flush=True)
  print(f'\n{args.workload}: median step time of each process')
  run.print_spread(medians, 'ms')

if __name__ == '__main__':
  main()
