"""No import cycles in ``legacy_optim`` and ``compat``, hidden ones included;
``compat``'s subsystems import only downwards.

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
import importlib
import pathlib
import sys

import pytest

import compat
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


# compat's subsystems, top to bottom: each may import those below it and the
# helpers compat shares, never one above it or beside it.
LAYERS = (
    ('compat.cli',),
    ('compat.codemod', 'compat.checkpoints'),
    ('compat.bridges',),
    ('legacy_optim',),
    ('flax_optim_rules',),
)
SHARED = ('compat._atomic', 'compat._lazy')
# The codemod stays free of jax: of the layers below it, only the
# stdlib-only catalogue and rule table (read without running
# legacy_optim/__init__).
CODEMOD_MAY_IMPORT = ('legacy_optim.catalogue', 'legacy_optim._rule_table')


def _subsystem(module: str):
  for rank, layer in enumerate(LAYERS):
    for name in layer:
      if module == name or module.startswith(name + '.'):
        return name, rank
  return None, None


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
  """Every edge that goes up, sideways between subsystems, or out of bounds."""
  wrong = []
  for module, targets in sorted(graph.items()):
    source, source_rank = _subsystem(module)
    if source is None:  # compat's package, testing, importer: not layered.
      continue
    for target in sorted(targets):
      dest, dest_rank = _subsystem(target)
      if dest == source or target in SHARED:
        continue
      if source == 'compat.codemod':
        allowed = target in CODEMOD_MAY_IMPORT
      elif dest is None:  # compat's package (it imports every layer)
        allowed = False
      else:
        allowed = dest_rank > source_rank
      if not allowed:
        wrong.append(f'{module} -> {target}')
  return wrong


@pytest.mark.parametrize('edge, allowed', [
    (('compat.cli.check', 'compat.bridges.nnx'), True),
    (('compat.checkpoints.api', 'compat.bridges._paths'), True),
    (('compat.checkpoints.api', 'compat._atomic'), True),
    (('compat.codemod.scan', 'legacy_optim.catalogue'), True),
    (('compat.bridges.nnx', 'compat.checkpoints.api'), False),  # up
    (('compat.checkpoints.api', 'compat.codemod.scan'), False),  # beside
    (('compat.codemod.migrate', 'compat.bridges.nnx'), False),  # jax
    (('compat.codemod.migrate', 'legacy_optim.base'), False),  # jax
    (('legacy_optim.base', 'compat.bridges.nnx'), False),  # up
    (('compat.cli.check', 'compat'), False),  # the package imports them all
    (('flax_optim_rules._adam', 'legacy_optim.base'), False),  # up
])
def test_layering_rule(edge, allowed):
  source, target = edge
  assert (layering_violations({source: {target}}) == []) == allowed


def test_subsystems_import_only_downwards():
  wrong = layering_violations(import_graph())
  assert not wrong, 'imports against the layering:\n' + '\n'.join(wrong)


def test_the_shim_and_the_rules_never_import_compat():
  # A user's own compat.py or compat/ (tests/test_good_citizen.py's
  # projects) would be what ``import compat`` finds from their code, and
  # legacy_optim serves their ``from flax import optim``: even the shared
  # helpers are out of its reach (the rule table lives in legacy_optim).
  wrong = [f'{module} -> {target}'
           for module, targets in sorted(import_graph().items())
           if module.split('.')[0] in ('legacy_optim', 'flax_optim_rules')
           for target in sorted(targets) if target.split('.')[0] == 'compat']
  assert not wrong, wrong


def test_every_subsystem_is_a_package():
  for layer in LAYERS:
    for name in layer:
      assert (ROOT / name.replace('.', '/') / '__init__.py').is_file(), name


def test_codemod_imports_only_the_standard_library_and_libcst():
  # tomli: the standard library's tomllib on Python 3.10 (_config.py).
  allowed = set(sys.stdlib_module_names) | {'libcst', 'compat', 'legacy_optim',
                                            'tomli'}
  for path in sorted((ROOT / 'compat' / 'codemod').glob('*.py')):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module]
      else:
        continue
      for name in names:
        assert name.split('.')[0] in allowed, f'{path.name} imports {name}'


@pytest.mark.parametrize('old, new', sorted(compat._MOVED.items()))
def test_moved_modules_keep_their_old_names(old, new):
  module = importlib.import_module(new)
  assert importlib.import_module(f'compat.{old}') is module
  assert getattr(compat, old) is module
  namespace = {}
  exec(f'from compat import {old} as found', namespace)
  assert namespace['found'] is module
  # The module still says where it lives.
  assert module.__spec__.name == new


# The codemod's modules, bottom layer first: a module imports modules of its
# own layer and the layers below it, never one above (issue 38's seams:
# index -> semantic model -> flow -> the project's model -> rules and fixes
# -> report -> the commands). Each module is listed once; a new one fails
# ``test_codemod_imports_one_way`` until it is placed.
CODEMOD_LAYERS = (
    # What the rest names: the Optimizer's members, the codes, the layout
    # of flax.optim's state.
    ('vocabulary', ('_members', '_codes', '_state_layout')),
    # Files, notebooks, workers, walks over one tree.
    ('index', ('_walk', '_source', '_tree', '_notebook', '_line_match',
               '_parallel')),
    # Per module: its names, imports and bindings; per project: which
    # module defines what (``_project_index``, its classes: ``_classes``).
    ('semantic', ('_names', '_module_aliases', '_project_index', '_classes',
                  '_own_methods')),
    # One module's optimizer flow, and what crosses a call between two.
    ('flow', ('_removals', '_restores', '_clu_restores', '_multi',
              '_serialization_helpers',
              '_tree_walkers', '_legacy_trees', '_flow_values',
              '_flow_scopes', '_flow_solve', '_flow_queries', '_flow_holding',
              '_flow_calls', '_dict_returns',
              '_flow', '_givers', '_escape_analysis', '_params',
              '_def_params',
              '_step_values', '_step_calls',
              '_self_holders')),
    # The project as one program: its factories, the flow across modules,
    # the links that keep a flow all or none.
    ('project', ('_links', '_factories', '_cross_flow', '_project_links',
                 '_mentions', '_project', '_module_model')),
    # The plan of each module's rewrites and the edits that carry it out.
    ('fixes', ('_array_targets', '_plan_records', '_plan_edits',
               '_plan_rules', '_plan_uses',
               '_plan_imports', '_rewrite_plan', '_user_rules', '_self_check',
               '_skeleton', '_libcst_visitors')),
    # Configuration, suppressions, output formats.
    ('report', ('_config', '_noqa', '_formats', '_plan_findings')),
    # The two commands. ``_prefilter`` (the index's first pass) sits here
    # while the words it looks for come from the flow's modules above the
    # index.
    ('commands', ('_prefilter', 'scan', 'migrate')),
)
_CODEMOD = 'compat.codemod'


def _codemod_layer_of() -> dict[str, int]:
  return {f'{_CODEMOD}.{module}': rank
          for rank, (_, modules) in enumerate(CODEMOD_LAYERS)
          for module in modules}


def codemod_layer_violations(graph: dict[str, set[str]]) -> list[str]:
  """Every codemod module no layer lists, and every import of one codemod
  module by another that goes up the layers."""
  rank = _codemod_layer_of()
  wrong = []
  for module, targets in sorted(graph.items()):
    if not module.startswith(_CODEMOD + '.'):
      continue
    if module not in rank:
      wrong.append(f'{module}: in no layer of CODEMOD_LAYERS')
      continue
    for target in sorted(targets):
      if target.startswith(_CODEMOD + '.') and rank.get(
          target, len(CODEMOD_LAYERS)) > rank[module]:
        wrong.append(f'{module} -> {target}')
  return wrong


@pytest.mark.parametrize('edge, allowed', [
    (('_project', '_names'), True),  # down
    (('_flow', '_removals'), True),  # within a layer
    (('migrate', 'scan'), True),
    (('_names', '_project'), False),  # up
    (('_flow', '_rewrite_plan'), False),  # the analysis takes the planner
    (('_project_index', '_project_links'), False),
    (('_members', '_walk'), False),  # the vocabulary below the index
    (('_unplaced', '_walk'), False),  # a module no layer lists
])
def test_codemod_layering_rule(edge, allowed):
  source, target = (f'{_CODEMOD}.{name}' for name in edge)
  assert (codemod_layer_violations({source: {target}}) == []) == allowed


def test_codemod_layers_list_each_module_once():
  listed = [module for _, modules in CODEMOD_LAYERS for module in modules]
  assert len(listed) == len(set(listed))
  on_disk = {path.stem for path in (ROOT / 'compat' / 'codemod').glob('*.py')
             if path.stem != '__init__'}
  assert set(listed) == on_disk


def test_codemod_imports_one_way():
  graph = import_graph()
  wrong = codemod_layer_violations(graph)
  assert not wrong, 'codemod imports against its layers:\n' + '\n'.join(wrong)
  codemod = {module: {t for t in targets if t.startswith(_CODEMOD + '.')}
             for module, targets in graph.items()
             if module.startswith(_CODEMOD + '.')}
  assert find_cycle(codemod) is None


# Issue 38: the codemod's rooms stay small enough to show one part each.
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 80


def oversized(tree: ast.AST, where: str) -> list[str]:
  """``where:line name (N lines)`` for each class over MAX_CLASS_LINES and
  each function over MAX_FUNCTION_LINES in ``tree``."""
  found = []
  for node in ast.walk(tree):
    limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else
             MAX_FUNCTION_LINES if isinstance(
                 node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
    if limit is None:
      continue
    lines = node.end_lineno - node.lineno + 1
    if lines > limit:
      found.append(f'{where}:{node.lineno} {node.name} ({lines} lines)')
  return found


def test_oversized_finds_a_long_function_and_class():
  body = '\n'.join(f'  x{i} = {i}' for i in range(MAX_FUNCTION_LINES))
  source = f'def long():\n{body}\n\nclass Big:\n' + '\n'.join(
      f'  a{i} = {i}' for i in range(MAX_CLASS_LINES))
  assert oversized(ast.parse(source), 'm.py') == [
      f'm.py:1 long ({MAX_FUNCTION_LINES + 1} lines)',
      f'm.py:{MAX_FUNCTION_LINES + 3} Big ({MAX_CLASS_LINES + 1} lines)']


def test_codemod_has_no_class_or_function_over_its_limit():
  found = []
  for path in sorted((ROOT / 'compat' / 'codemod').glob('*.py')):
    found += oversized(ast.parse(path.read_text(encoding='utf-8')),
                       path.name)
  assert not found, '\n'.join(found)
