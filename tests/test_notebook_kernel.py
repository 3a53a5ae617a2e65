"""A notebook that binds a name nowhere runs in a kernel another notebook
of the project prepared (issue 24): its free names mean what every notebook
of the project that binds them at top level imports them as.

The project below: ``prepare.ipynb`` imports flax.optim, jax and the
package's ``State`` (a NamedTuple whose ``optimizer`` field is annotated
``optim.Optimizer``) and makes a state; ``fragment.ipynb`` has no import at
all: it reads ``state.optimizer.target`` and makes and steps an optimizer
of its own with the kernel's ``optim`` and ``jax``. Run one after the other
in one namespace (a kernel), the migrated pair must compute the same bits
as the original under the shim.
"""

import ast
import json
import sys

import _notebooks
import jax.numpy as jnp
import numpy as np

from compat.codemod import _names
from compat.codemod import _notebook
from compat.codemod import migrate
from compat.codemod import scan

_STATE_MODULE = """from typing import NamedTuple

from flax import optim


class State(NamedTuple):
  optimizer: optim.Optimizer
"""

_PREPARE_CELLS = (
    'from flax import optim\nimport jax\nimport jax.numpy as jnp\n'
    'from pkg import state as state_lib\n',
    "params = {'w': jnp.arange(3.0)}\n"
    'state = state_lib.State(optimizer=optim.Adam(0.1).create(params))\n',
)

_FRAGMENT_CELLS = (
    'def step(optimizer, scale):\n'
    '  def loss(p):\n'
    "    return jnp.sum((p['w'] * scale) ** 2)\n"
    '  grad = jax.grad(loss)(optimizer.target)\n'
    '  return optimizer.apply_gradient(grad)\n',
    'optimizer_def = optim.Adam(0.05)\n'
    'optimizer = optimizer_def.create(state.optimizer.target)\n'
    'for scale in (1.0, 2.0, 3.0):\n'
    '  optimizer = step(optimizer, scale)\n'
    "result = optimizer.target['w']\n",
)


def _write_project(root, extra=None):
  files = {'pkg/__init__.py': '', 'pkg/state.py': _STATE_MODULE,
           'prepare.ipynb': _notebooks.notebook_of(*_PREPARE_CELLS),
           'fragment.ipynb': _notebooks.notebook_of(*_FRAGMENT_CELLS),
           **(extra or {})}
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _migrate(root) -> dict:
  sources, results = migrate.migrate_paths([str(root)])
  return {str(p)[len(str(root)) + 1:]: r for p, r in zip(sources, results)}


def _run_kernel(root, notebook_bytes, monkeypatch):
  """The notebooks' code cells run one after the other in one namespace
  (a kernel), with ``root`` importable; the namespace after."""
  monkeypatch.syspath_prepend(str(root))
  for name in [n for n in list(sys.modules)
               if n == 'pkg' or n.startswith('pkg.')]:
    monkeypatch.delitem(sys.modules, name)
  namespace = {_notebook.MAGIC_CALL: lambda index: None,
               _notebook.CELL_MARKER: lambda index: None}
  try:
    for raw in notebook_bytes:
      module = _notebook.Notebook(raw).module
      exec(compile(module, '<cell>', 'exec'), namespace)  # pylint: disable=exec-used
  finally:
    # The kernel's own import of ``pkg`` goes too (monkeypatch restores only
    # what it removed): a later test importing another ``pkg`` got this one.
    for name in [n for n in list(sys.modules)
                 if n == 'pkg' or n.startswith('pkg.')]:
      del sys.modules[name]
  return namespace


def _without_sources(raw: bytes):
  document = json.loads(raw)
  for cell in document['cells']:
    cell.pop('source')
  return document


def test_a_fragment_migrates_with_the_notebooks_preparing_its_kernel(
    tmp_path, monkeypatch):
  # Before: `optim` was bound by nothing in fragment.ipynb, so its
  # definition and optimizer were not proven, and its read of the
  # `State.optimizer` field kept the whole flow (both notebooks, the
  # package) on flax.optim.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write_project(project)
  results = _migrate(project)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not result.left, (name, result.left)
  fragment = results['fragment.ipynb']
  module = _notebook.Notebook(fragment.new).module
  # The rewrite's own names are imported by the fragment itself: the
  # migrated prepare.ipynb no longer imports flax.optim.
  assert 'optimizer_def = flax_optim_rules.adam(learning_rate=0.05)' in module
  assert 'import flax_optim_rules\n' in module
  assert 'from flax.training import train_state\n' in module
  assert 'optim.' not in module.replace('flax_optim_rules.', '')
  assert 'from flax import optim' not in _notebook.Notebook(
      results['prepare.ipynb'].new).module
  # Only source lines changed: outputs, metadata, layout are as they were.
  assert _without_sources(fragment.new) == _without_sources(fragment.old)
  _write_project(migrated)
  for name, result in results.items():
    (migrated / name).write_bytes(result.new)
  order = ('prepare.ipynb', 'fragment.ipynb')
  old = _run_kernel(project, [results[n].old for n in order], monkeypatch)
  new = _run_kernel(migrated, [results[n].new for n in order], monkeypatch)
  assert type(new['optimizer']).__name__ == 'TrainState'
  np.testing.assert_array_equal(np.asarray(old['result']),
                                np.asarray(new['result']))
  assert not np.array_equal(np.asarray(new['result']), jnp.arange(3.0))


def test_notebooks_binding_a_name_differently_resolve_only_that_name(
    tmp_path):
  # Another notebook binds `optim` to something else: the fragment's
  # `optim` means nothing known, so its flow (and with it, through the
  # field, the package's and prepare.ipynb's) stays, the reason naming the
  # fragment. `jax`, which every notebook imports alike, still resolves:
  # the fragment's removed `jax.tree_map` is rewritten.
  _write_project(tmp_path, {
      'other.ipynb': _notebooks.notebook_of('import torch.optim as optim\n'),
      'fragment.ipynb': _notebooks.notebook_of(
          *_FRAGMENT_CELLS, 'sizes = jax.tree_map(jnp.size, params)\n')})
  results = _migrate(tmp_path)
  fragment = results['fragment.ipynb']
  module = _notebook.Notebook(fragment.new).module
  assert 'optimizer_def = optim.Adam(0.05)' in module
  assert 'sizes = jax.tree_util.tree_map(jnp.size, params)' in module
  prepare, state = results['prepare.ipynb'], results['pkg/state.py']
  assert prepare.new == prepare.old
  assert state.new == state.old
  reasons = '\n'.join(left.reason for left in state.plan.leftovers)
  assert 'fragment.ipynb:' in reasons
  notebook = _notebook.Notebook(fragment.old)
  adam = notebook.file_line(notebook.module.splitlines().index(
      'optimizer_def = optim.Adam(0.05)') + 1)
  [note] = [n for n in fragment.plan.notes if n.construct == 'kernel']
  assert note.line == adam
  assert note.reason.startswith(
      "'optim' is bound nowhere in this notebook, and the notebooks of the "
      'project bind it to flax.optim, torch.optim:'), note.reason


def test_scan_finds_a_fragments_kernel_names_but_not_a_modules(tmp_path):
  # A free name in a .py module fails when it runs: it is never read as
  # the notebooks' kernel's; nor is a name a notebook binds anywhere (here
  # a parameter), even where it also reads it at top level.
  _write_project(tmp_path, {
      'pkg/lib.py': 'def make():\n  return optim.Adam(0.05)\n',
      'bound.ipynb': _notebooks.notebook_of(
          'def make(optim):\n  return optim.Adam(0.05)\n',
          'optimizer_def = optim.Adam(0.05)\n')})
  found = scan.scan_paths([str(tmp_path)]).findings
  lines = _notebook.Notebook(
      (tmp_path / 'fragment.ipynb').read_bytes()).module.splitlines()
  adam = next(i for i, line in enumerate(lines, 1)
              if 'optim.Adam(0.05)' in line)
  fragment_line = _notebook.Notebook(
      (tmp_path / 'fragment.ipynb').read_bytes()).file_line(adam)
  at_fragment = {(f.line, f.construct) for f in found
                 if f.path.endswith('fragment.ipynb')}
  assert (fragment_line, 'optimizer_def') in at_fragment
  assert not [f for f in found if f.path.endswith(('pkg/lib.py',
                                                    'bound.ipynb'))]


def test_the_kernel_table_decides_a_name_only_where_every_binding_agrees():
  def tree(source):  # both readings: statements only, or every node
    walked = _names.bindings_of(ast.parse(source)).top_level
    read = _names.top_level_bindings(ast.parse(source), source.encode())
    assert set(read) == set(walked) or ':=' in source
    return walked
  table = _names.kernel_bindings([
      tree('from flax import optim\nimport jax.numpy as jnp\n'
           'from . import local\nfor i in range(2):\n  pass\n'),
      tree('from flax import optim\nfrom jax import numpy as jnp\n'
           'def f():\n  global counter\n  counter = 1\n'),
      tree('try:\n  import mediapy as media\nexcept ImportError:\n'
           '  media = None\n'
           'squares = [(last := v) * v for v in range(2)]\n'),
  ])
  assert _names.kernel_path(table, 'optim') == 'flax.optim'
  # Two spellings, one module.
  assert _names.kernel_path(table, 'jnp') == 'jax.numpy'
  # A comprehension's variable is its own; its walrus binds the module's.
  assert 'v' not in table
  for undecided in ('local', 'i', 'f', 'counter', 'media', 'last'):
    assert _names.kernel_path(table, undecided) is None, undecided
  assert table['media'] == {'mediapy', _names.NOT_AN_IMPORT}
  # A star import may bind any name: nothing is decided.
  assert _names.kernel_bindings([tree('from flax import optim'),
                                 tree('from pylab import *')]) == {}


def test_a_fragment_keeping_its_flow_imports_what_its_kernel_lost(
    tmp_path, monkeypatch):
  # The fragment's own flow stays (a # noqa holds it) while prepare.ipynb
  # migrates and drops `from flax import optim`: run after it, the
  # fragment needs an import of its own. Before: it was left reading an
  # `optim` nothing bound any more.
  project = tmp_path / 'project'
  _write_project(project, {'fragment.ipynb': _notebooks.notebook_of(
      'optimizer = optim.Adam(0.1).create(params)  # noqa\n',
      "result = optimizer.target['w']\n")})
  results = _migrate(project)
  prepare, fragment = results['prepare.ipynb'], results['fragment.ipynb']
  assert 'from flax import optim' not in _notebook.Notebook(
      prepare.new).module
  module = _notebook.Notebook(fragment.new).module
  assert module.splitlines()[1:3] == [
      'from flax import optim', '']
  assert 'optimizer = optim.Adam(0.1).create(params)  # noqa' in module
  added = [note for note in fragment.plan.notes if note.code == (
      'from flax import optim')]
  assert len(added) == 1 and 'prepare.ipynb' in added[0].reason
  assert _without_sources(fragment.new) == _without_sources(fragment.old)
  migrated = tmp_path / 'migrated'
  _write_project(migrated)
  for name, result in results.items():
    (migrated / name).write_bytes(result.new)
  kernel = _run_kernel(migrated, [prepare.new, fragment.new], monkeypatch)
  np.testing.assert_array_equal(np.asarray(kernel['result']),
                                np.arange(3.0))


def test_what_a_fragment_leaves_of_its_kernels_flax_optim_is_counted(
    tmp_path):
  # Both notebooks keep their flows (each reads .optimizer_def, which has
  # no TrainState counterpart), so prepare.ipynb keeps its import and the
  # fragment still reads flax.optim through the kernel: the report counts
  # its lines as left, as it would with an import of its own.
  _write_project(tmp_path, {
      'prepare.ipynb': _notebooks.notebook_of(
          *_PREPARE_CELLS, 'print(state.optimizer.optimizer_def)\n'),
      'fragment.ipynb': _notebooks.notebook_of(
          'optimizer = optim.Adam(0.1).create(params)\n',
          'print(optimizer.optimizer_def)\n')})
  results = _migrate(tmp_path)
  fragment = results['fragment.ipynb']
  assert fragment.new == fragment.old
  notebook = _notebook.Notebook(fragment.old)
  adam = notebook.file_line(notebook.module.splitlines().index(
      'optimizer = optim.Adam(0.1).create(params)') + 1)
  left = {(item.line, item.construct) for item in fragment.left}
  assert {(adam, 'optimizer_def'), (adam, 'create')} <= left, left


def test_a_notebook_binding_a_kernel_name_anywhere_does_not_read_it():
  table = _names.kernel_bindings([_names.bindings_of(ast.parse(
      'import jax\nfrom flax import optim\n')).top_level])
  for source in ('def optim():\n  pass\nx = optim.Adam\n',
                 'class  optim:\n  pass\n',
                 'for optim in range(2):\n  pass\n',
                 'squares = [optim.x for optim in ()]\n',
                 'f(lambda optim: optim.x)\n',
                 'with f() as optim:\n  pass\n',
                 'del optim\n',
                 'def f():\n  global optim\n  optim = 1\n',
                 'y = (optim := 2)\n',
                 'x = "#"; optim = 1\n'):
    for given in (source.encode(), None):  # with its text, or walked
      kernel = _names.Kernel(table, ast.parse(source), given)
      assert kernel.path('optim') is None, source
      assert kernel.path('jax') == 'jax', source
  read = ("optim.Adam(0.1)\nx = optim.Adam\ny = optim['a']\nz.optim = 1\n"
          '# optim = None: a comment\n')
  for given in (read.encode(), None):
    kernel = _names.Kernel(table, ast.parse(read), given)
    assert kernel.path('optim') == 'flax.optim'
