"""``migrate`` against ``scan`` on one large module, side by side
(BENCHMARKS.md).

A module of plain functions with one flax.optim usage in its middle (the
import at the top), from 10 KB to 5 MB. Each command runs in a fresh
process as a user runs it (``python -m compat migrate --diff DIR``, ``python
-m compat scan DIR``), the two alternate their order between runs, and the
table gives medians of wall and CPU seconds (the child's own) and the ratio
the issue asks for: migrate's wall time over scan's on the same module. A
cost that grows faster than the file shows as a ratio that grows with the
size. ``migrate --diff`` must print the rewrite (else the run fails: a
migrate that gave up early would look fast).

  python benchmarks/migrate_speed.py --runs 3
  python benchmarks/migrate_speed.py --sizes 10K,100K,400K --timeout 600 \\
      --root path/to/an/older/checkout    # the curve of another commit
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = '10K,30K,100K,400K,1M,5M'

_HEAD = '''\
"""A large module with one flax.optim usage."""
from flax import optim
import jax
import jax.numpy as jnp

'''
_CLASS = '''
class Helper{c}:
  """Helpers {c}."""
'''
_METHOD = '''
  def method_{i}(self, x, y=2):
    """Method {i}."""
    z = jnp.tanh(x * y + {i})
    if z.sum() > 3:
      return jax.nn.relu(z)
    return z - 1
'''
_METHODS_PER_CLASS = 60  # about 500 top-level statements in 5 MB
_USAGE = '''

def make_optimizer(params):
  return optim.Adam(learning_rate=0.1).create(params)

'''


def _class(number: int) -> str:
  first = number * _METHODS_PER_CLASS
  return _CLASS.format(c=number) + ''.join(
      _METHOD.format(i=i) for i in range(first, first + _METHODS_PER_CLASS))


def module(size: int) -> str:
  """About ``size`` bytes: classes of methods, the usage after half."""
  parts, length = [_HEAD], len(_HEAD)
  while length < size:
    if length >= size // 2 and _USAGE not in parts:
      parts.append(_USAGE)
    parts.append(_class(len(parts)))
    length += len(parts[-1])
  if _USAGE not in parts:
    parts.append(_USAGE)
  return ''.join(parts)


def _bytes(text: str) -> int:
  units = {'K': 1000, 'M': 1000 * 1000}
  return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else (
      int(text))


def _run(command: str, directory: str, root: str, timeout: float) -> dict:
  """Wall and CPU seconds of one command in a fresh process (None: it
  ran past ``timeout``)."""
  argv = [sys.executable, '-m', 'compat', command] + (
      ['--diff'] if command == 'migrate' else []) + [directory]
  env = dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS='cpu')
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  try:
    # cwd: ``-m`` puts the current directory first on sys.path
    out = subprocess.run(argv, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False, cwd=root)
  except subprocess.TimeoutExpired:
    return {'wall': None, 'cpu': None}
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if command == 'migrate' and '+  return train_state.TrainState' not in (
      out.stdout):
    raise SystemExit(f'migrate did not rewrite the module:\n{out.stderr}')
  return {'wall': wall, 'cpu': after.ru_utime + after.ru_stime -
                                before.ru_utime - before.ru_stime}


def measure(sizes, runs: int, root: str, timeout: float) -> dict:
  """``{size: {command: [one dict per run]}}``."""
  results = {}
  for size in sizes:
    results[size] = {'migrate': [], 'scan': []}
    with tempfile.TemporaryDirectory() as directory:
      with open(os.path.join(directory, 'big.py'), 'w') as f:
        f.write(module(size))
      for run in range(runs):
        order = ('migrate', 'scan') if run % 2 == 0 else ('scan', 'migrate')
        for command in order:
          results[size][command].append(_run(command, directory, root,
                                             timeout))
        if results[size]['migrate'][-1]['wall'] is None:
          break  # past the limit: once is enough
    print(_row(size, results[size], timeout), flush=True)
  return results


def _median(rows, key):
  values = [r[key] for r in rows]
  return None if None in values else statistics.median(values)


def _row(size: int, result: dict, timeout: float) -> str:
  migrate, scan = (_median(result[c], 'wall') for c in ('migrate', 'scan'))
  migrate_cpu, scan_cpu = (_median(result[c], 'cpu')
                           for c in ('migrate', 'scan'))
  shown = (lambda s: f'> {timeout:.0f}' if s is None else f'{s:.2f}')
  ratio = (f'> {timeout / scan:.0f}x' if migrate is None else
           f'{migrate / scan:.1f}x')
  return (f'{size / 1000:>8,.0f} | {shown(migrate):>9} | {shown(scan):>6} | '
          f'{shown(migrate_cpu):>9} | {shown(scan_cpu):>7} | {ratio:>7}')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--sizes', default=SIZES,
                      help=f'module sizes in bytes, K or M (default {SIZES})')
  parser.add_argument('--runs', type=int, default=3)
  parser.add_argument('--root', default=ROOT,
                      help='the checkout whose compat runs (default: this)')
  parser.add_argument('--timeout', type=float, default=900,
                      help='seconds a command may run (then "> limit")')
  parser.add_argument('--json', metavar='FILE', help='write raw figures')
  args = parser.parse_args(argv)
  print(f'{args.root}: {args.runs} run(s), load average '
        f'{os.getloadavg()[0]:.1f}')
  print('size (KB) | migrate s | scan s | migrate CPU s | scan CPU s | '
        'migrate / scan (wall)')
  print('--------- | --------- | ------ | ------------- | ---------- | '
        '---------------------')
  results = measure([_bytes(s) for s in args.sizes.split(',')], args.runs,
                    args.root, args.timeout)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
