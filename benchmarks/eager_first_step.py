"""The first eager Adam step: the shim against real flax 0.5.3, side by side.

  python benchmarks/eager_first_step.py [--runs 3] [--workloads ...] [--json F]

Each figure comes from a fresh process (``--child``) that imports jax and the
optimizer package, builds the workload's params and gradients
(``workloads.py``), then times ``Adam(1e-3).create(params)`` plus the first
``apply_gradient(grads)`` without jit (the first step as a notebook sees
it), then the calls after it. It reports its peak RSS (``getrusage``'s
``ru_maxrss``, read in the child; the parent imports no jax, so the child's
figure is its own), its RSS after the step (also after ``malloc_trim``:
without the freed memory glibc keeps), its RSS before building the params
(imports and backend only), the bytes of params plus optimizer state, and
the XLA compilations counted by ``jax.monitoring``. The shim runs with
this interpreter, flax 0.5.3 with ``$ORACLE_PYTHON`` (jax 0.4.13). Runs
alternate which variant goes first; the table gives medians over runs and the
load average around them.
"""

import argparse
import ctypes
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE_PYTHON = os.environ.get('ORACLE_PYTHON', '/opt/venvs/oracle/bin/python')
WORKLOADS = ('small1k', 'small4k', 'small10k', 'resnet50')
LATER_CALLS = 6  # Timed calls after the first.


def _rss_mb(field='VmRSS'):
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(field + ':'):
        return int(line.split()[1]) / 1024
  return float('nan')


def _peak_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(name, variant):
  """One measurement in this (fresh) process; prints one JSON line."""
  warnings.simplefilter('ignore')
  sys.path.insert(0, HERE)
  import jax
  import jax.numpy as jnp
  import workloads
  if variant == 'flax':
    from flax import optim
  else:
    import legacy_optim as optim

  compiles = [0]

  def count(event, duration, **kwargs):
    del duration, kwargs
    if event == '/jax/core/compile/backend_compile_duration':
      compiles[0] += 1

  try:
    jax.monitoring.register_event_duration_secs_listener(count)
  except AttributeError:
    compiles[0] = None
  jax.block_until_ready(jnp.zeros(()))
  baseline_mb = _rss_mb()

  def on_device(tree):
    # Leaf by leaf, so that the NumPy tree is freed as it is copied.
    for key, value in tree.items():
      tree[key] = on_device(value) if isinstance(value, dict) else (
          jnp.asarray(value))
    return tree

  params = on_device(workloads.make(name, 0))
  grads = on_device(workloads.make(name, 1))
  jax.block_until_ready((params, grads))
  gc.collect()
  compiles_before = compiles[0]

  start = time.perf_counter()
  opt = optim.Adam(1e-3).create(params)
  opt = opt.apply_gradient(grads)
  jax.block_until_ready(opt)
  first_s = time.perf_counter() - start
  first_compiles = (None if compiles_before is None
                    else compiles[0] - compiles_before)
  peak_mb = _peak_mb()
  gc.collect()
  after_mb = _rss_mb()
  # What of that is freed memory the C allocator kept (not the process's).
  try:
    ctypes.CDLL('libc.so.6').malloc_trim(0)
    after_trim_mb = _rss_mb()
  except (OSError, AttributeError):
    after_trim_mb = None
  opt_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(opt))

  later_s = []
  for _ in range(LATER_CALLS):
    start = time.perf_counter()
    opt = opt.apply_gradient(grads)
    jax.block_until_ready(opt)
    later_s.append(time.perf_counter() - start)

  # A second, equal definition: what it compiles (create + 2 steps).
  before = compiles[0]
  start = time.perf_counter()
  other = optim.Adam(1e-3).create(opt.target)
  other = other.apply_gradient(grads).apply_gradient(grads)
  jax.block_until_ready(other)
  second_def_s = time.perf_counter() - start
  print(json.dumps({
      'first_s': first_s, 'later_s': later_s, 'peak_mb': peak_mb,
      'after_mb': after_mb, 'after_trim_mb': after_trim_mb,
      'baseline_mb': baseline_mb,
      'opt_mb': opt_bytes / 2**20, 'first_compiles': first_compiles,
      'second_def_compiles': (None if before is None
                              else compiles[0] - before),
      'second_def_s': second_def_s, 'jax': jax.__version__,
  }))


def run_child(name, variant, timeout):
  python = ORACLE_PYTHON if variant == 'flax' else sys.executable
  out = subprocess.run(
      [python, os.path.abspath(__file__), '--child', name, variant],
      capture_output=True, text=True, timeout=timeout, check=False)
  if out.returncode != 0:
    return {'error': out.stderr.strip().splitlines()[-1:]}
  return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs, field):
  values = [r[field] for r in runs if r.get(field) is not None]
  return statistics.median(values) if values else float('nan')


def report(results, config):
  print(f'# loads {config["loads"]}')
  header = ('workload  | variant | 1st step s (create+apply) | peak RSS MB '
            '(above imports) | RSS after MB (trimmed) | params+state MB | '
            'call 2 / 3 / median 4-7 ms | compiles 1st / 2nd equal Adam')
  print(header)
  print('-' * len(header))
  for name, by_variant in results.items():
    for variant, runs in by_variant.items():
      ok = [r for r in runs if 'error' not in r]
      if not ok:
        print(f'{name:<9} | {variant:<7} | failed: {runs[0]["error"]}')
        continue
      later = list(zip(*[r['later_s'] for r in ok]))
      tail = statistics.median(
          statistics.median(r['later_s'][2:]) for r in ok)
      firsts = ', '.join(f'{r["first_s"]:.2f}' for r in ok)
      print(f'{name:<9} | {variant:<7} | {_median(ok, "first_s"):.2f} '
            f'({firsts}) | '
            f'{_median(ok, "peak_mb"):.0f} '
            f'(+{_median(ok, "peak_mb") - _median(ok, "baseline_mb"):.0f}) | '
            f'{_median(ok, "after_mb"):.0f} '
            f'({_median(ok, "after_trim_mb"):.0f}) | '
            f'{_median(ok, "opt_mb"):.1f} | '
            f'{statistics.median(later[0]) * 1e3:.1f} / '
            f'{statistics.median(later[1]) * 1e3:.1f} / {tail * 1e3:.1f} | '
            f'{_median(ok, "first_compiles")} / '
            f'{_median(ok, "second_def_compiles")}')
    shim, flax = by_variant.get('shim'), by_variant.get('flax')
    if shim and flax and all('error' not in r for r in shim + flax):
      def tail(runs):
        return statistics.median(
            statistics.median(r['later_s'][2:]) for r in runs)

      def above_imports(runs):
        return _median(runs, 'peak_mb') - _median(runs, 'baseline_mb')

      def call_3(runs):
        return statistics.median(r['later_s'][1] for r in runs)

      first = _median(shim, 'first_s') / _median(flax, 'first_s')
      peak = _median(shim, 'peak_mb') / _median(flax, 'peak_mb')
      print(f'{name:<9} | ratios  | shim/flax: 1st step {first:.2f}, '
            f'peak RSS {peak:.2f} (above imports '
            f'{above_imports(shim) / above_imports(flax):.2f}), '
            f'flax/shim steady {tail(flax) / tail(shim):.1f}x, call 3 '
            f'{call_3(flax) / call_3(shim):.1f}x; '
            f'RSS after <= 1.5 x params+state + 300: '
            f'{_median(shim, "after_mb"):.0f} <= '
            f'{1.5 * _median(shim, "opt_mb") + 300:.0f}')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', type=int, default=3)
  parser.add_argument('--workloads', nargs='*', default=list(WORKLOADS))
  parser.add_argument('--variants', nargs='*', default=['shim', 'flax'])
  parser.add_argument('--timeout', type=int, default=900)
  parser.add_argument('--json', help='also write the raw figures here')
  parser.add_argument('--child', nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    child(*args.child)
    return 0
  loads = [os.getloadavg()[0]]
  results = {}
  for name in args.workloads:
    results[name] = {v: [] for v in args.variants}
    for run in range(args.runs):
      shift = run % len(args.variants)
      for variant in args.variants[shift:] + args.variants[:shift]:
        results[name][variant].append(run_child(name, variant, args.timeout))
        print(f'# {name} {variant} run {run + 1}: '
              f'{json.dumps(results[name][variant][-1])[:160]}', flush=True)
      loads.append(os.getloadavg()[0])
  config = {'loads': [round(x, 2) for x in loads],
            'started': time.strftime('%F %T'), 'cpus': os.cpu_count()}
  report(results, config)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'config': config, 'results': results}, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
