"""Inputs flax.optim took besides JAX arrays, and what it gave back for them.

flax.optim ran its per-leaf rules on whatever it was handed. Measured with
flax 0.5.3 (``tests/golden/generate_inputs.py``):

* integer params came back as floats: ``p - lr * g`` promotes (Adafactor
  alone cast its result back to the param's dtype);
* a Python ``int`` step (a state built by hand, as flax's own tests did)
  came back as ``int``;
* Python numbers and NumPy arrays worked as leaves; where a rule used only
  ``+ - * /`` (GradientDescent, Momentum) the results stayed Python numbers
  or NumPy arrays, computed in float64.

Only eager calls (nothing traced) can see such leaves: under ``jax.jit``
they are tracers already, so none of this runs in a traced step.

Also here: the check that a tree handed in (grads, an Optax state) has the
structure it must have, with an error naming the differing paths.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

_PYTHON_NUMBERS = (int, float, complex)  # bool is an int too.
_HOST_LEAVES = _PYTHON_NUMBERS + (np.ndarray, np.generic)


def add_updates(params: Any, updates: Any, keep_integer_dtype: bool) -> Any:
  """``optax.apply_updates``, except that integer params are promoted.

  A float param keeps its dtype (``p + u`` cast back, as Optax does); an
  integer param takes the result type of ``p + u``, as flax.optim's
  ``p - lr * g`` did, unless ``keep_integer_dtype``.
  """
  def add(param, update):
    if param is None:
      return None
    new = jnp.asarray(param + update)
    dtype = jnp.asarray(param).dtype
    # dtype.kind is 'V' for bfloat16 and friends: they are floats here.
    if keep_integer_dtype or dtype.kind not in 'biu':
      return new.astype(dtype)
    return new

  return jax.tree_util.tree_map(add, params, updates,
                                is_leaf=lambda x: x is None)


def _python_numbers_as_numpy(tree: Any) -> Any:
  """Python-number leaves as NumPy scalars: Optax reads ``.dtype`` of every
  leaf, and NumPy scalars compute exactly as the Python numbers did."""
  return jax.tree_util.tree_map(
      lambda x: np.asarray(x)[()] if isinstance(x, _PYTHON_NUMBERS) else x,
      tree)


def needs_host_step(*trees) -> bool:
  """True when a compiled step cannot give flax.optim's result for ``trees``:
  a leaf is a Python number (flax computed in float64 and could return a
  Python number or ``int`` step) or a NumPy value of a dtype JAX narrows
  (float64, int64: flax kept NumPy's precision). NumPy float32 leaves, e.g.
  of a restored checkpoint, compile like JAX arrays.
  """
  leaves = [leaf for tree in trees for leaf in jax.tree_util.tree_leaves(tree)]
  leaf_types = set(map(type, leaves))
  if any(issubclass(t, _PYTHON_NUMBERS) for t in leaf_types):
    return True
  if not any(issubclass(t, (np.ndarray, np.generic)) for t in leaf_types):
    return False
  return any(leaf.dtype != jax.dtypes.canonicalize_dtype(leaf.dtype)
             for leaf in leaves if isinstance(leaf, (np.ndarray, np.generic)))


def _all_host(*trees) -> bool:
  return all(isinstance(leaf, _HOST_LEAVES)
             for tree in trees for leaf in jax.tree_util.tree_leaves(tree))


def _like(new: Any, old: Any, on_host: bool) -> Any:
  """A result leaf in the kind flax.optim gave for the input leaf ``old``.

  Python numbers stay Python numbers where the arithmetic stayed on the host
  (a NumPy result, or any result of a host-arithmetic rule); a host rule's
  NumPy inputs come back as NumPy. Other results are left as computed.
  """
  if isinstance(old, _PYTHON_NUMBERS):
    if on_host or isinstance(new, (np.ndarray, np.generic)):
      return np.asarray(new).item()
    return new
  if not on_host:
    return new
  if isinstance(old, np.generic):
    return np.asarray(new)[()]
  return np.array(new)  # A fresh, writable NumPy array.


def apply_eagerly(step_fn: Callable[..., Any], host_arithmetic: bool,
                  hyper_params, params, state, grads):
  """Runs ``step_fn(hyper_params, params, state, grads)`` on eager inputs.

  The step runs op by op on the inputs as given, as flax.optim's did (NumPy
  arithmetic stays NumPy), with Python numbers as NumPy scalars on the way
  in and Python numbers again on the way out. When ``host_arithmetic`` and
  every param, state and gradient leaf is a Python number or NumPy value,
  the step runs with float64 enabled and every leaf comes back in its
  input's kind, as flax.optim's NumPy arithmetic gave it. A Python ``int``
  step stays one.
  """
  on_host = host_arithmetic and _all_host(params, state.param_states, grads)
  inputs = (_python_numbers_as_numpy(params),
            state.replace(param_states=_python_numbers_as_numpy(
                state.param_states)),
            _python_numbers_as_numpy(grads))
  if on_host:
    with jax.enable_x64(True):  # jnp keeps NumPy's float64 here.
      new_params, new_state = step_fn(hyper_params, *inputs)
  else:
    new_params, new_state = step_fn(hyper_params, *inputs)
  like = lambda new, old: _like(new, old, on_host)
  new_params = jax.tree_util.tree_map(like, new_params, params)
  new_state = new_state.replace(param_states=jax.tree_util.tree_map(
      like, new_state.param_states, state.param_states))
  if isinstance(state.step, int):
    new_state = new_state.replace(step=int(new_state.step))
  return new_params, new_state


def _describe_path(path) -> str:
  return jax.tree_util.keystr(tuple(path)) or '<root>'


def _leaf_paths(tree) -> list[str]:
  return [_describe_path(p)
          for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def check_same_structure(expected: Any, found: Any, expected_name: str,
                         found_name: str, shown: int = 5) -> None:
  """Raises TypeError naming both structures and the paths that differ."""
  expected_def = jax.tree_util.tree_structure(expected)
  found_def = jax.tree_util.tree_structure(found)
  if expected_def == found_def:
    return
  expected_paths, found_paths = _leaf_paths(expected), _leaf_paths(found)
  found_set, expected_set = set(found_paths), set(expected_paths)
  missing = [p for p in expected_paths if p not in found_set]
  extra = [p for p in found_paths if p not in expected_set]
  details = []
  if missing:
    details.append(f'missing from {found_name}: '
                   + ', '.join(missing[:shown])
                   + (f' (+{len(missing) - shown} more)'
                      if len(missing) > shown else ''))
  if extra:
    details.append(f'unexpected in {found_name}: '
                   + ', '.join(extra[:shown])
                   + (f' (+{len(extra) - shown} more)'
                      if len(extra) > shown else ''))
  if not details:
    first = next((a for a, b in zip(expected_paths, found_paths) if a != b),
                 None)
    details.append('same leaf paths but different container types'
                   + (f' (first at {first})' if first else ''))
  raise TypeError(
      f'{found_name} must have the same tree structure as {expected_name}; '
      + '; '.join(details) + '.\n'
      f'  {expected_name}: {expected_def}\n'
      f'  {found_name}: {found_def}')
