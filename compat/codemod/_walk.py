"""Cheaper walks over a module's ``ast`` for what only statements hold.

``ast.walk`` visits every node, expressions included, through a Python
generator per node: on real code that costs about as much as parsing.
Imports (and every other statement) sit only in the statement lists of
statements, exception handlers and match cases, so walking those lists
finds them all, in the order ``ast.walk`` yields them (breadth first, each
node's children in field order). Stdlib only.
"""

import ast
import collections
from typing import Iterator

# The fields that hold statements, in the order of every node's _fields
# (Try: body, handlers, orelse, finalbody; If/For/While: body, orelse).
_STATEMENT_FIELDS = ('body', 'handlers', 'orelse', 'finalbody', 'cases')


# Node class -> which of those fields it has (most statements: none).
_FIELDS_OF = {
    kind: tuple(f for f in _STATEMENT_FIELDS if f in kind._fields)
    for kind in vars(ast).values()
    if isinstance(kind, type) and issubclass(kind, ast.AST)}


def statement_children(node: ast.AST) -> list:
  """``node``'s statements, handlers and match cases, in the order
  ``ast.iter_child_nodes`` gives them (among its other children)."""
  found: list = []
  for field in _FIELDS_OF.get(type(node), _STATEMENT_FIELDS):
    children = getattr(node, field, None)
    if type(children) is list:  # a Lambda's or IfExp's body is one node
      found += children
  return found


def statements(tree: ast.AST) -> Iterator[ast.AST]:
  """Every statement under ``tree`` (with the handlers and match cases
  between them), in ``ast.walk``'s order. A module's are listed once per
  tree (``derived``): a dozen passes read them (the names' classes and
  holders, the project's index, the self-holders, the plan's spans)."""
  if type(tree) is ast.Module:
    return iter(derived(tree, _statement_list))
  return _statements(tree)


def _statement_list(tree: ast.AST) -> tuple:
  return tuple(_statements(tree))


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
  todo = collections.deque([tree])
  while todo:
    node = todo.popleft()
    todo.extend(statement_children(node))
    yield node


def child_nodes(node: ast.AST) -> list:
  """``ast.iter_child_nodes(node)`` as a list, in its order, without a
  generator per node (the flows' walks spent a third of their time in
  ``iter_child_nodes`` and ``iter_fields``)."""
  found = []
  for field in node._fields:
    value = getattr(node, field, None)
    if isinstance(value, ast.AST):
      found.append(value)
    elif isinstance(value, list):
      found += [item for item in value if isinstance(item, ast.AST)]
  return found


_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def scope_nodes(node: ast.AST, children=None) -> Iterator[ast.AST]:
  """The nodes of ``node``'s own scope: a function's body, or any other
  node's children, not entering the functions, lambdas and classes nested
  in it (scopes of their own; they themselves are yielded). ``children``:
  the tree's ``children`` map, where the caller holds it (no node's
  children listed again; the shared leaves left out)."""
  kids = child_nodes if children is None else children.__getitem__
  stack = list(node.body) if isinstance(
      node, (ast.FunctionDef, ast.AsyncFunctionDef)) else list(kids(node))
  while stack:
    child = stack.pop()
    yield child
    if not isinstance(child, _OWN_SCOPES):
      stack += kids(child)


# The nodes and parents of the last few trees walked: migrate's passes walk
# one module a dozen times over (the planner, the project's links, the
# self-check...), each walk costing about what parsing it does. A tree is
# never changed once parsed, so one walk serves them all; ``forget`` lets
# them go once a run is over.
_KEPT = 4
_walked: collections.OrderedDict = collections.OrderedDict()


# The trees a run keeps for all its phases (the project's model reads them
# in one phase after another, hundreds of trees apart): their walks stay
# until ``forget`` too, with the trees, in a run that forgets at its end.
_kept_whole: dict = {}
_keeping = [False]


def start_run() -> None:
  """From now until ``forget`` (which the caller promises), ``keep``
  keeps."""
  _keeping[0] = True


def keep(tree: ast.AST) -> None:
  """Keeps ``tree``'s walk, once made, until ``forget`` (a tree the caller
  keeps that long itself), in a run (``start_run``)."""
  if _keeping[0] and id(tree) not in _kept_whole:
    _kept_whole[id(tree)] = (tree, {})


def _memo(tree: ast.AST) -> dict:
  entry = _kept_whole.get(id(tree))
  if entry is not None and entry[0] is tree:
    return entry[1]
  entry = _walked.get(id(tree))
  if entry is None or entry[0] is not tree:
    entry = _walked[id(tree)] = (tree, {})
    while len(_walked) > _KEPT:
      _walked.popitem(last=False)
  _walked.move_to_end(id(tree))
  return entry[1]


# The nodes the parser shares between places (one ``ast.Load()`` for every
# read): no children, no position, and no scope of their own.
SHARED_LEAVES = (ast.expr_context, ast.operator, ast.boolop, ast.cmpop,
                  ast.unaryop)
_SHARED_LEAF_CLASSES = frozenset(
    kind for kind in vars(ast).values()
    if isinstance(kind, type) and issubclass(kind, SHARED_LEAVES))


def _walk_once(tree: ast.AST) -> dict:
  """``tree``'s walk, done once: its nodes in ``ast.walk``'s order
  (breadth first; a node the parser shares, such as ``ast.Load()``, once
  per place), each node's children but the shared leaves, each node's
  parent (the last holder of a shared one, as a dict built in that order
  keeps it) and, by class, the nodes but the shared leaves in that order
  (``nodes_of``: most passes look at one class or two)."""
  memo = _memo(tree)
  if 'children' not in memo:
    order, children, parents = [tree], {}, {}
    by_class = collections.defaultdict(list, {type(tree): [tree]})
    append, leaves, node_class = order.append, _SHARED_LEAF_CLASSES, ast.AST
    # (child_nodes' loop, inlined: hot; a list read while it grows is read
    # to its end: breadth first; the classes of the leaves told by one
    # look-up, not isinstance against their five bases; the class index
    # filled here costs next to nothing, one filter per class and tree
    # cost a pass over every node each)
    for node in order:
      own = children[node] = []
      for field in node._fields:
        value = getattr(node, field, None)
        if type(value) is list:
          for kid in value:
            if isinstance(kid, node_class):
              parents[kid] = node
              append(kid)
              kind = type(kid)
              if kind not in leaves:
                own.append(kid)
                by_class[kind].append(kid)
        elif isinstance(value, node_class):
          parents[value] = node
          append(value)
          kind = type(value)
          if kind not in leaves:
            own.append(value)
            by_class[kind].append(value)
    memo.update(nodes=tuple(order), children=children, parents=parents,
                by_class=by_class)
  return memo


def is_walked(tree: ast.AST) -> bool:
  """Whether ``tree``'s walk is made and kept (asking makes nothing, and
  keeps no tree longer)."""
  for table in (_kept_whole, _walked):
    entry = table.get(id(tree))
    if entry is not None and entry[0] is tree and 'nodes' in entry[1]:
      return True
  return False


def nodes(tree: ast.AST) -> tuple:
  """Every node of ``tree``, in ``ast.walk``'s order (walked once)."""
  return _walk_once(tree)['nodes']


def nodes_of(tree: ast.AST, kinds: tuple) -> list:
  """The nodes of ``tree`` whose class is one of ``kinds`` (leaf classes
  of ``ast``, such as ``ast.Call``: none has a subclass), in
  ``ast.walk``'s order, not to be changed: the walk's own list for one
  class (but a shared leaf's), filtered once per tree and ``kinds`` for
  several, for the passes that each look at calls or attributes only (the
  project's links ask for them in every module the model read; most of a
  module's nodes are neither)."""
  if len(kinds) == 1 and kinds[0] not in _SHARED_LEAF_CLASSES:
    return _walk_once(tree)['by_class'].get(kinds[0], _NONE)
  return derived(tree, _of_kinds, kinds)


_NONE: list = []  # (shared: no caller changes what nodes_of gives)


def _of_kinds(tree: ast.AST, kinds: tuple) -> list:
  wanted = frozenset(kinds)
  return [n for n in nodes(tree) if type(n) in wanted]


def parents(tree: ast.AST) -> dict:
  """Each node of ``tree`` below it -> the node holding it, in
  ``ast.walk``'s order (computed once; not to be changed)."""
  return _walk_once(tree)['parents']


def children(tree: ast.AST) -> dict:
  """Each node of ``tree`` -> its children but the shared leaves (contexts
  and operators), in ``ast.iter_child_nodes``' order (computed once;
  neither the map nor its lists to be changed): what a walk for bindings,
  calls and reads enters."""
  return _walk_once(tree)['children']


def below(node: ast.AST, children: dict) -> list:
  """``node`` and every node under it but the shared leaves, in
  ``ast.walk``'s order, through its tree's ``children`` map."""
  order, position = [node], 0
  while position < len(order):
    order += children[order[position]]
    position += 1
  return order


def under(node: ast.AST, tree: ast.AST) -> list:
  """``below(node, children(tree))`` where ``node`` is in ``tree`` (whose
  walk is shared), else the same nodes walked here."""
  kids = children(tree)
  if node in kids:
    return below(node, kids)
  return [n for n in ast.walk(node) if not isinstance(n, SHARED_LEAVES)]


def derived(tree: ast.AST, compute, *args):
  """``compute(tree, *args)``, computed once per tree (and ``args``, by
  identity or value as they hash) while its walk is kept (``compute``: a
  function of those alone; the tree is never changed once parsed, nor is
  the result to be): what every flow of a module asks again (each phase
  of the project's model builds its own)."""
  memo = _memo(tree)
  key = (compute, *args)
  if key not in memo:
    memo[key] = compute(tree, *args)
  return memo[key]


def forget() -> None:
  """Drops the trees kept (the end of a scan or migrate run)."""
  _walked.clear()
  _kept_whole.clear()
  _keeping[0] = False
