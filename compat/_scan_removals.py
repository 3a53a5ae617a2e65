"""Removals next to flax.optim that stop the same old code on today's jax/flax.

One table for ``compat scan`` (which reports them) and ``compat migrate``
(which rewrites the mechanical ones): ``match(node, names)`` says what a node
is and, when the rewrite is mechanical, what it becomes. Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

# Removed attribute -> its replacement, relative to the same module object
# (``jax.tree_map`` -> ``jax.tree_util.tree_map``: the rewrite keeps however
# the user spelled ``jax``).
_RENAMED = {
    'jax.tree_map': 'tree_util.tree_map',
    'jax.tree_multimap': 'tree_util.tree_map',
    'jax.tree_leaves': 'tree_util.tree_leaves',
    'jax.tree_flatten': 'tree_util.tree_flatten',
    'jax.tree_unflatten': 'tree_util.tree_unflatten',
    'jax.tree_structure': 'tree_util.tree_structure',
    'jax.tree_transpose': 'tree_util.tree_transpose',
    'jax.tree_reduce': 'tree_util.tree_reduce',
    'jax.tree_all': 'tree_util.tree_all',
    'jax.profiler.StepTraceContext': 'StepTraceAnnotation',
    'jax.tree_util.tree_multimap': 'tree_map',
}
# Removed attribute -> an absolute replacement (needs ``import jax``).
_MOVED = {
    'jax.numpy.DeviceArray': 'jax.Array',
    'jax.interpreters.xla.DeviceArray': 'jax.Array',
}
# Reported only: no mechanical rewrite.
_REPORTED = {
    'flax.nn': ('flax.nn (pre-Linen modules) is out of scope: port the model '
                'to flax.linen by hand (no mechanical rewrite exists; '
                'parameters and the module API both changed)'),
    'flax.training.lr_schedule': (
        'flax.training.lr_schedule was removed: use optax schedules '
        '(optax.piecewise_constant_schedule, optax.cosine_decay_schedule, '
        'optax.join_schedules); check the values, they are not mechanical'),
}


class Removal(NamedTuple):
  construct: str  # 'removed_api' or 'out_of_scope'
  old: str
  replacement: str  # text for a report
  rewrite: Optional[str]  # mechanical replacement source of ``node``, or None


def needed_import(rewrite: str) -> Optional[str]:
  """The module a rewrite's text names first (``jax``, ``flax``)."""
  if rewrite.startswith(('jax.', 'flax.')):
    return rewrite.partition('.')[0]
  return None


def _source_of(node) -> Optional[str]:
  """``a.b.c`` as written, for name/attribute chains only."""
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    base = _source_of(node.value)
    return None if base is None else f'{base}.{node.attr}'
  return None


def match(node, names) -> Optional[Removal]:
  """A removed API that ``node`` (an attribute, import or assignment) uses."""
  if isinstance(node, ast.ImportFrom) and node.module and not node.level:
    return _match_import(node)
  if isinstance(node, ast.Assign):
    return _match_pop_unpacking(node, names)
  if not isinstance(node, ast.Attribute):
    return None
  path = names.resolve(node)
  if path in _RENAMED:
    base = _source_of(node.value)
    new = _RENAMED[path]
    return Removal('removed_api', path, f'{path.rsplit(".", 1)[0]}.{new}',
                   None if base is None else f'{base}.{new}')
  if path in _MOVED:
    return Removal('removed_api', path, _MOVED[path], _MOVED[path])
  for prefix, reason in _REPORTED.items():
    if path == prefix:
      return Removal('out_of_scope' if prefix == 'flax.nn' else
                     'removed_api', path, reason, None)
  return None


def _match_import(node: ast.ImportFrom) -> Optional[Removal]:
  if node.module == 'jax.config' and [(a.name, a.asname) for a in
                                      node.names] == [('config', None)]:
    return Removal('removed_api', 'from jax.config import config',
                   'from jax import config', 'from jax import config')
  imported = {f'{node.module}.{a.name}' for a in node.names}
  for prefix, reason in _REPORTED.items():
    if node.module == prefix or node.module.startswith(prefix + '.') or (
        prefix in imported):
      return Removal('out_of_scope' if prefix == 'flax.nn' else
                     'removed_api', prefix, reason, None)
  return None


def _match_pop_unpacking(node: ast.Assign, names) -> Optional[Removal]:
  """``rest, params = variables.pop('params')``: ``init`` returns a dict."""
  value = node.value
  if not (len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
          and len(node.targets[0].elts) == 2 and isinstance(value, ast.Call)
          and isinstance(value.func, ast.Attribute) and
          value.func.attr == 'pop' and len(value.args) == 1 and
          not value.keywords and isinstance(value.args[0], ast.Constant) and
          isinstance(value.args[0].value, str)):
    return None
  del names  # any receiver: flax.core.pop takes dicts and FrozenDicts
  receiver = _source_of(value.func.value)
  rewrite = (f'flax.core.pop({receiver}, {value.args[0].value!r})'
             if receiver else None)
  return Removal('removed_api', 'FrozenDict.pop unpacking',
                 'flax.core.pop(variables, key): init returns a plain dict '
                 'today, whose pop gives only the value', rewrite)
