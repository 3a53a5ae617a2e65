"""Child process: train one flax v0.3.3 example on synthetic batches.

  python tests/_v033_driver.py EXAMPLE_DIR NAME OUT_NPZ

``EXAMPLE_DIR`` holds the example's modules, either as flax wrote them (run
through this library's ``flax.optim`` import alias) or as ``migrate --tier
exact`` rewrote them (plain Optax/TrainState). The recipe for ``NAME`` builds
a small model with the example's own code, creates the optimizer with the
example's own statements (taken from its source, so a migrated copy runs its
migrated statements) and calls the example's own train step ``STEPS`` times.
After every step the parameters and the step's metrics go to ``OUT_NPZ``;
``tests/test_migrate_examples.py`` compares the two runs bit for bit.

Modules the examples import only for their data pipelines and logging
(tensorflow, tensorflow_datasets, clu, ...) are not installed: they are
replaced by stand-ins that accept any attribute and call, which is enough
because no recipe calls into them.
"""

import ast
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from unittest import mock

import numpy as np

STEPS = 5
STUBBED_ROOTS = ('tensorflow', 'tensorflow_datasets', 'tensorflow_text',
                 'clu', 'sentencepiece', 'gym', 'seed_rl_atari_preprocessing',
                 'PIL')
STUBBED_MODULES = ('flax.metrics.tensorboard',)


class _StandIn(types.ModuleType):
  """A module whose every attribute is a ``MagicMock``."""

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    value = mock.MagicMock(name=f'{self.__name__}.{name}')
    setattr(self, name, value)
    return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Serves a ``_StandIn`` for the stubbed modules and their submodules."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if (fullname.split('.')[0] in STUBBED_ROOTS or
        fullname in STUBBED_MODULES):
      return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
    return None

  def create_module(self, spec):
    module = _StandIn(spec.name)
    module.__path__ = []
    return module

  def exec_module(self, module):
    del module


def example_statements(module, function: str, first: str, last: str,
                       **local_values):
  """Runs the statements of ``module.function`` from the first one that
  assigns ``first`` to the next one after it that assigns ``last``, with
  ``local_values`` as the function's locals; returns the locals after.

  migrate rewrites expressions, never adds or removes statements, so the
  same targets pick the same statements in the original and migrated copy.
  """
  with open(module.__file__, encoding='utf-8') as f:
    tree = ast.parse(f.read(), module.__file__)
  body = next(node.body for node in tree.body
              if isinstance(node, ast.FunctionDef) and node.name == function)

  def assigns(statement, name):
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in statement.targets)

  start = next(i for i, s in enumerate(body) if assigns(s, first))
  stop = next(i for i, s in enumerate(body) if i > start and assigns(s, last))
  code = compile(ast.Module(body=body[start:stop + 1], type_ignores=[]),
                 module.__file__, 'exec')
  namespace = dict(vars(module), **local_values)
  exec(code, namespace)  # noqa: S102 - the example's own statements
  return namespace


def params_of(optimizer):
  """A legacy ``Optimizer``'s target or a ``TrainState``'s params."""
  return optimizer.target if hasattr(optimizer, 'target') else optimizer.params


# ---------------------------------------------------------------------------
# Recipes: NAME -> function yielding (params, metrics) after each step.


def _mnist():
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  params = train.get_initial_params(jax.random.PRNGKey(0))
  optimizer = train.create_optimizer(params, learning_rate=0.1, beta=0.9)
  rng = np.random.RandomState(0)
  for _ in range(STEPS):
    batch = {'image': rng.rand(4, 28, 28, 1).astype(np.float32),
             'label': rng.randint(0, 10, 4)}
    optimizer, metrics = train.train_step(optimizer, batch)
    yield params_of(optimizer), metrics


def _vae():
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  train.FLAGS(['vae'])  # the flags' defaults: latents, learning_rate
  key = jax.random.PRNGKey(0)
  init_data = np.ones((4, 784), np.float32)
  params = train.model().init(key, init_data, key)['params']
  created = example_statements(train, 'main', 'optimizer', 'optimizer',
                               params=params)
  optimizer = created['optimizer']
  rng = np.random.RandomState(0)
  for step in range(STEPS):
    batch = (rng.rand(4, 784) > 0.5).astype(np.float32)
    optimizer = train.train_step(optimizer, batch,
                                 jax.random.PRNGKey(step + 1))
    yield params_of(optimizer), {}


RECIPES = {'mnist': _mnist, 'vae': _vae}


def main(argv):
  directory, name, out = argv[1:]
  sys.meta_path.insert(0, _StandInFinder())
  sys.path.insert(0, os.path.abspath(directory))
  os.chdir(directory)
  import jax  # noqa: PLC0415 - after the stand-ins are installed

  arrays = {}
  for step, (params, metrics) in enumerate(RECIPES[name]()):
    for key, leaf in enumerate(jax.tree_util.tree_leaves(params)):
      arrays[f'step{step}/params/{key}'] = np.asarray(leaf)
    for key, value in jax.tree_util.tree_flatten_with_path(metrics)[0]:
      arrays[f'step{step}/metrics/{jax.tree_util.keystr(key)}'] = (
          np.asarray(value))
  np.savez(out, **arrays)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
