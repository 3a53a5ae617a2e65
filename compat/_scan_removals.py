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
    'jax.host_id': 'process_index',
    'jax.host_count': 'process_count',
    'jax.host_ids': 'process_indices',
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
  # The mechanical rewrite, or None: a template for the source of ``target``
  # (``{source}``: its current source; literal braces doubled); '' deletes
  # the statement.
  rewrite: Optional[str]
  target: Optional[ast.AST] = None  # what the rewrite replaces; default: node


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


# Calls that are no-ops today, as expression statements: deleted.
_NO_OPS = {
    'jax.config.enable_omnistaging': (
        'jax.config.enable_omnistaging() was removed: omnistaging is always '
        'on (jax >= 0.2.12); delete the call'),
    'jax.config.config.enable_omnistaging': (
        'jax.config.enable_omnistaging() was removed: omnistaging is always '
        'on (jax >= 0.2.12); delete the call'),
}
# Modules whose call took (inputs_q, inputs_kv, mask) and now takes
# (inputs_q, inputs_k, inputs_v, *, mask): a third positional argument that
# was the mask would become the values.
_KV_ATTENTION = frozenset((
    'flax.linen.MultiHeadDotProductAttention',
    'flax.linen.attention.MultiHeadDotProductAttention',
))


def match(node, names) -> Optional[Removal]:
  """A removed API that ``node`` (an attribute, import, assignment, call or
  expression statement) uses."""
  if isinstance(node, ast.ImportFrom) and node.module and not node.level:
    return _match_import(node)
  if isinstance(node, ast.Assign):
    return _match_pop_unpacking(node, names)
  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
    path = names.resolve(node.value.func)
    if path in _NO_OPS:
      return Removal('removed_api', f'{path}()', _NO_OPS[path], '')
    return None
  if isinstance(node, ast.Call):
    return _match_positional_mask(node, names)
  if not isinstance(node, ast.Attribute):
    return None
  path = names.resolve(node)
  if path in _RENAMED:
    base = _source_of(node.value)
    new = _RENAMED[path]
    return Removal('removed_api', path, f'{path.rsplit(".", 1)[0]}.{new}',
                   None if base is None else _literal(f'{base}.{new}'))
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
  rewrite = (_literal(f'flax.core.pop({receiver}, {value.args[0].value!r})')
             if receiver else None)
  return Removal('removed_api', 'FrozenDict.pop unpacking',
                 'flax.core.pop(variables, key): init returns a plain dict '
                 'today, whose pop gives only the value', rewrite)


def _match_positional_mask(node: ast.Call, names) -> Optional[Removal]:
  """``MultiHeadDotProductAttention(...)(q, kv, mask)``: the mask by name."""
  module = node.func
  if not (isinstance(module, ast.Call) and
          names.resolve(module.func) in _KV_ATTENTION and
          len(node.args) == 3 and
          not any(isinstance(a, ast.Starred) for a in node.args) and
          not any(k.arg in (None, 'mask', 'inputs_v') for k in node.keywords)):
    return None
  return Removal('removed_api', 'MultiHeadDotProductAttention(...)(inputs_q, '
                 'inputs_kv, mask)', 'the call now takes (inputs_q, inputs_k, '
                 'inputs_v, *, mask): pass the mask as mask=...',
                 'mask={source}', node.args[2])


def _literal(text: str) -> str:
  """``text`` as a rewrite template: braces doubled."""
  return text.replace('{', '{{').replace('}', '}}')
