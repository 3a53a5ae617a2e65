"""Legacy ``Optimizer`` <-> a raw Optax transform and its state.

``to_optax(optimizer)`` returns ``(tx, opt_state)``: ``tx`` is the def's own
update rule as an ``optax.GradientTransformation`` (``to_optax()``) and
``opt_state`` the optimizer's current state, step count included, in that
transform's layout. A plain loop then continues training bit-identically::

  tx, opt_state = compat.to_optax(optimizer)
  params = optimizer.target
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)

``from_optax(opt_def, params, opt_state)`` is the way back. Converting moves
references only; no array is copied.

Compare like with like: ``Optimizer.apply_gradient`` runs one compiled step
even outside jit, so it matches a jitted Optax loop bit for bit; an Optax loop
run op by op may differ in the last bit (XLA fuses ``p - lr * g`` into one
multiply-add), exactly as the legacy rule run op by op would.
"""

import dataclasses
from typing import Any

import jax
import numpy as np
import optax

from legacy_optim import _inputs
from legacy_optim import base
from legacy_optim import multi
from legacy_optim import replicated


def check_convertible(optimizer: base.Optimizer) -> None:
  """Raises a clear error for what cannot be converted as is."""
  if not isinstance(optimizer, base.Optimizer):
    raise TypeError(
        'Expected a flax.optim Optimizer (from optimizer_def.create(target)), '
        f'got {type(optimizer).__name__}.')
  opt_def = optimizer.optimizer_def
  if isinstance(opt_def, replicated.ReplicatedOptimizer):
    raise ValueError(
        'This optimizer is replicated across devices (ReplicatedOptimizer '
        f'over {len(opt_def.devices)} device(s)). Convert one copy: '
        '`optimizer.unreplicate()` first, then replicate the result for pmap '
        '(e.g. flax.jax_utils.replicate(train_state)) and average gradients '
        f'in the train step with jax.lax.pmean(grads, {opt_def.axis_name!r}).')


def optax_state(optimizer: base.Optimizer) -> Any:
  """The optimizer's state in the layout of ``optimizer_def.to_optax()``."""
  check_convertible(optimizer)
  return optimizer.optimizer_def.to_optax_state(
      optimizer.state, optimizer.target)


def lacks_learning_rate(hyper_params) -> bool:
  """True when some (possibly nested) hyper-params have learning_rate=None."""
  if isinstance(hyper_params, (list, tuple)):
    return any(lacks_learning_rate(hp) for hp in hyper_params)
  if not dataclasses.is_dataclass(hyper_params):
    return False
  return any(
      (field.name == 'learning_rate' and value is None) or
      lacks_learning_rate(value)
      for field in dataclasses.fields(hyper_params)
      for value in [getattr(hyper_params, field.name)])


def transform(optimizer: base.Optimizer,
              **hyper_param_overrides) -> optax.GradientTransformation:
  """``optimizer_def.to_optax(**overrides)``, refusing what cannot convert.

  Raises:
    ValueError: the optimizer is replicated, or it has no learning rate (the
      legacy loop passed one to every ``apply_gradient``) and none is given.
  """
  check_convertible(optimizer)
  opt_def = optimizer.optimizer_def
  if lacks_learning_rate(opt_def.update_hyper_params(**hyper_param_overrides)):
    raise ValueError(
        f'{opt_def._name} has no learning rate: the legacy loop passed one to '
        'every apply_gradient(grads, learning_rate=...). Give it when '
        'converting: learning_rate=<number>, or learning_rate=<schedule> (a '
        'function of the step count) for per-step values.')
  return opt_def.to_optax(**hyper_param_overrides)


def to_optax(optimizer: base.Optimizer, **hyper_param_overrides):
  """Returns ``(tx, opt_state)`` continuing ``optimizer`` on plain Optax.

  Args:
    optimizer: a legacy ``Optimizer`` (not replicated: call ``unreplicate()``
      first).
    **hyper_param_overrides: hyper-params for ``tx``, as in
      ``apply_gradient``. A value may be a schedule (a callable of the step
      count): ``to_optax(opt, learning_rate=schedule)`` continues a loop that
      called ``apply_gradient(g, learning_rate=schedule(step))``.

  Returns:
    ``tx = optimizer_def.to_optax(**overrides)`` and the optimizer's state
    (step count included) in ``tx``'s layout; ``optimizer.target`` is the
    params to pass along.

  Raises:
    ValueError: ``optimizer`` is replicated, or has no learning rate and none
      is given.
  """
  tx = transform(optimizer, **hyper_param_overrides)
  return tx, optax_state(optimizer)


def _check_matches_template(opt_def, params, opt_state) -> None:
  """Checks ``opt_state`` against what ``opt_def.to_optax().init`` builds."""
  template = jax.eval_shape(opt_def.to_optax().init, params)
  _inputs.check_same_structure(template, opt_state,
                               f'{opt_def._name}.to_optax() state', 'opt_state')
  expected = jax.tree_util.tree_flatten_with_path(template)[0]
  found = jax.tree_util.tree_leaves(opt_state)
  wrong = [
      f'{jax.tree_util.keystr(path)}: expected shape {want.shape}, got '
      f'{np.shape(got)}'
      for (path, want), got in zip(expected, found)
      if tuple(want.shape) != np.shape(got)
  ]
  if wrong:
    raise ValueError(
        'opt_state does not fit these params:\n  ' + '\n  '.join(wrong))


def from_optax(opt_def: base.OptimizerDef, params: Any,
               opt_state: Any) -> base.Optimizer:
  """A legacy ``Optimizer`` from params and a ``opt_def.to_optax()`` state.

  The inverse of ``to_optax``: ``from_optax(opt.optimizer_def, opt.target,
  to_optax(opt)[1])`` equals ``opt`` bit for bit. Works as well for a
  ``TrainState``'s ``(params, opt_state)``.

  Raises:
    TypeError: ``opt_state`` is not shaped like ``opt_def.to_optax()``'s state
      for ``params`` (the message names the first differing path).
    ValueError: a state leaf's shape does not fit ``params``.
  """
  if isinstance(opt_def, replicated.ReplicatedOptimizer):
    raise ValueError(
        'from_optax builds an unreplicated optimizer: pass the wrapped '
        'definition (replicated_def.optimizer_def) and call .replicate() on '
        'the result.')
  _check_matches_template(opt_def, params, opt_state)
  return base.Optimizer(opt_def, opt_def.from_optax_state(opt_state, params),
                        params)


def traversal_labels(params: Any, *traversals: Any) -> Any:
  """``optax.partition`` labels for ``params`` from legacy traversals.

  Leaves the ``k``-th traversal selects get the label ``str(k)``; leaves none
  selects get ``'frozen'`` (pair it with ``optax.set_to_zero()``). This is how
  ``MultiOptimizer`` and ``create(focus=...)`` become ``optax.partition``::

    labels = compat.traversal_labels(params, kernels, biases)
    tx = optax.partition({'0': optax.sgd(0.1), '1': optax.sgd(0.01),
                          'frozen': optax.set_to_zero()}, labels)

  Raises:
    ValueError: a leaf is selected by more than one traversal (all are named).
  """
  if not traversals:
    raise TypeError('traversal_labels needs at least one traversal.')
  return multi.traversal_labels(params, traversals)
