"""An optimizer kept in a dict that is saved or loaded as a tree.

Research code checkpointed ``{'opt': optimizer, 'extra': ...}`` itself: it
flattened the dict into ``.npz`` files and read them back by unflattening
their leaves into a template built the same way, then took the optimizer
back out (``opt, extra = loaded['opt'], loaded['extra']``). A TrainState in
the optimizer's place has other leaves in another order, so migrated code
would load old files into the wrong leaves. ``flax_optim_rules.legacy_tree``
is the tree the Optimizer was (the same leaves, order and names), so the
flow migrates with both ends of the file in flax.optim's layout:

  tree = {'opt': opt, 'extra': e}
      -> tree = {'opt': flax_optim_rules.legacy_tree(opt), 'extra': e}
  opt, e = loaded['opt'], loaded['extra']
      -> opt, e = flax_optim_rules.from_legacy_tree(opt, loaded['opt']), ...

Where this holds, in the function that builds the dict (one dict display,
or ``dict(opt=...)``, with constant keys; the optimizer a name or a field of
one):

* the dict, and what is made from it, is only taken apart and rebuilt as a
  tree: passed to jax's tree functions (not given ``is_leaf``, whose
  function may receive the tree's nodes), ``jax.device_get``, ``replicate``,
  flax's serialization and checkpoints, a treedef's ``unflatten``, or to
  a parameter of a project function (also through ``pool.apply_async(f,
  (args,))``) that does only this with it (returning what it made is
  allowed there); tested for truth; given other entries, or read by
  another constant key (also with ``.get``);
* the optimizer's entry of any of them is read only as ``.target`` or
  ``.state`` (the tree has both), or assigned to a name the flow proves an
  optimizer, where the template is still the same value (a parameter, or
  no binding of it between the dict and the read, in one block).

Anything else (the dict returned, stored, passed where this is not seen,
its entry read otherwise) keeps the flow, with the reason. A function that
fails the above only as a generic tree walker of its parameter
(``_tree_walkers``: kind tests, entries, recursion, leaves given back) is
passed on an assumption: the verdict holds and names it
(``_Verdict.assumptions``), and ``_escape_analysis`` makes it an unsafe
fix; where the walker first turns a dataclass node into its state dict,
that it walks the tree as the Optimizer is proven, and the verdict names it
among what it proves (``_Verdict.proven``: a safe fix, noted). Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _removals
from compat.codemod import _tree_walkers
from compat.codemod import _walk


def _with_removed(*names) -> frozenset:
  return frozenset(n for name in names
                   for n in (name, *_removals.removed_spellings(name)))


# Calls that take a tree apart or rebuild it and do nothing else with its
# nodes, by what they give: a tree of its classes (a treedef too), the
# leaves and the treedef, or only leaves and plain containers (the same
# values whether the tree is flax.optim's Optimizer or legacy_tree's).
_GIVE_TREE = _with_removed(
    'jax.tree_util.tree_structure', 'jax.tree_util.tree_unflatten',
    'jax.tree_util.tree_map', 'jax.tree_util.tree_map_with_path',
    'jax.tree.structure', 'jax.tree.unflatten', 'jax.tree.map',
    'jax.tree.map_with_path', 'jax.device_get', 'jax.device_put',
    'flax.jax_utils.replicate', 'flax.jax_utils.unreplicate',
    'flax.serialization.from_state_dict', 'flax.serialization.from_bytes',
    'flax.training.checkpoints.restore_checkpoint', 'copy.copy',
    'copy.deepcopy')
_GIVE_LEAVES_AND_TREEDEF = _with_removed(
    'jax.tree_util.tree_flatten', 'jax.tree_util.tree_flatten_with_path',
    'jax.tree.flatten', 'jax.tree.flatten_with_path')
_GIVE_LEAVES = _with_removed(
    'jax.tree_util.tree_leaves', 'jax.tree_util.tree_leaves_with_path',
    'jax.tree.leaves', 'jax.tree.leaves_with_path',
    'flax.serialization.to_state_dict', 'flax.serialization.to_bytes',
    'flax.training.checkpoints.save_checkpoint',
    'flax.training.checkpoints.save_checkpoint_multiprocess')
_TREE_CALLS = _GIVE_TREE | _GIVE_LEAVES_AND_TREEDEF | _GIVE_LEAVES
_TREE, _FREE = 'tree', 'free'
# A treedef's method that rebuilds a tree of its structure.
_TREEDEF_METHODS = ('unflatten',)
# The fields a tree shares with flax.optim's Optimizer.
_TREE_FIELDS = (_members.TARGET, _members.STATE)
# How deep project functions are followed from the dict's function.
_DEPTH = 4


class Display(NamedTuple):
  """A dict holding an optimizer that is saved or loaded as a tree."""
  value: ast.AST  # the optimizer's expression in it
  key: str  # its entry
  loaded_back: tuple  # the reads assigned back to an optimizer's name


class _Verdict(NamedTuple):
  display: Optional[Display]
  why: Optional[str]  # None where ``display`` holds
  # What ``display`` rests on beside what is proven: a generic tree walker
  # the tree goes through (``_tree_walkers``), one text each.
  assumptions: tuple = ()
  # The generic tree walkers it goes through that are proven to walk it as
  # the Optimizer: what is proven of each, one text each.
  proven: tuple = ()


class _Answer(NamedTuple):
  """Whether a function takes a parameter only as a tree."""
  why: Optional[str]
  assumptions: tuple = ()
  proven: tuple = ()


def entry_of(value, parent, grandparent) -> Optional[tuple]:
  """``(dict node, key)`` where ``value`` is a constant-keyed entry of a
  dict display or of ``dict(key=...)``; else None."""
  if isinstance(parent, ast.Dict) and value in parent.values:
    key = parent.keys[parent.values.index(value)]
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
      return parent, key.value
    return None
  if isinstance(parent, ast.keyword) and parent.arg and isinstance(
      grandparent, ast.Call) and isinstance(grandparent.func, ast.Name) and (
          grandparent.func.id == 'dict') and not grandparent.args:
    return grandparent, parent.arg
  return None


def _spread(dict_node) -> bool:
  if isinstance(dict_node, ast.Dict):
    return any(k is None for k in dict_node.keys)
  return any(k.arg is None for k in dict_node.keywords)


def _parents(scope_node) -> dict:
  parents = {}
  for node in [scope_node, *_walk.scope_nodes(scope_node)]:
    for child in ast.iter_child_nodes(node):
      parents[child] = node
  return parents


def _bound_names(node) -> list:
  """Names a statement's own targets bind (assignments, loops, withs)."""
  targets = []
  if isinstance(node, ast.Assign):
    targets = node.targets
  elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For,
                         ast.AsyncFor, ast.NamedExpr)):
    targets = [node.target]
  elif isinstance(node, (ast.With, ast.AsyncWith)):
    targets = [i.optional_vars for i in node.items if i.optional_vars]
  return [n.id for t in targets for n in ast.walk(t)
          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


class _Uses:
  """What one scope does with the values made from a tree (a dict holding
  the optimizer, or a parameter given such a value)."""

  def __init__(self, checker, scope_node, names, seeds, key, depth,
               loaded_back_allowed, derived=()):
    self.checker, self.node, self.names = checker, scope_node, names
    self.key, self.depth = key, depth
    self.allow_back = loaded_back_allowed
    self.parents = _parents(scope_node)
    self.own = list(_walk.scope_nodes(scope_node))
    self.seeds = seeds  # the expressions the tree starts as
    self.loaded_back: list = []
    self.assumptions: list = []  # generic walkers taken on trust
    self.proven: list = []  # generic walkers proven (``_tree_walkers``)
    self.derived: set = set(derived)  # names made from the tree
    self.nested = {n.name: n for n in self.own
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    self._derive()

  # ---------------------------------------------------------- made from it
  def made_from_tree(self, node) -> bool:
    return self._kind(node) == _TREE

  def _kind(self, node):
    """_TREE (holds the tree's nodes), a tuple of kinds, or None."""
    if any(node is seed for seed in self.seeds):
      return _TREE
    if isinstance(node, ast.Name):
      return _TREE if node.id in self.derived else None
    if not isinstance(node, ast.Call):
      return None
    arguments = list(node.args) + [k.value for k in node.keywords]
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _TREEDEF_METHODS:
      return self._kind(func.value)
    if not any(self.made_from_tree(a) for a in arguments):
      return None
    resolved = self._tree_call(node)
    if resolved in _GIVE_LEAVES_AND_TREEDEF:
      return (_FREE, _TREE)
    if resolved in _GIVE_LEAVES:
      return _FREE
    # A tree function's result, or what a function given it returns (its
    # uses there are checked: what it gives back is followed here).
    return _TREE

  def _derive(self):
    changed = True
    while changed:
      changed = False
      for node in self.own:
        if not isinstance(node, ast.Assign):
          continue
        for target in node.targets:
          for name in self._names_given(target, node.value):
            if name not in self.derived:
              self.derived.add(name)
              changed = True

  def _names_given(self, target, value, kind=None) -> list:
    if kind is None and value is not None:
      kind = self._kind(value)
    if isinstance(target, ast.Name):
      return [target.id] if kind == _TREE else []
    if not isinstance(target, (ast.Tuple, ast.List)):
      return []
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(
        target.elts):
      return [n for t, v in zip(target.elts, value.elts)
              for n in self._names_given(t, v)]
    if isinstance(kind, tuple) and len(kind) == len(target.elts):
      return [n for t, k in zip(target.elts, kind)
              for n in self._names_given(t, None, k)]
    if kind is not None:  # unpacked otherwise: every name may hold it
      return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
    return []

  # ------------------------------------------------------------- its uses
  def problem(self) -> Optional[str]:
    """Why a value made from the tree is used otherwise than as a tree."""
    why = self._captured()
    if why:
      return why
    for node in self.own:
      if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and (
          node.id in self.derived):
        why = self._use_problem(node)
        if why:
          return why
    for seed in self.seeds:
      if not isinstance(seed, ast.Name):
        why = self._use_problem(seed)
        if why:
          return why
    return None

  def _captured(self) -> Optional[str]:
    """A def, lambda or class nested here that reads a name made from the
    tree (a closure): its uses are not followed, so they hold the flow."""
    for scope in self.own:
      if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef,
                                ast.Lambda, ast.ClassDef)):
        continue
      inner = set()
      if not isinstance(scope, ast.ClassDef):
        inner = set(_names.parameter_names(scope)) | {
            a.arg for a in (scope.args.vararg, scope.args.kwarg) if a}
      for node in _walk.scope_nodes(scope):  # its own bindings only
        inner.update(_bound_names(node))
      for node in ast.walk(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and (
            node.id in self.derived) and node.id not in inner:
          return _codes.filled_note(
              _codes.TREE_NAME_READ_NESTED, name=node.id,
              scope=getattr(scope, 'name', 'lambda'))
    return None

  def _use_problem(self, node) -> Optional[str]:
    parent = self.parents.get(node)
    text = ast.unparse(node)[:40]
    if isinstance(parent, ast.Assign) and parent.value is node and all(
        isinstance(n, ast.Name) for t in parent.targets for n in ast.walk(t)
        if not isinstance(n, (ast.Tuple, ast.List, ast.expr_context))):
      return None  # followed through the names it binds
    if isinstance(parent, (ast.Tuple, ast.List)) and isinstance(
        self.parents.get(parent), ast.Assign) and (
            self.parents[parent].value is parent) and all(
                isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == len(
                    parent.elts) for t in self.parents[parent].targets):
      return None  # unpacked element by element into names
    if _is_test(self.parents, node):
      return None
    if isinstance(parent, ast.Compare) and all(
        isinstance(c, ast.Constant) and c.value is None
        for c in parent.comparators + [parent.left] if c is not node):
      return None
    if isinstance(parent, ast.Subscript) and parent.value is node:
      return self._entry_problem(parent, text)
    if isinstance(parent, ast.Attribute) and parent.value is node and (
        parent.attr in _TREEDEF_METHODS) and isinstance(
            self.parents.get(parent), ast.Call):
      return None
    if isinstance(parent, ast.Attribute) and parent.value is node and (
        parent.attr == 'get') and self._other_entry(self.parents.get(parent)):
      return None  # loaded.get('states'): another entry
    if isinstance(parent, ast.keyword):
      parent = self.parents.get(parent)
    if isinstance(parent, ast.Call) and parent.func is not node:
      return self._call_problem(parent, node, text)
    if isinstance(parent, ast.Tuple) and isinstance(
        self.parents.get(parent), ast.Call):
      return self._async_problem(self.parents[parent], parent, node, text)
    if isinstance(parent, ast.Return) and self.depth > 0:
      return None  # a helper's result: its caller follows it
    return _codes.filled_note(_codes.TREE_NAME_USED, text=text,
                              use=ast.unparse(parent)[:50])

  def _other_entry(self, call) -> bool:
    """``d.get(key[, default])`` of a constant key other than the
    optimizer's."""
    return isinstance(call, ast.Call) and 1 <= len(call.args) <= 2 and (
        not call.keywords) and isinstance(call.args[0], ast.Constant) and (
            isinstance(call.args[0].value, str)) and (
                call.args[0].value != self.key)

  def _entry_problem(self, subscript, text) -> Optional[str]:
    key = subscript.slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
      return _codes.filled_note(_codes.TREE_ENTRY_KEY,
                                entry=ast.unparse(subscript)[:50])
    if isinstance(subscript.ctx, ast.Store):
      return None if key.value != self.key else _codes.filled_note(
          _codes.TREE_ENTRY_REPLACED, entry=ast.unparse(subscript)[:50])
    if not isinstance(subscript.ctx, ast.Load) or key.value != self.key:
      return None if isinstance(subscript.ctx, ast.Load) else (
          _codes.filled_note(_codes.TREE_ENTRY_DELETED,
                             entry=ast.unparse(subscript)[:50]))
    parent = self.parents.get(subscript)
    if isinstance(parent, ast.Attribute) and parent.attr in _TREE_FIELDS:
      return None  # the tree has the Optimizer's fields
    if self.allow_back and self._assigned(subscript):
      self.loaded_back.append(subscript)
      return None
    return _codes.filled_note(_codes.TREE_ENTRY_READ_BACK,
                              entry=ast.unparse(subscript)[:50], text=text)

  def _assigned(self, subscript) -> bool:
    parent = self.parents.get(subscript)
    if isinstance(parent, ast.Assign) and parent.value is subscript:
      return all(isinstance(t, ast.Name) for t in parent.targets)
    if isinstance(parent, ast.Tuple):
      outer = self.parents.get(parent)
      index = parent.elts.index(subscript)
      return isinstance(outer, ast.Assign) and outer.value is parent and all(
          isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == len(
              parent.elts) and isinstance(t.elts[index], ast.Name)
          for t in outer.targets)
    return False

  def _function_of(self, call):
    """(scope node, names) of the function ``call`` runs: a def nested
    here, or a project function; else None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in self.nested:
      return self.nested[func.id], self.names
    model = self.names.model
    function = None if model is None else model.callee(call, self.names)
    if function is not None:
      return None if function.is_method else (
          function.node, model.names.get(function.path))
    if isinstance(func, ast.Name) and not any(
        func.id in _bound_names(n) for n in self.own):
      # A function of this module by name (also where no dotted name is
      # this module's alone, so the project's model does not list it).
      defs = [n for n in self.names.tree.body
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and
              n.name == func.id]
      if len(defs) == 1 and func.id not in self.names.bindings and not any(
          func.id in _bound_names(n) for n in self.names.tree.body):
        return defs[0], self.names
    return None

  def _tree_call(self, call) -> Optional[str]:
    """The tree function ``call`` runs; None for another call, or one given
    ``is_leaf`` (its function may then receive the tree's nodes)."""
    resolved = self.names.resolve(call.func)
    if resolved not in _TREE_CALLS or any(k.arg == 'is_leaf'
                                          for k in call.keywords):
      return None
    return resolved

  def _call_problem(self, call, node, text) -> Optional[str]:
    if self._tree_call(call) is not None:
      return None
    return self._passed_problem(call, self._function_of(call), call, node,
                                text)

  def _async_problem(self, call, arguments, node, text) -> Optional[str]:
    """``pool.apply_async(f, (args...))``: ``f(*args)`` on a pool's thread."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == 'apply_async'
            and len(call.args) >= 2 and call.args[1] is arguments):
      return _codes.filled_note(_codes.ESCAPE_TUPLE_ARGUMENTS, text=text,
                                arguments=ast.unparse(arguments)[:50])
    runs = ast.Call(func=call.args[0], args=list(arguments.elts),
                    keywords=[])
    return self._passed_problem(call, self._function_of(runs), runs, node,
                                text)

  def _passed_problem(self, call, function, runs, node,
                      text) -> Optional[str]:
    """``node`` goes to ``function`` (``(FunctionDef, names)`` or None),
    which ``runs`` calls (``call`` itself, or what it has a pool run)."""
    shown = ast.unparse(call.func)[:50]
    if function is None or function[1] is None:
      return _codes.filled_note(_codes.TREE_PASSED_UNSEEN, text=text,
                                call=shown)
    definition, names = function
    parameter = next((p for p in _names.parameter_names(definition)
                      if _names.argument_for(definition, p, runs) is node),
                     None)
    if parameter is None:
      return _codes.filled_note(_codes.TREE_NO_PARAMETER, text=text,
                                call=shown)
    if self.depth >= _DEPTH:
      return _codes.filled_note(_codes.TREE_PASSED_TOO_DEEP, text=text,
                                depth=_DEPTH)
    answer = self.checker.parameter_problem(definition, names, parameter,
                                            self.key, self.depth + 1)
    if answer.why is None:
      self.assumptions += answer.assumptions
      self.proven += answer.proven
      return None
    # Not proven a tree's: a generic walker of it is taken on trust, or
    # proven where it first turns a dataclass into its state dict.
    walker = _tree_walkers.walker(definition, names, parameter, _TREE_CALLS)
    if walker is not None:
      (self.proven if walker.proven else self.assumptions).append(
          walker.grounds)
      return None
    return _codes.filled_note(_codes.TREE_IN_FUNCTION,
                              function=definition.name, why=answer.why)


def _is_test(parents, node) -> bool:
  """``node`` is only tested for truth (``if tree:``, ``not tree``, ``a
  and tree`` in a test)."""
  parent = parents.get(node)
  if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
    return True
  if isinstance(parent, ast.BoolOp):
    return _is_test(parents, parent)
  return isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and (
      parent.test is node)


class Checker:
  """The dicts of one module that hold an optimizer and are saved or
  loaded as trees (``verdict``), with the project's functions they reach
  checked once each."""

  def __init__(self, names):
    self.names = names
    self._open: set = set()  # (function, parameter, key) being checked
    self._answers: dict = {}

  def parameter_problem(self, definition, names, parameter, key,
                        depth) -> _Answer:
    """Why ``definition`` uses its ``parameter`` otherwise than as a tree
    (and the walkers that holds through only if they are generic)."""
    # The definition itself, not its id(): a project function's tree may be
    # dropped and parsed again while this checker lives, and a new node
    # could take a freed one's id and its answer.
    marker = (definition, parameter, key)
    if marker in self._answers:
      return self._answers[marker]
    if marker in self._open:
      return _Answer(None)  # recursion: its other uses decide
    self._open.add(marker)
    try:
      # Every binding of the name counts as made from the tree (``tree =
      # tree_unflatten(...)`` in a loader): each of its reads is checked.
      uses = _Uses(self, definition, names, [], key, depth, False,
                   derived=(parameter,))
      answer = _Answer(uses.problem(), tuple(uses.assumptions),
                       tuple(uses.proven))
    finally:
      self._open.discard(marker)
    if not self._open:  # not resting on a question still open
      self._answers[marker] = answer
    return answer

  def verdict(self, value, dict_node, key, parents) -> _Verdict:
    """Whether the dict ``dict_node`` holding ``value`` at ``key`` is only
    saved or loaded as a tree where it is built."""
    if _spread(dict_node):
      return _Verdict(None, _codes.note(_codes.DICT_SPREAD))
    if not isinstance(value, (ast.Name, ast.Attribute)) or (
        _names.chain_root(value) is None):
      return _Verdict(None, _codes.note(_codes.TREE_VALUE_NOT_NAME))
    scope_node = parents.get(dict_node)
    while scope_node is not None and not isinstance(
        scope_node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                     ast.ClassDef, ast.Module)):
      scope_node = parents.get(scope_node)
    if not isinstance(scope_node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      return _Verdict(None, _codes.note(_codes.TREE_DICT_OUTSIDE_FUNCTION))
    uses = _Uses(self, scope_node, self.names, [dict_node], key, 0, True)
    why = uses.problem()
    if why:
      return _Verdict(None, why)
    # The name is followed by its every binding; a read that runs before
    # the dict is built reads another of them (another dict's verdict).
    loaded_back = tuple(read for read in uses.loaded_back if _may_run_after(
        parents, statement_of(parents, dict_node),
        statement_of(parents, read)))
    for read in loaded_back:
      why = _template_problem(uses, value, dict_node, read)
      if why:
        return _Verdict(None, why)
    return _Verdict(Display(value, key, loaded_back), None,
                    tuple(dict.fromkeys(uses.assumptions)),
                    tuple(dict.fromkeys(uses.proven)))


def assigned_names(parents, read) -> list:
  """The names a read back (``_Uses._assigned``) is assigned to."""
  parent = parents.get(read)
  if isinstance(parent, ast.Assign):
    return list(parent.targets)
  index = parent.elts.index(read)
  return [target.elts[index] for target in parents[parent].targets]


def statement_of(parents, node):
  while node is not None and not isinstance(node, ast.stmt):
    node = parents.get(node)
  return node


_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp,
          ast.DictComp, ast.GeneratorExp)


def _may_run_after(parents, first, later) -> bool:
  """The statement ``later`` may run after ``first`` in one call of
  their function: it is ``first``, starts after it, or a loop holds
  both."""
  if later is first or (later.lineno, later.col_offset) > (
      first.lineno, first.col_offset):
    return True
  return bool(_loops_around(parents, first) & _loops_around(parents, later))


def _loops_around(parents, node) -> set:
  loops = set()
  while node is not None:
    if isinstance(node, _LOOPS):
      loops.add(node)
    node = parents.get(node)
  return loops


def _template_problem(uses, value, dict_node, read) -> Optional[str]:
  """The optimizer's expression still names the same value at ``read``."""
  root = _names.chain_root(value)
  definition = uses.node
  if root in _names.parameter_names(definition) and not any(
      root in _bound_names(n) for n in uses.own):
    return None
  parents = uses.parents
  first, last = (statement_of(parents, dict_node),
                 statement_of(parents, read))
  block = parents.get(first)
  siblings = [getattr(block, f, None) for f in ('body', 'orelse',
                                                'finalbody')]
  body = next((s for s in siblings if isinstance(s, list) and first in s and
               last in s), None)
  if body is None or body.index(first) > body.index(last):
    return _codes.filled_note(_codes.TREE_READ_ROOT_OTHER,
                              read=ast.unparse(read)[:40], root=root)
  between = body[body.index(first) + 1:body.index(last)]
  if any(root in _bound_names(n) for s in between for n in ast.walk(s)):
    return _codes.filled_note(_codes.TREE_ROOT_ASSIGNED_BETWEEN, root=root,
                              read=ast.unparse(read)[:40])
  return None
