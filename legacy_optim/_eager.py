"""Compiled eager steps for ``Optimizer.apply_gradient`` called outside jit.

flax.optim ran an un-jitted ``apply_gradient`` op by op and leaf by leaf: a
few dispatches per parameter and step, which makes notebooks and old training
scripts with thousands of leaves crawl. Here an eager call of a built-in rule
runs one compiled step instead, cached per configuration:

* the ``OptimizerDef`` object and its hyper-params (by identity, so a def
  whose hyper-params are replaced gets a new entry);
* the names and structure of the overrides given to ``apply_gradient``;
  numeric override values are *traced arguments*, so changing the learning
  rate every step does not recompile. Static zeros (``weight_decay=0``),
  bools and other non-numeric values are part of the key instead, because
  rules branch on them in Python (``_hyper.is_static_zero``);
* the tree structure, shapes and dtypes of target, state and grads (handled
  by ``jax.jit``'s own cache).

The cache is bypassed (the rule runs inline, exactly as before) when

* it is switched off: ``LEGACY_OPTIM_EAGER_JIT=0`` in the environment, or
  ``legacy_optim._eager.ENABLED = False``. Then every eager step dispatches
  op by op as in flax.optim: no compilation on a configuration's first call
  (which for thousands of leaves takes as long as any ``jax.jit`` of the
  step), but each step is slower and rounds like the op-by-op step;
* the call is already under a trace (``jit``/``pmap``/``grad``/``vmap``):
  the surrounding trace compiles it anyway;
* the def, or a def it wraps, runs a user-written per-leaf rule
  (``init_param_state``/``apply_param_gradient`` or an overridden
  ``apply_gradient``): such rules may have Python side effects that must run
  at every step, as they did in flax.optim;
* a target, state or gradient leaf is a Python number, or a NumPy value
  of a dtype JAX would narrow (float64, int64): flax.optim computed on those
  with NumPy, op by op, and returned NumPy/Python values and an ``int`` step
  (see ``_inputs``). NumPy float32 leaves (a restored checkpoint) still
  compile, and come back as ``jax.Array``;
* a static override value is not hashable, or the rule needs a concrete value
  of a numeric override (it raised a concretization error while tracing).

.. warning::
  A compiled step may round differently from the same step run op by op:
  XLA fuses ``p - lr * g`` into one fused multiply-add (one rounding instead
  of two). Eager results therefore equal those of
  ``jax.jit(lambda o, g: o.apply_gradient(g))`` bit for bit, not those of
  flax.optim's op-by-op eager step (which differs from flax.optim's own
  jitted step in the same way). The fidelity suite compares against flax
  0.5.3's jitted results.
"""

import collections
import math
import os
import threading
from typing import Any, Optional

import jax
import numpy as np

from legacy_optim import _hyper
from legacy_optim import _inputs

# Whether eager calls use compiled steps (see the module docstring).
ENABLED = os.environ.get('LEGACY_OPTIM_EAGER_JIT', '1') != '0'

# At most this many compiled configurations are kept (least recently used
# first out). Each entry keeps its OptimizerDef alive.
MAX_ENTRIES = 64

_DYNAMIC = object()  # Marks an override leaf passed as a traced argument.
_UNCACHEABLE = object()  # Cache value: this configuration runs uncached.

_CONCRETIZATION_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
)

_cache: 'collections.OrderedDict[Any, Any]' = collections.OrderedDict()
_lock = threading.Lock()


def clear_cache() -> None:
  """Forgets every compiled eager step."""
  with _lock:
    _cache.clear()


def cache_size() -> int:
  """The number of cached configurations (compiled or marked uncacheable)."""
  with _lock:
    return len(_cache)


def _is_dynamic(leaf) -> bool:
  """Numeric values other than static zeros become traced arguments."""
  if isinstance(leaf, (bool, np.bool_)) or _hyper.is_static_zero(leaf):
    return False
  return isinstance(leaf, (int, float, complex, np.ndarray, np.generic,
                           jax.Array))


def _static_key(leaf):
  """A hashable key telling static values apart (0 vs 0.0 vs -0.0)."""
  if isinstance(leaf, (float, np.floating)):
    return type(leaf), float(leaf), math.copysign(1.0, float(leaf))
  return type(leaf), leaf


def _contains_tracer(tree) -> bool:
  return any(isinstance(leaf, jax.core.Tracer)
             for leaf in jax.tree_util.tree_leaves(tree))


def under_a_trace(tree) -> bool:
  """True inside jit/pmap/grad/vmap tracing (O(1) where jax tells us)."""
  try:
    from jax._src import core  # pylint: disable=g-import-not-at-top
    return not core.trace_state_clean()
  except (ImportError, AttributeError):  # Older/newer jax: look at leaves.
    return _contains_tracer(tree)


class _Overrides:
  """Overrides split into a hashable key, static values and traced leaves."""

  def __init__(self, overrides: dict[str, Any]):
    self.names = tuple(sorted(overrides))
    self.treedefs = []
    self.statics = []  # per name: leaf values, _DYNAMIC where traced.
    self.dynamic = []
    key = []
    for name in self.names:
      leaves, treedef = jax.tree_util.tree_flatten(overrides[name])
      statics = [_DYNAMIC if _is_dynamic(l) else l for l in leaves]
      self.dynamic.extend(l for l, s in zip(leaves, statics) if s is _DYNAMIC)
      self.treedefs.append(treedef)
      self.statics.append(statics)
      key.append((name, treedef, tuple(
          None if s is _DYNAMIC else _static_key(s) for s in statics)))
    self.key = tuple(key)

  def rebuild(self, dynamic) -> dict[str, Any]:
    """The overrides with traced values in place of the dynamic leaves."""
    values = iter(dynamic)
    return {
        name: treedef.unflatten(
            [next(values) if s is _DYNAMIC else s for s in statics])
        for name, treedef, statics in zip(self.names, self.treedefs,
                                          self.statics)
    }


def _compile(opt_def, overrides: _Overrides):

  def step(target, state, grads, dynamic):
    hyper_params = opt_def.update_hyper_params(**overrides.rebuild(dynamic))
    return opt_def.apply_gradient(hyper_params, target, state, grads)

  return jax.jit(step)


def apply_gradient(opt_def, target, state, grads,
                   overrides: dict[str, Any]) -> Optional[tuple[Any, Any]]:
  """``(new_target, new_state)`` from a cached compiled step, or None.

  None means "not cached here": the caller runs the rule inline (see the
  module docstring for when that happens).
  """
  # User code (in the def or a def it wraps) runs at every step: inline.
  if not ENABLED or opt_def._user_hooks():  # pylint: disable=protected-access
    return None
  split = _Overrides(overrides)
  if (_contains_tracer(split.dynamic) or
      under_a_trace((target, state, grads)) or
      _inputs.needs_host_step(target, state, grads)):
    return None
  hp_leaves, hp_treedef = jax.tree_util.tree_flatten(opt_def.hyper_params)
  # Ids are safe: the entry keeps the def and its hyper-param leaves alive.
  key = (id(opt_def), hp_treedef, tuple(map(id, hp_leaves)), split.key)
  try:
    hash(key)
  except TypeError:  # An unhashable static value: run uncached.
    return None
  with _lock:
    entry = _cache.get(key)
    if entry is not None:
      _cache.move_to_end(key)
  if entry is None:
    entry = (_compile(opt_def, split), (opt_def, hp_leaves))
    with _lock:
      _cache[key] = entry
      while len(_cache) > MAX_ENTRIES:
        _cache.popitem(last=False)
  step = entry[0]
  if step is _UNCACHEABLE:
    return None
  try:
    return step(target, state, grads, split.dynamic)
  except _CONCRETIZATION_ERRORS:
    # The rule needs a concrete hyper-param value: it cannot be compiled with
    # traced overrides. Remember that and run it inline from now on.
    with _lock:
      _cache[key] = (_UNCACHEABLE, entry[1])
    return None
