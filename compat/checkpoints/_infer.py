"""What a flax.optim checkpoint says about the optimizer that wrote it.

A checkpoint stores the step, the target and per-parameter states, never the
optimizer definition. The state's field names identify the algorithm family
(``legacy_optim.catalogue``) and the state's shapes its
layout-relevant static configuration (RMSProp ``centered``; Adafactor
``factored``/``min_dim_size_to_factor``/momentum). Hyper-parameter values
(learning rate, betas...) are not stored anywhere.

``infer`` turns that into a *layout-equivalent* spec
(``compat.checkpoints._spec``): an optimizer definition whose state has
exactly the checkpoint's structure, shapes and dtypes. It refuses to guess
between algorithms with the same fields (the Adam family; Momentum and LARS).
"""

import dataclasses
import re
from typing import Any, Optional

import numpy as np

from legacy_optim import _restore
from legacy_optim import catalogue

WEIGHT_NORM = 'WeightNorm'
_NO_STATE = ()  # GradientDescent.


@dataclasses.dataclass(frozen=True)
class Inference:
  """Per-leaf state fields, candidate algorithms and an inferred spec."""
  leaf_fields: dict  # 'dense/kernel' -> ('momentum',), or None (unowned).
  leaf_algorithms: dict  # 'dense/kernel' -> ('LARS', 'Momentum'); () unowned.
  algorithms: tuple  # Candidates for the whole optimizer.
  spec: Optional[str]  # Layout-equivalent spec, or None when ambiguous.
  notes: tuple  # Why the spec is None, and anything suspicious.


def is_array(x) -> bool:
  return isinstance(x, (np.ndarray, np.generic))


def flatten(tree, prefix=()) -> list[tuple[tuple[str, ...], Any]]:
  """(path, leaf) pairs of a state dict; an empty dict is a leaf."""
  if isinstance(tree, dict) and tree:
    out = []
    for key, value in tree.items():
      out += flatten(value, prefix + (key,))
    return out
  return [(prefix, tree)]


# lookup(tree, path): the node at ``path`` (a tuple of keys) of nested dicts,
# or MISSING for a path the tree does not have.
MISSING = _restore.MISSING
lookup = _restore.lookup


def param_leaves(target) -> list[tuple[tuple[str, ...], Any]]:
  """The target's array leaves (what the optimizer trains), with paths."""
  return [(p, v) for p, v in flatten(target) if is_array(v)]


def _group_spec(name: str, states: list[dict], params: list[Any]):
  """A layout-equivalent spec for leaves of one algorithm, or (None, why)."""
  if name == 'RMSProp':
    centered = {s['mg'] is not None for s in states}
    if len(centered) > 1:
      return None, 'RMSProp leaves disagree on "centered" (mg is None for some)'
    return f'RMSProp(centered={centered.pop()})', ''
  if name == 'Adafactor':
    return _adafactor_spec(states, params)
  if name == WEIGHT_NORM:
    inner_states = [s['direction_state'] for s in states]
    inner_params = [s['direction'] for s in states]
    inner_fields = {_fields(s) for s in inner_states}
    if len(inner_fields) != 1:
      return None, 'WeightNorm leaves hold different inner optimizer states'
    (fields,) = inner_fields
    candidates = catalogue.algorithms_for_fields(fields or ())
    if len(candidates) != 1:
      return None, (f'WeightNorm wraps one of {", ".join(candidates)} '
                    f'(inner state fields {list(fields or ())})')
    inner, why = _group_spec(candidates[0], inner_states, inner_params)
    return (f'WeightNorm({inner})' if inner else None), why
  return f'{name}()', ''


def _adafactor_spec(states, params):
  """Adafactor's static config from which leaves hold factored moments."""
  factored_dims, unfactored_dims = [], []
  momentum = set()
  for state, param in zip(states, params):
    shape = np.shape(param)
    second_largest = sorted(shape)[-2] if len(shape) >= 2 else None
    is_factored = len(shape) >= 2 and np.shape(state['v']) != shape
    (factored_dims if is_factored else unfactored_dims).append(second_largest)
    if shape != (1,):
      momentum.add(np.shape(state['m']) == shape)
  args = []
  if factored_dims:
    threshold = min(factored_dims)
    if any(d is not None and d >= threshold for d in unfactored_dims):
      return None, ('Adafactor leaves are factored inconsistently with any '
                    'min_dim_size_to_factor')
    if threshold != 128:
      args.append(f'min_dim_size_to_factor={threshold}')
  elif any(d is not None and d >= 128 for d in unfactored_dims):
    args.append('factored=False')
  if len(momentum) > 1:
    return None, 'Adafactor leaves disagree on momentum (beta1)'
  if momentum == {True}:
    args.append('beta1=0.9')
  return f'Adafactor({", ".join(args)})', ''


def _fields(state) -> Optional[tuple[str, ...]]:
  if state is None:
    return None
  if isinstance(state, dict):
    return tuple(sorted(state))
  raise ValueError(f'per-parameter state must be a dict or None, found '
                   f'{type(state).__name__}')


def infer(optimizer_state_dict: dict) -> Inference:
  """Infers what it can from an Optimizer's state dict (see module doc)."""
  target = optimizer_state_dict['target']
  param_states = optimizer_state_dict['state']['param_states']
  leaves = param_leaves(target)
  leaf_fields, leaf_algorithms, notes = {}, {}, []
  groups: dict[tuple[str, ...], list] = {}
  for path, param in leaves:
    shown = '/'.join(path)
    state = lookup(param_states, path)
    if state is MISSING:
      raise ValueError(f'state/param_states has no entry for param {shown}.')
    try:
      fields = _fields(state)
    except ValueError as e:
      raise ValueError(f'state/param_states/{shown}: {e}.') from None
    leaf_fields[shown] = fields
    leaf_algorithms[shown] = (
        () if fields is None else catalogue.algorithms_for_fields(fields))
    if fields is not None and not leaf_algorithms[shown]:
      notes.append(
          f'{shown}: unknown per-parameter state fields {list(fields)}')
    if any(is_array(v) and v.dtype.kind in 'fc' and not np.all(np.isfinite(v))
           for _, v in flatten(state)) or (
               param.dtype.kind in 'fc' and not np.all(np.isfinite(param))):
      notes.append(f'{shown}: holds non-finite values')
    groups.setdefault(fields, []).append((path, param, state))

  owned = {f: g for f, g in groups.items() if f is not None}
  specs = {}
  for fields, members in owned.items():
    candidates = catalogue.algorithms_for_fields(fields)
    if len(candidates) != 1:
      specs[fields] = None
      if candidates:
        notes.append(
            f'the state fields {list(fields)} fit {_either(candidates)} '
            'alike: pass the optimizer explicitly')
      continue
    spec, why = _group_spec(candidates[0], [m[2] for m in members],
                            [m[1] for m in members])
    specs[fields] = spec
    if why:
      notes.append(why)

  if len(owned) == 1 and None not in groups:
    (fields,) = owned
    return Inference(leaf_fields, leaf_algorithms,
                     catalogue.algorithms_for_fields(fields), specs[fields],
                     tuple(notes))
  if not owned:
    notes.append('no parameter has optimizer state')
    return Inference(leaf_fields, leaf_algorithms, (), None, tuple(notes))
  spec = None
  if all(specs.values()):
    pairs = [f'({owned_regex([m[0] for m in owned[f]])!r}, {specs[f]})'
             for f in owned]
    spec = f'MultiOptimizer({", ".join(pairs)})'
  return Inference(leaf_fields, leaf_algorithms, ('MultiOptimizer',), spec,
                   tuple(notes))


def _either(names) -> str:
  if len(names) < 2:
    return ''.join(names)
  return ', '.join(names[:-1]) + ' and ' + names[-1]


def owned_regex(paths) -> str:
  """A regex matching exactly these params' ModelParamTraversal paths."""
  alternatives = '|'.join(re.escape('/'.join(p)) for p in sorted(paths))
  return f'^/(?:{alternatives})$'
