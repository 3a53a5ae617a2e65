"""The per-field view of the legacy per-parameter states.

The legacy layout (what users read and checkpoints hold) is a tree shaped like
the params whose leaves are per-parameter state dataclasses, e.g.
``{'w': _MomentumParamState(momentum=...)}``. Optax keeps one tree per state
field instead, e.g. ``TraceState(trace={'w': ...})``. Converting is a
transpose over the params' tree structure; it moves references only (no array
is copied), so it costs nothing under ``jax.jit``.
"""

from typing import Any, Callable, Mapping, Sequence

import jax


def is_named_tuple(node) -> bool:
  """True for a NamedTuple instance (an Optax state), not a plain tuple."""
  return isinstance(node, tuple) and hasattr(node, '_fields')


def optax_state_values(opt_state) -> dict[str, Any]:
  """Attribute -> value of every NamedTuple in an Optax state or a chain's
  tuple of them (``count``, ``trace``, ``grad_ema``...)."""
  if is_named_tuple(opt_state):
    return opt_state._asdict()
  values = {}
  if isinstance(opt_state, tuple):
    for inner in opt_state:
      values.update(optax_state_values(inner))
  return values


def fill_optax_state(template, values: Mapping[str, Any]):
  """``template`` with every NamedTuple attribute named in ``values``
  replaced by its value (the inverse of ``optax_state_values``)."""
  if is_named_tuple(template):
    return template._replace(**{name: values[name] for name in template._fields
                                if name in values})
  if isinstance(template, tuple):
    return tuple(fill_optax_state(inner, values) for inner in template)
  return template


def split_param_states(
    param_states: Any, params: Any, fields: Sequence[str]) -> dict[str, Any]:
  """Per-leaf state objects -> one params-shaped tree per field."""
  treedef = jax.tree_util.tree_structure(params)
  flat_states = treedef.flatten_up_to(param_states)
  return {
      name: treedef.unflatten([getattr(s, name) for s in flat_states])
      for name in fields
  }


def merge_param_states(
    field_trees: Mapping[str, Any], params: Any,
    make_state: Callable[..., Any]) -> Any:
  """One params-shaped tree per field -> per-leaf state objects."""
  treedef = jax.tree_util.tree_structure(params)
  columns = {name: treedef.flatten_up_to(tree)
             for name, tree in field_trees.items()}
  flat_states = [
      make_state(**{name: column[i] for name, column in columns.items()})
      for i in range(treedef.num_leaves)
  ]
  return treedef.unflatten(flat_states)
