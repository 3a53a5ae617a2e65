"""What the params and optimizer state of each kind of training state are.

Portable (runs under flax 0.5.3 too): flax.nnx is only consulted when the
caller has already imported it, so this module never imports flax itself.

Each kind of state, with where its params and its optimizer state are:

* legacy ``Optimizer`` (legacy_optim or flax.optim: has ``optimizer_def``
  and ``target``): params ``.target``; optimizer state
  ``optimizer_def.to_optax_state(.state, .target)`` (the layout of
  ``to_optax()``), or flax.optim's own ``.state`` when there is no such
  method.
* ``(model, nnx.Optimizer)`` pair, ``nnx.ModelAndOptimizer``: params
  ``nnx.state(model, wrt)`` as a plain dict; ``optimizer.opt_state`` as
  plain arrays.
* ``nnx.Module`` alone: its ``nnx.Param`` state; no optimizer state.
* object with ``params`` and ``opt_state`` (``TrainState``): ``.params``
  and ``.opt_state``.
* ``(params, opt_state)`` tuple/list: ``[0]`` and ``[1]``.

nnx kinds are *stateful*: a step function updates them in place and its
return value is ignored. Every other kind is functional: the step function
returns the new state. Mappings of any type (FrozenDict, nnx State, dict)
compare as dicts, so ``.target`` of a linen model and the pure state of the
same model wrapped in ``nnx.bridge.ToNNX`` have the same leaf paths.
"""

import sys
from typing import Any, Optional

KINDS_HELP = (
    'a legacy Optimizer, a (model, nnx.Optimizer) pair, an '
    'nnx.ModelAndOptimizer, an nnx.Module, an object with .params and '
    '.opt_state (TrainState), or a (params, opt_state) tuple')


def _nnx():
  """flax.nnx if the program has imported it (else no state can be nnx)."""
  return sys.modules.get('flax.nnx')


def _nnx_parts(state: Any):
  """(model, optimizer or None) for nnx kinds, else None."""
  nnx = _nnx()
  if nnx is None:
    return None
  if isinstance(state, nnx.Optimizer) and 'model' in vars(state):
    return state.model, state  # nnx.ModelAndOptimizer.
  if (isinstance(state, (tuple, list)) and len(state) == 2
      and isinstance(state[0], nnx.Module)
      and isinstance(state[1], nnx.Optimizer)):
    return state[0], state[1]
  if isinstance(state, nnx.Module):
    return state, None
  return None


def is_stateful(state: Any) -> bool:
  return _nnx_parts(state) is not None


def is_bare_module(state: Any) -> bool:
  """An nnx model without its optimizer."""
  parts = _nnx_parts(state)
  return parts is not None and parts[1] is None


def is_legacy_optimizer(state: Any) -> bool:
  return hasattr(state, 'optimizer_def') and hasattr(state, 'target')


def kind_of(state: Any) -> Optional[str]:
  """'nnx', 'legacy', 'train_state', 'pair' or None (unknown)."""
  if _nnx_parts(state) is not None:
    return 'nnx'
  if is_legacy_optimizer(state):
    return 'legacy'
  if hasattr(state, 'params') and hasattr(state, 'opt_state'):
    return 'train_state'
  if isinstance(state, (tuple, list)) and len(state) == 2:
    return 'pair'
  return None


def _nnx_params(state):
  nnx = _nnx()
  model, optimizer = _nnx_parts(state)
  wrt = optimizer.wrt if optimizer is not None else nnx.Param
  return nnx.as_pure(nnx.state(model, wrt))


def _nnx_opt_state(state):
  optimizer = _nnx_parts(state)[1]
  if optimizer is None:
    raise TypeError(
        'An nnx.Module alone has no optimizer state; pass a (model, '
        'nnx.Optimizer) pair to compare optimizer states.')
  return _nnx().as_pure(optimizer.opt_state)


def _legacy_opt_state(optimizer):
  to_optax_state = getattr(optimizer.optimizer_def, 'to_optax_state', None)
  if to_optax_state is None:  # flax.optim itself.
    return optimizer.state
  return to_optax_state(optimizer.state, optimizer.target)


_PARAMS = {'nnx': _nnx_params, 'legacy': lambda s: s.target,
           'train_state': lambda s: s.params, 'pair': lambda s: s[0]}
_OPT_STATES = {'nnx': _nnx_opt_state, 'legacy': _legacy_opt_state,
               'train_state': lambda s: s.opt_state, 'pair': lambda s: s[1]}


def _extract(state: Any, table: dict, what: str, option: str) -> Any:
  kind = kind_of(state)
  if kind is None:
    raise TypeError(
        f'Cannot tell the {what} of a {type(state).__name__}: expected '
        f'{KINDS_HELP}. Pass {option}=... to extract it yourself.')
  return table[kind](state)


def params_of(state: Any) -> Any:
  """The params of ``state`` (see the module docstring for each kind)."""
  return _extract(state, _PARAMS, 'params', 'params_fn')


def opt_state_of(state: Any) -> Any:
  """The optimizer state of ``state`` (see the module docstring)."""
  return _extract(state, _OPT_STATES, 'optimizer state', 'opt_state_fn')
