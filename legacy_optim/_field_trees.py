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
