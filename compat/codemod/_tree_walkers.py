"""A generic tree walker: a function that treats every node of a tree alike.

Research code names the leaves of the trees it saves with a recursion of
its own (ub's ``_traverse_with_names``)::

  def walk(tree):
    if dataclasses.is_dataclass(tree):
      tree = flax.serialization.to_state_dict(tree)
    if isinstance(tree, dict):
      for key in sorted(tree.keys()):
        for path, leaf in walk(tree[key]):
          yield key + '/' + path, leaf
    else:
      yield '', tree

Such a function asks a node only its kind and its entries: it never reads a
member of flax.optim's Optimizer (``.target``, ``.state``, ``.replace``...),
so given ``flax_optim_rules.legacy_tree(state)`` (a dataclass with the
Optimizer's leaves, order and state dict) where it was given the Optimizer,
it walks it the same way. That it does is what a migration through it
*assumes* (an unsafe fix, ``--unsafe-fixes``): the shape below is read from
the code, but what the kinds it tests answer, and where the leaves it gives
back go, is the program's.

Except where it is proven (a safe fix, ``Walker.proven``): the walker's
first statement that names its parameter is the prelude above, ``if
dataclasses.is_dataclass(node): node = flax.serialization.to_state_dict(
node)`` (nothing else in it, no ``else``), and no other statement binds
the name. Both the Optimizer and ``legacy_tree(...)`` are dataclasses and
their state dicts are equal (tests/test_legacy_tree.py asserts both), so
from the prelude on the walker holds the same value for either, and gives
back the same names and leaves.

A parameter's walker shape, in the function's own scope (its node names:
the parameter, a name rebound from it through a tree function, the entries
it iterates):

* kind tests only: ``isinstance(node, C)`` with ``C`` a plain container or
  array class (``_KIND_CLASSES``, also in a tuple), or
  ``dataclasses.is_dataclass(node)``: both kinds of node answer alike;
* a tree function of ``tree_calls`` (``to_state_dict``...), not given
  ``is_leaf``; truth tests and ``is None``;
* its entries: ``node.keys()``, ``.items()``, ``.values()``, ``sorted(node)``,
  ``len(node)``, ``for key in node``, ``node[key]`` for a key that is not a
  constant (every entry alike);
* recursion: an entry passed back to the function at the same parameter;
* a leaf given back: ``yield``/``return`` of a node (alone, or in tuple
  and list displays).

Anything else (an attribute read, a constant key, the node passed to
another function) is not a walker, and stays what it was: a use migrate
does not prove. The function must recurse and test kinds, or it walks
nothing. Stdlib only.
"""

import ast
import posixpath
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _names
from compat.codemod import _walk

# Classes a kind test may name: neither flax.optim's Optimizer nor the tree
# standing for it is one of them, so the test answers alike for both.
_KIND_CLASSES = frozenset((
    'dict', 'list', 'tuple', 'set', 'frozenset', 'str', 'bytes', 'int',
    'float', 'bool', 'collections.abc.Mapping', 'collections.abc.Sequence',
    'collections.abc.MutableMapping', 'typing.Mapping', 'typing.Sequence',
    'typing.Dict', 'collections.OrderedDict', 'flax.core.FrozenDict',
    'flax.core.frozen_dict.FrozenDict', 'numpy.ndarray', 'jax.Array',
    'jax.numpy.ndarray'))
# The prelude that makes a walker proven (``_state_dict_first``).
_IS_DATACLASS = 'dataclasses.is_dataclass'
_TO_STATE_DICT = 'flax.serialization.to_state_dict'
_KIND_TESTS = frozenset((_IS_DATACLASS,))
_ENTRY_METHODS = frozenset(('keys', 'items', 'values'))
_ENTRY_FUNCTIONS = frozenset(('sorted', 'len', 'list', 'reversed'))



class _Shape:
  """The uses of one parameter's node names in one function."""

  def __init__(self, definition, names, parameter, tree_calls):
    self.definition, self.names = definition, names
    self.parameter, self.tree_calls = parameter, tree_calls
    self.own = list(_walk.scope_nodes(definition))
    self.parents = {child: node for node in [definition, *self.own]
                    for child in ast.iter_child_nodes(node)}
    self.nodes = {parameter}
    self.recurses = self.tests_kind = False

  def walks(self) -> bool:
    if not self._bind_entries():
      return False
    for node in self.own:
      if isinstance(node, ast.Name) and node.id in self.nodes and (
          isinstance(node.ctx, ast.Load)) and not self._allowed(node):
        return False
    return self.recurses and self.tests_kind

  # -------------------------------------------------------------- names
  def _bind_entries(self) -> bool:
    """Collects the names bound to a node's entries; False where a node
    name is bound otherwise than from a tree function of itself."""
    loops = [n for n in self.own if isinstance(n, (ast.For,
                                                   ast.comprehension))]
    for _ in loops:  # nested loops bind entries of entries
      known = len(self.nodes)
      for loop in loops:
        self._bind_loop(loop.target, loop.iter)
      if len(self.nodes) == known:
        break
    for node in self.own:
      if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and (
          node.id in self.nodes) and not self._rebound_through_tree(node):
        return False
    return True

  def _bind_loop(self, target, iterated) -> None:
    """``for v in node.values()``, ``for k, v in node.items()``: ``v`` is
    a node too (a key is any value: reading ``node[key]`` is checked)."""
    source = iterated
    if isinstance(source, ast.Call) and self._resolved(source.func) in (
        _ENTRY_FUNCTIONS) and len(source.args) == 1:
      source = source.args[0]  # sorted(node.keys()), list(node)
    method = None
    if isinstance(source, ast.Call) and isinstance(
        source.func, ast.Attribute) and not source.args:
      method, source = source.func.attr, source.func.value
    if not (isinstance(source, ast.Name) and source.id in self.nodes):
      return
    if method == 'values' and isinstance(target, ast.Name):
      self.nodes.add(target.id)
    elif method == 'items' and isinstance(target, ast.Tuple) and len(
        target.elts) == 2 and isinstance(target.elts[1], ast.Name):
      self.nodes.add(target.elts[1].id)

  def _rebound_through_tree(self, name) -> bool:
    """``node = to_state_dict(node)`` (or a loop over its entries)."""
    parent = self.parents.get(name)
    if isinstance(parent, (ast.For, ast.comprehension)) or (
        isinstance(parent, ast.Tuple) and isinstance(
            self.parents.get(parent), (ast.For, ast.comprehension))):
      return True  # bound by _bind_loop to an entry
    return isinstance(parent, ast.Assign) and parent.targets == [name] and (
        isinstance(parent.value, ast.Call)) and self._tree_call(
            parent.value) and any(
                isinstance(a, ast.Name) and a.id in self.nodes
                for a in parent.value.args)

  # --------------------------------------------------------------- uses
  def _resolved(self, func) -> Optional[str]:
    resolved = self.names.resolve(func)
    if resolved is None and isinstance(func, ast.Name):
      resolved = func.id  # a builtin
    return resolved

  def _tree_call(self, call) -> bool:
    return self.names.resolve(call.func) in self.tree_calls and not any(
        k.arg == 'is_leaf' for k in call.keywords)

  def _allowed(self, node) -> bool:
    """One use of a node (a node name, or an entry read of one)."""
    parent = self.parents.get(node)
    if isinstance(parent, ast.Call) and node in parent.args:
      return self._argument_allowed(parent, node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
      call = self.parents.get(parent)
      return parent.attr in _ENTRY_METHODS and isinstance(
          call, ast.Call) and call.func is parent and not call.args
    if isinstance(parent, ast.Subscript) and parent.value is node:
      return isinstance(parent.ctx, ast.Load) and not isinstance(
          parent.slice, ast.Constant) and self._allowed(parent)
    if isinstance(parent, (ast.For, ast.comprehension)) and (
        parent.iter is node):
      return True  # its keys
    if self._given_back(node):
      return True  # a leaf
    if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and (
        parent.test is node):
      return True
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
      return True
    if isinstance(parent, ast.Compare) and all(
        isinstance(c, ast.Constant) and c.value is None
        for c in [parent.left, *parent.comparators] if c is not node):
      return True
    return False

  def _given_back(self, node) -> bool:
    """``node`` is yielded or returned, alone or in tuple and list
    displays (``yield path, node``, ``return [(path, node)]``)."""
    parent = self.parents.get(node)
    while isinstance(parent, (ast.Tuple, ast.List)):
      parent = self.parents.get(parent)
    return isinstance(parent, (ast.Yield, ast.Return))

  def _argument_allowed(self, call, node) -> bool:
    resolved = self._resolved(call.func)
    if resolved == 'isinstance' and len(call.args) == 2 and (
        call.args[0] is node) and self._kind_classes(call.args[1]):
      self.tests_kind = True
      return True
    if resolved in _KIND_TESTS and len(call.args) == 1:
      self.tests_kind = True
      return True
    if resolved in _ENTRY_FUNCTIONS and len(call.args) == 1:
      return True
    if self._tree_call(call):
      return True
    if isinstance(call.func, ast.Name) and (
        call.func.id == self.definition.name) and (
            _names.argument_for(self.definition, self.parameter, call)
            is node):
      self.recurses = True
      return True
    return False

  def _kind_classes(self, node) -> bool:
    if isinstance(node, ast.Tuple):
      return bool(node.elts) and all(self._kind_classes(e)
                                     for e in node.elts)
    return self._resolved(node) in _KIND_CLASSES


class Walker(NamedTuple):
  """A function found a generic tree walker of a parameter."""
  # It first replaces a dataclass node by its state dict
  # (``_state_dict_first``): the fix through it is proven (SAFE), not
  # assumed (UNSAFE).
  proven: bool
  grounds: str  # what is proven, or what is assumed (the report's sentence)


def walker(definition, names, parameter, tree_calls) -> Optional[Walker]:
  """``definition`` (a module function of the module ``names`` reads) as a
  generic tree walker of its ``parameter``, where a migration passes a tree
  there; None where it is not one. ``tree_calls``: the dotted names of the
  functions that take a tree apart or rebuild it and do nothing else with
  its nodes."""
  if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
      parameter not in _names.parameter_names(definition)):
    return None
  if not _Shape(definition, names, parameter, tree_calls).walks():
    return None
  where = f'{posixpath.normpath(names.path or "<module>")}:' + str(
      definition.lineno)
  if _state_dict_first(definition, names, parameter):
    return Walker(True, _codes.proven_grounds(
        _codes.GENERIC_TREE_WALKER_STATE_DICT, name=definition.name,
        where=where))
  return Walker(False, _codes.unsafe_assumption(
      _codes.GENERIC_TREE_WALKER, name=definition.name, where=where))


def _state_dict_first(definition, names, parameter) -> bool:
  """The walker's first statement that names ``parameter`` is ``if
  dataclasses.is_dataclass(node): node = to_state_dict(node)`` (flax's),
  and nothing else binds the name: whatever it is given, the Optimizer or
  the tree standing for it (dataclasses both, with equal state dicts), no
  later operation of it meets the dataclass, only the equal state dict."""
  for statement in definition.body:
    if _is_state_dict_prelude(statement, names, parameter):
      break
    if parameter in _named(statement):
      return False  # read (or bound) before it is converted
  else:
    return False
  # The prelude's own binding is the only one (nested scopes included:
  # one that binds the name is not told apart from one that does not).
  return sum(_names.binds(node) == parameter for statement in definition.body
             for node in ast.walk(statement)) == 1


def _is_state_dict_prelude(statement, names, parameter) -> bool:
  """``if dataclasses.is_dataclass(p): p = flax.serialization.
  to_state_dict(p)``, nothing else in either branch."""
  if not isinstance(statement, ast.If) or statement.orelse or len(
      statement.body) != 1:
    return False
  (assign,) = statement.body
  return _called_on(statement.test, names, _IS_DATACLASS, parameter) and (
      isinstance(assign, ast.Assign)) and len(assign.targets) == 1 and (
          _is_name(assign.targets[0], parameter)) and _called_on(
              assign.value, names, _TO_STATE_DICT, parameter)


def _called_on(node, names, function, parameter) -> bool:
  """``node`` is ``function(parameter)``, one argument, no keyword."""
  return isinstance(node, ast.Call) and names.resolve(node.func) == (
      function) and len(node.args) == 1 and not node.keywords and (
          _is_name(node.args[0], parameter))


def _is_name(node, name) -> bool:
  return isinstance(node, ast.Name) and node.id == name


def _named(statement) -> set:
  """Every name ``statement`` reads or binds, nested scopes included."""
  return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)} | {
      _names.binds(node) for node in ast.walk(statement)}

