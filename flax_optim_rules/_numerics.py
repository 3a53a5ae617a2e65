"""Arithmetic and hyper-parameter handling shared by the legacy rules.

Hyper-parameters reach a rule as one object with one attribute per
hyper-parameter: flax.optim's dataclasses (``legacy_optim``'s
``_AdamHyperParams`` ...) or a ``HyperParams`` built from keywords (the
public functions of this package). A value may be a number, a traced value
(an override under ``jax.jit``, or ``optax.inject_hyperparams``) or a
schedule: a callable of the step count.

The arithmetic is written once in flax.optim's floating-point operation
order so that every rule built from it rounds exactly as flax 0.5.3 did:

* ``ema``: the moving average ``decay * avg + (1 - decay) * x``;
* ``bias_corrected``: ``avg / (1 - decay ** t)`` with ``t = step + 1`` in the
  average's dtype;
* ``divide_by_scalar``, ``divide_by_root``, ``divide_twice``: divisions
  written so that today's XLA rounds them as the XLA of flax 0.5.3's days
  did (see below);
* ``descent``: turns the legacy ``p - s - (lr * wd) * p`` (two roundings)
  into Optax updates that ``optax.apply_updates`` turns into the same value
  (``update_to`` does it for any new value);
* ``init_state``: a rule's state, ``NamedTuple(count, <one params-shaped
  tree per legacy per-parameter field>)``, as flax.optim initialised it.

Needs nothing but jax (and NumPy, which comes with it).
"""

import dataclasses
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax


class HyperParams(types.SimpleNamespace):
  """Hyper-parameters given as keywords: ``HyperParams(learning_rate=0.1)``."""


def _values(hyper_params: Any) -> dict[str, Any]:
  if isinstance(hyper_params, HyperParams):
    return vars(hyper_params)
  if dataclasses.is_dataclass(hyper_params):
    return {f.name: getattr(hyper_params, f.name)
            for f in dataclasses.fields(hyper_params)}
  return {}


def resolve(hyper_params: Any, count: Any) -> Any:
  """Evaluates schedule-valued fields at ``count``; other fields unchanged.

  A user's OptimizerDef may hold anything as hyper_params (flax.optim only
  looked inside them for overrides); only the fields of a dataclass or a
  ``HyperParams`` can be schedules.
  """
  scheduled = {name: value(count)
               for name, value in _values(hyper_params).items()
               if callable(value)}
  if not scheduled:
    return hyper_params
  if isinstance(hyper_params, HyperParams):
    return HyperParams(**{**vars(hyper_params), **scheduled})
  return dataclasses.replace(hyper_params, **scheduled)


def require_learning_rate(learning_rate: Any, owner: str) -> Any:
  if learning_rate is None:
    raise ValueError(
        f'{owner}: no learning rate provided. Pass learning_rate=... to the '
        f'constructor or to apply_gradient(grads, learning_rate=...).')
  return learning_rate


def require_params(params: Any, owner: str) -> Any:
  """Rules that read the params need them passed to ``update``."""
  if params is None:
    raise ValueError(f'{owner} needs params: call '
                     'tx.update(grads, opt_state, params).')
  return params


def learning_rate_schedule(learning_rate: Any, owner: str) -> Callable:
  """A schedule (count -> rate) for a constant, traced or scheduled rate.

  The missing-rate check runs when the schedule is evaluated (inside the
  transform's update), so an optimizer can still be created without a rate
  and receive it as an override at each step, as flax.optim allowed.
  """
  def schedule(count):
    rate = require_learning_rate(learning_rate, owner)
    return rate(count) if callable(rate) else rate
  return schedule


def is_static_zero(value: Any) -> bool:
  """True only for a concrete Python/NumPy zero (never for a traced value)."""
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return value == 0
  if isinstance(value, jnp.ndarray) or hasattr(value, 'aval'):
    return False
  try:
    return isinstance(value, np.generic) and bool(value == 0)
  except TypeError:
    return False


def static_bool(value: Any, name: str, owner: str) -> bool:
  """A static configuration flag must be a Python bool, never traced."""
  if isinstance(value, bool):
    return value
  try:
    return bool(value)
  except Exception as e:
    raise TypeError(
        f'{owner}: {name} selects the update rule and must be a Python bool, '
        f'not a traced value ({type(value).__name__}). Pass it to the '
        f'constructor instead of as a traced override.') from e


def require_constant(hyper_params: Any, names: tuple[str, ...],
                     owner: str) -> None:
  """Rejects schedules for fields the underlying stock Optax rule fixes."""
  for name in names:
    if callable(getattr(hyper_params, name)):
      raise ValueError(
          f'{owner}: only learning_rate may be a schedule; {name} was given '
          'a callable. Pass a number (or a traced value) instead.')


# Why some divisions below are written the long way.
#
# flax.optim ran under jax 0.3/0.4, whose XLA simplified jitted divisions in
# ways today's XLA does not, and vice versa. Measured on CPU against flax 0.5.3
# under jax 0.4.13:
#
# * ``x / c`` for a traced scalar ``c`` was a true division; today's XLA
#   turns ``x / broadcast(c)`` into ``x * (1 / c)``. ``divide_by_scalar`` adds
#   ``0 * sign(x)`` to the divisor: zero for every finite or infinite ``x``
#   (nan for a nan ``x``, whose quotient is nan anyway), but not provably so,
#   so the simplifier keeps the division elementwise and correctly rounded.
#   (``0 * x`` would do the same for finite ``x`` but turn an overflowed,
#   infinite moment into nan where flax.optim kept inf.)
# * ``x / sqrt(y)`` (``sqrt`` with no other user) became ``x * (1 / sqrt(y))``
#   with a correctly rounded reciprocal; today's XLA uses an approximate
#   reciprocal square root. ``divide_by_root`` spells out the old form.
# * ``(x / c) / y`` became ``x / (c * y)``; ``divide_twice`` spells it out.
#
# The last two did not happen for bfloat16 (which XLA on CPU evaluates in
# float32, rounding after every op); there the plain expression already
# rounds as flax.optim did. Other backends (GPU, TPU) were not measured: the
# forms below are the same math and differ from the plain ones only in
# rounding.


def _rewritten_by_old_xla(dtype) -> bool:
  return jnp.dtype(dtype) != jnp.bfloat16


def divide_by_scalar(x: jax.Array, scalar: jax.Array) -> jax.Array:
  """``x / scalar`` rounded as one elementwise division (see above)."""
  return x / (scalar + 0. * jnp.sign(x))


def divide_by_root(x: jax.Array, root: jax.Array) -> jax.Array:
  """``x / root`` for ``root = sqrt(...)``, as jitted flax.optim rounded it."""
  if not _rewritten_by_old_xla(root.dtype):
    return x / root
  return x * (1. / jnp.abs(root))  # abs: hides the sqrt from today's rewrite


def divide_twice(x: jax.Array, scalar: jax.Array, y: jax.Array) -> jax.Array:
  """``(x / scalar) / y`` as jitted flax.optim rounded it."""
  if not _rewritten_by_old_xla(x.dtype):
    return divide_by_scalar(x, scalar) / y
  return x / (scalar * y)


def bias_correction(decay: Any, count: jax.Array, dtype) -> jax.Array:
  """``1 - decay ** t`` with ``t = count + 1`` cast to ``dtype`` first.

  flax.optim cast the step to the parameter's dtype before the power (so a
  bfloat16 parameter gets a bfloat16 ``t``).
  """
  return 1. - decay ** jnp.asarray(count + 1, dtype)


def ema(decay: Any, average: Any, sample: Any) -> Any:
  """``decay * average + (1 - decay) * sample`` on whole trees (legacy order).

  ``1 - decay`` is computed before it meets the array, so for a Python float
  ``decay`` it is computed in double precision and rounded once, as in
  flax.optim.
  """
  return jax.tree_util.tree_map(
      lambda avg, x: decay * avg + (1. - decay) * x, average, sample)


def bias_corrected(average: Any, decay: Any, count: jax.Array) -> Any:
  """``average / (1 - decay ** t)`` leaf by leaf (see ``bias_correction``)."""
  return jax.tree_util.tree_map(
      lambda avg: divide_by_scalar(avg, bias_correction(decay, count,
                                                        avg.dtype)), average)


def descent(steps: Any, params: Any, learning_rate: Any, weight_decay: Any,
            owner: str) -> Any:
  """Optax updates reproducing ``p <- (p - s) - (learning_rate * wd) * p``.

  flax.optim subtracted the step ``s`` and then the learning-rate-scaled
  weight decay, two roundings that a single ``p + u`` cannot repeat in
  general. The updates are therefore ``((p - s) - (lr * wd) * p) - p``: that
  difference is exact whenever the new value is within a factor of two of
  ``p`` (Sterbenz), and ``optax.apply_updates`` then yields flax.optim's value
  to the bit. Where a step moves a parameter by more than about half its own
  size (parameters near zero), the result may be one rounding (an ulp of the
  new value) off. Without weight decay (a static zero, which flax.optim's
  arithmetic turned into a no-op) the updates are ``-s``, and ``p + (-s)``
  equals ``p - s`` exactly.
  """
  if is_static_zero(weight_decay):
    return jax.tree_util.tree_map(jnp.negative, steps)
  require_params(params, f'{owner} with weight_decay')
  decay = learning_rate * weight_decay
  return jax.tree_util.tree_map(
      lambda p, s: update_to((p - s) - decay * p, p), params, steps)


def with_float_grads(
    tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """``tx`` given integer (and bool) gradient leaves as floats: ``g * 1.0``
  promotes them as flax.optim's ``learning_rate * g`` did (to float32, or
  float64 with x64 on). Same state as ``tx``."""

  def as_float(g):
    if hasattr(g, 'dtype') and not jnp.issubdtype(g.dtype, jnp.inexact):
      return g * 1.0
    return g

  def update_fn(updates, state, params=None):
    return tx.update(jax.tree_util.tree_map(as_float, updates), state, params)

  return optax.GradientTransformation(tx.init, update_fn)


def update_to(new_param: jax.Array, param: jax.Array) -> jax.Array:
  """The update ``u`` with ``param + u == new_param`` (see ``descent``).

  ``new_param - param``, except where ``param`` is infinite: there the legacy
  rules can only give the same infinity or nan, which ``param + new_param``
  reproduces, while the difference would be nan for both. Written so the
  select only sees ``param``: under an explicit-axis mesh with ZeRO-1 the
  step (and so ``new_param``) is split while ``param`` is not, and a select
  needs one sharding (``new_param - 0.0`` is ``new_param``, signed zeros and
  nan included).
  """
  return new_param - jnp.where(jnp.isfinite(param), param, 0)


def _zeros_on_host(leaf: Any) -> bool:
  """Whether ``jnp.zeros_like(leaf)`` is a plain non-weak array of ``leaf``'s
  shape, dtype and placement, so host zeros put on the device equal it."""
  if isinstance(leaf, np.ndarray):
    return leaf.dtype.kind in 'biufc'
  return (isinstance(leaf, jax.Array) and
          not isinstance(leaf, jax.core.Tracer) and
          isinstance(leaf.dtype, np.dtype) and leaf.dtype.kind in 'biufc' and
          not leaf.weak_type and leaf.sharding.is_fully_addressable)


def zeros_like_tree(params: Any) -> Any:
  """``tree_map(jnp.zeros_like, params)`` without dispatching per leaf.

  Op by op, each ``zeros_like`` is one dispatch and, per new shape, one XLA
  compilation (seconds at thousands of leaves). Concrete arrays instead get
  host zeros moved to the device in one ``device_put`` of the whole tree,
  placed as ``zeros_like`` places them (committed arrays: their sharding;
  the rest: the default device, uncommitted). Traced, weakly typed or other
  leaves (Python scalars, key arrays) go through ``jnp.zeros_like``.
  """
  leaves, treedef = jax.tree_util.tree_flatten(params)
  zeros = [None] * len(leaves)
  placed, floating = [], []  # Indices by placement.
  for i, leaf in enumerate(leaves):
    if not _zeros_on_host(leaf):
      zeros[i] = jnp.zeros_like(leaf)
    elif isinstance(leaf, jax.Array) and leaf.committed:
      placed.append(i)
    else:
      floating.append(i)

  def host_zeros(indices):
    return [np.zeros(np.shape(leaves[i]),
                     jax.dtypes.canonicalize_dtype(leaves[i].dtype))
            for i in indices]

  if placed:
    for i, z in zip(placed, jax.device_put(
        host_zeros(placed), [leaves[i].sharding for i in placed])):
      zeros[i] = z
  if floating:
    for i, z in zip(floating, jax.device_put(host_zeros(floating))):
      zeros[i] = z
  return treedef.unflatten(zeros)


def init_state(state_cls: Any, params: Any) -> Any:
  """``state_cls(count=0, **{field: zeros like params})``, as flax.optim
  initialised its step and per-parameter state."""
  fields = state_cls._fields[1:]
  leaves, treedef = jax.tree_util.tree_flatten(params)
  traced = any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)
  step = jnp.zeros([], jnp.int32) if traced else np.zeros([], np.int32)
  # Every field's zeros and the step in one device_put (see above).
  zeros = zeros_like_tree([step] + leaves * len(fields))
  count, per_field = zeros[0], zeros[1:]
  return state_cls(
      count=count,
      **{name: treedef.unflatten(per_field[k * len(leaves):
                                           (k + 1) * len(leaves)])
         for k, name in enumerate(fields)})
