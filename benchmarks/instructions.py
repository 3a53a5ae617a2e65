"""Instructions per jitted step under callgrind: shim vs native Optax.

  python benchmarks/instructions.py [--workload small2000] [--steps 5]
                                    [--runs 2] [--variants shim native]

Wall-clock ratios of the jitted step scatter by +-20% between processes on a
shared 2-core machine, even for two processes running the *same* compiled
program (see BENCHMARKS.md), which hides a 2% target. Instruction counts do
not depend on the machine's load: each run starts the step in its own process
under ``valgrind --tool=callgrind`` with instrumentation off, warms it up
(compile, two steps), then counts only the ``--steps`` measured steps
(``callgrind_control`` switches counting on and dumps when they are done).

What remains between runs of one variant is the process's own state: glibc
malloc's work depends on the heap's history (about 15% of a 2,000-leaf step
is malloc/free), so give ``--runs`` >= 2 and read the spread.
Compiled executables are shared through a persistent compilation cache in a
temporary folder, so only the first run of a variant compiles (slowly: under
valgrind). Needs valgrind (``callgrind_control``); about 2-4 minutes per run
for ``small2000``.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(workload, variant, steps, marker):
  """Runs inside valgrind: warm up, wait for the counter, run ``steps``."""
  sys.path.insert(0, HERE)
  import jax
  import run

  state, jitted, grads = run.warmed_up_step(workload, variant, 2)
  open(marker + '.ready', 'w').close()
  # Spin (not sleep): callgrind acts on control commands while code runs.
  while not os.path.exists(marker + '.go'):
    pass
  for _ in range(steps):
    state = jitted(state, grads)
    jax.block_until_ready(state)
  open(marker + '.done', 'w').close()
  while not os.path.exists(marker + '.exit'):
    time.sleep(0.05)


def _wait_for(path, process, what):
  while not os.path.exists(path):
    if process.poll() is not None:
      raise RuntimeError(f'the callgrind child exited ({process.returncode}) '
                         f'before {what}; see its log next to {path}')
    time.sleep(0.2)


def _control(*args):
  subprocess.run(['callgrind_control', *args], check=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _dumped_instructions(out_file):
  """Total ``Ir`` of the dump written by ``callgrind_control -d``."""
  dumps = sorted(p for p in os.listdir(os.path.dirname(out_file))
                 if p.startswith(os.path.basename(out_file) + '.'))
  if not dumps:
    raise RuntimeError(f'callgrind wrote no dump next to {out_file}')
  with open(os.path.join(os.path.dirname(out_file), dumps[-1])) as f:
    for line in f:
      if line.startswith('totals:') or line.startswith('summary:'):
        return int(line.split()[1])
  raise RuntimeError(f'no totals in callgrind dump {dumps[-1]}')


def count(workload, variant, steps, work_dir, index):
  """Instructions of ``steps`` jitted steps of ``variant``, fresh process."""
  marker = os.path.join(work_dir, f'{variant}-{index}')
  out_file = marker + '.callgrind'
  env = dict(os.environ,
             JAX_COMPILATION_CACHE_DIR=os.path.join(work_dir, 'jax-cache'),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
             PYTHONHASHSEED='0')
  with open(marker + '.log', 'w') as log:
    process = subprocess.Popen(
        ['valgrind', '--tool=callgrind', '--instr-atstart=no',
         f'--callgrind-out-file={out_file}', sys.executable,
         os.path.abspath(__file__), '--child', workload, variant, str(steps),
         marker], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
      _wait_for(marker + '.ready', process, 'warming up')
      _control('-i', 'on', str(process.pid))
      _control('-z', str(process.pid))
      open(marker + '.go', 'w').close()
      _wait_for(marker + '.done', process, 'finishing its steps')
      _control('-d', str(process.pid))
      _control('-i', 'off', str(process.pid))
      open(marker + '.exit', 'w').close()
      process.wait(timeout=600)
    finally:
      if process.poll() is None:
        process.kill()
        process.wait()
  return _dumped_instructions(out_file) / steps


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workload', default='small2000')
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--runs', type=int, default=2)
  parser.add_argument('--variants', nargs='+', default=['shim', 'native'])
  parser.add_argument('--child', nargs=4, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    workload, variant, steps, marker = args.child
    _child(workload, variant, int(steps), marker)
    return
  if shutil.which('callgrind_control') is None:
    sys.exit('instructions.py needs valgrind (callgrind_control on PATH).')
  sys.path.insert(0, HERE)
  import run
  per_step = {v: [] for v in args.variants}
  with tempfile.TemporaryDirectory(prefix='callgrind-') as work_dir:
    for index in range(args.runs):
      for variant in run.rotated(args.variants, index):
        per_step[variant].append(
            count(args.workload, variant, args.steps, work_dir, index))
        print(f'run {index + 1}: {variant:<8} '
              f'{per_step[variant][-1] / 1e6:8.2f} M instructions/step',
              flush=True)
  print(f'\n{args.workload}, {args.steps} steps per run, {args.runs} runs: '
        'instructions per step')
  run.print_spread(per_step, 'M', scale=1e6)

if __name__ == '__main__':
  main()
