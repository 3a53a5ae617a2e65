"""Multi-process data parallelism: 2 processes x 4 CPU devices on localhost.

Two worker processes (this file run as a script) join through
``jax.distributed.initialize`` with a loopback coordinator and train with the
shim, gradients averaged over all 8 devices of both processes (CPU
collectives: gloo). A third process runs the same code alone on 8 local
devices. Every variant must end with the same params in both workers and
match the single-process run:

* ``pmap``: ``optimizer.replicate()`` + ``jax.pmap`` (ReplicatedOptimizer);
* ``jit``: ``jax.jit`` over a global 8-device mesh, batch split across
  processes, optimizer replicated;
* ``zero1``: as ``jit`` with the optimizer state split over all 8 devices of
  both processes by ``compat.state_shardings(..., 'zero1')``.

Bounded: every process has a deadline, and all of them are killed on any
failure or timeout.
"""

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import _devices
import numpy as np
import pytest

N_PROCESSES = 2
LOCAL_DEVICES = 4
GLOBAL_DEVICES = N_PROCESSES * LOCAL_DEVICES
BATCH = 64  # Global examples per step.
STEPS = 3
DEADLINE = 300  # Seconds for all processes together.
VARIANTS = ('pmap-Momentum', 'pmap-Adam', 'jit-Momentum', 'jit-Adam',
            'zero1-Adam')


# ------------------------------------------------------------- worker side


def _data(step):
  rng = np.random.default_rng(10 + step)
  x = rng.standard_normal((BATCH, 6)).astype(np.float32)
  y = rng.standard_normal((BATCH, 16)).astype(np.float32)
  return x, y


def _make(algorithm):
  import legacy_optim as optim
  rng = np.random.default_rng(0)
  params = {'kernel': rng.standard_normal((6, 16)).astype(np.float32),
            'bias': rng.standard_normal(16).astype(np.float32)}
  opt_def = {'Momentum': lambda: optim.Momentum(0.1, nesterov=True),
             'Adam': lambda: optim.Adam(0.05, weight_decay=1e-3)}[algorithm]()
  return opt_def.create(params)


def _loss(params, x, y):
  import jax.numpy as jnp
  return jnp.mean((x @ params['kernel'] + params['bias'] - y) ** 2)


def _local_rows(process_id, num_processes):
  per_process = BATCH // num_processes
  return slice(process_id * per_process, (process_id + 1) * per_process)


def _train_pmap(algorithm, process_id, num_processes):
  import jax
  opt = _make(algorithm).replicate(axis_name='batch')
  step = jax.pmap(
      lambda o, x, y: o.apply_gradient(jax.grad(_loss)(o.target, x, y)),
      axis_name='batch')
  n_local = jax.local_device_count()
  for i in range(STEPS):
    x, y = _data(i)
    rows = _local_rows(process_id, num_processes)
    opt = step(opt, x[rows].reshape(n_local, -1, 6),
               y[rows].reshape(n_local, -1, 16))
  return jax.device_get(opt.unreplicate().target)


def _train_jit(algorithm, process_id, num_processes, zero1):
  import jax
  from jax.sharding import Mesh
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  import compat
  mesh = Mesh(np.array(jax.devices()), ('data',))
  opt = _make(algorithm)
  shardings = compat.state_shardings(opt, mesh,
                                     'zero1' if zero1 else 'replicated')
  # Every process holds the same host values; each places its own shards.
  opt = jax.tree_util.tree_map(
      lambda x, s: jax.make_array_from_callback(
          np.shape(x), s, lambda index, x=x: np.asarray(x)[index]),
      opt, shardings)
  batch_sharding = NamedSharding(mesh, P('data'))
  step = jax.jit(
      lambda o, x, y: o.apply_gradient(jax.grad(_loss)(o.target, x, y)),
      in_shardings=(shardings, batch_sharding, batch_sharding),
      out_shardings=shardings, donate_argnums=0)
  for i in range(STEPS):
    x, y = _data(i)
    rows = _local_rows(process_id, num_processes)
    opt = step(opt,
               jax.make_array_from_process_local_data(batch_sharding, x[rows]),
               jax.make_array_from_process_local_data(batch_sharding, y[rows]))
  if zero1:
    split = [leaf for leaf in jax.tree_util.tree_leaves(opt.state)
             if not leaf.sharding.is_fully_replicated]
    assert split, 'zero1 left every state leaf replicated'
    assert all(not leaf.is_fully_addressable for leaf in split) == (
        num_processes > 1)
  return jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_data(0)),
                                opt.target)


def worker(process_id, num_processes, port, out_path):
  import jax
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  if num_processes > 1:
    jax.distributed.initialize(
        coordinator_address=f'127.0.0.1:{port}', num_processes=num_processes,
        process_id=process_id, initialization_timeout=120)
  assert jax.device_count() == GLOBAL_DEVICES, jax.devices()
  assert jax.process_count() == num_processes
  results = {}
  for variant in VARIANTS:
    kind, algorithm = variant.split('-')
    if kind == 'pmap':
      params = _train_pmap(algorithm, process_id, num_processes)
    else:
      params = _train_jit(algorithm, process_id, num_processes,
                          zero1=kind == 'zero1')
    for name, value in params.items():
      results[f'{variant}/{name}'] = value
  np.savez(out_path, **results)
  if num_processes > 1:
    jax.distributed.shutdown()


# ------------------------------------------------------------- test side


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _spawn(process_id, num_processes, port, out_path, log_path):
  env = dict(os.environ)
  env['XLA_FLAGS'] = ('--xla_force_host_platform_device_count='
                      f'{GLOBAL_DEVICES // num_processes}')
  env['PYTHONWARNINGS'] = 'ignore'
  env.pop('JAX_PLATFORMS', None)
  log = open(log_path, 'w')
  proc = subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), str(process_id),
       str(num_processes), str(port), str(out_path)],
      env=env, stdout=log, stderr=subprocess.STDOUT)
  proc.log_path = log_path
  log.close()
  return proc


def _wait_all(procs, deadline):
  """Waits for every process; kills all of them on failure or timeout."""
  try:
    for proc in procs:
      proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    failed = [p for p in procs if p.returncode != 0]
  except subprocess.TimeoutExpired:
    failed = [p for p in procs if p.poll() is None]
    timed_out = True
  else:
    timed_out = False
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  if failed or timed_out:
    logs = '\n'.join(
        f'--- process {i} (exit {p.returncode}):\n'
        + open(p.log_path).read()[-4000:] for i, p in enumerate(procs))
    pytest.fail(('timed out' if timed_out else 'a process failed')
                + f'\n{logs}')


def _run_all():
  """Both workers and the single-process reference: their final params."""
  with tempfile.TemporaryDirectory(prefix='multiprocess') as tmp:
    tmp = pathlib.Path(tmp)
    deadline = time.monotonic() + DEADLINE
    port = _free_port()
    procs = [
        _spawn(i, N_PROCESSES, port, tmp / f'worker{i}.npz',
               tmp / f'worker{i}.log') for i in range(N_PROCESSES)]
    # The single-process reference runs alongside: same code, 8 local
    # devices.
    procs.append(_spawn(0, 1, 0, tmp / 'single.npz', tmp / 'single.log'))
    _wait_all(procs, deadline)
    workers = [dict(np.load(tmp / f'worker{i}.npz'))
               for i in range(N_PROCESSES)]
    return workers, dict(np.load(tmp / 'single.npz'))


# Started after collection, beside the main process (tests/_devices.py).
outcomes = _devices.Background(_run_all).fixture(__file__)


@pytest.mark.parametrize('variant', VARIANTS)
def test_two_processes_match_the_single_process_run(outcomes, variant):
  workers, single = outcomes
  keys = sorted(k for k in single if k.startswith(variant + '/'))
  assert keys, sorted(single)
  for key in keys:
    # Both workers hold the very same params.
    np.testing.assert_array_equal(workers[0][key], workers[1][key],
                                  err_msg=key)
    # Gradients summed across processes instead of inside one: the same up
    # to summation order.
    np.testing.assert_allclose(workers[0][key], single[key], rtol=1e-6,
                               atol=1e-6, err_msg=key)
    # And training moved the params at all.
    assert not np.allclose(single[key], _initial(variant, key), atol=1e-3)


def _initial(variant, key):
  import jax
  return jax.device_get(_make(variant.split('-')[1]).target)[key.split('/')[1]]


if __name__ == '__main__':
  worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
