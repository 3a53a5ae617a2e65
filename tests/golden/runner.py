"""Runs one fidelity case: create the optimizer, 100 jitted steps, read out.

The same function runs in every environment: with real flax 0.5.3
(``generate_oracle.py``), with flax 0.5.3's modules on today's JAX
(``generate_floor.py``) and with ``legacy_optim`` (``tests/test_fidelity.py``).
Only the ``optim``/``traverse_util`` modules passed in differ.
"""

import dataclasses
import platform
import sys
from typing import Any, Optional
import warnings

import flax
from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np

from golden import cases
from golden import edge_cases


@dataclasses.dataclass
class Result:
  initial: dict  # {path: np.ndarray} params fed in (after dtype conversion).
  final: dict  # {path: np.ndarray} params after the last step.
  state: dict  # {path: np.ndarray | None | 'empty'}: the final state dict.
  params_digest: str
  grads_digest: str


def flatten_state_dict(tree, prefix: str = '') -> dict:
  """A state dict -> ``{'a/b': leaf}``; empty dicts and None kept as markers."""
  if isinstance(tree, dict):
    if not tree:
      return {prefix: 'empty'}
    out = {}
    for key in sorted(tree):
      out.update(flatten_state_dict(tree[key], f'{prefix}/{key}'
                                    if prefix else str(key)))
    return out
  if tree is None:
    return {prefix: None}
  return {prefix: np.asarray(tree)}


def _to_tree(case, arrays: dict, dtype) -> Any:
  return cases.unflatten(
      case['tree'], {p: jnp.asarray(a, dtype=dtype) for p, a in arrays.items()})


def _flat_params(params) -> dict:
  return flatten_state_dict(serialization.to_state_dict(params))


def make_step(case):
  """The jitted step: ``step(opt, grads)`` or ``step(opt, grads, lr)``."""
  spec = case['lr']
  if spec is None:
    return jax.jit(lambda opt, grads: opt.apply_gradient(grads))
  scales = spec.get('per_sub_scale')
  if scales is None:
    return jax.jit(lambda opt, grads, lr: opt.apply_gradient(
        grads, learning_rate=lr))

  def step(opt, grads, lr):
    # The documented MultiOptimizer pattern: one hyper_params entry per
    # sub-optimizer, each with its own rate.
    hps = [hp.replace(learning_rate=lr * scale)
           for hp, scale in zip(opt.optimizer_def.hyper_params, scales)]
    return opt.apply_gradient(grads, hyper_params=hps)

  return jax.jit(step)


def run_case(optim_module, traverse_module, case,
             steps: Optional[int] = None) -> Result:
  """Runs ``case`` with the given ``optim``/``traverse_util`` modules."""
  steps = cases.STEPS if steps is None else steps
  dtype = jnp.dtype(case['dtype'])
  params = _to_tree(case, cases.initial_params(case), dtype)
  initial = _flat_params(params)
  params_digest = cases.Digest()
  for path in sorted(initial):
    params_digest.update(path, initial[path])

  opt_def = cases.build_optimizer_def(optim_module, traverse_module, case)
  focus = cases.build_focus(traverse_module, case)
  optimizer = opt_def.create(params, focus=focus)
  step_fn = make_step(case)

  grad_steps = cases.gradient_steps(case)
  grads_digest = cases.Digest()
  for t in range(steps):
    grads = _to_tree(case, {p: g[t] for p, g in grad_steps.items()}, dtype)
    for path, g in sorted(_flat_params(grads).items()):
      grads_digest.update(f'{t}/{path}', g)
    if case['lr'] is None:
      optimizer = step_fn(optimizer, grads)
    else:
      optimizer = step_fn(optimizer, grads, cases.lr_argument(case, t))

  return Result(
      initial=initial,
      final=_flat_params(optimizer.target),
      state=flatten_state_dict(serialization.to_state_dict(optimizer.state)),
      params_digest=params_digest.hexdigest(),
      grads_digest=grads_digest.hexdigest())


def edge_inputs() -> tuple:
  """``(params, [grads of each step])`` of the edge cases, as trees."""
  values = {path: (dtype, params, grads)
            for path, dtype, params, grads in edge_cases.leaves()}

  def tree(pick):
    return cases.unflatten(edge_cases.tree(), {
        path: jnp.asarray(edge_cases.as_dtype(pick(v), v[0]))
        for path, v in values.items()})

  return tree(lambda v: v[1]), [tree(lambda v, t=t: v[2][t])
                                for t in range(edge_cases.STEPS)]


def edge_initial_params() -> dict:
  """The edge cases' params before the first step, flat."""
  return _flat_params(edge_inputs()[0])


def run_edge_case(optim_module, traverse_module, case, jit: bool) -> Result:
  """Runs an ``edge_cases`` case: ``edge_cases.STEPS`` steps, jitted or not.

  ``final`` holds the params after every step (``'step<k>/<path>'``) and
  ``state`` the optimizer state dict after the last one.
  """
  params, grad_steps = edge_inputs()
  params_digest = cases.Digest()
  for path, value in sorted(_flat_params(params).items()):
    params_digest.update(path, value)
  opt_def = cases.build_optimizer_def(optim_module, traverse_module, case)
  optimizer = opt_def.create(params)
  step_fn = lambda opt, grads: opt.apply_gradient(grads)
  if jit:
    step_fn = jax.jit(step_fn)
  grads_digest = cases.Digest()
  final = {}
  for t, grads in enumerate(grad_steps):
    for path, g in sorted(_flat_params(grads).items()):
      grads_digest.update(f'{t}/{path}', g)
    optimizer = step_fn(optimizer, grads)
    final.update(edge_step_params(t, optimizer.target))
  return Result(
      initial=_flat_params(params), final=final,
      state=flatten_state_dict(serialization.to_state_dict(optimizer.state)),
      params_digest=params_digest.hexdigest(),
      grads_digest=grads_digest.hexdigest())


def edge_step_params(t: int, params) -> dict:
  """The params after step ``t`` (0-based) as ``{'step<t+1>/<path>': ...}``."""
  return {f'step{t + 1}/{path}': value
          for path, value in _flat_params(params).items()}


def stored_result(golden, name: str) -> Result:
  """An entry of a ``store.Golden`` as a Result (to merge a partial run)."""
  entry = golden.entries[name]
  return Result(initial={}, final=golden.params(name),
                state=golden.state(name),
                params_digest=entry['params_digest'],
                grads_digest=entry['grads_digest'])


def oracle_version_error(script: str) -> Optional[str]:
  """Why ``script`` cannot write golden data here (None under flax 0.5.3).

  Also silences the deprecation warnings flax.optim's ``__init__`` turned
  to 'always' (one per OptimizerDef).
  """
  warnings.simplefilter('ignore', DeprecationWarning)
  if flax.__version__ == '0.5.3':
    return None
  return (f'{script} needs flax 0.5.3, found {flax.__version__} '
          f'({sys.executable}).')


def environment() -> dict:
  """Versions of what ran the cases (recorded next to the data)."""
  return {
      'flax': flax.__version__,
      'jax': jax.__version__,
      'jaxlib': jax.lib.__version__,
      'numpy': np.__version__,
      'python': platform.python_version(),
      'machine': platform.machine(),
  }
