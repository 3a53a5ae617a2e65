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
import importlib.util
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


def _unreplicated(optimizer, metrics):
  """The params and metrics of a pmapped train step's replicated outputs."""
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  return (params_of(jax_utils.unreplicate(optimizer)),
          jax_utils.unreplicate(metrics))


def _tiny_transformer_config():
  """The example's configs/default.py with a model small enough for a test."""
  config = importlib.import_module('configs.default').get_config()
  config.vocab_size = 32
  config.per_device_batch_size = 2
  config.max_target_length = config.max_eval_target_length = 8
  config.max_predict_length = 8
  config.num_layers = 1
  config.num_heads = 2
  config.emb_dim = config.qkv_dim = 8
  config.mlp_dim = 16
  config.warmup_steps = 3  # the schedule warms up and decays within STEPS
  config.restore_checkpoints = False
  # float32 compute halves XLA's compile time on CPU; the parameters and the
  # optimizer state are float32 either way.
  config.use_bfloat16 = False
  return config


def _train_and_evaluate_steps(batch_keys):
  """lm1b's and wmt's train_and_evaluate: its statements from the model
  config to the dropout keys (optimizer creation, replication, learning-rate
  schedule, pmapped train step), then its training loop's step call on
  synthetic token batches with ``batch_keys``."""
  from flax.training import common_utils  # noqa: PLC0415 - after the stand-ins
  train = importlib.import_module('train')
  config = _tiny_transformer_config()
  created = example_statements(train, 'train_and_evaluate', 'train_config',
                               'dropout_rngs', config=config,
                               vocab_size=config.vocab_size,
                               workdir='unused')
  optimizer = created['optimizer']
  rng = np.random.RandomState(0)
  shape = (config.per_device_batch_size, config.max_target_length)
  for _ in range(STEPS):
    # Token 0 is padding: the examples weight it out of the loss.
    batch = {key: rng.randint(0, config.vocab_size, shape).astype(np.int32)
             for key in batch_keys}
    optimizer, metrics = created['p_train_step'](
        optimizer, common_utils.shard(batch),
        dropout_rng=created['dropout_rngs'])
    yield _unreplicated(optimizer, metrics)


def _lm1b():
  return _train_and_evaluate_steps(('inputs',))


def _wmt():
  # wmt's bleu.py builds its regular expressions at import time with
  # six.unichr, which a MagicMock cannot stand in for; on Python 3 it is chr.
  if importlib.util.find_spec('six') is None:
    sys.modules['six'] = types.SimpleNamespace(unichr=chr)
  return _train_and_evaluate_steps(('inputs', 'targets'))


def _nlp_seq():
  from flax.training import common_utils  # noqa: PLC0415 - after the stand-ins
  train = importlib.import_module('train')
  # main's schedule warms up over 8000 steps: a base rate this large makes the
  # first steps' updates far larger than float32 rounding of the parameters.
  train.FLAGS(['nlp_seq', '--learning_rate=1000'])
  # main sizes the model by the vocabularies of its CoNLL files and keeps the
  # default dimensions otherwise; here both are small.
  config = train.models.TransformerConfig(
      vocab_size=32, output_vocab_size=8, emb_dim=8, num_heads=2,
      num_layers=1, qkv_dim=8, mlp_dim=16, max_len=8)
  created = example_statements(train, 'main', 'model', 'dropout_rngs',
                               config=config,
                               learning_rate=train.FLAGS.learning_rate,
                               random_seed=train.FLAGS.random_seed)
  optimizer = created['optimizer']
  dropout_rngs = created['dropout_rngs']
  rng = np.random.RandomState(0)
  shape = (4, config.max_len)  # (batch, length); token 0 is padding
  for _ in range(STEPS):
    batch = {'inputs': rng.randint(0, config.vocab_size, shape),
             'targets': rng.randint(0, config.output_vocab_size, shape)}
    optimizer, metrics, dropout_rngs = created['p_train_step'](
        optimizer, common_utils.shard(batch), dropout_rng=dropout_rngs)
    yield _unreplicated(optimizer, metrics)


RECIPES = {'mnist': _mnist, 'vae': _vae,
           'lm1b': _lm1b, 'wmt': _wmt, 'nlp_seq': _nlp_seq}


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
