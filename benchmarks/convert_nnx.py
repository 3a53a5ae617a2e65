"""``convert_checkpoint(..., to='nnx')`` against ``to='train_state'``.

Writes a legacy Adam(1e-3) checkpoint of a workload (default ``small10k``:
10,000 leaves of 16 x 16), then times ``compat.convert_checkpoint`` to each
target in a fresh process per figure (imports excluded), the targets
alternating which goes first, and prints the medians and their ratio
(issue 16's target: nnx <= 1.3 x train_state).

  python benchmarks/convert_nnx.py --workload small10k --runs 2
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import workloads

TARGETS = ('train_state', 'nnx')

_CHILD = r'''
import sys, time, warnings
warnings.simplefilter('ignore')
import compat
src, dst, to = sys.argv[1:]
start = time.perf_counter()
compat.convert_checkpoint(src, dst, to=to, optimizer='Adam(1e-3)',
                          progress=False)
print(time.perf_counter() - start)
'''

_WRITE = r'''
import sys, warnings
warnings.simplefilter('ignore')
import numpy as np
from flax import serialization
import legacy_optim
tree = dict(np.load(sys.argv[1]))
opt = legacy_optim.Adam(1e-3).create(tree)
open(sys.argv[2], 'wb').write(serialization.to_bytes(opt))
'''


def _run(code, *args) -> str:
  out = subprocess.run([sys.executable, '-c', code, *map(str, args)],
                       check=True, capture_output=True, text=True)
  return out.stdout.strip()


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='small10k',
                      choices=sorted(workloads.SHAPES))
  parser.add_argument('--runs', type=int, default=2)
  parser.add_argument('--json', help='write the raw figures here')
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    params = workloads.make(args.workload, seed=0)
    if any(isinstance(v, dict) for v in params.values()):
      raise SystemExit('Needs a flat workload (the small* ones).')
    np.savez(tmp / 'params.npz', **params)
    src = tmp / 'legacy.msgpack'
    _run(_WRITE, tmp / 'params.npz', src)
    times = {to: [] for to in TARGETS}
    for run in range(args.runs):
      for to in (TARGETS if run % 2 == 0 else TARGETS[::-1]):
        dst = tmp / f'{to}_{run}'
        times[to].append(float(_run(_CHILD, src, dst, to)))
        print(f'run {run} {to}: {times[to][-1]:.2f} s', flush=True)
  medians = {to: statistics.median(t) for to, t in times.items()}
  print(f'{args.workload} (load {os.getloadavg()[0]:.1f}): ' + ', '.join(
      f'{to} {medians[to]:.2f} s' for to in TARGETS) +
        f'; nnx / train_state {medians["nnx"] / medians["train_state"]:.2f}')
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(
        {'workload': args.workload, 'times': times}, indent=1))


if __name__ == '__main__':
  main()
