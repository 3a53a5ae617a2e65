"""Validating a state dict before it is restored into an Optimizer.

flax <= 0.5.3 restored whatever a checkpoint held: arrays of the wrong shape
or dtype went silently into the optimizer and failed (or, worse, broadcast)
steps later. ``check_state_dict`` compares the state dict with the template
``Optimizer`` (its structure, shapes and dtypes; values are never used) and
raises ``RestoreMismatchError`` listing every differing path with what was
expected and what was found.

No escape hatch is needed: to restore a checkpoint into a *different*
optimizer or model on purpose, read it without a template
(``compat.load_legacy_checkpoint(path).state_dict``, or
``flax.serialization.msgpack_restore``), edit the dict, then call
``flax.serialization.from_state_dict(template, edited)``.

The per-parameter state field names of each algorithm are part of the
checkpoint format (see ``PARAM_STATE_FIELDS``); they let the error say which
algorithm wrote a checkpoint when it does not match the template.
"""

import dataclasses
from typing import Any, Optional

import jax
import numpy as np
from flax import serialization

# Per-parameter state field names each algorithm writes (the checkpoint
# format of flax <= 0.5.3). A leaf no sub-optimizer of a MultiOptimizer owns
# holds None.
PARAM_STATE_FIELDS = {
    'GradientDescent': (),
    'Momentum': ('momentum',),
    'LARS': ('momentum',),
    'Adam': ('grad_ema', 'grad_sq_ema'),
    'AdaBelief': ('grad_ema', 'grad_sq_ema'),
    'LAMB': ('grad_ema', 'grad_sq_ema'),
    'Adagrad': ('G',),
    'Adadelta': ('sq_avg', 'acc_delta'),
    'RMSProp': ('v', 'mg'),
    'Adafactor': ('v_row', 'v_col', 'v', 'm'),
    'WeightNorm': ('direction_state', 'scale_state', 'direction', 'scale'),
}

MAX_LISTED = 40


def algorithms_for_fields(fields) -> tuple[str, ...]:
  """The algorithms whose per-parameter state has exactly these fields."""
  fields = set(fields)
  return tuple(sorted(name for name, known in PARAM_STATE_FIELDS.items()
                      if set(known) == fields))


@dataclasses.dataclass(frozen=True)
class Difference:
  """One path where a state dict does not match its template."""
  path: str
  expected: str
  found: str

  def __str__(self):
    return f'{self.path}: expected {self.expected}, found {self.found}'


class RestoreMismatchError(ValueError):
  """A checkpoint does not fit the optimizer it is restored into."""

  def __init__(self, differences: list[Difference], template: str,
               hint: str = ''):
    self.differences = differences
    listed = '\n'.join(f'  {d}' for d in differences[:MAX_LISTED])
    more = len(differences) - MAX_LISTED
    if more > 0:
      listed += f'\n  ... and {more} more'
    message = (f'The checkpoint does not match {template}, the template it '
               f'is restored into ({len(differences)} difference'
               f'{"s" if len(differences) != 1 else ""}):\n{listed}')
    if hint:
      message += f'\n{hint}'
    super().__init__(message)


def _is_array(x) -> bool:
  return isinstance(x, (np.ndarray, np.generic, jax.Array))


def _is_scalar(x) -> bool:
  return isinstance(x, (bool, int, float, complex))


def _describe(x) -> str:
  if _is_array(x):
    return f'{np.dtype(x.dtype).name}{list(np.shape(x))}'
  if isinstance(x, dict):
    keys = ', '.join(sorted(map(str, x)))
    return f'a dict with keys {{{keys}}}' if x else 'an empty dict'
  if x is None:
    return 'None'
  return type(x).__name__


def _compare(expected, found, path: str, out: list[Difference]) -> None:
  """Appends to ``out`` every difference between two state dicts."""
  here = path or '<root>'
  if isinstance(expected, dict):
    if not isinstance(found, dict):
      out.append(Difference(here, _describe(expected), _describe(found)))
      return
    for key in expected:
      sub = f'{path}/{key}' if path else str(key)
      if key not in found:
        out.append(Difference(sub, _describe(expected[key]), 'no entry'))
      else:
        _compare(expected[key], found[key], sub, out)
    for key in found:
      if key not in expected:
        sub = f'{path}/{key}' if path else str(key)
        out.append(Difference(sub, 'no entry', _describe(found[key])))
  elif expected is None:
    if found is not None:
      out.append(Difference(here, 'None', _describe(found)))
  elif _is_array(expected):
    # flax wrote every array leaf as an array: a Python number in its place
    # would change the leaf's dtype (a float32 param restored as an int).
    if not _is_array(found):
      out.append(Difference(here, _describe(expected), _describe(found)))
    elif _is_array(found) and (
        np.shape(expected) != np.shape(found) or
        np.dtype(expected.dtype) != np.dtype(found.dtype)):
      out.append(Difference(here, _describe(expected), _describe(found)))
  elif _is_scalar(expected):
    # A Python number in the template (weak type): any number fits.
    if not (_is_scalar(found) or (_is_array(found) and not np.shape(found))):
      out.append(Difference(here, _describe(expected), _describe(found)))
  elif type(found) is not type(expected):
    out.append(Difference(here, _describe(expected), _describe(found)))


def _field_sets(param_states) -> set[tuple[str, ...]]:
  """The distinct per-leaf field-name tuples of a param_states state dict."""
  found = set()

  known = {tuple(sorted(fields)) for fields in PARAM_STATE_FIELDS.values()}

  def visit(node):
    if not isinstance(node, dict) or not node:
      return
    if tuple(sorted(node)) in known or any(_is_array(v) for v in node.values()):
      found.add(tuple(sorted(node)))
      return
    for v in node.values():
      visit(v)

  visit(param_states)
  return found


def _algorithm_hint(expected_states, found_states, template: str) -> str:
  """Names the algorithm that wrote the checkpoint, when it differs."""
  got = _field_sets(found_states)
  if not got or got == _field_sets(expected_states):
    return ''
  names = sorted({a for fields in got for a in algorithms_for_fields(fields)})
  if not names:
    return ''
  written_by = (', '.join(names[:-1]) + ' or ' + names[-1]
                if len(names) > 1 else names[0])
  return (f'The per-parameter state in the checkpoint was written by '
          f'{written_by}, not by {template}: restore it into an '
          'optimizer built with the definition that wrote it.')


def check_state_dict(opt_target, opt_state, state_dict, *,
                     template: str = 'the template optimizer') -> None:
  """Raises RestoreMismatchError unless ``state_dict`` fits the template.

  Args:
    opt_target: the template optimizer's target.
    opt_state: the template optimizer's ``OptimizerState``.
    state_dict: ``{'target': ..., 'state': {'step': ..., 'param_states':
      ...}}`` as read from a checkpoint.
    template: names the template's optimizer definition in the message.
  """
  expected = {'target': serialization.to_state_dict(opt_target),
              'state': serialization.to_state_dict(opt_state)}
  differences: list[Difference] = []
  _compare(expected, state_dict, '', differences)
  hint = ''
  if isinstance(state_dict, dict) and isinstance(state_dict.get('state'), dict):
    step = state_dict['state'].get('step')
    if (_is_array(step) or isinstance(step, int)) and np.issubdtype(
        np.asarray(step).dtype, np.integer) and np.any(np.asarray(step) < 0):
      differences.append(Difference(
          'state/step', 'a non-negative step', f'{np.asarray(step).tolist()}'))
    hint = _algorithm_hint(expected['state'].get('param_states'),
                           state_dict['state'].get('param_states'), template)
  if differences:
    raise RestoreMismatchError(differences, template, hint)
