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
checkpoint format (``catalogue.Algorithm.state_fields``); they let the error
say which algorithm wrote a checkpoint when it does not match the template.
"""

import dataclasses
import sys

from flax import serialization
import jax
import numpy as np

from legacy_optim import catalogue
from legacy_optim import deprecation

MAX_LISTED = 40


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


def is_array(x) -> bool:
  # ShapeDtypeStruct: an array described by a checkpoint's metadata.
  return isinstance(x, (np.ndarray, np.generic, jax.Array,
                        jax.ShapeDtypeStruct))


def _is_scalar(x) -> bool:
  return isinstance(x, (bool, int, float, complex))


def _number_kind(x) -> str:
  """'bool', 'integer', 'floating' or 'complex' for an array or number."""
  dtype = x.dtype if is_array(x) else np.result_type(x)
  for kind in (np.bool_, np.integer, np.floating, np.complexfloating):
    if jax.numpy.issubdtype(dtype, kind):  # bfloat16 is floating here too.
      return kind.__name__.rstrip('_')
  return np.dtype(dtype).name


def _describe(x) -> str:
  if is_array(x):
    return f'{np.dtype(x.dtype).name}{list(np.shape(x))}'
  if isinstance(x, dict):
    keys = ', '.join(sorted(map(str, x)))
    return f'a dict with keys {{{keys}}}' if x else 'an empty dict'
  if x is None:
    return 'None'
  return type(x).__name__


def _orbax_empty_node(expected, found) -> bool:
  """An empty node (``{}``: a NamedTuple without fields such as
  ``optax.EmptyState``) that Orbax wrote, and reads back, as None."""
  return isinstance(expected, dict) and not expected and found is None


def with_empty_nodes(expected, found):
  """``found`` with the empty nodes Orbax read as None (where ``expected``
  has ``{}``) empty again, so that ``from_state_dict`` rebuilds them."""
  if _orbax_empty_node(expected, found):
    return {}
  if isinstance(expected, dict) and isinstance(found, dict):
    return {key: with_empty_nodes(expected[key], value) if key in expected
            else value for key, value in found.items()}
  return found


def _compare(expected, found, path: str, out: list[Difference],
             exact_dtypes: bool, empty_as_none: bool = False) -> None:
  """Appends to ``out`` every difference between two state dicts.

  ``exact_dtypes``: arrays must have the expected dtype, not only the same
  kind of number (a route that would cast the file's values to the
  template's dtype, as Orbax does, must not narrow them silently).
  """
  here = path or '<root>'
  if empty_as_none and _orbax_empty_node(expected, found):
    return
  if isinstance(expected, dict):
    if not isinstance(found, dict):
      out.append(Difference(here, _describe(expected), _describe(found)))
      return
    for key in expected:
      sub = f'{path}/{key}' if path else str(key)
      if key not in found:
        out.append(Difference(sub, _describe(expected[key]), 'no entry'))
      else:
        _compare(expected[key], found[key], sub, out, exact_dtypes,
                 empty_as_none)
    for key in found:
      if key not in expected:
        sub = f'{path}/{key}' if path else str(key)
        out.append(Difference(sub, 'no entry', _describe(found[key])))
  elif expected is None:
    if found is not None:
      out.append(Difference(here, 'None', _describe(found)))
  elif is_array(expected):
    # Structure, shape and the kind of number must match; unless
    # exact_dtypes, the precision may differ (float64 arrays written by NumPy
    # code fit a float32 leaf, a Python int step fits int32[]), as flax <=
    # 0.5.3 restored such values (keeping the file's precision).
    if not (is_array(found) or _is_scalar(found)) or (
        np.shape(expected) != np.shape(found) or
        _number_kind(expected) != _number_kind(found) or
        (exact_dtypes and is_array(found) and
         np.dtype(expected.dtype) != np.dtype(found.dtype))):
      out.append(Difference(here, _describe(expected), _describe(found)))
  elif _is_scalar(expected):
    # A Python number in the template (weak type): any number fits.
    if not (_is_scalar(found) or (is_array(found) and not np.shape(found))):
      out.append(Difference(here, _describe(expected), _describe(found)))
  elif type(found) is not type(expected):
    out.append(Difference(here, _describe(expected), _describe(found)))


def _layouts():
  """(name, fields) of every per-parameter layout a checkpoint may hold."""
  for algorithm in catalogue.BUILT_INS:
    yield algorithm.name, algorithm.state_fields
    if algorithm.older_state_fields:
      versions, fields = algorithm.older_state_fields
      yield f'{algorithm.name} (the layout of {versions})', fields


def _field_sets(param_states) -> set[tuple[str, ...]]:
  """The distinct per-leaf field-name tuples of a param_states state dict."""
  found = set()

  known = {tuple(sorted(fields)) for _, fields in _layouts()}

  def visit(node):
    if not isinstance(node, dict) or not node:
      return
    if tuple(sorted(node)) in known or any(is_array(v) for v in node.values()):
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
  names = sorted({name for fields in got for name, known in _layouts()
                  if set(known) == set(fields)})
  if not names:
    return ''
  written_by = (', '.join(names[:-1]) + ' or ' + names[-1]
                if len(names) > 1 else names[0])
  return (f'The per-parameter state in the checkpoint was written by '
          f'{written_by}, not by {template}: restore it into an '
          'optimizer built with the definition that wrote it.')


def check_state_dict(opt_target, opt_state, state_dict, *,
                     template: str = 'the template optimizer',
                     empty_as_none: bool = False) -> None:
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
  # First the file: what flax's Orbax route passes on is already filled in.
  _check_flax_restore_call(expected, template)
  differences: list[Difference] = []
  _compare(expected, state_dict, '', differences, exact_dtypes=False,
           empty_as_none=empty_as_none)
  hint = ''
  if isinstance(state_dict, dict) and isinstance(state_dict.get('state'), dict):
    step = state_dict['state'].get('step')
    if (is_array(step) or isinstance(step, int)) and np.issubdtype(
        np.asarray(step).dtype, np.integer) and np.any(np.asarray(step) < 0):
      differences.append(Difference(
          'state/step', 'a non-negative step', f'{np.asarray(step).tolist()}'))
    hint = mismatch_hint(expected['state'], state_dict['state'], template)
  if differences:
    raise RestoreMismatchError(differences, template, hint)


# ----------------------------------------------------------------------------
# The column-wise state of an earlier flax-optim-compat.
#
# Between commits 7f643a7 and ea025cc this library stored a state whose
# per-parameter objects were all of one built-in class column-wise, as its
# pytree: ``.state.grad_ema['w']`` instead of flax.optim's
# ``.state.param_states['w'].grad_ema``. msgpack files were written in
# flax.optim's layout, but Orbax saves pytrees by key path, so Orbax
# checkpoints of that release hold ``state/<field>/<param path>``.

_KNOWN_FIELDS = frozenset(
    f for algorithm in catalogue.BUILT_INS for f in algorithm.state_fields)
MISSING = object()  # lookup's answer for a path the tree does not have.


def column_fields(state) -> tuple[str, ...]:
  """The state fields of a column-wise OptimizerState state dict, or ()."""
  if not isinstance(state, dict) or 'param_states' in state or (
      'step' not in state):
    return ()
  fields = tuple(key for key in state if key != 'step')
  return fields if fields and set(fields) <= _KNOWN_FIELDS else ()


def column_wise_state_hint(state) -> str:
  fields = column_fields(state)
  if not fields:
    return ''
  return (
      'The checkpoint holds the optimizer state column-wise (state/'
      f'{{{",".join(fields)}}}/<param path>), as an earlier flax-optim-compat '
      "wrote it through Orbax; compat.restore_checkpoint(path, target) "
      "converts it to flax.optim's state/param_states/<param path>/<field>.")


def mismatch_hint(expected_state, found_state, template: str) -> str:
  """Which algorithm or layout wrote ``found_state`` (an OptimizerState's
  state dict), when that explains why it does not fit ``expected_state``."""
  found_param_states = (found_state.get('param_states')
                        if isinstance(found_state, dict) else None)
  return '\n'.join(filter(None, (
      _algorithm_hint(expected_state.get('param_states'), found_param_states,
                      template),
      column_wise_state_hint(found_state))))


def find_differences(expected, found, path: str = '', *,
                     exact_dtypes: bool = False,
                     empty_as_none: bool = False) -> list[Difference]:
  """Every path where state dict ``found`` does not fit ``expected``
  (``empty_as_none``: an empty node may be None, as Orbax writes it)."""
  out: list[Difference] = []
  _compare(expected, found, path, out, exact_dtypes, empty_as_none)
  return out


def lookup(tree, path):
  """The node at ``path`` (a tuple of keys) of nested dicts, or MISSING."""
  for key in path:
    if not isinstance(tree, dict) or key not in tree:
      return MISSING
    tree = tree[key]
  return tree


def param_states_from_columns(state, target) -> dict:
  """flax.optim's layout of a column-wise OptimizerState state dict.

  Args:
    state: ``{'step': ..., <field>: <params-shaped tree>, ...}``.
    target: the Optimizer's target as a state dict (gives the param paths).

  Returns:
    ``{'step': ..., 'param_states': <params-shaped tree of {field: value}>}``;
    a param with None in every column (one no sub-optimizer owns) gets None.
    Entries a column lacks stay absent, so the template check names them.
  """
  fields = column_fields(state)
  if not fields:
    raise ValueError('not a column-wise optimizer state: keys '
                     f'{sorted(state) if isinstance(state, dict) else state}')

  def per_param(node, path):
    if isinstance(node, dict) and node:
      return {k: per_param(v, path + (k,)) for k, v in node.items()}
    values = {f: lookup(state[f], path) for f in fields}
    if all(v is None for v in values.values()):
      return None
    return {f: v for f, v in values.items() if v is not MISSING}

  return {'step': state['step'], 'param_states': per_param(target, ())}


# ----------------------------------------------------------------------------
# flax.training.checkpoints.restore_checkpoint(dir, target=optimizer).
#
# Its Orbax backend restores by key path with the target as the fallback:
# entries the checkpoint lacks keep the target's values, dtypes are cast to
# the target's, extra entries are dropped. The state dict that reaches
# restore_state then always fits the template, so it is the file itself that
# must be checked. flax calls serialization.from_state_dict(target, ...)
# inside restore_checkpoint; that call is recognised on the stack (nothing of
# flax is patched) and the file's metadata (shapes and dtypes, no values) is
# compared with the template.

_FLAX_CHECKPOINTS = 'flax.training.checkpoints'


def _flax_restore_frame():
  """flax's restore_checkpoint frame when it is restoring us, else None."""
  frame = sys._getframe(1)
  while frame is not None:
    if (frame.f_code.co_name == 'restore_checkpoint' and
        frame.f_globals.get('__name__') == _FLAX_CHECKPOINTS):
      return frame
    frame = frame.f_back
  return None


def as_state_dict(tree):
  """An Orbax tree (restored values or metadata) in state-dict form.

  Orbax gives tuples as lists and empty nodes as ``()``; flax's state dicts
  have ``{'0': ...}`` and ``{}``. Metadata leaves become ShapeDtypeStructs.
  """
  if isinstance(tree, dict):
    return {str(k): as_state_dict(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return {str(i): as_state_dict(v) for i, v in enumerate(tree)}
  if tree is None or is_array(tree) or _is_scalar(tree):
    return tree
  if hasattr(tree, 'shape') and hasattr(tree, 'dtype'):
    return jax.ShapeDtypeStruct(tuple(tree.shape), tree.dtype)
  return tree


def orbax_metadata(checkpointer, path):
  """The state-dict form of an Orbax checkpoint's tree metadata, or None."""
  try:
    metadata = checkpointer.metadata(path)
  except Exception:
    return None  # Unreadable metadata: the restore itself reports it.
  metadata = getattr(metadata, 'item_metadata', metadata)
  return as_state_dict(getattr(metadata, 'tree', metadata))


def _check_flax_restore_call(expected, template: str) -> None:
  frame = _flax_restore_frame()
  if frame is None:
    return
  deprecation.warn_legacy_use('restore_checkpoint')
  local = frame.f_locals
  if not local.get('is_orbax') or local.get('orbax_transforms') is not None:
    return  # msgpack: the state dict was the file. Transforms: a remapping.
  on_disk = orbax_metadata(local.get('orbax_checkpointer'),
                           local.get('ckpt_path'))
  if on_disk is None:
    return
  # from_state_dict names the root '.': './opt' for {'opt': optimizer}.
  keys = tuple(k for k in serialization.current_path().split('/')
               if k not in ('', '.'))
  where = '/'.join(keys)
  found = lookup(on_disk, keys)
  if found is MISSING:
    listed = [Difference(where, _describe(expected), 'no entry')]
  else:
    # Orbax casts the file's values to the target's dtypes: exact dtypes;
    # and it writes an empty node as None.
    listed = find_differences(expected, found, where, exact_dtypes=True,
                              empty_as_none=True)
  if listed:
    state = found.get('state') if isinstance(found, dict) else None
    raise RestoreMismatchError(listed, template, '\n'.join(filter(None, (
        mismatch_hint(expected['state'], state, template),
        f'(Read from the Orbax checkpoint {local.get("ckpt_path")}: '
        "flax's restore_checkpoint would have filled what it lacks from the "
        "target and cast dtypes to the target's. compat.restore_checkpoint("
        'path, target) restores only what matches exactly.)'))))
