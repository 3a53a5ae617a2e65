"""Removals next to flax.optim that stop the same old code on today's jax/flax.

One table for ``compat scan`` (which reports them) and ``compat migrate``
(which rewrites the mechanical ones): ``match(node, names)`` says what a node
is and, when the rewrite is mechanical, what it becomes. The opt-in runtime
layer (``compat.legacy_jax``) serves the same rows to old programs that run
unchanged: ``runtime_aliases()`` derives what it adds from them, so each
alias and its rewrite are one fact. The fixes that are one text, and the
rows' names the rule table's ``removals`` list, are the table's
(``legacy_optim/_rule_table.py``: ``REMOVAL_FIXES``). Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _walk

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
    'jax.random.KeyArray': 'jax.Array',
    'jax.partial': 'functools.partial',
    'jax.ops.index': 'numpy.index_exp',
}
# Removed modules -> where they live today (``from jax.experimental import
# optimizers``).
_MOVED_MODULES = {
    'jax.experimental.optimizers': 'jax.example_libraries.optimizers',
    'jax.experimental.stax': 'jax.example_libraries.stax',
}
# Removed ``jax.ops.index_*(x, idx, y)`` -> the method of ``x.at[idx]``.
_AT_METHODS = {
    'jax.ops.index_update': 'set',
    'jax.ops.index_add': 'add',
    'jax.ops.index_mul': 'multiply',
    'jax.ops.index_min': 'min',
    'jax.ops.index_max': 'max',
}
# flax.nn's activation functions were jax's own (flax/nn/activation.py
# imported them from jax.nn, tanh from jax.numpy): their jax names are the
# same functions. The rest of flax.nn (pre-Linen modules) is _REPORTED. The
# runtime layer refuses flax.nn whole, so these have no runtime alias; the
# prefilter finds them as it finds every flax.nn mention.
_FLAX_NN_ACTIVATIONS = {
    **{f'flax.nn.{name}': f'jax.nn.{name}' for name in (
        'celu', 'elu', 'gelu', 'glu', 'leaky_relu', 'log_sigmoid',
        'log_softmax', 'relu', 'sigmoid', 'soft_sign', 'softmax', 'softplus',
        'swish', 'silu')},
    'flax.nn.tanh': 'jax.numpy.tanh',
}
# Reported only: no mechanical rewrite.
_REPORTED = {_codes.FLAX_NN: _codes.removal_fix(_codes.FLAX_NN)}

# flax.training.lr_schedule went with flax.optim; flax_optim_rules.lr_schedule
# has its helpers bit for bit (what replaces it: the rule table's text).
LR_SCHEDULE = _codes.LR_SCHEDULE
LR_SCHEDULE_EXACT = 'flax_optim_rules.lr_schedule'
_LR_SCHEDULE_HELPERS = frozenset((
    'create_constant_learning_rate_schedule',
    'create_stepped_learning_rate_schedule',
    'create_cosine_learning_rate_schedule',
))
LR_SCHEDULE_REPLACEMENT = _codes.removal_fix(LR_SCHEDULE)


class Removal(NamedTuple):
  construct: str  # 'removed_api' or 'out_of_scope'
  old: str
  replacement: str  # text for a report
  # The mechanical rewrite, or None: a template for the source of ``target``
  # (``{source}``: its current source; literal braces doubled); '' deletes
  # the statement.
  rewrite: Optional[str]
  target: Optional[ast.AST] = None  # what the rewrite replaces; default: node
  parts: tuple = ()  # (name, node): more ``{name}`` sources for the template


def removed_spellings(name: str) -> tuple[str, ...]:
  """The removed names that today's ``name`` replaces (``jax.tree_multimap``
  for ``jax.tree_util.tree_map``): code still spelling them calls ``name``
  once migrated, or through the runtime layer."""
  return tuple(old for old, new in _RENAMED.items()
               if f"{old.rsplit('.', 1)[0]}.{new}" == name)


def needed_import(rewrite: str) -> Optional[str]:
  """The module a rewrite's text names first (``jax``, ``flax``,
  ``flax_optim_rules.lr_schedule``)."""
  if rewrite == LR_SCHEDULE_EXACT or rewrite.startswith(
      LR_SCHEDULE_EXACT + '.'):
    return LR_SCHEDULE_EXACT
  if rewrite.startswith(('jax.', 'flax.', 'functools.', 'numpy.')):
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


# Calls that are no-ops today, as expression statements: deleted. Both
# spellings of the config object (``from jax.config import config``).
_NO_OPS = dict.fromkeys(
    ('jax.config.enable_omnistaging', 'jax.config.config.enable_omnistaging'),
    _codes.removal_fix(_codes.OMNISTAGING))
# Modules whose call took (inputs_q, inputs_kv, mask) and now takes
# (inputs_q, inputs_k, inputs_v, *, mask): a third positional argument that
# was the mask would become the values.
_KV_ATTENTION = frozenset((
    'flax.linen.MultiHeadDotProductAttention',
    'flax.linen.attention.MultiHeadDotProductAttention',
))
_POSITIONAL_MASK = _codes.POSITIONAL_MASK
_POSITIONAL_MASK_FIX = _codes.removal_fix(_POSITIONAL_MASK)
# linen's ``init`` returned a FrozenDict until flax 0.7.
_POP_UNPACKING = _codes.POP_UNPACKING
_POP_UNPACKING_FIX = _codes.removal_fix(_POP_UNPACKING)
_FROZEN_COPY = _codes.FROZEN_COPY
_FROZEN_COPY_FIX = _codes.removal_fix(_FROZEN_COPY)


def _words(paths) -> frozenset:
  return frozenset(path.rpartition('.')[2] for path in paths)


# The last words of the removed paths an attribute chain and a call's
# callee can read (``_ends_elsewhere``).
_ATTRIBUTE_WORDS = _words([*_RENAMED, *_MOVED, *_FLAX_NN_ACTIVATIONS,
                           LR_SCHEDULE, *_REPORTED])
_CALLEE_WORDS = _words(_AT_METHODS)


def _ends_elsewhere(node, words, names) -> bool:
  """``node`` is an attribute chain whose path cannot end in one of
  ``words``: where the project re-exports nothing, a chain's path ends in
  its own attribute (every scanned attribute and call asks, and most of
  them read nothing removed)."""
  return isinstance(node, ast.Attribute) and node.attr not in words and (
      not names.reexports)


# The kinds of node ``match`` can find a removed API in.
MATCHED_KINDS = (ast.ImportFrom, ast.Import, ast.Assign, ast.Expr, ast.Call,
                 ast.Attribute)


def match(node, names) -> Optional[Removal]:
  """A removed API that ``node`` (an attribute, import, assignment, call or
  expression statement) uses."""
  if isinstance(node, ast.ImportFrom) and node.module and not node.level:
    return _match_import(node)
  if isinstance(node, ast.Import):
    return _match_lr_schedule_import(node, names)
  if isinstance(node, ast.Assign):
    return _match_pop_unpacking(node, names)
  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
    path = names.resolve(node.value.func)
    if path in _NO_OPS:
      return Removal('removed_api', f'{path}()', _NO_OPS[path], '')
    return None
  if isinstance(node, ast.Call):
    return (_match_positional_mask(node, names) or
            _match_frozen_copy(node) or _match_at_method(node, names))
  if not isinstance(node, ast.Attribute) or _ends_elsewhere(
      node, _ATTRIBUTE_WORDS, names):
    return None
  path = names.resolve(node)
  if path in _RENAMED:
    base = _source_of(node.value)
    new = _RENAMED[path]
    return Removal('removed_api', path, f'{path.rsplit(".", 1)[0]}.{new}',
                   None if base is None else _literal(f'{base}.{new}'))
  if path in _MOVED:
    return Removal('removed_api', path, _MOVED[path], _MOVED[path])
  if path in _FLAX_NN_ACTIVATIONS:
    new = _FLAX_NN_ACTIVATIONS[path]
    return Removal('removed_api', path, _codes.removal_text(
        _codes.REMOVAL_SAME_FUNCTION, new=new), new)
  if path == LR_SCHEDULE:  # flax.training.lr_schedule.X: the module moved
    return Removal('removed_api', path, LR_SCHEDULE_REPLACEMENT,
                   _literal(LR_SCHEDULE_EXACT) if isinstance(
                       node.ctx, ast.Load) else None)
  if path in _REPORTED:
    if _is_activation_base(node, names):
      return None  # the activation's row rewrites the whole chain
    return Removal('out_of_scope', path, _REPORTED[path], None)
  return None


def _is_activation_base(node: ast.Attribute, names) -> bool:
  """Whether ``node`` (``flax.nn``) is the module of a ``flax.nn``
  activation (``flax.nn.relu``)."""
  parent = _walk.parents(names.tree).get(node)  # (a node has one)
  return isinstance(parent, ast.Attribute) and parent.value is node and (
      names.resolve(parent) in _FLAX_NN_ACTIVATIONS)


def _match_import(node: ast.ImportFrom) -> Optional[Removal]:
  if node.module == 'jax.config' and [(a.name, a.asname) for a in
                                      node.names] == [('config', None)]:
    return Removal('removed_api', 'from jax.config import config',
                   'from jax import config', 'from jax import config')
  if node.module in (LR_SCHEDULE, LR_SCHEDULE.rpartition('.')[0]):
    return _match_lr_schedule_from(node)
  moved = _match_moved_module_from(node)
  if moved:
    return moved
  imported = {f'{node.module}.{a.name}' for a in node.names}
  for prefix, reason in _REPORTED.items():
    if node.module == prefix or node.module.startswith(prefix + '.') or (
        prefix in imported):
      return Removal('out_of_scope', prefix, reason, None)
  return None


def _match_lr_schedule_from(node: ast.ImportFrom) -> Optional[Removal]:
  """``from flax.training import lr_schedule`` and ``from
  flax.training.lr_schedule import create_...``: the same names from
  flax_optim_rules."""
  if node.module == LR_SCHEDULE:
    if all(a.name in _LR_SCHEDULE_HELPERS for a in node.names):
      return Removal('removed_api', LR_SCHEDULE, LR_SCHEDULE_REPLACEMENT,
                     _literal(_import_from(LR_SCHEDULE_EXACT, node.names,
                                           node)))
    # ``*`` also bound the module's own imports (jnp, np).
    return Removal('removed_api', LR_SCHEDULE, _codes.removal_text(
        _codes.REMOVAL_STAR_IMPORT, module=LR_SCHEDULE_EXACT,
        fix=LR_SCHEDULE_REPLACEMENT), None)
  module, _, name = LR_SCHEDULE.rpartition('.')
  moved = [a for a in node.names if a.name == name]
  if not moved:
    return None
  new = _import_from(LR_SCHEDULE_EXACT.rpartition('.')[0], moved, node)
  kept = [a for a in node.names if a.name != name]
  if kept:
    # A module-level statement starts its line; in a block the indentation
    # is not known here, so the second import shares the line.
    separator = '\n' if node.col_offset == 0 else '; '
    new = _import_from(module, kept, node) + separator + new
  return Removal('removed_api', LR_SCHEDULE, LR_SCHEDULE_REPLACEMENT,
                 _literal(new))


def _import_from(module: str, aliases, statement: ast.ImportFrom) -> str:
  """``from module import aliases``, parenthesized one per line where
  ``statement`` spanned several lines."""
  names = [a.name + (f' as {a.asname}' if a.asname else '') for a in aliases]
  if statement.end_lineno == statement.lineno:
    return f'from {module} import {", ".join(names)}'
  indent = ' ' * (statement.col_offset + 4)  # inside parentheses: any
  lines = ''.join(f'{indent}{name},\n' for name in names)
  return f'from {module} import (\n{lines}{indent[:-4]})'


def _match_moved_module_from(node: ast.ImportFrom) -> Optional[Removal]:
  """``from jax.experimental.optimizers import x`` and ``from
  jax.experimental import optimizers``: the same names from where the module
  lives today (only where every name imported moved alike)."""
  if node.module in _MOVED_MODULES:
    new = _MOVED_MODULES[node.module]
    fix = _codes.removal_text(_codes.REMOVAL_MOVED, old=node.module, new=new)
    return Removal('removed_api', node.module, fix,
                   _literal(_import_from(new, node.names, node)))
  moved = [f'{node.module}.{a.name}' for a in node.names
           if f'{node.module}.{a.name}' in _MOVED_MODULES]
  if not moved:
    return None
  parents = {_MOVED_MODULES[m].rpartition('.')[0] for m in moved}
  fix = ', '.join(_codes.removal_text(_codes.REMOVAL_MOVED, old=m,
                                      new=_MOVED_MODULES[m]) for m in moved)
  if len(moved) < len(node.names) or len(parents) > 1:
    return Removal('removed_api', moved[0], _codes.removal_text(
        _codes.REMOVAL_IMPORT_KEPT, fix=fix), None)
  return Removal('removed_api', moved[0], fix,
                 _literal(_import_from(parents.pop(), node.names, node)))


def _match_at_method(node: ast.Call, names) -> Optional[Removal]:
  """``jax.ops.index_update(x, idx, y)``: ``jax.numpy.asarray(x).at[idx]
  .set(y)``, which converts ``x`` as the removed function did."""
  if _ends_elsewhere(node.func, _CALLEE_WORDS, names):
    return None
  path = names.resolve(node.func)
  if path not in _AT_METHODS:
    return None
  if len(node.args) != 3 or node.keywords or any(
      isinstance(a, ast.Starred) for a in node.args):
    return Removal('removed_api', path, _codes.removal_text(
        _codes.REMOVAL_CALL_KEPT, fix=_at_method_fix(path)), None)
  return Removal('removed_api', path, _at_method_fix(path),
                 'jax.numpy.asarray({x}).at[{idx}].'
                 f'{_AT_METHODS[path]}({{y}})', node,
                 tuple(zip(('x', 'idx', 'y'), node.args)))


def _at_method_fix(path: str) -> str:
  return _codes.removal_text(_codes.REMOVAL_AT_METHOD, old=path,
                            method=_AT_METHODS[path])


def _match_lr_schedule_import(node: ast.Import, names) -> Optional[Removal]:
  """``import flax.training.lr_schedule [as m]``: flax_optim_rules'."""
  if not any(a.name == LR_SCHEDULE for a in node.names):
    return None
  new = []
  for alias in node.names:
    if alias.name != LR_SCHEDULE:
      new.append(alias.name + (f' as {alias.asname}' if alias.asname else ''))
    elif alias.asname:
      new.append(f'{LR_SCHEDULE_EXACT} as {alias.asname}')
    else:
      if _flax_needs_binding(node, names.tree):
        new.append('flax')
      new.append(LR_SCHEDULE_EXACT)
  return Removal('removed_api', LR_SCHEDULE, LR_SCHEDULE_REPLACEMENT,
                 _literal('import ' + ', '.join(dict.fromkeys(new))))


def _flax_needs_binding(statement: ast.Import, tree: ast.Module) -> bool:
  """Whether ``flax``, bound by ``statement`` (``import
  flax.training.lr_schedule``), is used for more than that module and bound
  by no other import."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Import) and node is not statement and any(
        a.asname is None and a.name.partition('.')[0] == 'flax' and
        a.name != LR_SCHEDULE for a in node.names):
      return False
  uses = sum(isinstance(n, ast.Name) and n.id == 'flax'
             for n in ast.walk(tree))
  lr_schedule_uses = sum(_source_of(n) == LR_SCHEDULE
                         for n in ast.walk(tree)
                         if isinstance(n, ast.Attribute))
  return uses > lr_schedule_uses


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
  if _plain_dict(value.func.value, node, names.tree):
    return None  # a dict's pop gives the value: no FrozenDict was popped
  receiver = _source_of(value.func.value)
  rewrite = (_literal(f'flax.core.pop({receiver}, {value.args[0].value!r})')
             if receiver else None)
  return Removal('removed_api', _POP_UNPACKING, _POP_UNPACKING_FIX, rewrite)


def _plain_dict(receiver: ast.expr, statement: ast.stmt,
                tree: ast.Module) -> bool:
  """Whether ``receiver`` is a plain dict where ``statement`` reads it:
  made by ``dict(...)`` or a display, or a name its scope binds only so
  (``**params``, ``params = dict(...)``, ``params: dict``). Anything else
  (``variables``, ``model.init(x)``, a parameter) may be a FrozenDict."""
  if _makes_plain_dict(receiver):
    return True
  if not isinstance(receiver, ast.Name):
    return False
  scope = _scope_of(statement, tree)
  plain = []  # one per binding of the name in its scope
  if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
    arguments = scope.args
    plain += [True for a in (arguments.kwarg,) if a and a.arg == receiver.id]
    plain += [_annotates_dict(a.annotation) for a in (
        *arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
        arguments.vararg) if a and a.arg == receiver.id]
  counted = set()  # the targets of the assignments judged above
  for node in _walk.scope_nodes(scope):
    targets = [t for t in (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.AnnAssign)
                           else []) if isinstance(t, ast.Name) and
               t.id == receiver.id]
    if targets and isinstance(node, ast.Assign):
      plain.append(_makes_plain_dict(node.value))
    elif targets:
      plain.append(_annotates_dict(node.annotation))
    elif isinstance(node, ast.Name) and node.id == receiver.id and (
        isinstance(node.ctx, ast.Store)) and id(node) not in counted:
      plain.append(False)  # bound by a loop, a with, an unpacking...
    counted.update(map(id, targets))
  return bool(plain) and all(plain)


def _makes_plain_dict(value: ast.expr) -> bool:
  return isinstance(value, (ast.Dict, ast.DictComp)) or (
      isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and
      value.func.id == 'dict')


def _annotates_dict(annotation: Optional[ast.expr]) -> bool:
  if isinstance(annotation, ast.Subscript):
    annotation = annotation.value
  return isinstance(annotation, (ast.Name, ast.Attribute)) and (
      _source_of(annotation) in ('dict', 'Dict', 'typing.Dict'))


def _scope_of(statement: ast.stmt, tree: ast.Module) -> ast.AST:
  """The function or class whose body holds ``statement`` (or the module);
  statements only are walked, and a pop like this one is rare."""
  todo = [(tree, tree)]
  while todo:
    node, scope = todo.pop()
    for child in _walk.statement_children(node):
      if child is statement:
        return scope
      todo.append((child, child if isinstance(child, (
          ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope))
  return tree


def _match_positional_mask(node: ast.Call, names) -> Optional[Removal]:
  """``MultiHeadDotProductAttention(...)(q, kv, mask)``: the mask by name."""
  module = node.func
  if not (isinstance(module, ast.Call) and
          names.resolve(module.func) in _KV_ATTENTION and
          len(node.args) == 3 and
          not any(isinstance(a, ast.Starred) for a in node.args) and
          not any(k.arg in (None, 'mask', 'inputs_v') for k in node.keywords)):
    return None
  return Removal('removed_api', _POSITIONAL_MASK, _POSITIONAL_MASK_FIX,
                 'mask={source}', node.args[2])


def _match_frozen_copy(node: ast.Call) -> Optional[Removal]:
  """``variables.copy({...})``: FrozenDict's merge; ``init`` returns a plain
  dict today, whose ``copy`` takes no argument. Only a dict display as the
  argument says it is that merge (``ndarray.copy('C')`` is not)."""
  if not (isinstance(node.func, ast.Attribute) and node.func.attr == 'copy'
          and len(node.args) == 1 and isinstance(node.args[0], ast.Dict)
          and not node.keywords):
    return None
  return Removal('removed_api', _FROZEN_COPY, _FROZEN_COPY_FIX,
                 'flax.core.copy({receiver}, {update})', node,
                 (('receiver', node.func.value), ('update', node.args[0])))


def _literal(text: str) -> str:
  """``text`` as a rewrite template: braces doubled."""
  return text.replace('{', '{{').replace('}', '}}')


# ---------------------------------------------------------------------------
# The runtime layer (``compat.legacy_jax``, opt-in): how it serves each row
# above to an old program run unchanged. It adds a name only where the
# installed jax/flax lacks it, and never replaces one that exists.

# What the layer does for a removal (``RuntimeAlias.kind``):
ATTRIBUTE = 'attribute'  # module ``old``'s parent gets the object at ``new``
AT_METHOD = 'at_method'  # module ``old``'s parent gets a function calling
# the method ``new`` of ``jnp.asarray(x).at[idx]``
MODULE = 'module'  # ``import old`` gives the module ``new``
MODULE_ATTRIBUTE = 'module_attribute'  # a module ``old``'s parent holding
# the object at ``new`` under ``old``'s last name (``from jax.config import
# config``: ``jax.config`` is an object today, not a module)
NO_OP = 'no_op'  # the object ``old``'s parent gets a method doing nothing
FLAX_CONFIG = 'flax_config'  # flax's configuration flag ``new`` set True
ROUTE_MASK = 'route_mask'  # module ``new``'s call gets a positional mask
# routed to ``mask=`` (only where it cannot be values: one more dimension
# than the keys, as flax's masks have)
REFUSE = 'refuse'  # not guessed: importing ``old`` raises naming the fix

# The flag that makes linen's ``init`` return a FrozenDict again.
RETURN_FROZENDICT = 'flax.config.flax_return_frozendict'


class RuntimeAlias(NamedTuple):
  old: str  # the removed name, dotted as old code reaches it
  kind: str  # ATTRIBUTE, MODULE, ...
  new: str  # today's equivalent, dotted (FLAX_CONFIG: flax.config.<flag>)
  fix: str  # what ``migrate`` does or the report says (Removal.replacement)


def runtime_aliases() -> tuple[RuntimeAlias, ...]:
  """Every removal the runtime layer serves, derived from the tables above.

  A removal missing here is one the layer leaves failing as it does today
  (an ``import`` of an absent module, a missing attribute).
  """
  aliases = []
  for old, new in _RENAMED.items():
    absolute = f'{old.rsplit(".", 1)[0]}.{new}'
    aliases.append(RuntimeAlias(old, ATTRIBUTE, absolute, absolute))
  aliases += [RuntimeAlias(old, ATTRIBUTE, new, new)
              for old, new in _MOVED.items()]
  aliases += [RuntimeAlias(old, NO_OP, '', fix) for old, fix in
              _NO_OPS.items() if old.count('.') == 2]  # one object: once
  aliases.append(RuntimeAlias('jax.config.config', MODULE_ATTRIBUTE,
                              'jax.config', 'from jax import config'))
  aliases += [RuntimeAlias(old, AT_METHOD, new, _at_method_fix(old))
              for old, new in _AT_METHODS.items()]
  aliases.append(RuntimeAlias(LR_SCHEDULE, MODULE, LR_SCHEDULE_EXACT,
                              LR_SCHEDULE_REPLACEMENT))
  aliases += [RuntimeAlias(old, MODULE, new, f'{old} moved to {new}')
              for old, new in _MOVED_MODULES.items()]
  aliases += [RuntimeAlias(_POP_UNPACKING, FLAX_CONFIG, RETURN_FROZENDICT,
                           _POP_UNPACKING_FIX),
              RuntimeAlias(_FROZEN_COPY, FLAX_CONFIG, RETURN_FROZENDICT,
                           _FROZEN_COPY_FIX)]
  aliases += [RuntimeAlias(_POSITIONAL_MASK, ROUTE_MASK, path,
                           _POSITIONAL_MASK_FIX)
              for path in sorted(_KV_ATTENTION) if path.count('.') == 3]
  aliases += [RuntimeAlias(old, REFUSE, '', fix)
              for old, fix in _REPORTED.items()]
  return tuple(aliases)
