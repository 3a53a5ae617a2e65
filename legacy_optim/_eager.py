"""Compiled eager steps for ``Optimizer.apply_gradient`` called outside jit.

flax.optim ran an un-jitted ``apply_gradient`` op by op and leaf by leaf: a
few dispatches per parameter and step, which makes notebooks and old training
scripts with thousands of leaves crawl. Compiling the whole step as one XLA
program instead makes later steps fast, but its first call then compiles a
program that grows with the number of leaves (tens of seconds and gigabytes
for thousands of leaves).

flax.optim's rules are per leaf, so an eager step here runs small compiled
*kernels*: the leaves are grouped by what the rule sees of them (the shape
and dtype of param, gradient and per-parameter state, and for a
``MultiOptimizer`` the sub-optimizer that owns the leaf), and one kernel steps
up to ``CHUNK`` leaves of a group per call. A group of ``n`` small leaves
compiles one kernel for ``min(n, CHUNK)`` leaves, whatever ``n`` is (the last
call of a group repeats leaves to fill the kernel and drops their results);
a large leaf (over ``PAD_LIMIT`` elements) is stepped alone. The first step of
a tree therefore compiles one small program per group, and a step costs one
dispatch per ``CHUNK`` small leaves.

A kernel is the built-in rule itself run on a list of leaves, so each leaf
goes through the same XLA operations as in ``jax.jit`` of the whole step:
eager results equal those of ``jax.jit(lambda o, g: o.apply_gradient(g))``
bit for bit (``tests/test_eager_cache.py``).

Kernels are cached by value, so equal definitions share them:

* the ``OptimizerDef``'s class and attributes, hyper-params included, by
  value (a new but equal ``Adam(1e-3)`` compiles nothing; NumPy and JAX array
  values by their bytes);
* the names and structure of the overrides given to ``apply_gradient``;
  numeric override values are *traced arguments*, so changing the learning
  rate every step does not recompile. Static zeros (``weight_decay=0``),
  bools and other non-numeric values are part of the key instead, because
  rules branch on them in Python (``_hyper.is_static_zero``);
* the group (shapes, dtypes, state structure, sub-optimizer) and the number
  of leaves per call.

At most ``MAX_ENTRIES`` kernels are kept, least recently used first out. A
kernel holds one compiled XLA program: about 4 MB of memory (measured with
16 leaves of 16 x 16 on CPU; mostly XLA's code and buffers), so the cache
holds at most about 0.5 GB; a ResNet-50 needs 11 kernels, a tree of
thousands of alike leaves one or two. A ``MultiOptimizer``'s
leaf-to-sub-optimizer assignment is cached next to them.
``legacy_optim.eager.clear_cache()`` frees all of it (to the allocator,
which reuses it for the next kernels). A tree whose step needs more kernels
than ``MAX_ENTRIES`` (more than 2,000 leaves of all different shapes)
compiles some of them again at every step: raise ``MAX_ENTRIES`` then.

The cache is bypassed (the rule runs inline, exactly as before) when

* it is switched off: ``LEGACY_OPTIM_EAGER_JIT=0`` in the environment, or
  ``legacy_optim.eager.ENABLED = False``. Then every eager step dispatches
  op by op as in flax.optim, and rounds like the op-by-op step;
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

A ``MultiOptimizer`` nested inside another def (``WeightNorm(MultiOptimizer
(...))``) picks rules by the leaves' paths in a tree the kernels do not see:
its steps compile the whole tree as one program, cached the same way.

.. warning::
  A compiled step may round differently from the same step run op by op:
  XLA fuses ``p - lr * g`` into one fused multiply-add (one rounding instead
  of two). Eager results therefore equal those of the jitted step, not those
  of flax.optim's op-by-op eager step (which differs from flax.optim's own
  jitted step in the same way). The fidelity suite compares against flax
  0.5.3's jitted results.
"""

import collections
import copy
import dataclasses
import functools
import math
import os
import threading
from typing import Any, Callable, Optional

import jax
import numpy as np

from legacy_optim import _hyper
from legacy_optim import _inputs

# Whether eager calls use compiled steps (see the module docstring).
ENABLED = os.environ.get('LEGACY_OPTIM_EAGER_JIT', '1') != '0'

# At most this many kernels (and MultiOptimizer label trees) are kept:
# about 4 MB each (see the module docstring).
MAX_ENTRIES = 128

# Small leaves of one group stepped per kernel call. More leaves per call
# dispatch less often but compile a larger program.
CHUNK = 16

# Leaves with more elements than this are stepped one per call: repeating
# one to fill a kernel would cost more than a dispatch saves.
PAD_LIMIT = 1 << 14

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
  """Forgets every compiled eager kernel (their memory is freed with them)."""
  with _lock:
    _cache.clear()


def cache_size() -> int:
  """The number of cached entries (kernels, label trees, uncacheable marks)."""
  with _lock:
    return len(_cache)


def _cached(key, build: Callable[[], Any]) -> Any:
  """The cache entry for ``key``, built (outside the lock) when missing."""
  with _lock:
    entry = _cache.get(key)
    if entry is not None:
      _cache.move_to_end(key)
      return entry
  entry = build()
  with _lock:
    _cache[key] = entry
    while len(_cache) > MAX_ENTRIES:
      _cache.popitem(last=False)
  return entry


def _picks_rule_by_label(opt_def) -> bool:
  """True for a def whose ``labels(params)`` names each leaf's rule."""
  return getattr(type(opt_def), '_eager_rule_by_label', False)


def _decomposition(opt_def) -> str:
  """How a step splits: 'leaves', 'labels' (one kernel per label), 'tree'."""

  def nested_labels(d):
    return any(_picks_rule_by_label(i) or nested_labels(i)
               for i in d._inner_defs())

  # A state that is no tree of per-leaf states (OptaxOptimizerDef's) cannot
  # be split by leaves either.
  if nested_labels(opt_def) or opt_def._whole_tree_state:
    return 'tree'
  return 'labels' if _picks_rule_by_label(opt_def) else 'leaves'


# ----------------------------------------------------------------- keys


def _is_dynamic(leaf) -> bool:
  """Numeric values other than static zeros become traced arguments."""
  if isinstance(leaf, (bool, np.bool_)) or _hyper.is_static_zero(leaf):
    return False
  return isinstance(leaf, (int, float, complex, np.ndarray, np.generic,
                           jax.Array))


def _value_key(value) -> Any:
  """A hashable key equal for equal values (0 vs 0.0 vs -0.0 vs NaN apart).

  Raises TypeError for an unhashable value this cannot look into.
  """
  if value is None or isinstance(value, (bool, str, bytes, type, np.dtype)):
    return type(value), value
  if isinstance(value, (int, float, complex)):  # Python numbers: exact bits.
    return type(value), np.asarray(value).tobytes()
  if isinstance(value, (np.ndarray, np.generic, jax.Array)):
    array = np.asarray(value)
    return type(value), array.dtype.str, array.shape, array.tobytes()
  if isinstance(value, (list, tuple)):
    return type(value), tuple(map(_value_key, value))
  if isinstance(value, dict):
    return type(value), tuple((k, _value_key(v)) for k, v in value.items())
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return type(value), tuple(
        (f.name, _value_key(getattr(value, f.name)))
        for f in dataclasses.fields(value))
  if hasattr(value, 'hyper_params') and hasattr(value, 'apply_gradient'):
    # An OptimizerDef: its class and every attribute define its rule.
    return type(value), tuple(
        (k, _value_key(v)) for k, v in sorted(vars(value).items()))
  hash(value)  # Schedules, traversals...: equal when identical.
  return type(value), value


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
          None if s is _DYNAMIC else _value_key(s) for s in statics)))
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


def _contains_tracer(tree) -> bool:
  return any(isinstance(leaf, jax.core.Tracer)
             for leaf in jax.tree_util.tree_leaves(tree))


def under_a_trace(tree) -> bool:
  """True inside jit/pmap/grad/vmap tracing (O(1) where jax tells us)."""
  try:
    from jax._src import core
    return not core.trace_state_clean()
  except (ImportError, AttributeError):  # Older/newer jax: look at leaves.
    return _contains_tracer(tree)


# -------------------------------------------------------------- kernels


def _step_function(rule_def, overrides: _Overrides):
  """``step(state, dynamic, params, grads)``: the rule with traced overrides.

  ``rule_def`` is a copy taken when the kernel was made: later changes to
  the user's def (a replaced ``hyper_params``) get a kernel of their own.
  """

  def step(state, dynamic, params, grads):
    hyper_params = rule_def.update_hyper_params(**overrides.rebuild(dynamic))
    return rule_def.apply_gradient(hyper_params, params, state, grads)

  return step


def _kernel(opt_def, overrides: _Overrides,
            labels: Optional[tuple[Any, ...]]) -> Callable[..., Any]:
  rule_def = copy.copy(opt_def)
  if labels is not None:
    # The kernel's params are a list of leaves whose sub-optimizers the
    # caller looked up in the whole tree.
    rule_def.labels = lambda params: list(labels)
  return jax.jit(_step_function(rule_def, overrides))


def _leaf_key(param, state, grad, label) -> tuple[Any, ...]:
  """What a kernel specializes on for one leaf."""
  state_leaves, state_def = jax.tree_util.tree_flatten(state)
  return (label, param.shape, param.dtype, grad.shape, grad.dtype, state_def,
          tuple((x.shape, x.dtype) for x in state_leaves))


def _labels(opt_def, config_key, treedef, params, flat_params) -> list[Any]:
  """Each leaf's sub-optimizer label (a MultiOptimizer's traversals)."""
  shapes = tuple((p.shape, p.dtype) for p in flat_params)
  labels = _cached(('labels', config_key, treedef, shapes),
                   lambda: opt_def.labels(params))
  return treedef.flatten_up_to(labels)


def _bundles(leaf_keys: list[Any]) -> list[list[int]]:
  """Leaf indices in kernel calls of up to ``CHUNK`` leaves each.

  Alike leaves (equal keys) go together, so that a tree of many alike leaves
  calls one kernel over and over. A call of fewer alike small leaves is
  filled up by repeating its first leaf (its results are dropped), so that
  it calls the same kernel too.
  """
  groups = collections.defaultdict(list)
  for i, key in enumerate(leaf_keys):
    groups[key].append(i)
  order = [i for indices in groups.values() for i in indices]
  bundles = [order[i:i + CHUNK] for i in range(0, len(order), CHUNK)]
  last = bundles[-1]
  key = leaf_keys[last[0]]
  if (len(bundles) > 1 and len(last) < CHUNK and
      all(leaf_keys[i] == key for i in bundles[-2] + last) and
      math.prod(key[1]) <= PAD_LIMIT):
    last.extend([last[0]] * (CHUNK - len(last)))
  return bundles


def _step_by_groups(opt_def, def_key, split, target, state, grads):
  """One step as kernel calls over bundles of leaves (or None)."""
  treedef = jax.tree_util.tree_structure(target)
  params = treedef.flatten_up_to(target)
  param_states = treedef.flatten_up_to(state.param_states)
  flat_grads = treedef.flatten_up_to(grads)
  if not params:
    return None
  if _picks_rule_by_label(opt_def):
    # Per configuration, as a compiled whole step would trace it: traversal
    # filters run on a configuration's first step (tests/test_subclass_hooks).
    labels = _labels(opt_def, (def_key, split.key), treedef, target, params)
  else:
    labels = [None] * len(params)
  leaf_keys = list(map(_leaf_key, params, param_states, flat_grads, labels))

  new_params = [None] * len(params)
  new_states = [None] * len(params)
  new_state = None
  for bundle in _bundles(leaf_keys):
    bundle_labels = (None if labels[0] is None
                     else tuple(labels[i] for i in bundle))
    kernel = _cached(
        ('kernel', def_key, split.key, tuple(leaf_keys[i] for i in bundle)),
        functools.partial(_kernel, opt_def, split, bundle_labels))
    bundle_params, new_state = kernel(
        state.replace(param_states=[param_states[i] for i in bundle]),
        split.dynamic, [params[i] for i in bundle],
        [flat_grads[i] for i in bundle])
    # A leaf repeated to fill the bundle gets the same results again.
    for i, p, s in zip(bundle, bundle_params, new_state.param_states):
      new_params[i] = p
      new_states[i] = s
  return (treedef.unflatten(new_params),
          new_state.replace(param_states=treedef.unflatten(new_states)))


def _step_whole_tree(opt_def, def_key, split, target, state, grads):
  kernel = _cached(('tree', def_key, split.key),
                   lambda: _kernel(opt_def, split, labels=None))
  return kernel(state, split.dynamic, target, grads)


def apply_gradient(opt_def, target, state, grads,
                   overrides: dict[str, Any]) -> Optional[tuple[Any, Any]]:
  """``(new_target, new_state)`` from cached compiled kernels, or None.

  None means "not cached here": the caller runs the rule inline (see the
  module docstring for when that happens).
  """
  # User code (in the def or a def it wraps) runs at every step: inline.
  if not ENABLED or opt_def._user_hooks():
    return None
  try:
    split = _Overrides(overrides)
    def_key = _value_key(opt_def)
    hash((def_key, split.key))
  except TypeError:  # An unhashable static value: run uncached.
    return None
  if (_contains_tracer(split.dynamic) or
      under_a_trace((target, state, grads)) or
      _inputs.needs_host_step(target, state, grads)):
    return None
  failed_key = ('uncacheable', def_key, split.key)
  with _lock:
    if failed_key in _cache:
      return None
  _inputs.check_same_structure(target, grads, 'target', 'grads')
  decomposition = _decomposition(opt_def)
  try:
    if decomposition == 'tree':
      return _step_whole_tree(opt_def, def_key, split, target, state, grads)
    return _step_by_groups(opt_def, def_key, split, target, state, grads)
  except _CONCRETIZATION_ERRORS:
    # The rule needs a concrete hyper-param value: it cannot be compiled with
    # traced overrides. Remember that and run it inline from now on.
    _cached(failed_key, lambda: _UNCACHEABLE)
    return None
