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
import sys

import _legacy_imports
import jax
import jax.numpy as jnp
import numpy as np

from compat.codemod import _project
from compat.codemod import _rewrite_plan
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
  before = set(sys.modules)
  sys.path.insert(0, str(directory))
  try:
    return importlib.import_module(module).train(*args)
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
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), name
  training = results['training.py'].new
  assert b'train_state.TrainState.create(' in training
  assert b'tstate.optimizer.params' in training
  assert b'tstate.optimizer.step' in training
  assert b'-> optax.GradientTransformation' in results['configs.py'].new
  params, batches = _data()
  for name in ('adam', 'adafactor'):
    old = _run(project, 'main', params, batches, name)
    new = _run(migrated, 'main', params, batches, name)
    _assert_same_bits(old.target, new.params)
    assert int(old.state.step) == int(new.step) == STEPS


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
  for name, result in results.items():
    assert result.new == result.old, name
  reasons = _reasons(results)
  assert 'definition.hyper_params' in reasons['inspect_def.py', 3]
  assert 'training.py:21' in reasons['training.py', 21]
  assert 'not rewritten' in reasons['training.py', 32]  # .target
  for line in (12, 13):  # both definitions of the config's method
    assert 'flow across modules' in reasons['configs.py', line]
  params, batches = _data()
  _assert_same_bits(_run(project, 'main', params, batches, 'adam').target,
                    _run(migrated, 'main', params, batches, 'adam').target)


class _Plan:

  def __init__(self, *edits):
    self.edits = [_rewrite_plan.Edit(0, 0, '', (), line, construct)
                  for line, construct in edits]


def test_flow_violations_finds_each_link_rewritten_on_one_side_only():
  link = _project.Link('configs.py', 12, 'training.py', 21, 20,
                       _project._CREATED_HERE)
  lost = _project.Link('configs.py', 12, 'inspect.py', None, 3,
                       '`d` goes on into `print(d)`')
  plans = {'configs.py': _Plan((12, 'algorithm')),
           'training.py': _Plan((21, 'create'))}

  def rewritten(path, line, construct):
    plan = plans.get(path)
    return plan is not None and any(e.line == line and e.construct ==
                                    construct for e in plan.edits)

  assert _project.flow_violations([link], rewritten) == []
  assert _project.flow_violations([link, lost], rewritten) == [lost]
  plans['training.py'] = _Plan()  # the .create stayed: broken program
  assert _project.flow_violations([link], rewritten) == [link]
  plans['configs.py'] = _Plan()  # both stayed: the shim runs both
  assert _project.flow_violations([link, lost], rewritten) == []


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
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, _PACKAGE)
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), name
  assert b'Optional[train_state.TrainState]' in results['pkg/state.py'].new
  assert b"print(holder.optimizer.params['w'].shape)" in results[
      'pkg/train.py'].new
  params, batches = _data()
  old = _run(project, 'pkg.train', params, batches)
  new = _run(migrated, 'pkg.train', params, batches)
  _assert_same_bits(old.target, new.params)


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
  # Called by name nowhere (a config system or another package calls it),
  # or decorated so: rewriting its definitions alone would hand an Optax
  # transform to a caller that expects an OptimizerDef.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  decorated = ('import functools\n\nfrom flax import optim\n\n\n'
               '@functools.lru_cache()\n'
               'def make_def(rate):\n'
               '  return optim.Momentum(rate, beta=0.9)\n')
  _write(project, {'configs.py': _CONFIGS, 'cached.py': decorated})
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert result.new == result.old, name
  reasons = [left.reason for left in results['configs.py'].plan.leftovers]
  assert any('create_optimizer_def() is called nowhere' in r
             for r in reasons), reasons
  reasons = [left.reason for left in results['cached.py'].plan.leftovers]
  assert any('decorated with `functools.lru_cache()`' in r
             for r in reasons), reasons


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
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), name
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
  for name, result in results.items():
    assert result.new == result.old, name
  reasons = _reasons(results)
  assert 'mpkg/train_utils.py:14: it goes into the MultiOptimizer here' in (
      reasons['mpkg/optimizers.py', 6])
  assert 'flow across modules' in reasons['mpkg/train_utils.py', 14]
  assert 'not rewritten' in reasons['mpkg/trainer.py', 12]  # .target
