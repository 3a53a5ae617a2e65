"""``OptimizerState``: flax.optim's state object, stored one column per field.

Users see the legacy layout: ``state.param_states`` is shaped like the params
with one per-parameter state object per leaf, e.g.
``{'w': _AdamParamState(grad_ema=..., grad_sq_ema=...)}``. As a pytree,
though, a state whose per-parameter objects are all of one built-in class is
stored the way Optax stores it: one params-shaped tree per field
(``grad_ema``, then ``grad_sq_ema``).

Why: every call of a jitted step flattens its inputs and unflattens its
outputs in Python. With per-parameter objects that means building and reading
one object per leaf and step (2,000 dataclass constructions per step for a
2,000-leaf model, about 8% of the whole step). Stored column-wise, the state
flattens and unflattens in C++ like native Optax state, and the per-parameter
objects are built only when someone reads ``param_states``.

The stored form is a function of the content only (``_to_columns``), so two
states with the same param_states have the same tree structure however they
were built (e.g. the carry of a ``lax.fori_loop``). States whose per-parameter
objects are of a user's class (or of several classes, as under a
MultiOptimizer that mixes algorithms) keep the legacy layout as their pytree.
"""

import dataclasses
from typing import Any, NamedTuple, Optional

import jax
from flax import serialization
from flax import struct

from legacy_optim import _layout

# Per-parameter state classes that may be stored column-wise: class -> fields.
_COLUMNAR_CLASSES: dict[type, tuple[str, ...]] = {}


def per_param_state(cls):
  """``flax.struct.dataclass`` for a built-in per-parameter state class.

  Instances are then stored column-wise inside ``OptimizerState``: the class
  is rebuilt with keyword arguments, one per field, when ``param_states`` is
  read.
  """
  cls = struct.dataclass(cls)
  fields = tuple(f.name for f in dataclasses.fields(cls))
  if not fields:
    raise TypeError(f'{cls.__name__} needs at least one field.')
  _COLUMNAR_CLASSES[cls] = fields
  return cls


class _ColumnLayout(NamedTuple):
  """Static part of a column-wise state (pytree aux data: hashable)."""
  per_param_class: type
  fields: tuple[str, ...]
  params_treedef: Any  # the tree the per-parameter objects sat in.


def _is_per_param_object(node) -> bool:
  return type(node) in _COLUMNAR_CLASSES


def _to_columns(param_states) -> Optional[tuple[_ColumnLayout, tuple]]:
  """(layout, one tree per field), or None when the legacy layout stays."""
  objects, treedef = jax.tree_util.tree_flatten(
      param_states, is_leaf=_is_per_param_object)
  if not objects:
    return None
  cls = type(objects[0])
  if cls not in _COLUMNAR_CLASSES or any(type(o) is not cls for o in objects):
    return None
  fields = _COLUMNAR_CLASSES[cls]
  by_field = _layout.fields_of(treedef, objects, fields)
  return (_ColumnLayout(cls, fields, treedef),
          tuple(by_field[name] for name in fields))


def _from_columns(layout: _ColumnLayout, columns) -> Any:
  return _layout.states_from_fields(
      layout.params_treedef, dict(zip(layout.fields, columns)),
      layout.per_param_class)


_UNSET = object()


@dataclasses.dataclass(frozen=True, init=False)
class OptimizerState:
  """Legacy optimizer state: the step count and per-parameter states."""
  step: Any
  param_states: Any

  def __init__(self, step, param_states):
    split = _to_columns(param_states)
    layout, payload = (None, param_states) if split is None else split
    self._set(step, layout, payload, param_states)

  def _set(self, step, layout, payload, param_states):
    object.__setattr__(self, 'step', step)
    object.__setattr__(self, '_layout', layout)
    # The legacy param_states tree, or the column trees when layout is set.
    object.__setattr__(self, '_payload', payload)
    object.__setattr__(self, '_param_states', param_states)

  @classmethod
  def _assemble(cls, step, layout, payload) -> 'OptimizerState':
    state = object.__new__(cls)
    state._set(step, layout, payload,  # pylint: disable=protected-access
               payload if layout is None else _UNSET)
    return state

  def _get_param_states(self):
    if self._param_states is _UNSET:
      object.__setattr__(self, '_param_states',
                         _from_columns(self._layout, self._payload))
    return self._param_states

  def replace(self, **updates) -> 'OptimizerState':
    """A copy with the given fields (``step``, ``param_states``) replaced."""
    if set(updates) == {'step'}:  # Keep the columns: no per-leaf work.
      return self._assemble(updates['step'], self._layout, self._payload)
    return dataclasses.replace(self, **updates)

  def __reduce__(self):
    return OptimizerState, (self.step, self.param_states)


# A property, not a stored field: the dataclass keeps ``param_states`` in its
# fields (repr, eq, dataclasses.replace) and reads it through this.
OptimizerState.param_states = property(
    OptimizerState._get_param_states,  # pylint: disable=protected-access
    doc='Per-parameter states, shaped like the params.')


def _flatten_with_keys(state):
  # pylint: disable=protected-access
  step = (jax.tree_util.GetAttrKey('step'), state.step)
  if state._layout is None:
    return (step, (jax.tree_util.GetAttrKey('param_states'),
                   state._payload)), None
  return (step, *((jax.tree_util.GetAttrKey(name), column)
                  for name, column in zip(state._layout.fields,
                                          state._payload))), state._layout


def _flatten(state):
  # pylint: disable=protected-access
  if state._layout is None:
    return (state.step, state._payload), None
  return (state.step, *state._payload), state._layout


def _unflatten(layout, children):
  # pylint: disable=protected-access
  if layout is None:
    return OptimizerState._assemble(children[0], None, children[1])
  return OptimizerState._assemble(children[0], layout, tuple(children[1:]))


jax.tree_util.register_pytree_with_keys(
    OptimizerState, _flatten_with_keys, _unflatten, _flatten)


def _state_dict(state: OptimizerState) -> dict[str, Any]:
  return {'step': serialization.to_state_dict(state.step),
          'param_states': serialization.to_state_dict(state.param_states)}


def _restore(state: OptimizerState, state_dict) -> OptimizerState:
  # As flax.struct's dataclasses do: every field present, nothing extra.
  for name in ('step', 'param_states'):
    if name not in state_dict:
      raise ValueError(
          f'Missing field {name} in state dict while restoring an instance '
          f'of OptimizerState, at path {serialization.current_path()}')
  extra = sorted(set(state_dict) - {'step', 'param_states'})
  if extra:
    raise ValueError(
        f'Unknown field(s) "{",".join(map(str, extra))}" in state dict while '
        'restoring an instance of OptimizerState at path '
        f'{serialization.current_path()}')
  return OptimizerState(
      serialization.from_state_dict(state.step, state_dict['step'],
                                    name='step'),
      serialization.from_state_dict(state.param_states,
                                    state_dict['param_states'],
                                    name='param_states'))


serialization.register_serialization_state(
    OptimizerState, _state_dict, _restore)
