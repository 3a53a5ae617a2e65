"""Legacy ``Optimizer`` -> ``flax.training.train_state.TrainState``.

The state carries the legacy target as ``params``, the def's transform as
``tx`` and the optimizer's state (step count included) as ``opt_state``, so
``state.apply_gradients(grads=grads)`` continues training bit-identically.
The way back is ``compat.from_optax(opt_def, state.params, state.opt_state)``.
"""

from typing import Any, Callable, Mapping, Optional, Sequence

from flax.training import train_state

from compat.bridges import optax_bridge
from legacy_optim import base


def to_train_state(optimizer: base.Optimizer,
                   apply_fn: Callable[..., Any],
                   *,
                   overrides: Optional[Mapping[str, Any]] = None,
                   train_state_class: type = train_state.TrainState,
                   wrap: Optional[optax_bridge.Wrap] = None,
                   inject: Sequence[str] = (),
                   **fields) -> train_state.TrainState:
  """Returns a ``TrainState`` continuing ``optimizer``.

  Args:
    optimizer: a legacy ``Optimizer`` (not replicated: ``unreplicate()`` it;
      replicate the returned state instead).
    apply_fn: the model's apply function (e.g. ``model.apply``).
    overrides: hyper-param overrides for the transform, as in
      ``compat.to_optax`` (values may be schedules of the step count).
    train_state_class: ``TrainState`` or a subclass of it.
    wrap, inject: wrap the transform (clipping in front, ``MultiSteps``) and
      make hyper-params settable, with the legacy state carried inside; as in
      ``compat.to_optax``.
    **fields: extra fields of ``train_state_class`` (e.g. ``batch_stats``).

  Returns:
    ``train_state_class(step=optimizer.state.step, params=optimizer.target,
    tx=tx, opt_state=opt_state, apply_fn=apply_fn, **fields)``.
  """
  if not (isinstance(train_state_class, type) and
          issubclass(train_state_class, train_state.TrainState)):
    raise TypeError('train_state_class must be TrainState or a subclass, '
                    f'got {train_state_class!r}.')
  tx, opt_state = optax_bridge.to_optax(optimizer, wrap=wrap, inject=inject,
                                        **dict(overrides or {}))
  return train_state_class(
      step=optimizer.state.step, apply_fn=apply_fn, params=optimizer.target,
      tx=tx, opt_state=opt_state, **fields)
