"""No import cycles in ``legacy_optim`` and ``compat``, hidden ones included.

The graph is read from the source with ``ast``, not from ``sys.modules``, so
it sees every import a module can ever run:

* ``import a.b`` and ``from a import b`` / ``from . import b`` /
  ``from .b import c``, at module level and inside functions, classes and
  ``try``/``if`` blocks (an import inside a function is an edge too: it runs
  the imported module the first time the function is called, and a cycle
  through it is still a cycle);
* ``from pkg import name`` is an edge to the submodule ``pkg.name`` when
  that module exists, else to ``pkg`` itself (its ``__init__`` provides the
  name);
* lazy imports: a module named by a string in a dict literal (the export
  tables that ``compat._lazy`` resolves on attribute access, the CLI's
  command table) or passed as a
  literal to ``importlib.import_module``/``__import__`` is an edge too;
* an ``import_module`` call whose name is computed cannot be read: each one
  is listed in ``COMPUTED_IMPORTS`` with the modules it can import, and a new
  one fails the test until it is listed.

Importing a submodule first initializes its parent packages; that ordering
is the import system's, not a dependency, so no edge goes from a module to
its parents.
"""

import ast
import pathlib

import pytest

from legacy_optim import catalogue

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ('legacy_optim', 'compat', 'flax_optim_rules')
_IMPORT_FUNCTIONS = ('import_module', '__import__')

# Module -> what its computed import_module() calls can import.
COMPUTED_IMPORTS = {
    # _lazy.exports resolves the tables of its callers (edges of theirs).
    'compat._lazy': set(),
    # Resolves its own COMMANDS table (read as edges above).
    'compat.cli': set(),
    # Imports every built-in algorithm's module the catalogue lists.
    'legacy_optim': {f'legacy_optim.{algorithm.module}'
                     for algorithm in catalogue.BUILT_INS},
}
# ``_lazy.module_without_package(package, name)`` loads ``package.name``.
_LOAD_WITHOUT_PACKAGE = 'module_without_package'


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix('').parts)
  if parts[-1] == '__init__':
    parts.pop()
  return '.'.join(parts)


def _sources() -> dict[str, pathlib.Path]:
  return {
      _module_name(path): path
      for package in PACKAGES
      for path in sorted((ROOT / package).rglob('*.py'))
  }


def _base_of_relative(module: str, is_package: bool, level: int) -> str:
  """The package a ``from`` import with ``level`` dots starts from."""
  parts = module.split('.')
  if not is_package:
    parts = parts[:-1]
  if level > 1:
    parts = parts[:len(parts) - (level - 1)]
  return '.'.join(parts)


def _called_name(call: ast.Call) -> str:
  function = call.func
  if isinstance(function, ast.Attribute):
    return function.attr
  return function.id if isinstance(function, ast.Name) else ''


def _imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
  """Every module of ``known`` that ``module`` can import, at any depth."""
  tree = ast.parse(path.read_text(), filename=str(path))
  is_package = path.name == '__init__.py'
  found = set(COMPUTED_IMPORTS.get(module, ()))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        found.add(alias.name)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        start = _base_of_relative(module, is_package, node.level)
        base = f'{start}.{base}' if base and start else (base or start)
      for alias in node.names:
        submodule = f'{base}.{alias.name}'
        found.add(submodule if submodule in known else base)
    elif isinstance(node, ast.Dict):  # A table: name -> module (, doc).
      found.update(item.value for value in node.values
                   for item in ast.walk(value)
                   if isinstance(item, ast.Constant) and item.value in known)
    elif (isinstance(node, ast.Call)
          and _called_name(node) == _LOAD_WITHOUT_PACKAGE
          and all(isinstance(arg, ast.Constant) for arg in node.args[:2])):
      found.add('.'.join(arg.value for arg in node.args[:2]))
    elif isinstance(node, ast.Call) and _called_name(node) in _IMPORT_FUNCTIONS:
      argument = node.args[0] if node.args else None
      if isinstance(argument, ast.Constant):
        found.add(argument.value)
      else:
        assert module in COMPUTED_IMPORTS, (
            f'{path}:{node.lineno}: {_called_name(node)}() of a computed name;'
            ' list what it can import in COMPUTED_IMPORTS.')
  # ``import a.b.c`` names a.b.c; keep the deepest module of ours it names.
  edges = set()
  for name in found:
    while name and name not in known:
      name = name.rpartition('.')[0]
    if name and name != module:
      edges.add(name)
  return edges


def import_graph() -> dict[str, set[str]]:
  sources = _sources()
  known = set(sources)
  return {module: _imports(module, path, known)
          for module, path in sources.items()}


def find_cycle(graph: dict[str, set[str]]):
  """One cycle as a list of modules (first == last), or None."""
  state = {}  # module -> 'open' while on the DFS stack, 'done' after.
  stack = []

  def visit(module):
    state[module] = 'open'
    stack.append(module)
    for target in sorted(graph.get(module, ())):
      if state.get(target) == 'open':
        return stack[stack.index(target):] + [target]
      if target not in state:
        cycle = visit(target)
        if cycle:
          return cycle
    stack.pop()
    state[module] = 'done'
    return None

  for module in sorted(graph):
    if module not in state:
      cycle = visit(module)
      if cycle:
        return cycle
  return None


def test_graph_sees_the_hidden_kinds_of_import():
  graph = import_graph()
  # A lazy export table (compat/__init__.py) is an edge.
  assert 'compat.bridges.optax_bridge' in graph['compat']
  # ``from compat import _atomic`` names the submodule.
  assert 'compat._atomic' in graph['compat.checkpoints.api']
  # An import inside a function body (to_nnx_optimizer is imported only for
  # to='nnx') is an edge.
  assert 'compat.bridges.train_state' in graph['compat.checkpoints._convert']
  # The CLI's command table.
  assert 'compat.checkpoints.api' in graph['compat.cli']
  # A stdlib-only module loaded by file (the scanner reads the catalogue
  # without running legacy_optim/__init__).
  assert 'legacy_optim.catalogue' in graph['compat.codemod.scan']
  # The algorithm modules the package imports by the catalogue's names.
  assert 'legacy_optim.adam' in graph['legacy_optim']


@pytest.mark.parametrize('graph, cycle', [
    ({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}, ['a', 'b', 'c', 'a']),
    ({'a': {'b'}, 'b': set(), 'c': {'c2'}, 'c2': {'c'}}, ['c', 'c2', 'c']),
    ({'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}, None),
])
def test_find_cycle(graph, cycle):
  assert find_cycle(graph) == cycle


def test_every_listed_computed_import_exists():
  # A stale entry would hide the edges of a module that no longer needs it.
  with_computed = set()
  for module, path in _sources().items():
    for node in ast.walk(ast.parse(path.read_text())):
      if (isinstance(node, ast.Call) and
          _called_name(node) in _IMPORT_FUNCTIONS and
          not (node.args and isinstance(node.args[0], ast.Constant))):
        with_computed.add(module)
  assert with_computed == set(COMPUTED_IMPORTS)


def test_no_import_cycles():
  cycle = find_cycle(import_graph())
  assert cycle is None, 'import cycle: ' + ' -> '.join(cycle)
