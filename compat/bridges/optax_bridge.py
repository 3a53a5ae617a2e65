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
import inspect
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from flax_optim_rules import _legacy_layout
from legacy_optim import _hyper
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


def hyper_param_names(hyper_params) -> frozenset[str]:
  """The names a per-step override may set (for a list of sub-optimizers'
  hyper-params, as in MultiOptimizer: the names all of them have)."""
  if isinstance(hyper_params, (list, tuple)):
    names = [hyper_param_names(hp) for hp in hyper_params]
    return frozenset.intersection(*names) if names else frozenset()
  if dataclasses.is_dataclass(hyper_params):
    return frozenset(_hyper.field_names(hyper_params))
  return frozenset()


def _with_step_overrides(opt_def: base.OptimizerDef,
                         overrides: dict[str, Any]
                        ) -> optax.GradientTransformationExtraArgs:
  """``opt_def.to_optax(**overrides)`` whose ``update`` takes extra kwargs.

  A kwarg naming a hyper-param overrides it for that step, as
  ``apply_gradient(grads, learning_rate=...)`` did (so
  ``nnx_opt.update(model, grads, learning_rate=5e-4)`` works); the others
  reach the rule as Optax's extra args, as for a stock transform.
  """
  names = hyper_param_names(opt_def.hyper_params)
  tx = opt_def.to_optax(**overrides)

  def update_fn(updates, state, params=None, **extra_args):
    step_overrides = {k: extra_args.pop(k) for k in sorted(extra_args)
                      if k in names}
    step_tx = (opt_def.to_optax(**{**overrides, **step_overrides})
               if step_overrides else tx)
    return optax.with_extra_args_support(step_tx).update(
        updates, state, params, **extra_args)

  return optax.GradientTransformationExtraArgs(tx.init, update_fn)


def transform(optimizer: base.Optimizer,
              **hyper_param_overrides) -> optax.GradientTransformationExtraArgs:
  """``optimizer_def.to_optax(**overrides)``, refusing what cannot convert.

  Its ``update`` also takes per-step hyper-param overrides and Optax's extra
  args as keywords (see ``_with_step_overrides``).

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
  return _with_step_overrides(opt_def, hyper_param_overrides)


Wrap = Callable[[optax.GradientTransformation], optax.GradientTransformation]

# The step counters of Optax's wrappers that continue from the legacy step
# count, by state class name (some classes are private to Optax, and their
# modules move between versions): inject_hyperparams' and its schedules'
# ``count``, MultiSteps' ``gradient_step``, a ``scale_by_schedule``'s count.
_STEP_COUNTERS = {
    'InjectHyperparamsState': 'count',
    'InjectStatefulHyperparamsState': 'count',
    'WrappedScheduleState': 'count',
    'ScaleByScheduleState': 'count',
    'MultiStepsState': 'gradient_step',
}


def _carry_step(tree: Any, step: Any, inner_state: Any) -> Any:
  """``tree`` with the wrappers' step counters set to ``step``.

  ``inner_state`` (the legacy state, placed in ``tree`` as is) keeps its own
  count; so do wrappers counting something else (e.g. reduce_on_plateau).
  """
  if tree is inner_state:
    return tree
  if _legacy_layout.is_named_tuple(tree):
    fields = {name: _carry_step(value, step, inner_state)
              for name, value in zip(tree._fields, tree)}
    counter = _STEP_COUNTERS.get(type(tree).__name__)
    if counter in fields:
      fields[counter] = jnp.asarray(step, jnp.result_type(fields[counter]))
    return type(tree)(**fields)
  if isinstance(tree, (list, tuple)):
    return type(tree)(_carry_step(x, step, inner_state) for x in tree)
  if isinstance(tree, dict):
    return {k: _carry_step(v, step, inner_state) for k, v in tree.items()}
  return tree


def injectable(names: Sequence[str], opt_def: base.OptimizerDef,
                overrides: dict[str, Any]) -> dict[str, Any]:
  """The starting values of the hyper-params ``inject`` names."""
  names = list(names)
  if not names:
    return {}
  hyper_params = opt_def.update_hyper_params(**overrides)
  valid = hyper_param_names(hyper_params)
  unknown = [n for n in names if n not in valid]
  if unknown or not dataclasses.is_dataclass(hyper_params):
    raise ValueError(
        f'inject: {opt_def._name} has no single hyper-parameter named '
        f'{", ".join(map(repr, unknown or names))}; valid names are: '
        f'{", ".join(sorted(valid)) or "none"}.')
  return {name: getattr(hyper_params, name) for name in names}


def wrapped_transform(make_inner: Callable[..., optax.GradientTransformation],
                      *, wrap: Optional[Wrap] = None,
                      inject: Optional[dict[str, Any]] = None
                     ) -> optax.GradientTransformation:
  """``wrap(optax.inject_hyperparams(make_inner)(**inject))``, each part
  optional (``make_inner`` takes the injected hyper-params as keywords)."""
  if inject:
    def factory(**hyper_params):
      return make_inner(**hyper_params)

    factory.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)
        for name in inject])
    tx = optax.inject_hyperparams(factory)(**inject)
  else:
    tx = make_inner()
  if wrap is None:
    return tx
  wrapped = wrap(tx)
  if not callable(getattr(wrapped, 'init', None)):
    raise TypeError(
        'wrap must return an optax.GradientTransformation, got '
        f'{type(wrapped).__name__} (for optax.MultiSteps, return '
        '`optax.MultiSteps(tx, k).gradient_transformation()`).')
  return wrapped


def compose(make_inner: Callable[..., optax.GradientTransformation],
            inner_state: Any, params: Any, step: Any, *,
            wrap: Optional[Wrap] = None,
            inject: Optional[dict[str, Any]] = None):
  """``(tx, opt_state)``: ``make_inner()`` wrapped, ``inner_state`` inside.

  ``tx`` is ``wrapped_transform(make_inner, wrap, inject)``; ``opt_state``
  its state for ``params`` with ``inner_state`` where ``make_inner()``'s
  state goes. It is built by the wrappers' own ``init`` around an inner
  transform whose ``init`` returns ``inner_state`` (so any wrapper works);
  the wrappers' step counters are then set to ``step``.
  """

  def carrying(**hyper_params):
    return optax.GradientTransformationExtraArgs(
        lambda _: inner_state, make_inner(**hyper_params).update)

  opt_state = wrapped_transform(carrying, wrap=wrap, inject=inject).init(
      params)
  return (wrapped_transform(make_inner, wrap=wrap, inject=inject),
          _carry_step(opt_state, step, inner_state))


def to_optax(optimizer: base.Optimizer, *, wrap: Optional[Wrap] = None,
             inject: Sequence[str] = (), **hyper_param_overrides):
  """Returns ``(tx, opt_state)`` continuing ``optimizer`` on plain Optax.

  Args:
    optimizer: a legacy ``Optimizer`` (not replicated: call ``unreplicate()``
      first).
    wrap: a function of the converted transform returning the transform to
      train with, e.g. ``lambda tx: optax.chain(optax.clip_by_global_norm(1.),
      tx)`` or ``lambda tx: optax.MultiSteps(tx, 4).gradient_transformation()``;
      ``opt_state`` is then the wrapped transform's state with the legacy
      state inside, and the wrappers' step counters (``count``,
      ``gradient_step``) continue from the legacy step.
    inject: hyper-param names to make settable between steps as
      ``optax.inject_hyperparams`` does (``opt_state.hyperparams[name] =
      value``; inside ``wrap``'s state when both are given).
    **hyper_param_overrides: hyper-params for ``tx``, as in
      ``apply_gradient``. A value may be a schedule (a callable of the step
      count): ``to_optax(opt, learning_rate=schedule)`` continues a loop that
      called ``apply_gradient(g, learning_rate=schedule(step))``.

  Returns:
    ``tx`` (``optimizer_def.to_optax(**overrides)``, wrapped as asked) and
    the optimizer's state (step count included) in ``tx``'s layout;
    ``optimizer.target`` is the params to pass along. ``tx.update`` takes
    per-step overrides as keywords (``tx.update(g, s, p, learning_rate=lr)``,
    the legacy ``apply_gradient(g, learning_rate=lr)``) and passes other
    keywords on as Optax extra args.

  Raises:
    ValueError: ``optimizer`` is replicated, has no learning rate and none
      is given, or ``inject`` names no hyper-param of its def.
  """
  tx = transform(optimizer, **hyper_param_overrides)
  opt_state = optax_state(optimizer)
  if wrap is None and not inject:
    return tx, opt_state
  opt_def = optimizer.optimizer_def
  return compose(
      lambda **hp: transform(optimizer, **{**hyper_param_overrides, **hp}),
      opt_state, optimizer.target, optimizer.state.step, wrap=wrap,
      inject=injectable(inject, opt_def, hyper_param_overrides))


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
