"""Moving optimizer state between the legacy layout and Optax's layout.

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


def _describe_path(path) -> str:
  return jax.tree_util.keystr(tuple(path)) or '<root>'


def first_structure_difference(expected: Any, found: Any):
  """Returns (path, expected_node, found_node) where two trees first differ.

  Returns None when the structures are equal.
  """
  if jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(
      found):
    return None
  expected_paths = jax.tree_util.tree_flatten_with_path(expected)[0]
  found_paths = jax.tree_util.tree_flatten_with_path(found)[0]
  for (p_exp, _), (p_found, _) in zip(expected_paths, found_paths):
    if p_exp != p_found:
      return _describe_path(p_exp), _describe_path(p_found)
  if len(expected_paths) != len(found_paths):
    longer, label = ((expected_paths, 'expected') if len(expected_paths) >
                     len(found_paths) else (found_paths, 'found'))
    extra = _describe_path(longer[min(len(expected_paths),
                                      len(found_paths))][0])
    return (extra, '<missing>') if label == 'expected' else ('<missing>',
                                                                extra)
  # Same leaf paths but different node types (e.g. dict vs FrozenDict).
  return '<node types>', '<node types>'


def check_same_structure(expected: Any, found: Any, expected_name: str,
                         found_name: str) -> None:
  """Raises TypeError naming both structures and the first differing path."""
  diff = first_structure_difference(expected, found)
  if diff is None:
    return
  exp_path, found_path = diff
  raise TypeError(
      f'{found_name} must have the same tree structure as {expected_name}. '
      f'First difference: {expected_name} has {exp_path} where '
      f'{found_name} has {found_path}.\n'
      f'  {expected_name}: {jax.tree_util.tree_structure(expected)}\n'
      f'  {found_name}: {jax.tree_util.tree_structure(found)}')
