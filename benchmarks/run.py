"""Benchmarks: the shim vs native Optax vs stock Optax vs real flax 0.5.3.

  /opt/venvs/dev/bin/python benchmarks/run.py [--quick] [--json out.json]

Prints one table; every ratio compares figures measured in the same run.
Algorithm: Adam (learning rate 1e-3), float32, on three workloads
(``workloads.py``). Variants of the jitted step (each ``donate_argnums=0``):

* shim: ``jax.jit(lambda opt, g: opt.apply_gradient(g))`` on a legacy
  ``Optimizer``;
* native: the raw Optax loop with the same transform,
  ``tx = optim.Adam(lr).to_optax()``;
* stock: the raw Optax loop with ``optax.adam(lr)`` (the nearest stock alias;
  it rounds differently, see adam.py).

Measured: the jitted step's time over interleaved rounds (ratios are the
median of per-round ratios: the variants of a round ran seconds apart, under
the same load); trace + lower + compile time (a fresh function each repeat,
repeats interleaved likewise); XLA's temp buffer size;
peak RSS of a donated training loop (a child process per variant); eager
``apply_gradient`` (no jit: the shim's cached compiled step, its op-by-op
path, and real flax 0.5.3 in its own venv, a child process); the 64M-param
Adam step's achieved bandwidth against this machine's copy bandwidth.
"""

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

warnings.simplefilter('ignore')
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jax
import jax.numpy as jnp
import numpy as np
import optax
import table
import workloads

import legacy_optim as optim

LEARNING_RATE = 1e-3
ORACLE_PYTHON = os.environ.get('ORACLE_PYTHON', '/opt/venvs/oracle/bin/python')
# --------------------------------------------------------------- variants


def _raw_step(tx):
  def step(state, grads):
    params, opt_state = state
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
  return step


def _shim_step(opt, grads):
  return opt.apply_gradient(grads)


def build(variant, params):
  """``(state, step)``: the initial state (owning ``params``) and the step."""
  if variant == 'shim':
    return optim.Adam(LEARNING_RATE).create(params), _shim_step
  tx = (optim.Adam(LEARNING_RATE).to_optax() if variant == 'native'
        else optax.adam(LEARNING_RATE))
  return (params, tx.init(params)), _raw_step(tx)


VARIANTS = ('shim', 'native', 'stock')


def _on_device(tree):
  return jax.tree_util.tree_map(jnp.asarray, tree)


def _fresh(tree):
  """A copy with its own buffers (donation must not delete shared ones)."""
  return jax.tree_util.tree_map(lambda x: x.copy(), tree)


def _block(tree):
  return jax.block_until_ready(tree)


def warmed_up_step(workload, variant, warmup_steps):
  """``(state, jitted_step, grads)`` after ``warmup_steps`` donated steps.

  For the one-variant-per-process tools (``instructions.py``,
  ``process_spread.py``): compiled, warmed up, and older garbage frozen so
  that the collector's later work is the measured steps' own.
  """
  params = _on_device(workloads.make(workload, 0))
  grads = _on_device(workloads.make(workload, 1))
  state, step = build(variant, params)
  jitted = jax.jit(step, donate_argnums=0)
  for _ in range(warmup_steps):
    state = jitted(state, grads)
  _block(state)
  gc.collect()
  gc.freeze()
  return state, jitted, grads



def rotated(names, index):
  """``names`` rotated by ``index``, so that no variant always runs first."""
  shift = index % len(names)
  return list(names[shift:]) + list(names[:shift])


def print_spread(values, unit, scale=1.0):
  """One line per variant: median, range and spread over its processes.

  ``values`` maps each variant to its per-process figures (in order; the last
  variant is the reference). Other variants also get their ratio to the
  reference: of the medians and of the minima.
  """
  reference = list(values)[-1]
  for variant, figures in values.items():
    line = (f'{variant:<8} median {statistics.median(figures) / scale:8.2f} '
            f'{unit} (range {min(figures) / scale:.2f}-'
            f'{max(figures) / scale:.2f}: x{max(figures) / min(figures):.2f})')
    if variant != reference:
      ref = values[reference]
      line += (f'  {variant}/{reference}: median '
               f'{statistics.median(figures) / statistics.median(ref):.3f}, '
               f'of minima {min(figures) / min(ref):.3f}')
    print(line)

@contextlib.contextmanager
def _timing():
  """Times the block with the garbage collector paused, as ``timeit`` does.

  A collection that lands in one variant's round would charge it with the
  garbage of all of them (the fresh copies, the other variants' steps).
  """
  gc.collect()
  gc.disable()
  start = time.perf_counter()
  elapsed = []
  try:
    yield lambda: elapsed[0]
  finally:
    elapsed.append(time.perf_counter() - start)
    gc.enable()


# ------------------------------------------------------------ jitted step


def _compile(step, state, grads):
  """A fresh jit of ``step`` compiled for ``(state, grads)``; its time."""
  jitted = jax.jit(lambda s, g: step(s, g), donate_argnums=0)
  start = time.perf_counter()
  compiled = jitted.lower(state, grads).compile()
  return jitted, compiled, time.perf_counter() - start


def _copy_loop(n):
  """``x + 1`` in place over ``n`` float32 (donated): reads + writes 8n B."""
  add_one = jax.jit(lambda x: x + 1.0, donate_argnums=0)
  box = [_block(add_one(jnp.ones(n, jnp.float32)))]

  def run(steps):
    for _ in range(steps):
      box[0] = add_one(box[0])
    _block(box[0])
  return run


def jitted_steps(params, grads, rounds, steps, compile_repeats,
                 copy_probe=False):
  """Interleaved rounds of the jitted variants (and a copy loop)."""
  states, fns = {}, {}
  for variant in VARIANTS:
    states[variant], fns[variant] = build(variant, _fresh(params))
  compile_s = {v: [] for v in VARIANTS}
  jitted, temp_bytes = {}, {}
  for _ in range(compile_repeats):
    for variant in VARIANTS:  # Interleaved, so load changes hit all alike.
      jitted[variant], compiled, seconds = _compile(
          fns[variant], states[variant], grads)
      compile_s[variant].append(seconds)
      analysis = compiled.memory_analysis()
      temp_bytes[variant] = getattr(analysis, 'temp_size_in_bytes', None)

  def runner(variant):
    def run(n):
      state = states[variant]
      for _ in range(n):
        state = jitted[variant](state, grads)
      states[variant] = _block(state)
    return run

  runners = {v: runner(v) for v in VARIANTS}
  if copy_probe:
    runners['copy'] = _copy_loop(
        sum(x.size for x in jax.tree_util.tree_leaves(params)))
  for run in runners.values():  # Warm-up (and the jit cache lookup).
    run(2)
  per_step = {v: [] for v in runners}
  names = list(runners)
  for r in range(rounds):
    order = rotated(names, r)
    # Fresh buffers every round, allocated in this round's order: where the
    # kernel places large arrays (huge pages, alignment) moves a memory-bound
    # step by several percent, and must not favour one variant throughout.
    for variant in order:
      if variant in states:
        states[variant] = _block(_fresh(states[variant]))
    for variant in order:
      with _timing() as seconds:
        runners[variant](steps)
      per_step[variant].append(seconds() / steps)
  states.clear()
  return {
      'step_s': {v: statistics.median(t) for v, t in per_step.items()},
      'step_rounds_s': per_step,
      'compile_s': {v: statistics.median(t) for v, t in compile_s.items()},
      'compile_repeats_s': compile_s,
      'temp_bytes': temp_bytes,
  }


# ------------------------------------------------------------ eager steps


def eager_steps(name, params, grads, steps):
  """The shim without jit: cached compiled step, and the op-by-op path."""
  opt = optim.Adam(LEARNING_RATE).create(_fresh(params))
  _block(opt)
  start = time.perf_counter()
  opt = opt.apply_gradient(grads)
  _block(opt)
  first = time.perf_counter() - start
  opt = _block(opt.apply_gradient(grads))  # Warm-up.
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    opt = opt.apply_gradient(grads)
    _block(opt)
    times.append(time.perf_counter() - start)
  # What flax.optim did: dispatch op by op (the rule without the cache).
  opt_def = opt.optimizer_def
  op_by_op = []
  for _ in range(2):  # The first call compiles each primitive once.
    start = time.perf_counter()
    _block(opt_def.apply_gradient(opt_def.hyper_params, opt.target,
                                  opt.state, grads))
    op_by_op.append(time.perf_counter() - start)
  return {'first_s': first, 'step_s': statistics.median(times),
          'op_by_op_s': op_by_op[-1]}


def oracle_eager(names, steps):
  if not os.path.exists(ORACLE_PYTHON):
    return None
  out = subprocess.run(
      [ORACLE_PYTHON, os.path.join(HERE, 'oracle_eager.py'), *names,
       f'--steps={steps}'], capture_output=True, text=True, timeout=3600,
      check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------ memory


def _rss_mb(field):
  """VmRSS (now) or VmHWM (peak) of this process, in MB.

  Not getrusage's ru_maxrss: that survives fork + exec, so a child would
  report its parent's peak.
  """
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(field + ':'):
        return int(line.split()[1]) / 1024
  raise RuntimeError(f'{field} not in /proc/self/status')


def memory_probe(name, variant, steps=3):
  """Child process: peak RSS of a donated training loop."""
  _block(jnp.zeros(()))  # Start the backend before the baseline.
  baseline = _rss_mb('VmRSS')
  key = jax.random.PRNGKey(0)
  shapes = workloads.SHAPES[name]()
  params = jax.tree_util.tree_map(
      lambda s: jax.random.normal(key, s, jnp.float32),
      shapes, is_leaf=lambda x: isinstance(x, tuple))
  grads = jax.tree_util.tree_map(lambda p: p * 0.5, params)
  state, step = build(variant, params)
  del params
  jitted = jax.jit(step, donate_argnums=0)
  for _ in range(steps):
    state = jitted(state, grads)
  _block(state)
  print(json.dumps({'baseline_mb': baseline, 'peak_mb': _rss_mb('VmHWM')}))


def peak_memory(name):
  results = {}
  for variant in ('shim', 'native'):
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), '--memory-probe', name,
         variant], capture_output=True, text=True, timeout=1800, check=True)
    results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
  return results


# ------------------------------------------------------------ bandwidth


def numpy_copy_bandwidth(n=64 * 2**20, repeats=7):
  """Median GB/s (bytes read + written) of NumPy's single-threaded copy."""
  src = np.ones(n, np.float32)
  dst = np.empty_like(src)
  seconds = statistics.median(
      _timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
  return {'numpy_gbs': 2 * n * 4 / seconds / 1e9}


def _timed(fn):
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true',
                      help='fewer rounds/steps (a smoke run, not figures)')
  parser.add_argument('--workloads', nargs='*', default=list(
      workloads.WORKLOADS), choices=workloads.WORKLOADS)
  parser.add_argument('--memory-workloads', nargs='*',
                      default=['resnet50', 'big64m'],
                      choices=workloads.WORKLOADS)
  parser.add_argument('--skip-oracle', action='store_true')
  parser.add_argument('--json', help='also write all raw figures here')
  parser.add_argument('--memory-probe', nargs=2, metavar=('WORKLOAD',
                                                          'VARIANT'),
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.memory_probe:
    memory_probe(*args.memory_probe)
    return 0

  rounds, eager_n = (3, 2) if args.quick else (31, 5)
  config = {
      'workloads': args.workloads,
      'jax': jax.__version__, 'optax': optax.__version__,
      'python': platform.python_version(), 'cpus': os.cpu_count(),
      'load_before': os.getloadavg(), 'started': time.strftime('%F %T'),
  }
  print(f'# jax {jax.__version__}, optax {optax.__version__}, '
        f'{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at start',
        flush=True)
  results = {}
  if not args.skip_oracle:
    print('# flax 0.5.3 eager (oracle venv)...', flush=True)
    results['oracle'] = oracle_eager(args.workloads, 2 if args.quick else 3)
  results['bandwidth'] = numpy_copy_bandwidth()
  for name in args.workloads:
    print(f'# {name}...', flush=True)
    params, grads = (_on_device(workloads.make(name, seed)) for seed in (0, 1))
    steps = {'resnet50': 5, 'small2000': 10, 'big64m': 3}[name]
    results[name] = {
        'jit': jitted_steps(
            params, grads, rounds, steps,
            compile_repeats=(1 if args.quick else
                             3 if name == 'small2000' else 7),
            copy_probe=name == 'big64m'),
        'eager': eager_steps(name, params, grads, eager_n),
    }
    del params, grads
    if name in args.memory_workloads:
      results[name]['memory'] = peak_memory(name)
  config['load_after'] = os.getloadavg()
  print(f'# load {config["load_after"][0]:.2f} at end', flush=True)
  table.report(results, config)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'config': config, 'results': results}, f, indent=1,
                default=float)
  return 0


if __name__ == '__main__':
  sys.exit(main())
