"""``flax-optim-compat check``: old path = new path, for every optimizer.

Trains a small built-in model (a two-layer linen MLP on synthetic regression
data) with every configuration of ``_configs``: ``2K`` steps through the
legacy ``Optimizer``, and ``K`` legacy steps followed by ``K`` steps on each
new path: a raw Optax loop (``to_optax``; with ``--eager`` also without jit,
against the legacy rule run op by op), ``TrainState.apply_gradients`` and
``nnx.Optimizer.update`` on a ``bridge.ToNNX`` model. The ``round trip``
column converts the legacy state to Optax and back. Prints one table saying,
per configuration and path, whether the result is bit-identical to the legacy
run (or the largest difference); exits non-zero on any mismatch or error.

Gradients come from one shared jitted function of the params, so any
difference is the optimizer path's.
"""

import argparse
from concurrent import futures
import dataclasses
import sys
import time
from typing import Any, Callable, Optional, Sequence
import warnings

from flax import linen as nn
from flax import nnx
from flax.nnx import bridge
import jax
import jax.numpy as jnp
import numpy as np
import optax

from compat.bridges import nnx as nnx_bridge
from compat.bridges import optax_bridge
from compat.bridges import train_state as train_state_bridge
from compat.cli import _configs
from legacy_optim import deprecation

PATHS = ('round trip', 'optax', 'optax (eager)', 'TrainState', 'nnx.Optimizer')
# The eager loop costs as much as all the others (every op dispatched and
# compiled on its own), so the command runs it only on request.
DEFAULT_PATHS = tuple(p for p in PATHS if p != 'optax (eager)')

_BATCH, _IN, _HIDDEN, _OUT = 16, 4, 8, 3


class MLP(nn.Module):
  """The built-in model: Dense -> tanh -> Dense.

  Its initializers are zeros (no random op to compile): the starting params
  come from NumPy, see ``Problem``.
  """

  @nn.compact
  def __call__(self, x):
    zeros = nn.initializers.zeros
    hidden = jnp.tanh(nn.Dense(_HIDDEN, kernel_init=zeros)(x))  # Dense_0
    return nn.Dense(_OUT, kernel_init=zeros)(hidden)  # Dense_1


def _loss(params, x, y):
  return jnp.mean((MLP().apply({'params': params}, x) - y)**2)


_grad_fn = jax.jit(jax.grad(_loss))


class Problem:
  """The model's initial params and one batch per step: ``y = sin(x @ W)``.

  Params and data come from NumPy (the same on every JAX version, and no
  eager JAX op has to be compiled to make them).
  """

  def __init__(self, num_steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    teacher = rng.normal(size=(_IN, _OUT))
    inputs = [rng.normal(size=(_BATCH, _IN)) for _ in range(num_steps)]
    self.batches = [(x.astype(np.float32), np.sin(x @ teacher).astype(
        np.float32)) for x in inputs]
    self.params = jax.tree_util.tree_map(
        lambda s: jnp.asarray(rng.normal(size=s.shape).astype(s.dtype) / (
            np.sqrt(s.shape[0]) if len(s.shape) == 2 else 10)),
        jax.eval_shape(MLP().init, jax.random.key(0), inputs[0])['params'])

  def grads(self, params, step: int):
    return _grad_fn(params, *self.batches[step])

  def nnx_model(self) -> nnx.Module:
    """A ``bridge.ToNNX`` model (zeros until ``to_nnx_optimizer`` fills it)."""
    model = bridge.ToNNX(MLP(), rngs=nnx.Rngs(0))
    bridge.lazy_init(model, self.batches[0][0])
    return model


# ------------------------------------------------------------------ paths


def legacy_update(config, optimizer, grads):
  """One legacy step as users wrote it: ``Optimizer.apply_gradient``."""
  return optimizer.apply_gradient(
      grads, **config.legacy_overrides(optimizer.state.step))


legacy_step = jax.jit(legacy_update, static_argnums=0)


def legacy_rule_update(config, optimizer, grads):
  """One legacy step op by op: ``OptimizerDef.apply_gradient``.

  ``Optimizer.apply_gradient`` outside jit runs one compiled step (see
  ``legacy_optim._eager``), which rounds like the jitted columns (XLA fuses
  ``p - lr * g`` into one multiply-add); the eager column compares op by op
  with op by op instead.
  """
  opt_def = optimizer.optimizer_def
  hyper_params = opt_def.update_hyper_params(
      **config.legacy_overrides(optimizer.state.step))
  target, state = opt_def.apply_gradient(hyper_params, optimizer.target,
                                         optimizer.state, grads)
  return optimizer.replace(target=target, state=state)


def run_legacy(config, problem, optimizer, start, stop, jit=True):
  """Legacy steps ``start..stop-1``; returns the ``Optimizer``."""
  step = legacy_step if jit else legacy_rule_update
  for i in range(start, stop):
    optimizer = step(config, optimizer, problem.grads(optimizer.target, i))
  return optimizer


def optax_update(tx, params, opt_state, grads):
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state


optax_step = jax.jit(optax_update, static_argnums=0)


def run_optax(config, problem, optimizer, start, stop, jit=True):
  """Converts with ``to_optax``, runs a raw Optax loop, converts back."""
  tx, opt_state = optax_bridge.to_optax(optimizer, **config.optax_overrides())
  step = optax_step if jit else optax_update
  params = optimizer.target
  for i in range(start, stop):
    params, opt_state = step(tx, params, opt_state, problem.grads(params, i))
  return optax_bridge.from_optax(optimizer.optimizer_def, params, opt_state)


_train_state_step = jax.jit(lambda state, grads: state.apply_gradients(
    grads=grads))


def run_train_state(config, problem, optimizer, start, stop):
  """``TrainState.apply_gradients`` steps; returns the final TrainState."""
  state = train_state_bridge.to_train_state(
      optimizer, MLP().apply, overrides=config.optax_overrides())
  for i in range(start, stop):
    state = _train_state_step(state, problem.grads(state.params, i))
  return state


@nnx.jit
def nnx_step(model, nnx_opt, grads):
  grad_state = jax.tree_util.tree_map(lambda v: v, nnx.state(model, nnx.Param))
  nnx.replace_by_pure_dict(grad_state, grads)
  nnx_opt.update(model, grad_state)


def run_nnx(config, problem, optimizer, start, stop):
  """``nnx.Optimizer.update`` steps on a ToNNX model; returns its params."""
  model = problem.nnx_model()
  nnx_opt = nnx_bridge.to_nnx_optimizer(optimizer, model,
                                    **config.optax_overrides())
  for i in range(start, stop):
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    nnx_step(model, nnx_opt, problem.grads(params, i))
  return nnx.to_pure_dict(nnx.state(model, nnx.Param))


# ------------------------------------------------------------ one config


@dataclasses.dataclass
class Comparison:
  """What a path produced next to what the legacy path produced."""
  expected: Any
  actual: Any = None
  error: Optional[BaseException] = None


def run_config(config, problem: Problem, k: int,
               paths: Sequence[str] = PATHS) -> dict[str, Comparison]:
  """Runs ``config`` on ``paths``; exceptions are recorded, not raised.

  The legacy runs (``k`` steps, then ``k`` more: the reference) are shared by
  the paths that need them and run only when one does.
  """
  legacy_runs = {}

  def legacy(jit=True):
    """(legacy optimizer after k steps, after 2k steps)."""
    if jit not in legacy_runs:
      start = config.create(problem.params)
      mid = run_legacy(config, problem, start, 0, k, jit)
      legacy_runs[jit] = mid, run_legacy(config, problem, mid, k, 2 * k, jit)
    return legacy_runs[jit]

  def round_trip():
    mid, _ = legacy()
    _, opt_state = optax_bridge.to_optax(mid, **config.optax_overrides())
    return Comparison(mid, optax_bridge.from_optax(mid.optimizer_def,
                                                   mid.target, opt_state))

  def optax_loop(jit):
    mid, reference = legacy(jit)
    return Comparison(reference, run_optax(config, problem, mid, k, 2 * k,
                                           jit))

  def train_state():
    mid, reference = legacy()
    state = run_train_state(config, problem, mid, k, 2 * k)
    back = optax_bridge.from_optax(reference.optimizer_def, state.params,
                             state.opt_state)
    return Comparison((reference, reference.state.step), (back, state.step))

  def nnx_optimizer():
    mid, reference = legacy()
    return Comparison(reference.target, run_nnx(config, problem, mid, k,
                                                2 * k))

  runners: dict[str, Callable[[], Comparison]] = {
      'round trip': round_trip,
      'optax': lambda: optax_loop(jit=True),
      'optax (eager)': lambda: optax_loop(jit=False),
      'TrainState': train_state,
      'nnx.Optimizer': nnx_optimizer,
  }
  results = {}
  for path in paths:
    try:
      results[path] = runners[path]()
    except Exception as e:
      results[path] = Comparison(None, error=e)
  return results


def max_difference(expected, actual) -> Optional[float]:
  """0.0 when bit-identical, the largest absolute difference otherwise.

  Returns None when the trees do not even have the same structure or shapes.
  """
  expected_structure: Any = jax.tree_util.tree_structure(expected)
  if expected_structure != jax.tree_util.tree_structure(actual):
    return None
  worst = 0.0
  for a, b in zip(jax.tree_util.tree_leaves(expected),
                  jax.tree_util.tree_leaves(actual)):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
      return None
    if a.dtype == b.dtype and a.tobytes() == b.tobytes():
      continue
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    worst = max(worst, float(np.nanmax(diff)) if diff.size else 0.0,
                np.finfo(np.float64).tiny)
  return worst


# -------------------------------------------------------------------- CLI


class _Progress:
  """A one-line progress bar on stderr (plain lines when not a terminal)."""

  def __init__(self, total: int, enabled: bool, stream=None):
    self.total, self.done = total, 0
    self.stream = sys.stderr if stream is None else stream
    self.enabled = enabled
    self.tty = enabled and self.stream.isatty()
    self._draw('')

  def _draw(self, label: str) -> None:
    if not self.tty:
      return
    width = 30
    filled = width * self.done // max(self.total, 1)
    self.stream.write(f'\r[{"#" * filled}{"." * (width - filled)}] '
                      f'{self.done}/{self.total} {label:<32.32}')
    self.stream.flush()

  def finished(self, label: str) -> None:
    """One more configuration is done."""
    self.done += 1
    if self.tty:
      self._draw(label)
    elif self.enabled:
      self.stream.write(f'check: {self.done}/{self.total} {label}\n')
      self.stream.flush()

  def close(self) -> None:
    if self.tty:
      self.stream.write('\r' + ' ' * 72 + '\r')
      self.stream.flush()


def _cell(comparison: Comparison, notes: list[str], name: str) -> tuple[str,
                                                                         bool]:
  """The table cell and whether it passes."""
  if comparison.error is not None:
    error = comparison.error
    message = f'{type(error).__name__}: {error}'.splitlines()[0]
    if message not in notes:
      notes.append(message)
    return f'ERROR [{notes.index(message) + 1}]', False
  diff = max_difference(comparison.expected, comparison.actual)
  if diff is None:
    notes.append(f'{name}: different tree structure or shapes')
    return f'MISMATCH [{len(notes)}]', False
  if diff == 0.0:
    return 'identical', True
  return f'diff {diff:.1e}', False


def _parse_args(argv):
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat check',
      description=(
          'Train a tiny linen MLP with every optimizer configuration through '
          'the legacy flax.optim path and through each new path (raw Optax '
          'loop, TrainState, nnx.Optimizer on a bridge.ToNNX model), '
          'switching after K legacy steps, and print '
          'whether each matches 2K legacy steps bit for bit. Exit status 1 '
          'on any mismatch or error.'))
  parser.add_argument('--steps', type=int, default=3, metavar='K',
                      help='legacy steps before switching, and steps after '
                      '(default: 3)')
  parser.add_argument('--only', action='append', default=[], metavar='NAME',
                      help='run only configurations whose name contains NAME '
                      '(case-insensitive; repeatable)')
  parser.add_argument('--eager', action='store_true',
                      help='also run the raw Optax loop without jit (against '
                      'the legacy rule run op by op; slower)')
  parser.add_argument('--jobs', type=int, default=2, metavar='N',
                      help='configurations run at a time (default: 2)')
  parser.add_argument('--list', action='store_true',
                      help='list the configurations and exit')
  parser.add_argument('--no-progress', action='store_true',
                      help='do not draw the progress bar on stderr')
  args = parser.parse_args(argv)
  if args.steps < 1:
    parser.error('--steps must be at least 1')
  if args.jobs < 1:
    parser.error('--jobs must be at least 1')
  return args


def _select(only: Sequence[str]):
  wanted = [name.lower() for name in only]
  return [c for c in _configs.CONFIGS
          if not wanted or any(w in c.name.lower() for w in wanted)]


def _run_all(configs, problem, args, paths) -> list[dict[str, Comparison]]:
  """``run_config`` for each config, ``args.jobs`` at a time (in order)."""
  progress = _Progress(len(configs), enabled=not args.no_progress)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', deprecation.LegacyOptimDeprecationWarning)
    # XLA compiles without holding the GIL, so two threads keep two cores
    # busy; the steps themselves are tiny.
    with futures.ThreadPoolExecutor(args.jobs) as pool:
      pending = {
          pool.submit(run_config, config, problem, args.steps, paths): config
          for config in configs
      }
      for future in futures.as_completed(pending):
        progress.finished(pending[future].name)
  progress.close()
  return [future.result() for future in pending]


def _print_table(configs, all_results, paths) -> int:
  """Prints the table and its notes; returns the number of failed cells."""
  rows: list[Any] = []
  notes: list[str] = []
  failures = 0
  for config, results in zip(configs, all_results):
    cells = []
    for path in paths:
      cell, ok = _cell(results[path], notes, f'{config.name} / {path}')
      failures += not ok
      cells.append(cell)
    rows.append([config.name] + cells)
  header = ['config', *paths]
  widths = [max(len(row[i]) for row in [header] + rows)
            for i in range(len(header))]
  for row in [header] + rows:
    print('  '.join(f'{c:<{w}}' for c, w in zip(row, widths)).rstrip())
  for i, note in enumerate(notes, 1):
    print(f'[{i}] {note}')
  return failures


def main(argv=None) -> int:
  args = _parse_args(argv)
  if args.list:
    print('\n'.join(config.name for config in _configs.CONFIGS))
    return 0
  configs = _select(args.only)
  if not configs:
    print(f'no configuration matches {args.only}; see --list',
          file=sys.stderr)
    return 2

  paths = PATHS if args.eager else DEFAULT_PATHS
  began = time.perf_counter()
  all_results = _run_all(configs, Problem(2 * args.steps), args, paths)
  failures = _print_table(configs, all_results, paths)
  total = len(configs) * len(paths)
  print(f'\n{total - failures}/{total} bit-identical ({len(configs)} configs '
        f'x {len(paths)} paths; {args.steps} legacy steps, then '
        f'{args.steps} on each path; {time.perf_counter() - began:.1f} s)')
  return 1 if failures else 0
