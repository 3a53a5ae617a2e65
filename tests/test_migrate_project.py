"""``migrate`` on flows that cross modules: rewritten whole or kept whole.

Each project here is a few small modules written for the test in the shapes
research code used (a config class whose method returns the definition, a
factory module, the user's own NamedTuple/dataclass holding the optimizer,
relative imports). Rewritten, it must train bit-identically to the original
under the shim, with no flax.optim import left; where one link cannot be
rewritten, no module of the flow changes and the report lists every link.
"""

import importlib
import os
import re
import sys
import types

import _legacy_imports
import _notebooks
import jax
import jax.numpy as jnp
import numpy as np

from compat.codemod import _links
from compat.codemod import _notebook
from compat.codemod import _project
from compat.codemod import migrate

STEPS = 4

_CONFIGS = '''"""A config module: its class says which definition to build."""
from flax import optim


class OptimizerConfig:

  def __init__(self, name='adam', learning_rate=0.01):
    self.name, self.learning_rate = name, learning_rate

  def create_optimizer_def(self) -> optim.OptimizerDef:
    if self.name == 'adafactor':
      return optim.Adafactor(self.learning_rate)
    return optim.Adam(self.learning_rate, beta2=0.99)
'''

_TRAINING = '''"""A training module: creates, holds and steps the optimizer."""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import optim


class TrainState(NamedTuple):
  optimizer: optim.Optimizer
  mstate: Any


class Trainer:

  def __init__(self, optimizer_factory):
    self.optimizer_factory = optimizer_factory

  def init(self, params):
    optimizer_def = self.optimizer_factory.create_optimizer_def()
    optimizer = optimizer_def.create(params)
    return TrainState(optimizer, {})

  def step(self, tstate, batch, lr):
    return train_step(tstate, batch, lr)


@jax.jit
def train_step(tstate, batch, lr):
  def loss(p):
    return jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
  grad = jax.grad(loss)(tstate.optimizer.target)
  optimizer = tstate.optimizer.apply_gradient(grad, learning_rate=lr)
  return tstate._replace(optimizer=optimizer), tstate.optimizer.state.step
'''

_MAIN = '''import configs
import training


def train(params, batches, name):
  trainer = training.Trainer(configs.OptimizerConfig(name))
  tstate = trainer.init(params)
  for index, batch in enumerate(batches):
    tstate, _ = trainer.step(tstate, batch, 0.01 / (index + 1))
  return tstate.optimizer
'''


def _write(directory, files):
  directory.mkdir(parents=True)
  for name, text in files.items():
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _migrate_into(project, migrated):
  """Migrates ``project`` as one tree; writes the result to ``migrated``."""
  sources, results = migrate.migrate_paths([str(project)])
  for path, result in zip(sources, results):
    target = migrated / os.path.relpath(path, project)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(result.new)
  return {os.path.relpath(p, project): r for p, r in zip(sources, results)}


def _run(directory, module, *args):
  """``module.train(*args)`` imported from ``directory`` (fresh modules)."""
  return _run_with(directory, lambda: importlib.import_module(module), args)


def _run_notebook(directory, name, *args):
  """``train(*args)`` defined by the notebook ``name`` in ``directory``,
  its code cells run as one script there (magic lines do nothing)."""
  def load():
    notebook = _notebook.Notebook((directory / name).read_bytes())
    namespace = {_notebook.MAGIC_CALL: lambda index: None,
                 _notebook.CELL_MARKER: lambda index: None}
    exec(compile(notebook.module, name, 'exec'), namespace)  # pylint: disable=exec-used
    return types.SimpleNamespace(**namespace)
  return _run_with(directory, load, args)


def _run_with(directory, load, args):
  before = set(sys.modules)
  sys.path.insert(0, str(directory))
  try:
    return load().train(*args)
  finally:
    sys.path.remove(str(directory))
    for name in set(sys.modules) - before:
      if not name.startswith(('jax', 'flax', 'optax', 'legacy_optim',
                              'flax_optim_rules', 'compat', 'numpy')):
        del sys.modules[name]


def _reasons(results) -> dict:
  """(file, line) -> the reasons the report gives there, one a line."""
  reasons: dict = {}
  for name, result in results.items():
    for left in result.plan.leftovers:
      reasons[name, left.line] = reasons.get((name, left.line), '') + (
          left.reason + '\n')
  return reasons


def _data():
  rng = np.random.RandomState(7)
  params = {'w': jnp.asarray(rng.randn(4, 2), jnp.float32)}
  batches = [{'x': jnp.asarray(rng.randn(8, 4), jnp.float32),
              'y': jnp.asarray(rng.randn(8, 2), jnp.float32)}
             for _ in range(STEPS)]
  return params, batches


def _assert_same_bits(a, b):
  leaves_a, leaves_b = (jax.tree_util.tree_leaves(t) for t in (a, b))
  assert len(leaves_a) == len(leaves_b)
  for index, (x, y) in enumerate(zip(leaves_a, leaves_b)):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (index, x, y)


def test_config_method_definition_and_users_namedtuple_train_identically(
    tmp_path):
  # The shape: the config module's method returns the definition,
  # the training module creates it and keeps the optimizer in its own
  # NamedTuple. Before: only the config module changed (AttributeError:
  # 'GradientTransformationExtraArgs' object has no attribute 'create').
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'configs.py': _CONFIGS, 'training.py': _TRAINING,
                   'main.py': _MAIN})
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  training = results['training.py'].new
  assert b'train_state.TrainState.create(' in training
  assert b'tstate.optimizer.params' in training
  assert b'tstate.optimizer.step' in training
  assert b'-> optax.GradientTransformation' in results['configs.py'].new
  for name in ('adam', 'adafactor'):
    _assert_trains_alike(project, migrated, 'main', name)


def test_one_link_that_cannot_be_followed_keeps_every_module_of_the_flow(
    tmp_path):
  # A script reads the definition's hyper_params: an Optax transform has
  # none, so the definition must stay, and with it the .create and every
  # use in the training module.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  inspect = ('import configs\n\n'
             'definition = configs.OptimizerConfig().create_optimizer_def()\n'
             'print(definition.hyper_params.learning_rate)\n')
  _write(project, {'configs.py': _CONFIGS, 'training.py': _TRAINING,
                   'main.py': _MAIN, 'inspect_def.py': inspect})
  results = _migrate_into(project, migrated)
  _assert_unchanged(results)
  reasons = _reasons(results)
  assert 'definition.hyper_params' in reasons['inspect_def.py', 3]
  assert 'training.py:21' in reasons['training.py', 21]
  assert 'not rewritten' in reasons['training.py', 32]  # .target
  for line in (12, 13):  # both definitions of the config's method
    assert 'flow across modules' in reasons['configs.py', line]
  params, batches = _data()
  _assert_same_bits(_run(project, 'main', params, batches, 'adam').target,
                    _run(migrated, 'main', params, batches, 'adam').target)


def test_flow_violations_finds_each_link_rewritten_on_one_side_only():
  made = _links.Element('Call', 12, 11, 12, 25)
  created = _links.Element('Call', 21, 4, 21, 30)
  link = _project.Link('configs.py', 12, 'training.py', 21, 20,
                       _project._CREATED_HERE, producer_element=made,
                       consumer_element=created)
  lost = _project.Link('configs.py', 12, 'inspect.py', None, 3,
                       '`d` goes on into `print(d)`', producer_element=made)
  migrated = {'configs.py': {made}, 'training.py': {created}}

  def rewritten(path, element):
    return element in migrated.get(path, ())

  assert _project.flow_violations([link], rewritten) == []
  assert _project.flow_violations([link, lost], rewritten) == [lost]
  migrated['training.py'] = set()  # the .create stayed: broken program
  assert _project.flow_violations([link], rewritten) == [link]
  migrated['configs.py'] = set()  # both stayed: the shim runs both
  assert _project.flow_violations([link, lost], rewritten) == []


_MADE_ELSEWHERE = {
    'configs.py': '''from flax import optim


def make_def():
  return optim.Adam(0.1)
''',
    # The definition reaches `d`, but so may `other`: `d.create(params)` is
    # no provable `.create` of a definition and stays as it is. The
    # `.create` beside it on its line is rewritten.
    'training.py': '''from flax import optim

import configs


def init(params, other, use_other):
  d = configs.make_def()
  if use_other:
    d = other
  first, second = d.create(params), optim.Momentum(0.1).create(params)
  return first, second
''',
}


def test_a_link_asks_about_its_own_create_not_its_line(tmp_path):
  # The link from make_def's definition names the `.create` it meets, not
  # its line: matched by line and construct, the other `.create` rewritten
  # there passed for it, and make_def was rewritten into an Optax
  # transform that `d.create(params)`, left as it was, then called.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, _MADE_ELSEWHERE)
  results = _migrate_into(project, migrated)
  _assert_unchanged(results)
  assert 'training.py:10: its `.create(...)` is here' in _reasons(
      results)['configs.py', 5]

_PACKAGE = {
    'pkg/__init__.py': '',
    'pkg/optimizers.py': '''from flax import optim


def get_optimizer(config):
  return optim.Momentum(config['learning_rate'], beta=0.9)
''',
    'pkg/state.py': '''import dataclasses
from typing import Optional

from flax import optim


@dataclasses.dataclass
class Holder:
  optimizer: Optional[optim.Optimizer] = None
''',
    'pkg/train.py': '''import jax
import jax.numpy as jnp

from . import state as state_lib
from .optimizers import get_optimizer


@jax.jit
def step(optimizer, batch):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(optimizer.target)
  return optimizer.apply_gradient(grad)


def train(params, batches):
  holder = state_lib.Holder(
      get_optimizer({'learning_rate': 0.05}).create(params))
  for batch in batches:
    holder.optimizer = step(holder.optimizer, batch)
  print(holder.optimizer.target['w'].shape)
  return holder.optimizer
''',
}


def test_relative_imports_factory_function_and_optional_field(tmp_path):
  # `from .optimizers import get_optimizer`, `get_optimizer(c).create(p)`
  # and a dataclass field `Optional[optim.Optimizer]` of another module.
  results = _assert_package_trains_alike(
      tmp_path, _PACKAGE, b"print(holder.optimizer.params['w'].shape)")
  assert b'Optional[train_state.TrainState]' in results['pkg/state.py'].new


def _assert_package_trains_alike(tmp_path, files, line):
  """``files`` (``_PACKAGE``'s shape) migrate whole, ``pkg/train.py``
  with ``line``, and train like the original."""
  project, migrated, results = _migrated(tmp_path, files)
  _assert_fully_migrated(results)
  assert line in results['pkg/train.py'].new
  params, batches = _data()
  old = _run(project, 'pkg.train', params, batches)
  new = _run(migrated, 'pkg.train', params, batches)
  _assert_same_bits(old.target, new.params)
  return results


def test_migrating_the_migrated_project_changes_nothing(tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'configs.py': _CONFIGS, 'training.py': _TRAINING,
                   'main.py': _MAIN, **_PACKAGE})
  _migrate_into(project, migrated)
  again = _migrate_into(migrated, tmp_path / 'again')
  for name, result in again.items():
    assert result.new == result.old, name


def test_a_factory_whose_callers_are_not_scanned_keeps_its_definitions(
    tmp_path):
  # Named without being called (a registry, a gin file) or decorated (gin
  # and its kind call it): its callers are not in the scanned code, and
  # rewriting its definitions alone would hand an Optax transform to one
  # that expects an OptimizerDef.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  factory = ('from flax import optim\n\n\n'
             'def make_def(rate):\n'
             '  return optim.Momentum(rate, beta=0.9)\n')
  decorated = ('import functools\n\n' + factory).replace(
      'def make_def', '@functools.lru_cache()\ndef make_cached_def')
  _write(project, {
      'cached.py': decorated,
      'registry.py': factory + "\n\nMAKERS = {'momentum': make_def}\n",
      'gin_made.py': factory.replace('make_def', 'make_gin_def'),
      'configs/train.gin': 'train.optimizer_def = @gin_made.make_gin_def()\n',
  })
  results = _migrate_into(project, migrated)
  _assert_unchanged(results)
  reasons = [left.reason for left in results['cached.py'].plan.leftovers]
  assert any('make_cached_def() is decorated with `functools.lru_cache()`'
             in r for r in reasons), reasons
  reasons = [left.reason for left in results['registry.py'].plan.leftovers]
  assert any('make_def() is called nowhere in the scanned code but named at '
             f'{project}/registry.py:8' in r for r in reasons), reasons
  reasons = [left.reason for left in results['gin_made.py'].plan.leftovers]
  assert any('make_gin_def() is called nowhere in the scanned code but named '
             f'at {project}/configs/train.gin:1' in r for r in reasons), reasons


# scenic's get_backbone_multioptimizer: a public factory nothing calls.
_UNCALLED = '''"""Factories of definitions."""
from flax import optim


def get_optimizer(config):
  return optim.Adam(config['learning_rate'], beta2=0.99)
'''


def test_a_factory_called_and_named_nowhere_migrates_with_a_note(tmp_path):
  # The scanned tree is the program: a factory nothing in it calls or names
  # (not even a config file or a comment) is dead code there, rewritten with
  # its flow; the report says that callers outside the tree meet the new
  # contract.
  _, _, results = _migrated(tmp_path, {'optimizers.py': _UNCALLED})
  _assert_fully_migrated(results)
  assert b'optim.' not in results['optimizers.py'].new
  notes = [(n.line, n.construct, n.reason)
           for n in results['optimizers.py'].plan.notes]
  assert [(line, construct) for line, construct, _ in notes] == [
      (5, 'called_nowhere')], notes
  assert '`get_optimizer` is called and named nowhere' in notes[0][2]
  assert 'it now returns an Optax transform' in notes[0][2]
  # Passed as a single file, not a tree: its callers may be in another.
  single = str(tmp_path / 'project' / 'optimizers.py')
  _, (result,) = migrate.migrate_paths([single])
  assert result.new == result.old
  assert any('get_optimizer() is called nowhere in the scanned code but '
             'passed as single files, not their directory' in l.reason
             for l in result.plan.leftovers), result.plan.leftovers
  # Its name in a comment of another module is enough to keep it.
  commented = tmp_path / 'commented'
  _write(commented, {
      'optimizers.py': _UNCALLED,
      'main.py': '# opt = get_optimizer(config).create(params)\n'})
  _assert_unchanged(_migrate_into(commented, tmp_path / 'commented_out'))
  # A method called nowhere may be a hook a base class outside calls.
  _write(tmp_path / 'method', {'configs.py': _CONFIGS})
  results = _migrate_into(tmp_path / 'method', tmp_path / 'method_out')
  _assert_unchanged(results)
  assert any('create_optimizer_def() is a method called nowhere' in l.reason
             for l in results['configs.py'].plan.leftovers)


# A package and a Colab notebook that trains with it (nerfies' shape): the
# notebook creates the optimizer from the package's factory, keeps it in the
# package's dataclass and reads it there; the package's step function
# applies the gradients.
_NOTEBOOK_PACKAGE = {
    'pkg/__init__.py': '',
    'pkg/opt.py': """from flax import optim


def make(learning_rate):
  return optim.Adam(learning_rate)
""",
    'pkg/state.py': """from typing import Any

import flax
from flax import optim


@flax.struct.dataclass
class State:
  optimizer: optim.Optimizer
  extra: Any = None
""",
    'pkg/steps.py': """import jax
import jax.numpy as jnp


@jax.jit
def train_step(state, batch):
  def loss(p):
    return jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
  grad = jax.grad(loss)(state.optimizer.target)
  return state.replace(optimizer=state.optimizer.apply_gradient(grad))
""",
}


_TRAIN_CELL = """def train(params, batches):
  optimizer = opt.make(0.01).create(params)
  state = state_lib.State(optimizer=optimizer)
  first = state.optimizer.state.step + 1
  for batch in batches:
    state = steps.train_step(state, batch)
  return state.optimizer.target, first
"""


def _migrate_with_notebook(tmp_path, *last_cells):
  """The package and a notebook of the cells above and ``last_cells``,
  migrated: ``(project, migrated, notebook text, results)``."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  notebook = _notebooks.notebook_of(
      '%matplotlib inline\nfrom pkg import opt\n',
      'from pkg import state as state_lib\nfrom pkg import steps\n',
      _TRAIN_CELL, *last_cells)
  _write(project, {**_NOTEBOOK_PACKAGE, 'train.ipynb': notebook})
  return project, migrated, notebook, _migrate_into(project, migrated)


def test_a_notebook_consuming_the_packages_optimizer_migrates_with_it(
    tmp_path):
  # Before: the notebook was migrated without the project, so its
  # `state.optimizer.state.step` stayed on what the package now makes a
  # TrainState (and `opt.make(...).create` was not known as a .create).
  project, migrated, _, results = _migrate_with_notebook(tmp_path)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    module = result.new if name.endswith('.py') else _notebook.Notebook(
        result.new).module.encode()
    assert not _legacy_imports.legacy_imports(module), name
  cells = results['train.ipynb'].new.decode()
  assert 'state.optimizer.step + 1' in cells
  assert 'return state.optimizer.params, first' in cells
  params, batches = _data()
  old_params, old_first = _run_notebook(project, 'train.ipynb', params,
                                        batches)
  new_params, new_first = _run_notebook(migrated, 'train.ipynb', params,
                                        batches)
  _assert_same_bits(old_params, new_params)
  assert int(old_first) == int(new_first) == 1


def test_a_notebook_link_that_cannot_be_followed_keeps_the_package_flow(
    tmp_path):
  # The notebook reads the definition's hyper_params: the package's
  # definition stays, and with it the notebook's own uses.
  _, _, notebook, results = _migrate_with_notebook(
      tmp_path, 'print(opt.make(0.1).hyper_params.learning_rate)\n')
  assert results['pkg/opt.py'].new == results['pkg/opt.py'].old
  assert results['train.ipynb'].new == results['train.ipynb'].old
  lines = notebook.splitlines()

  def line_of(text):  # the notebook file's line
    return next(i for i, line in enumerate(lines, 1) if text in line)

  reasons = _reasons(results)
  create, inspect = line_of('.create(params)'), line_of('.hyper_params')
  assert f'train.ipynb:{create}: its `.create(...)` is here' in reasons[
      'train.ipynb', create]
  assert f'train.ipynb:{inspect}: the definition goes into' in reasons[
      'pkg/opt.py', 5]


# scenic's shape: a factory module returns one definition per config
# (a weight decay from the config), a helper builds a MultiOptimizer of
# (traversal, definition) pairs from the factory's results (one reused
# through a plain `backbone_def = other_def`), the trainer creates and
# steps it with a per-step rate.
_MULTI_PACKAGE = {
    'mpkg/__init__.py': '',
    'mpkg/optimizers.py': '''from flax import optim as optimizers


def get_optimizer(config):
  if config['optimizer'] == 'adam':
    return optimizers.Adam(learning_rate=config['lr'],
                           weight_decay=config.get('weight_decay', 0.0))
  return optimizers.Momentum(learning_rate=config['lr'], beta=0.9,
                             weight_decay=config.get('weight_decay', 0.0))
''',
    'mpkg/train_utils.py': '''from flax import optim

from mpkg import optimizers


def get_backbone_multioptimizer(config) -> optim.MultiOptimizer:
  other_def = optimizers.get_optimizer(config)
  if config.get('backbone'):
    backbone_def = optimizers.get_optimizer(config['backbone'])
  else:
    backbone_def = other_def
  backbone = optim.ModelParamTraversal(lambda path, _: 'backbone' in path)
  other = optim.ModelParamTraversal(lambda path, _: 'backbone' not in path)
  return optim.MultiOptimizer((backbone, backbone_def), (other, other_def))
''',
    'mpkg/trainer.py': '''import jax
import jax.numpy as jnp

from mpkg import train_utils


@jax.jit
def step(optimizer, batch, lr):
  def loss(p):
    hidden = batch['x'] @ p['backbone']['w']
    return jnp.mean((hidden @ p['head']['w'] - batch['y']) ** 2)
  grad = jax.grad(loss)(optimizer.target)
  return optimizer.apply_gradient(grad, learning_rate=lr)


def train(params, batches, config):
  optimizer = train_utils.get_backbone_multioptimizer(config).create(params)
  for index, batch in enumerate(batches):
    optimizer = step(optimizer, batch, 0.05 / (index + 1))
  return optimizer
''',
}


def _multi_data():
  rng = np.random.RandomState(11)
  params = {'backbone': {'w': jnp.asarray(rng.randn(4, 3), jnp.float32)},
            'head': {'w': jnp.asarray(rng.randn(3, 2), jnp.float32)}}
  batches = [{'x': jnp.asarray(rng.randn(8, 4), jnp.float32),
              'y': jnp.asarray(rng.randn(8, 2), jnp.float32)}
             for _ in range(STEPS)]
  return params, batches


def test_definitions_of_a_factory_module_flow_into_a_multi_optimizer(
    tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, _MULTI_PACKAGE)
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  assert b'return flax_optim_rules.multi_optimizer((backbone, backbone_def)' \
      in results['mpkg/train_utils.py'].new
  params, batches = _multi_data()
  configs = [
      {'optimizer': 'momentum', 'lr': 0.1, 'weight_decay': 1e-3},
      {'optimizer': 'adam', 'lr': 0.01,
       'backbone': {'optimizer': 'momentum', 'lr': 0.1}}]
  for config in configs:
    old = _run(project, 'mpkg.trainer', params, batches, config)
    new = _run(migrated, 'mpkg.trainer', params, batches, config)
    _assert_same_bits(old.target, new.params)
    assert int(old.state.step) == int(new.step) == STEPS


def test_a_definition_read_elsewhere_keeps_the_multi_optimizer_flow(
    tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  inspect = ('from mpkg import optimizers\n\n'
             "print(optimizers.get_optimizer({'optimizer': 'adam', 'lr': 1})"
             '.hyper_params)\n')
  _write(project, {**_MULTI_PACKAGE, 'mpkg/inspect_def.py': inspect})
  results = _migrate_into(project, migrated)
  _assert_unchanged(results)
  reasons = _reasons(results)
  assert 'mpkg/train_utils.py:14: it goes into the MultiOptimizer here' in (
      reasons['mpkg/optimizers.py', 6])
  assert 'flow across modules' in reasons['mpkg/train_utils.py', 14]
  assert 'not rewritten' in reasons['mpkg/trainer.py', 12]  # .target


def _migrated(tmp_path, files):
  """``(project, migrated, results)``: ``files`` written as a project and
  migrated as one tree into ``migrated``."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, files)
  return project, migrated, _migrate_into(project, migrated)


def _assert_fully_migrated(results):
  """No leftover and no flax.optim/legacy_optim import in any module."""
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), name


def _assert_unchanged(results):
  """No module changed: the flow was kept whole."""
  for name, result in results.items():
    assert result.new == result.old, name


def _assert_trains_alike(project, migrated, module, *args):
  """``module.train`` of both trees, the original under the shim: the same
  params to the bit after the same number of steps."""
  params, batches = _data()
  old = _run(project, module, params, batches, *args)
  new = _run(migrated, module, params, batches, *args)
  _assert_same_bits(old.target, new.params)
  assert int(old.state.step) == int(new.step) == STEPS


# The config classes of a gin-style project: an abstract base method that
# only raises, two overrides that build different rules; the state class
# holding the optimizer in another module, built positionally.
_GIN_FILES = {
    'opt_config.py': '''from flax import optim


class OptimizerConfig:
  learning_rate = 0.01

  def create_optimizer_def(self) -> optim.OptimizerDef:
    raise NotImplementedError('a subclass builds the definition')


class AdamConfig(OptimizerConfig):

  def create_optimizer_def(self) -> optim.OptimizerDef:
    return optim.Adam(beta1=0.8, beta2=0.99)


class AdafactorConfig(OptimizerConfig):

  def create_optimizer_def(self) -> optim.OptimizerDef:
    return optim.Adafactor(beta1=0.9)
''',
    'task.py': '''from typing import Any

from flax import optim
from flax import struct


@struct.dataclass
class TrainState:
  optimizer: optim.Optimizer
  mstate: Any
''',
    'loop.py': '''import jax
import jax.numpy as jnp

import opt_config
import task

TrainState = task.TrainState


class Trainer:
  optimizer_factory: opt_config.OptimizerConfig

  def __init__(self, factory):
    self.optimizer_factory = factory

  def init(self, params):
    optimizer_def = self.optimizer_factory.create_optimizer_def()
    optimizer = optimizer_def.create(params)
    return TrainState(optimizer, {})

  def train_step(self, tstate, batch, lr):
    grad = jax.grad(lambda p: jnp.mean(
        (batch['x'] @ p['w'] - batch['y']) ** 2))(tstate.optimizer.target)
    new_optimizer = tstate.optimizer.apply_gradient(grad, learning_rate=lr)
    return TrainState(new_optimizer, tstate.mstate)
''',
    # The step jitted, as training code runs it: an eager flax.optim step
    # runs as compiled kernels, an eager TrainState step op by op, and the
    # two may round apart by an ulp on some CPUs (Adafactor on AVX2 here).
    'main.py': '''import jax

import loop
import opt_config


def train(params, batches, name):
  config = {'adam': opt_config.AdamConfig,
            'adafactor': opt_config.AdafactorConfig}[name]()
  trainer = loop.Trainer(config)
  tstate = trainer.init(params)
  step = jax.jit(trainer.train_step)
  for index, batch in enumerate(batches):
    tstate = step(tstate, batch, 0.02 / (index + 1))
  return tstate.optimizer
''',
}


def test_overrides_of_an_abstract_config_method_and_a_state_class_elsewhere(
    tmp_path):
  # meliad's shape: the base method only raises, so the call
  # `self.optimizer_factory.create_optimizer_def()` returns what one of the
  # overrides returns: a definition either way. Before: "called nowhere",
  # and the state's readers were rewritten while its `.create` stayed.
  project, migrated, results = _migrated(tmp_path, _GIN_FILES)
  _assert_fully_migrated(results)
  assert b'TrainState.create(' in results['loop.py'].new
  assert b'optimizer: train_state.TrainState' in results['task.py'].new
  for name in ('adam', 'adafactor'):
    _assert_trains_alike(project, migrated, 'main', name)


def test_an_override_that_returns_something_else_keeps_the_flow(tmp_path):
  # One override hands on a definition made where migrate cannot see: the
  # overrides disagree, so no module of the flow changes.
  files = dict(_GIN_FILES)
  files['opt_config.py'] += '''

class GivenConfig(OptimizerConfig):

  def __init__(self, given):
    self.given = given

  def create_optimizer_def(self):
    return self.given
'''
  project, migrated, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  reasons: dict = {}
  for name, result in results.items():
    for left in result.plan.leftovers:
      reasons[name, left.line] = reasons.get((name, left.line), '') + (
          left.reason + '\n')
  for line in (14, 20):  # both overrides' definitions
    assert 'may run the override at' in reasons['opt_config.py', line]
    assert 'opt_config.py:28, which does not return' in reasons[
        'opt_config.py', line]
  assert 'task.py:9' in reasons['loop.py', 19]  # the TrainState(...) store
  assert 'task.py:9' in reasons['main.py', 15]  # tstate.optimizer
  params, batches = _data()
  _assert_same_bits(_run(project, 'main', params, batches, 'adam').target,
                    _run(migrated, 'main', params, batches, 'adam').target)


def test_a_value_stored_in_the_field_that_is_not_provably_an_optimizer(
    tmp_path):
  # The state class's readers live in another module than its makers; one
  # maker stores what a caller passed (unknown): rewriting the readers
  # would break it, so every module of the flow stays and says why.
  files = dict(_GIN_FILES)
  files['resume.py'] = ('import task\n\n\n'
                        'def resume(restored):\n'
                        '  return task.TrainState(restored, {})\n')
  project, migrated, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  resume = [(left.line, left.reason)
            for left in results['resume.py'].plan.leftovers]
  assert any(line == 5 and '`restored` goes into the field `optimizer` of '
             'TrainState' in reason for line, reason in resume), resume
  reasons = [left.reason for left in results['loop.py'].plan.leftovers]
  assert any('task.py:9' in r for r in reasons), reasons


# The optimizer in a flax.struct dataclass declared by the training module,
# warm-started by a helper module that never imports flax.optim (it only
# replaces the target and stores the optimizer back), replicated and
# unreplicated as a whole state (mipnerf's `del optimizer` once stored).
_WARM_START = {
    'train.py': '''import flax
import jax
import jax.numpy as jnp
from flax import jax_utils
from flax import optim

import warm


@flax.struct.dataclass
class TrainState:
  step: int
  optimizer: optim.Optimizer


def make_state(params):
  optimizer = optim.Momentum(0.05, beta=0.9).create(params)
  state = TrainState(step=0, optimizer=optimizer)
  del optimizer  # binds nothing: the stored value is still provable
  return state


@jax.jit
def train_step(state, batch):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(state.optimizer.target)
  return state.replace(step=state.step + 1,
                       optimizer=state.optimizer.apply_gradient(grad))


def train(params, batches):
  state = warm.warm_start(make_state(params), params)
  state = jax_utils.unreplicate(jax_utils.replicate(state))
  for batch in batches:
    state = train_step(state, batch)
  return state.optimizer
''',
    'warm.py': '''import jax


def warm_start(state, params):
  doubled = jax.tree_util.tree_map(lambda x: 2 * x, params)
  optimizer = state.optimizer.replace(target=doubled)
  return state.replace(optimizer=optimizer)
''',
}


def test_a_helper_module_replaces_the_target_and_stores_it_back(tmp_path):
  project, migrated, results = _migrated(tmp_path, _WARM_START)
  _assert_fully_migrated(results)
  assert b'state.optimizer.replace(params=doubled)' in results['warm.py'].new
  _assert_trains_alike(project, migrated, 'train')


def test_a_helper_storing_what_it_cannot_prove_keeps_both_modules(tmp_path):
  # The helper stores what its caller's callback returns: not provably an
  # optimizer, so neither module changes; the report says where and why.
  files = dict(_WARM_START)
  files['warm.py'] += ('\n\ndef reset(state, make):\n'
                       '  return state.replace(optimizer=make())\n')
  project, migrated, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  warm_left = [(left.line, left.reason)
               for left in results['warm.py'].plan.leftovers]
  assert any(line == 11 and '`make()` goes into the field `optimizer`' in
             reason for line, reason in warm_left), warm_left
  train_left = [left.reason for left in results['train.py'].plan.leftovers]
  assert any('flow across modules' in r and 'warm.py:6' in r
             for r in train_left), train_left


_WEIGHT_NORMED = '''import jax
import jax.numpy as jnp
from flax import optim


def create(params, use_weight_norm):
  optimizer_def = optim.Adam(0.0, beta2=0.99)
  if use_weight_norm:
    optimizer_def = optim.WeightNorm(optimizer_def, wn_decay=1e-3)
  return optimizer_def.create(params)


@jax.jit
def step(optimizer, batch, lr):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(optimizer.target)
  return optimizer.apply_gradient(grad, learning_rate=lr)


def train(params, batches, use_weight_norm):
  optimizer = create(params, use_weight_norm)
  for index, batch in enumerate(batches):
    optimizer = step(optimizer, batch, 0.05 / (index + 1))
  return optimizer
'''


def test_weight_norm_around_a_definition_trains_identically(tmp_path):
  # hypernerf's shape: the definition wrapped in WeightNorm on a flag, the
  # rate set per step. WeightNorm becomes flax_optim_rules.weight_norm.
  project, migrated, results = _migrated(tmp_path, {'train.py': _WEIGHT_NORMED})
  _assert_fully_migrated(results)
  assert (b'optimizer_def = flax_optim_rules.weight_norm(optimizer_def, '
          b'wn_decay=1e-3)') in results['train.py'].new
  for use_weight_norm in (True, False):
    _assert_trains_alike(project, migrated, 'train', use_weight_norm)


def test_weight_norm_around_what_migrate_cannot_prove_keeps_the_flow(
    tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  source = _WEIGHT_NORMED.replace(
      'def create(params, use_weight_norm):\n  optimizer_def = '
      'optim.Adam(0.0, beta2=0.99)\n',
      'def create(params, use_weight_norm, inner=None):\n  optimizer_def = '
      'inner or optim.Adam(0.0, beta2=0.99)\n')
  _write(project, {'train.py': source})
  result = _migrate_into(project, migrated)['train.py']
  assert result.new == result.old
  left = [(l.line, l.reason) for l in result.plan.leftovers]
  assert any(line == 9 and 'not provably a flax.optim definition' in reason
             for line, reason in left), left


_SOME_STEPS_SET_THE_RATE = '''import jax
import jax.numpy as jnp
from flax import optim


def _grad(optimizer, batch):
  return jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(optimizer.target)


@jax.jit
def step_at(optimizer, batch, lr):
  return optimizer.apply_gradient(_grad(optimizer, batch), learning_rate=lr)


@jax.jit
def step(optimizer, batch):
  return optimizer.apply_gradient(_grad(optimizer, batch))


def train(params, batches):
  optimizer = optim.Momentum(0.05, beta=0.9).create(params)
  for index, batch in enumerate(batches):
    if index % 2:
      optimizer = step_at(optimizer, batch, 0.01)
    else:
      optimizer = step(optimizer, batch)
  return optimizer
'''


def test_the_definitions_rate_stays_in_the_injected_transform(tmp_path):
  # Every step sets the rate: the definition's own rate is still written
  # (the injected state's first value; it became 0.0 on the stock path).
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  every_step_sets_it = _SOME_STEPS_SET_THE_RATE.replace(
      'optimizer = step(optimizer, batch)',
      'optimizer = step_at(optimizer, batch, 0.02)')
  start = every_step_sets_it.index('@jax.jit\ndef step(')
  end = every_step_sets_it.index('def train(')
  _write(project, {'train.py': every_step_sets_it[:start] +
                   every_step_sets_it[end:]})
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  assert b'(learning_rate=0.05, momentum=0.9)' in results['train.py'].new
  _assert_trains_alike(project, migrated, 'train')


def test_a_step_at_the_definitions_rate_beside_steps_setting_one(tmp_path):
  # flax.optim's override lasts one step; an injected rate stays in the
  # state, so the plain step cannot be rewritten: the flow stays whole.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'train.py': _SOME_STEPS_SET_THE_RATE})
  result = _migrate_into(project, migrated)['train.py']
  assert result.new == result.old
  left = [(l.line, l.reason) for l in result.plan.leftovers]
  assert any(line == 18 and 'a rate set so stays' in reason
             for line, reason in left), left


def test_a_method_resolves_through_the_attributes_annotated_class(tmp_path):
  # Another class has a method of the same name that returns something
  # else; `self.optimizer_factory` is annotated `opt_config.OptimizerConfig`
  # in every class declaring it, so only that hierarchy's overrides count.
  files = dict(_GIN_FILES)
  files['schedules.py'] = ('class Constant:\n\n'
                           '  def create_optimizer_def(self):\n'
                           '    return 0.01\n')
  project, migrated, results = _migrated(tmp_path, files)
  _assert_fully_migrated(results)
  _assert_trains_alike(project, migrated, 'main', 'adam')


def test_an_unannotated_attribute_resolves_the_method_by_its_name(tmp_path):
  # Without the annotation any class's method of that name may run: the
  # one returning something else keeps the flow whole.
  files = dict(_GIN_FILES)
  files['loop.py'] = files['loop.py'].replace(
      '  optimizer_factory: opt_config.OptimizerConfig\n\n', '')
  files['schedules.py'] = ('class Constant:\n\n'
                           '  def create_optimizer_def(self):\n'
                           '    return 0.01\n')
  project, migrated, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  reasons = [left.reason for left in results['opt_config.py'].plan.leftovers]
  assert any('schedules.py:3, which does not return' in r
             for r in reasons), reasons


def test_an_abstractmethod_base_gives_its_callers_nothing(tmp_path):
  # The base method is `@abc.abstractmethod` with only a docstring: it is
  # never what the call runs, so the overrides decide.
  files = dict(_GIN_FILES)
  files['opt_config.py'] = 'import abc\n' + files['opt_config.py'].replace(
      "    raise NotImplementedError('a subclass builds the definition')\n",
      '    """A subclass builds the definition."""\n').replace(
          '  def create_optimizer_def(self) -> optim.OptimizerDef:\n'
          '    """A subclass',
          '  @abc.abstractmethod\n'
          '  def create_optimizer_def(self) -> optim.OptimizerDef:\n'
          '    """A subclass')
  assert '@abc.abstractmethod' in files['opt_config.py']
  project, migrated, results = _migrated(tmp_path, files)
  _assert_fully_migrated(results)
  _assert_trains_alike(project, migrated, 'main', 'adafactor')


# flax's own ppo example's shape: a module function creates and returns the
# optimizer, another module's step takes it by an annotated parameter, and
# a test script that never spells flax.optim calls both and reads
# `.target` (which stayed on main while the other two modules changed:
# 'TrainState' object has no attribute 'target').
_GIVER_FILES = {
    'models.py': '''from flax import optim


def create_optimizer(params, learning_rate):
  optimizer_def = optim.Adam(learning_rate)
  optimizer = optimizer_def.create(params)
  return optimizer
''',
    'steps.py': '''import jax
import jax.numpy as jnp
from flax import optim


@jax.jit
def train_step(optimizer: optim.Optimizer, batch):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(optimizer.target)
  return optimizer.apply_gradient(grad)
''',
    'check.py': '''import models
import steps


def train(params, batches):
  optimizer = models.create_optimizer(params, 0.01)
  for batch in batches:
    optimizer = steps.train_step(optimizer, batch)
  assert optimizer.target['w'].shape == params['w'].shape
  return optimizer
''',
}


def test_an_optimizer_returned_to_another_module_is_rewritten_there(
    tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, _GIVER_FILES)
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  assert b"optimizer.params['w']" in results['check.py'].new
  _assert_trains_alike(project, migrated, 'check')


def test_a_use_of_a_returned_optimizer_left_keeps_every_module(tmp_path):
  # The script also reads the definition through the optimizer, which a
  # TrainState does not have: nothing of the flow may change anywhere.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  files = dict(_GIVER_FILES)
  files['check.py'] = files['check.py'].replace(
      '  return optimizer\n',
      '  print(optimizer.optimizer_def.hyper_params.learning_rate)\n'
      '  return optimizer\n')
  _write(project, files)
  results = _migrate_into(project, migrated)
  _assert_unchanged(results)
  reasons = [left.reason for left in results['models.py'].plan.leftovers]
  assert any('check.py' in r and 'create_optimizer()' in r
             for r in reasons), reasons
  _assert_same_bits(_run(project, 'check', *_data()).target,
                    _run(migrated, 'check', *_data()).target)


def test_no_flow_is_rewritten_when_the_analysis_across_modules_fails(
    tmp_path, monkeypatch):
  # Without the project's links nothing can say whether a flow goes on in
  # another module: every flow stays, the failure is an error.
  def broken(self, *args, **kwargs):
    raise RuntimeError('injected')

  monkeypatch.setattr(_project.Model, '__init__', broken)
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, _GIVER_FILES)
  results = _migrate_into(project, migrated)
  _assert_unchanged(results)
  reasons = [left.reason for left in results['models.py'].plan.leftovers]
  assert any('analysis across modules failed' in r for r in reasons), reasons


# flax's imagenet example: a dynamic-scale step keeps the old optimizer
# where the gradients were not finite, with the removed jax.tree_multimap,
# and stores the result back into the state class's optimizer field.
_TREE_MULTIMAP_STORE = '''import functools

import flax
import jax
import jax.numpy as jnp
from flax import optim


@flax.struct.dataclass
class State:
  optimizer: optim.Optimizer


@jax.jit
def step(state, batch):
  optimizer = state.optimizer
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(optimizer.target)
  new_optimizer = optimizer.apply_gradient(grad)
  is_fin = jnp.all(jnp.isfinite(grad['w']))
  new_optimizer = jax.tree_multimap(
      functools.partial(jnp.where, is_fin), new_optimizer, optimizer)
  return state.replace(optimizer=new_optimizer)


def train(params, batches):
  state = State(optimizer=optim.Momentum(0.1, beta=0.9).create(params))
  for batch in batches:
    state = step(state, batch)
  return state.optimizer
'''


def test_a_leafwise_map_over_optimizers_stored_in_a_field(tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'train.py': _TREE_MULTIMAP_STORE})
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  assert b'jax.tree_util.tree_map(' in results['train.py'].new
  # The original runs under the shim with the removed name spelled as
  # today's jax has it (jax.tree_multimap is gone).
  runnable = tmp_path / 'runnable'
  _write(runnable, {'train.py': _TREE_MULTIMAP_STORE.replace(
      'jax.tree_multimap(', 'jax.tree_util.tree_map(')})
  _assert_trains_alike(runnable, migrated, 'train')


# A trainer that creates its optimizer under jit, on the host's device
# (`jax.jit(get_optimizer(config).create, backend='cpu')(params)`), stores
# it in a state dataclass of another module and steps it with a learning
# rate given per step.
_JITTED_CREATE = {
    'opts.py': '''from flax import optim


def get_optimizer(config):
  return optim.Adam(config['learning_rate'], beta2=0.99)
''',
    'state.py': '''from typing import Optional

import flax
from flax import optim


@flax.struct.dataclass
class TrainState:
  step: int = 0
  optimizer: Optional[optim.Optimizer] = None
''',
    'trainer.py': '''import jax
import jax.numpy as jnp

import opts
import state as state_lib


@jax.jit
def train_step(state, batch, lr):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(state.optimizer.target)
  new_optimizer = state.optimizer.apply_gradient(grad, learning_rate=lr)
  return state.replace(step=state.step + 1, optimizer=new_optimizer)


def train(params, batches):
  optimizer = jax.jit(
      opts.get_optimizer({'learning_rate': 0.01}).create,
      backend='cpu')(params)
  state = state_lib.TrainState(step=0, optimizer=optimizer)
  for batch in batches:
    state = train_step(state, batch, 0.02)
  return state.optimizer
''',
}


def test_a_create_given_to_jit_is_rewritten_with_its_definition(tmp_path):
  project, migrated, results = _migrated(tmp_path, _JITTED_CREATE)
  _assert_fully_migrated(results)
  assert (b'lambda params, tx=opts.get_optimizer({\'learning_rate\': 0.01})'
          b': train_state.TrainState.create(apply_fn=None, params=params, '
          b'tx=tx)') in results['trainer.py'].new
  _assert_trains_alike(project, migrated, 'trainer')


def test_a_jitted_create_with_other_jit_options_keeps_the_flow(tmp_path):
  # donate_argnums changes what the call may do with its argument: not
  # followed, so no module of the flow changes and the report says where.
  files = dict(_JITTED_CREATE)
  files['trainer.py'] = files['trainer.py'].replace(
      "backend='cpu'", 'donate_argnums=0')
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  reasons = _reasons(results)
  assert '`optimizer` goes into the field `optimizer` of TrainState' in (
      reasons['trainer.py', 20])
  assert 'flow across modules' in reasons['opts.py', 5]


# A restore helper that stores a dict stand-in (`{'target': params}`, as a
# restored checkpoint's raw layout) where no state was given, and a reader
# that reads the stand-in by its key: neither is an optimizer, both are
# read the same way before and after.
_STAND_IN = dict(_WARM_START)
_STAND_IN['warm.py'] += '''

def from_checkpoint(state, params, fresh):
  if fresh:
    new_optimizer = {'target': params}
  else:
    new_optimizer = state.optimizer.replace(target=params)
  return state.replace(optimizer=new_optimizer)


def placeholder(state, params):
  return state.replace(optimizer={'target': params})


def params_of(state):
  return state.optimizer['target']
'''
_STAND_IN['main.py'] = '''import train as train_lib
import warm


def train(params, batches):
  fresh = warm.from_checkpoint(train_lib.make_state(params), params, True)
  held = warm.placeholder(fresh, warm.params_of(fresh))
  state = warm.from_checkpoint(train_lib.make_state(params),
                               warm.params_of(held), False)
  for batch in batches:
    state = train_lib.train_step(state, batch)
  return state.optimizer
'''


def test_a_dict_stand_in_stored_in_the_field_migrates_with_the_flow(
    tmp_path):
  project, migrated, results = _migrated(tmp_path, _STAND_IN)
  _assert_fully_migrated(results)
  new = results['warm.py'].new
  assert b"new_optimizer = {'target': params}" in new
  assert b'new_optimizer = state.optimizer.replace(params=params)' in new
  assert b"return state.optimizer['target']" in new
  _assert_trains_alike(project, migrated, 'main')


def test_a_name_holding_a_dict_or_an_optimizer_read_otherwise_stays(
    tmp_path):
  # `new_optimizer.target` would stay as it is (the name is not provably
  # an optimizer) and meet a TrainState: the flow is kept whole.
  files = dict(_STAND_IN)
  files['warm.py'] = files['warm.py'].replace(
      '  return state.replace(optimizer=new_optimizer)\n',
      '  print(new_optimizer.target)\n'
      '  return state.replace(optimizer=new_optimizer)\n', 1)
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  assert '`new_optimizer` goes into the field `optimizer`' in _reasons(
      results)['warm.py', 16]


# A MultiOptimizer subclass that logs, when the optimizer is made, which
# params each traversal selects (reading its filter by flax.optim's name)
# and then makes the state as MultiOptimizer does.
_LOGGING_MULTI = dict(_MULTI_PACKAGE)
_LOGGING_MULTI['mpkg/train_utils.py'] = '''from flax import optim
from flax import traverse_util

from mpkg import optimizers


def get_backbone_multioptimizer(config) -> optim.MultiOptimizer:
  other_def = optimizers.get_optimizer(config)
  backbone_def = optimizers.get_optimizer(config.get('backbone', config))
  backbone = optim.ModelParamTraversal(lambda path, _: 'backbone' in path)
  other = optim.ModelParamTraversal(lambda path, _: 'backbone' not in path)
  return LoggingMulti((backbone, backbone_def), (other, other_def))


class LoggingMulti(optim.MultiOptimizer):

  def init_state(self, params):
    self.log(params)
    return super().init_state(params)

  def log(self, params):
    flat = traverse_util.flatten_dict(params)
    for index, traversal in enumerate(self.traversals):
      for key, value in sorted(flat.items()):
        path = '/' + '/'.join(key)
        if traversal._filter_fn(path, value):
          print('optimizer', index, 'trains', path, value.shape)
'''


def test_a_multi_optimizer_subclass_that_logs_moves_onto_multi_rule_def(
    tmp_path, capsys):
  project, migrated, results = _migrated(tmp_path, _LOGGING_MULTI)
  _assert_fully_migrated(results)
  new = results['mpkg/train_utils.py'].new
  assert b'class LoggingMulti(flax_optim_rules.MultiRuleDef):' in new
  assert (b'return LoggingMulti((backbone, backbone_def), (other, '
          b'other_def)).to_optax()') in new
  params, batches = _multi_data()
  config = {'optimizer': 'adam', 'lr': 0.01,
            'backbone': {'optimizer': 'momentum', 'lr': 0.1}}
  capsys.readouterr()
  old = _run(project, 'mpkg.trainer', params, batches, config)
  logged = capsys.readouterr().out
  new = _run(migrated, 'mpkg.trainer', params, batches, config)
  assert capsys.readouterr().out == logged
  assert "optimizer 0 trains /backbone/w (4, 3)" in logged
  _assert_same_bits(old.target, new.params)
  assert int(old.state.step) == int(new.step) == STEPS


def test_a_multi_optimizer_subclass_reading_its_state_keeps_the_flow(
    tmp_path):
  # The override reads the state flax.optim made (its step): Optax's
  # differs, so the class and the whole flow stay, and the report says why.
  files = dict(_LOGGING_MULTI)
  files['mpkg/train_utils.py'] = files['mpkg/train_utils.py'].replace(
      '    return super().init_state(params)\n',
      '    state = super().init_state(params)\n'
      '    print(state.step)\n'
      '    return state\n')
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  assert 'LoggingMulti.init_state builds or reads a state itself' in (
      _reasons(results)['mpkg/train_utils.py', 15])


# A step helper module that never names flax.optim: its function's
# parameter is an optimizer only through what the trainer passes it.
_STEP_HELPER = {
    'steps.py': '''import jax
import jax.numpy as jnp


def loss(params, batch):
  return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)


@jax.jit
def step(optimizer, batch, lr):
  grad = jax.grad(loss)(optimizer.target, batch)
  return optimizer.apply_gradient(grad, learning_rate=lr)
''',
    'trainer.py': '''from flax import optim

import steps


def train(params, batches):
  optimizer = optim.Adam(0.01).create(params)
  for batch in batches:
    optimizer = steps.step(optimizer, batch, 0.02)
  return optimizer
''',
}


def test_a_parameter_proven_by_its_calls_from_another_module(tmp_path):
  project, migrated, results = _migrated(tmp_path, _STEP_HELPER)
  _assert_fully_migrated(results)
  assert b'grad = jax.grad(loss)(optimizer.params, batch)' in results[
      'steps.py'].new
  _assert_trains_alike(project, migrated, 'trainer')


def test_one_call_passing_what_is_not_provably_an_optimizer_keeps_the_flow(
    tmp_path):
  # A script steps what a callback made: `steps.step`'s parameter is not
  # provably an optimizer, so its uses stay, and with them the trainer
  # whose optimizer reaches them (before, the trainer's own call proved it
  # and the script met a rewritten step).
  files = dict(_STEP_HELPER)
  files['script.py'] = ('import steps\n\n\n'
                        'def resume(make, batch):\n'
                        '  return steps.step(make(), batch, 0.1).target\n')
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  reasons = _reasons(results)
  assert 'script.py:5 passes `make()` as `optimizer` of step(), not ' \
      'provably an optimizer' in reasons['steps.py', 12]
  assert 'also holds values not provably' in reasons['trainer.py', 7]


def test_a_callee_module_kept_keeps_the_callers_passing_it_an_optimizer(
    tmp_path):
  # steps.py reads the optimizer's definition (no TrainState counterpart):
  # it stays, so the trainer that passes it its optimizer stays with it.
  files = dict(_STEP_HELPER)
  files['steps.py'] += ('\n\ndef peek(optimizer):\n'
                        '  return optimizer.optimizer_def\n')
  files['trainer.py'] = files['trainer.py'].replace(
      '  return optimizer\n', '  steps.peek(optimizer)\n  return optimizer\n')
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  reasons = _reasons(results)
  assert '.optimizer_def of a flax.optim Optimizer' in reasons[
      'steps.py', 16]
  assert 'passes an optimizer to peek()' in reasons['trainer.py', 10]


def test_a_package_scanned_from_inside_resolves_its_absolute_imports(
    tmp_path):
  """``migrate pkg/`` of a package whose modules import each other as
  ``from pkg import defs``: the scan starts inside the package, and the
  names still resolve to the files scanned (the definition and its
  ``.create`` are one flow)."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project / 'pkg', {
      '__init__.py': '',
      'defs.py': ('from flax import optim\n\n\n'
                  'def make_def(rate):\n'
                  '  return optim.Adam(learning_rate=rate, beta2=0.99)\n'),
      'train.py': ('import jax\nimport jax.numpy as jnp\n\n'
                   'from pkg import defs\n\n\n'
                   '@jax.jit\n'
                   'def step(opt, batch):\n'
                   '  grads = jax.grad(lambda p: jnp.mean(\n'
                   "      (batch['x'] @ p['w'] - batch['y'])**2))(opt.target)\n"
                   '  return opt.apply_gradient(grads)\n\n\n'
                   'def train(params, batches):\n'
                   '  opt = defs.make_def(0.01).create(params)\n'
                   '  for batch in batches:\n'
                   '    opt = step(opt, batch)\n'
                   '  return opt\n'),
  })
  sources, results = migrate.migrate_paths([str(project / 'pkg')])
  by_name = {}
  for path, result in zip(sources, results):
    relative = os.path.relpath(path, project)
    by_name[relative] = result
    (migrated / relative).parent.mkdir(parents=True, exist_ok=True)
    (migrated / relative).write_bytes(result.new)
  _assert_fully_migrated(by_name)
  _assert_trains_alike(project, migrated, 'pkg.train')


def test_a_multi_optimizer_subclass_made_in_another_module_keeps_the_flow(
    tmp_path):
  # The pairs given to the class are followed only in its own module.
  files = dict(_LOGGING_MULTI)
  files['mpkg/train_utils.py'] = files['mpkg/train_utils.py'].replace(
      '  return LoggingMulti(', '  return multi.LoggingMulti(').replace(
          'from mpkg import optimizers\n',
          'from mpkg import multi\nfrom mpkg import optimizers\n')
  head, _, tail = files['mpkg/train_utils.py'].partition(
      '\n\nclass LoggingMulti')
  files['mpkg/train_utils.py'] = head + '\n'
  files['mpkg/multi.py'] = ('from flax import optim\n'
                            'from flax import traverse_util\n\n\n'
                            'class LoggingMulti' + tail)
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  assert 'LoggingMulti is a MultiOptimizer subclass of another module' in (
      _reasons(results)['mpkg/train_utils.py', 13])


def test_a_factory_returning_another_modules_kept_rule_keeps_its_creates(
    tmp_path):
  # The factory's definition is the rule class of a third module, which
  # stays (it derives from a built-in rule): the trainer's .create of it
  # stays too (before, no link named the factory's line, and the trainer
  # alone was rewritten).
  files = {
      'rules.py': ('from flax import optim\n\n\n'
                   'class Mine(optim.GradientDescent):\n  pass\n'),
      'factory.py': 'import rules\n\n\ndef make():\n  return rules.Mine(0.1)\n',
      'trainer.py': ('import factory\n\n\n'
                     'def train(params, grads):\n'
                     '  optimizer = factory.make().create(params)\n'
                     '  return optimizer.apply_gradient(grads).target\n'),
  }
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  assert 'flow across modules' in _reasons(results)['trainer.py', 5]


_TRAINER_WITH_AN_OPTAX_PROPERTY = '''import optax


class Trainer:

  @property
  def optimizer(self) -> optax.GradientTransformation:
    return optax.sgd(0.1)

  def init_state(self, params):
    return self.optimizer.init(params)

  def apply(self, grads, opt_state, params):
    updates, opt_state = self.optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
'''


def test_a_property_of_the_same_name_is_not_the_optimizer_field(tmp_path):
  # jax3d: one project's dataclass holds a flax.optim Optimizer in
  # `optimizer`, another project's trainer has an `optimizer` property giving
  # an Optax transform. `self.optimizer.init(...)` there is the trainer's
  # own: it is not reported, and stays. Every other `x.optimizer` of the
  # package reads a value typed as the dataclass (made as one, here), so
  # the dataclass's flow migrates.
  files = {**_PACKAGE, 'pkg/other.py': _TRAINER_WITH_AN_OPTAX_PROPERTY}
  _, _, results = _migrated(tmp_path, files)
  assert not results['pkg/other.py'].left  # nothing of flax.optim there
  assert results['pkg/other.py'].new == results['pkg/other.py'].old
  _assert_package_trains_alike(
      tmp_path / 'trained', files,
      b"print(holder.optimizer.params['w'].shape)")


# jax3d's NeSF: the holder's field is contested (another class declares
# `optimizer` otherwise), and every read of it is on a receiver typed as
# the holder: a parameter annotated with its class, a name bound to its
# constructor's call, to a function annotated to return one, to
# `replicate(...)` of one, or to a field another class annotates with it.
_TYPED_RECEIVERS = {
    'pkg/__init__.py': '',
    'pkg/state.py': '''from typing import NamedTuple

from flax import optim
from flax import struct


@struct.dataclass
class Holder:
  optimizer: optim.Optimizer


class StepOutput(NamedTuple):
  holder: Holder
  loss: float
''',
    'pkg/other.py': _TRAINER_WITH_AN_OPTAX_PROPERTY,
    'pkg/train.py': '''import copy

import jax
import jax.numpy as jnp
from flax import optim

from pkg import state as state_lib


@jax.jit
def step(holder: state_lib.Holder, batch) -> state_lib.StepOutput:
  def loss_fn(params):
    return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)
  loss, grad = jax.value_and_grad(loss_fn)(holder.optimizer.target)
  new_optimizer = holder.optimizer.apply_gradient(grad, learning_rate=0.05)
  return state_lib.StepOutput(holder=holder.replace(optimizer=new_optimizer),
                              loss=loss)


def restored(holder) -> state_lib.Holder:
  return copy.copy(holder)


def train(params, batches):
  holder = state_lib.Holder(optimizer=optim.Adam().create(params))
  holder = restored(holder)
  first_step = int(holder.optimizer.state.step)
  for batch in batches:
    output = step(holder, batch)
    holder = output.holder
  assert first_step == 0
  return holder.optimizer
''',
}


def test_reads_on_receivers_typed_as_the_holder_migrate_its_flow(tmp_path):
  project, migrated, results = _migrated(tmp_path, _TYPED_RECEIVERS)
  _assert_fully_migrated(results)
  assert results['pkg/other.py'].new == results['pkg/other.py'].old
  new = results['pkg/train.py'].new
  assert b'first_step = int(holder.optimizer.step)' in new
  assert b'(holder.optimizer.params)' in new
  _assert_trains_alike(project, migrated, 'pkg.train')


def test_a_field_typed_as_the_holder_only_where_no_module_says_otherwise(
    tmp_path):
  # `output.holder` is a Holder where every class declaring `holder`
  # annotates it so; a module naming nothing of flax.optim (so not read for
  # classes) declares `holder` too: the read is untyped, the flow stays.
  files = {**_TYPED_RECEIVERS,
           'pkg/unrelated.py': 'class Other:\n  holder: int = 0\n'}
  _, _, results = _migrated(tmp_path, files)
  _assert_unchanged(results)
  report = migrate.format_report(list(results.values()), [], 'exact')
  assert '`holder.optimizer` at ' in report, report


def test_a_read_on_an_untyped_receiver_keeps_a_contested_fields_flow(
    tmp_path):
  # One receiver migrate cannot type (a parameter without the holder's
  # annotation) may be the trainer's: the whole flow stays, and the report
  # names that read.
  untyped = {
      'read': 'return holder.optimizer.target',
      'replaced': 'return holder.replace(optimizer=None)',
      'stored': 'holder.optimizer = jnp.zeros(())',
  }
  for what, line in untyped.items():
    files = dict(_TYPED_RECEIVERS)
    files['pkg/train.py'] = files['pkg/train.py'].replace(
        'def restored(holder) -> state_lib.Holder:',
        f'def weights(holder):\n  {line}\n\n\n'
        'def restored(holder) -> state_lib.Holder:')
    _, _, results = _migrated(tmp_path / what, files)
    _assert_unchanged(results)
    report = migrate.format_report(list(results.values()), [], 'exact')
    assert '/pkg/other.py:6 declares `Trainer.optimizer` otherwise: `' in (
        report), (what, report)
    assert ('/pkg/train.py:21 uses `.optimizer` of a value not typed as '
            'Holder') in report, (what, report)


def test_a_field_name_another_class_declares_otherwise_keeps_the_flow(
    tmp_path):
  # `holder.optimizer.target` in a module that cannot tell a Holder from a
  # Config: rewriting what Holder stores would leave that read on a
  # TrainState. Before, make.py was migrated and use.py left as it was.
  files = {
      'pkg/__init__.py': '',
      'pkg/state.py': '''import dataclasses
from typing import Any

from flax import optim


@dataclasses.dataclass
class Holder:
  optimizer: optim.Optimizer


@dataclasses.dataclass
class Config:
  optimizer: Any = None
''',
      'pkg/make.py': '''from flax import optim

from pkg import state as state_lib


def make(params):
  return state_lib.Holder(optim.Adam(0.1).create(params))
''',
      'pkg/use.py': '''def weights(holder):
  return holder.optimizer.target
''',
  }
  for declared_otherwise in ('  optimizer: Any = None\n',
                             '  optimizer = None\n',
                             '  @property\n  def optimizer(self):\n'
                             '    return None\n'):
    files['pkg/state.py'] = files['pkg/state.py'].replace(
        files['pkg/state.py'].split('class Config:\n')[1], declared_otherwise)
    project = tmp_path / str(len(declared_otherwise))
    _write(project, files)
    results = _migrate_into(project, tmp_path / 'out')
    _assert_unchanged(results)
    report = migrate.format_report(list(results.values()), [], 'exact')
    assert ('/pkg/state.py:9 declares `Holder.optimizer` a flax.optim '
            'Optimizer, and ') in report, report
    assert re.search(r'/pkg/state\.py:1[34] declares `Config\.optimizer` '
                     'otherwise', report), report


def test_the_field_read_on_a_calls_result_is_rewritten_with_its_flow(
    tmp_path):
  # mipnerf's `jax.device_get(jax.tree_map(lambda x: x[0], state))
  # .optimizer.target`: before, the read of a call's result was neither
  # rewritten nor linked, and stayed `.target` on a TrainState.
  files = dict(_PACKAGE)
  files['pkg/train.py'] = files['pkg/train.py'].replace(
      "  print(holder.optimizer.target['w'].shape)\n",
      "  print(_same(holder).optimizer.target['w'].shape)\n").replace(
          '\n\n@jax.jit\n', '\n\ndef _same(value):\n  return value\n\n\n'
          '@jax.jit\n')
  _assert_package_trains_alike(
      tmp_path, files, b"print(_same(holder).optimizer.params['w'].shape)")


# A NamedTuple holder read by position in a module that names nothing of
# flax: ``opt, _ = tstate`` takes the optimizer without the field's name.
_POSITIONAL_STATE = '''from typing import Any, NamedTuple

from flax import optim


class TrainState(NamedTuple):
  optimizer: optim.Optimizer
  mstate: Any


def make(params):
  return TrainState(optim.Adam(learning_rate=0.1).create(params), {})
'''
_POSITIONAL_MAIN = '''import state
import use


def train(params, batches):
  return use.params_of(state.make(params))
'''


def test_a_namedtuple_holder_read_by_position_elsewhere_keeps_the_flow(
    tmp_path):
  # Before: state.py was migrated and use.py's `opt.target` met a
  # TrainState (AttributeError).
  reads = {
      'unpacked': 'def params_of(tstate):\n  opt, _ = tstate\n'
                  '  return opt.target\n',
      'starred': 'def params_of(tstate):\n  opt, *_ = tstate\n'
                 '  return opt.target\n',
      'in a loop': 'def params_of(tstate):\n  for opt, _ in [tstate]:\n'
                   '    return opt.target\n',
      'indexed': 'def params_of(tstate):\n  return tstate[0].target\n',
      'its step': 'def params_of(tstate):\n  opt = tstate[-2]\n'
                  '  opt2, _ = tstate\n'
                  '  return opt2.state.step\n',
  }
  for what, use in reads.items():
    where = tmp_path / what.replace(' ', '_')
    project, _, results = _migrated(where, {
        'state.py': _POSITIONAL_STATE, 'use.py': use,
        'main.py': _POSITIONAL_MAIN})
    _assert_unchanged(results)
    report = migrate.format_report(list(results.values()), [], 'exact')
    assert f'{project}/use.py:' in report and (
        'takes element 0 of a tuple of 2') in report, (what, report)
    params, batches = _data()
    _run(project, 'main', params, batches)  # the kept program runs


def test_other_positional_reads_leave_the_namedtuple_flow_migrated(tmp_path):
  # Another element, another number of elements, or a use a TrainState
  # has too: nothing there can take the optimizer as one.
  reads = {
      'the other element': 'def params_of(tstate):\n  _, m = tstate\n'
                           '  return m.target\n',
      'another arity': 'def params_of(tstate):\n  opt, _, _ = tstate\n'
                       '  return opt.target\n',
      'a TrainState use': 'def params_of(tstate):\n  opt, _ = tstate\n'
                          '  return opt.step\n',
  }
  for what, use in reads.items():
    _, _, results = _migrated(tmp_path / what.replace(' ', '_'), {
        'state.py': _POSITIONAL_STATE, 'use.py': use,
        'main.py': _POSITIONAL_MAIN})
    assert not results['state.py'].plan.leftovers, what
    assert b'train_state.TrainState.create(' in results['state.py'].new, what


def test_a_config_giving_the_field_name_a_literal_is_no_link(tmp_path):
  # score_sde's and scenic's configs: `config.optimizer = 'adam'` in a
  # module naming nothing of flax, and the name compared with a literal.
  # Neither is an optimizer's: the flow migrates, and the report does not
  # name the config module as one of its links.
  config = ("import ml_collections_stub as mc\n\n\ndef get_config():\n"
            "  config = mc.ConfigDict()\n  config.optimizer = 'momentum'\n"
            "  if config.optimizer == 'momentum':\n"
            "    config.beta = 0.9\n  return config\n")
  project, migrated, results = _migrated(
      tmp_path, {**_PACKAGE, 'pkg/config.py': config})
  _assert_fully_migrated(results)
  assert results['pkg/config.py'].new == results['pkg/config.py'].old
  _assert_trains_alike(project, migrated, 'pkg.train')
  held = _migrated(tmp_path / 'held', {
      **_PACKAGE, 'pkg/config.py': config.replace("'momentum'\n",
                                                  "make()\n", 1)})[2]
  _assert_unchanged(held)


# score_sde: a factory's step passed as a value. `optimization_manager`
# returns its nested `optimize_fn`; run_lib hands it to
# `losses.get_step_fn(..., optimize_fn=optimize_fn)`, whose nested step
# calls it and keeps what it gives (an optimizer) in the state.
_STEP_VALUE = {
    'losses.py': '''import flax
import jax
import jax.numpy as jnp


def get_optimizer(config):
  return flax.optim.Adam(beta1=config['beta1'])


def optimization_manager(config):
  def optimize_fn(state, grad, warmup=config['warmup']):
    lr = state.lr
    if warmup > 0:
      lr = lr * jnp.minimum((state.step + 1) / warmup, 1.0)
    return state.optimizer.apply_gradient(grad, learning_rate=lr)
  return optimize_fn


def get_step_fn(train, optimize_fn=None):
  def loss_fn(params, batch):
    return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)

  def step_fn(carry_state, batch):
    (rng, state) = carry_state
    if train:
      loss, grad = jax.value_and_grad(loss_fn)(state.optimizer.target, batch)
      new_optimizer = optimize_fn(state, grad)
      assert new_optimizer.target['w'].shape == (4, 2)
      new_state = state.replace(step=state.step + 1, optimizer=new_optimizer)
    else:
      loss = loss_fn(state.optimizer.target, batch)
      new_state = state
    return (rng, new_state), loss
  return step_fn
''',
    'state.py': '''import flax


@flax.struct.dataclass
class State:
  step: int
  optimizer: flax.optim.Optimizer
  lr: float
''',
    'run_lib.py': '''import jax

import losses
import state as mutils

CONFIG = {'beta1': 0.8, 'warmup': 3}


def train(params, batches):
  optimizer = losses.get_optimizer(CONFIG).create(params)
  state = mutils.State(step=0, optimizer=optimizer, lr=0.05)
  optimize_fn = losses.optimization_manager(CONFIG)
  train_step_fn = losses.get_step_fn(True, optimize_fn=optimize_fn)
  eval_step_fn = losses.get_step_fn(False, optimize_fn=optimize_fn)
  rng = jax.random.PRNGKey(0)
  for batch in batches:
    (rng, state), _ = jax.jit(train_step_fn)((rng, state), batch)
    eval_step_fn((rng, state), batch)
  return state.optimizer
''',
}


def test_a_step_passed_as_a_value_is_followed_where_it_is_called(tmp_path):
  project, migrated, results = _migrated(tmp_path, _STEP_VALUE)
  _assert_fully_migrated(results)
  losses = results['losses.py'].new
  assert b"assert new_optimizer.params['w'].shape" in losses
  assert b'inject_learning_rate(flax_optim_rules.adam)' in losses
  _assert_trains_alike(project, migrated, 'run_lib')


def test_a_step_value_going_elsewhere_keeps_its_flow(tmp_path):
  # The step also goes where its calls are not seen: the factory's step
  # keeps its callers unknown, so the optimizer it gives stays unproven.
  elsewhere = {
      'passed on again': ('losses.py', '      new_optimizer = optimize_fn(',
                          '      print(optimize_fn)\n'
                          '      new_optimizer = optimize_fn('),
      'stored by the caller': ('run_lib.py', '  rng = jax.random',
                               '  kept = [optimize_fn]\n  rng = jax.random'),
      'its factory used at home': (
          'losses.py', 'def get_step_fn(',
          'MANAGERS = [optimization_manager({"warmup": 0})]\n\n\n'
          'def get_step_fn('),
      'its factory named at home': (
          'losses.py', 'def get_step_fn(',
          'MANAGERS = {"default": optimization_manager}\n\n\n'
          'def get_step_fn('),
      'another value passed': ('run_lib.py',
                               'get_step_fn(False, optimize_fn=optimize_fn)',
                               'get_step_fn(False, optimize_fn=print)'),
  }
  for what, (name, old, new) in elsewhere.items():
    files = dict(_STEP_VALUE)
    assert old in files[name], what
    files[name] = files[name].replace(old, new)
    _, _, results = _migrated(tmp_path / what.replace(' ', '_'), files)
    _assert_unchanged(results)
    assert 'optimize_fn' in _reasons(results).get(('losses.py', 15), '') or (
        'new_optimizer' in ''.join(_reasons(results).values())), what


_SCRIPT_DIRECTORY_HELPERS = '''from flax import optim


def make(params):
  return optim.Adam(learning_rate=0.01, beta2=0.99).create(params)
'''

_SCRIPT_DIRECTORY_MAIN = '''import jax
import jax.numpy as jnp

import helpers  # the helpers.py beside this script


@jax.jit
def step(opt, batch):
  def loss(p):
    return jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
  return opt.apply_gradient(jax.grad(loss)(opt.target))


def train(params, batches):
  opt = helpers.make(params)
  for batch in batches:
    opt = step(opt, batch)
  return opt
'''


def test_a_module_name_two_script_directories_share_is_the_importers_own(
    tmp_path):
  # Research repositories keep one directory per experiment, each with its
  # own helpers.py imported as `import helpers` by the scripts beside it
  # (run from there). The name is the one beside the importer, so the flow
  # links across the two modules instead of stopping at an ambiguous name.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {
      'exp_a/helpers.py': _SCRIPT_DIRECTORY_HELPERS,
      'exp_a/main.py': _SCRIPT_DIRECTORY_MAIN,
      'exp_b/helpers.py': 'def make(params):\n  return params\n',
      'exp_b/main.py': 'import helpers\n\nprint(helpers.make(1))\n'})
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  assert b'train_state.TrainState.create(' in results['exp_a/helpers.py'].new
  assert results['exp_b/helpers.py'].new == results['exp_b/helpers.py'].old
  _assert_trains_alike(project / 'exp_a', migrated / 'exp_a', 'main')
