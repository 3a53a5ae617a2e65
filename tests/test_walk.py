"""The cheaper walks of ``compat/codemod/_walk.py`` give exactly what the
standard library's walks give, in the same order (the flows and scan read
their order: the first binding found, the first parent recorded)."""

import ast
import collections
import pathlib
import sys

import pytest

from compat.codemod import _names
from compat.codemod import _walk

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Real code of every kind of statement and expression: the codemod itself,
# plus what it does not use (match, async, star-expressions, walrus, ...).
_SAMPLE = '''
async def f(a, /, b=1, *c, d, **e):
  async with x as (y, *z):
    async for i in range(3):
      yield [j async for j in k if (w := j)]
  match a:
    case {'k': [1, *rest]} | Point(x=0) if rest:
      pass
    case _:
      del a[1:2, ::3]
  try:
    raise E from None
  except ValueError as err:
    global g
  lambda q=1, *r: q
  return f'{a!r:>{b}}'
'''
# Exception groups (``except*``) parse from Python 3.11 (setup.cfg allows
# 3.10): sampled where they parse.
_SAMPLE_311 = '''
try:
  pass
except* ValueError as err:
  raise err
'''


def _sources():
  for path in sorted((ROOT / 'compat' / 'codemod').glob('*.py')):
    yield path.name, path.read_text()
  yield 'sample', _SAMPLE
  if sys.version_info >= (3, 11):
    yield 'sample_311', _SAMPLE_311


def _reference_scope_nodes(node):
  stack = list(node.body) if isinstance(
      node, (ast.FunctionDef, ast.AsyncFunctionDef)) else list(
          ast.iter_child_nodes(node))
  while stack:
    child = stack.pop()
    yield child
    if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                              ast.Lambda, ast.ClassDef)):
      stack.extend(ast.iter_child_nodes(child))


@pytest.mark.parametrize('name, source', list(_sources()),
                         ids=[name for name, _ in _sources()])
def test_child_nodes_and_scope_nodes_are_the_standard_walks(name, source):
  tree = ast.parse(source)
  for node in ast.walk(tree):
    assert _walk.child_nodes(node) == list(ast.iter_child_nodes(node)), (
        name, ast.dump(node)[:80])
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.Lambda, ast.ClassDef)):
      assert list(_walk.scope_nodes(node)) == list(
          _reference_scope_nodes(node)), name


_SHARED = (ast.expr_context, ast.operator, ast.boolop, ast.cmpop,
           ast.unaryop)


@pytest.mark.parametrize('name, source', list(_sources()),
                         ids=[name for name, _ in _sources()])
def test_one_walk_gives_the_standard_nodes_parents_and_children(name, source):
  """The walk every reader of a tree shares (``_walk.nodes``, ``parents``,
  ``children``): ``ast.walk``'s nodes in its order, each node's parent as a
  dict built in that order keeps it, and each node's children but the
  leaves the parser shares (contexts, operators); ``scope_nodes`` through
  that map is the standard scope walk without those leaves."""
  tree = ast.parse(source)
  assert _walk.nodes(tree) == tuple(ast.walk(tree)), name
  assert _walk.parents(tree) == {child: node for node in ast.walk(tree)
                                 for child in ast.iter_child_nodes(node)}
  children = _walk.children(tree)
  for node in ast.walk(tree):
    assert children[node] == [c for c in ast.iter_child_nodes(node)
                              if not isinstance(c, _SHARED)], name
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.Lambda, ast.ClassDef)):
      assert list(_walk.scope_nodes(node, children)) == [
          n for n in _reference_scope_nodes(node)
          if not isinstance(n, _SHARED)], name


class _Unread(tuple):
  """A walk's node list that no reader may go through again."""

  def __iter__(self):
    raise AssertionError('the walk\'s nodes were read again')


@pytest.mark.parametrize('name, source', list(_sources()),
                         ids=[name for name, _ in _sources()])
def test_one_class_of_nodes_is_the_walks_own_list_not_a_filter(name, source):
  """``nodes_of`` one class reads the class index the walk fills as it
  goes (each pass asking for calls, attributes or names filtered every
  node of the module again: 3,018 filters on the speed tree), in
  ``ast.walk``'s order."""
  tree = ast.parse(source)
  nodes = _walk.nodes(tree)
  memo = _walk._memo(tree)  # pylint: disable=protected-access
  memo['nodes'] = _Unread(nodes)
  kinds = {type(n) for n in nodes if not isinstance(n, _SHARED)}
  for kind in kinds:
    assert _walk.nodes_of(tree, (kind,)) == [
        n for n in ast.walk(tree) if type(n) is kind], (name, kind)
  absent = next(k for k in (ast.Nonlocal, ast.Await, ast.MatchStar)
                if k not in kinds)
  assert _walk.nodes_of(tree, (absent,)) == [], name
  memo['nodes'] = nodes  # (a shared leaf's class: filtered, as before)
  assert _walk.nodes_of(tree, (ast.Load,)) == [
      n for n in ast.walk(tree) if type(n) is ast.Load], name


@pytest.mark.parametrize('name, source', list(_sources()),
                         ids=[name for name, _ in _sources()])
def test_below_is_the_standard_walk_without_the_shared_leaves(name, source):
  tree = ast.parse(source)
  children = _walk.children(tree)
  for node in ast.walk(tree):
    if isinstance(node, _SHARED):
      continue
    assert _walk.below(node, children) == [
        n for n in ast.walk(node) if not isinstance(n, _SHARED)], name


def _walk_many_others():
  for i in range(_walk._KEPT + 2):  # pylint: disable=protected-access
    _walk.parents(ast.parse(f'x{i} = {i}'))


def test_a_tree_kept_in_a_run_keeps_its_walk_until_the_run_ends():
  """A run's kept trees are walked once, however many trees are walked
  between two phases that read them; outside a run, and after it, a kept
  tree is one of the last few walked only (no tree outlives its run)."""
  tree = ast.parse(_SAMPLE)
  _walk.start_run()
  try:
    _walk.keep(tree)
    first = _walk.parents(tree)
    _walk_many_others()
    assert _walk.parents(tree) is first
  finally:
    _walk.forget()
  _walk.keep(tree)  # no run: nothing kept
  first = _walk.parents(tree)
  _walk_many_others()
  assert _walk.parents(tree) is not first
  assert _walk.parents(tree) == first


def test_what_is_derived_from_a_tree_is_computed_once_per_kept_walk():
  """``derived`` computes a function of a tree once while its walk is
  kept (each flow of a module asked it again), for that tree only."""
  calls = []

  def count_names(tree):
    calls.append(tree)
    return sum(isinstance(n, ast.Name) for n in _walk.nodes(tree))

  tree, other = ast.parse(_SAMPLE), ast.parse('a = b')
  _walk.start_run()
  try:
    _walk.keep(tree)
    first = _walk.derived(tree, count_names)
    _walk_many_others()
    assert _walk.derived(tree, count_names) == first
    assert _walk.derived(other, count_names) == 2
  finally:
    _walk.forget()
  assert calls == [tree, other]
  assert first == sum(isinstance(n, ast.Name) for n in ast.walk(tree))


def _reference_references(tree, names):
  """``_names.references`` by a walk of its own: breadth first, each
  node with the node whose children list it."""
  todo = collections.deque([(tree, None)])
  while todo:
    node, parent = todo.popleft()
    todo.extend((child, node) for child in ast.iter_child_nodes(node))
    if isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(
        parent, ast.Attribute):
      dotted = names.resolve(node)
      if dotted:
        yield node, parent, dotted


@pytest.mark.parametrize('name, source', list(_sources()),
                         ids=[name for name, _ in _sources()])
def test_references_read_the_shared_walk(name, source, monkeypatch):
  """The chains a module's names resolve, as a walk of their own finds
  them and in its order, read from the tree's walk once it is made (the
  project's phases ask every module they read)."""
  del name
  tree = ast.parse(source)
  names = _names.ModuleNames(tree)
  expected = list(_reference_references(tree, names))
  _walk.nodes(tree)  # (made by the tree's first reader)
  walked = []
  with monkeypatch.context() as patched:
    patched.setattr(ast, 'iter_child_nodes',
                    lambda node: walked.append(node) or iter(()))
    found = list(_names.references(tree, names))
  assert not walked
  assert found == expected


_STATEMENT_KINDS = (ast.stmt, ast.excepthandler, ast.match_case)


@pytest.mark.parametrize('name, source', list(_sources()),
                         ids=[name for name, _ in _sources()])
def test_a_modules_statements_are_the_standard_walks_listed_once(
    name, source, monkeypatch):
  """``statements`` of a module: ``ast.walk``'s statements, handlers and
  match cases, in its order; listed once per tree while its walk is kept
  (a dozen passes of each module read them), a function's each time."""
  del name
  tree = ast.parse(source)
  expected = [tree] + [n for n in ast.walk(tree)
                       if isinstance(n, _STATEMENT_KINDS)]
  listed = []
  children = _walk.statement_children

  def noting(node):
    listed.append(node)
    return children(node)

  monkeypatch.setattr(_walk, 'statement_children', noting)
  _walk.start_run()
  try:
    _walk.keep(tree)
    assert list(_walk.statements(tree)) == expected
    assert len(listed) == len(expected)
    _walk_many_others()
    assert list(_walk.statements(tree)) == expected
    assert len(listed) == len(expected)
    function = next((n for n in expected if isinstance(n, ast.FunctionDef)),
                    None)
    if function is not None:
      below = [n for n in ast.walk(function)
               if isinstance(n, _STATEMENT_KINDS)]
      assert list(_walk.statements(function)) == below
      assert len(listed) == len(expected) + len(below)
  finally:
    _walk.forget()
