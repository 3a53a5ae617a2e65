"""Child process: train one flax v0.3.3 example on synthetic batches.

  python tests/_v033_driver.py EXAMPLE_DIR NAME OUT_NPZ [--no-shim]
      [--resume save|restore CHECKPOINTS]

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

``--no-shim`` (a migrated copy): importing this library's modules raises
(``ShimBlocker``; the caller turns the ``flax.optim`` alias off).
``--resume``: ``RESUME``'s recipe for ``NAME`` saves in or restores from
``CHECKPOINTS`` with the example's own checkpoint code
(``train_save_resume``; tests/_corpus_train.py's ``compare_resumed``).
"""

import ast
import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import pickle
import sys
import types
from unittest import mock

import numpy as np

STEPS = 5
STUBBED_ROOTS = ('tensorflow', 'tensorflow_datasets', 'tensorflow_text',
                 'clu', 'sentencepiece', 'gym', 'seed_rl_atari_preprocessing',
                 'PIL')
STUBBED_MODULES = ('flax.metrics.tensorboard',)
SHIM_ROOTS = ('legacy_optim', 'compat', 'flax_optim_compat')


class ShimBlocker(importlib.abc.MetaPathFinder):
  """Refuses this library's modules: what migrated code must not need."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname.split('.')[0] in SHIM_ROOTS:
      raise ModuleNotFoundError(
          f'{fullname} is blocked: migrated code must run without the shim',
          name=fullname)
    return None


class _StandIn(types.ModuleType):
  """A module whose every attribute is a ``MagicMock``."""

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    value = mock.MagicMock(name=f'{self.__name__}.{name}')
    setattr(self, name, value)
    return value


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Serves a ``_StandIn`` for the stubbed modules: ``roots`` with their
  submodules, and ``modules`` by their exact names."""

  def __init__(self, roots=STUBBED_ROOTS, modules=STUBBED_MODULES):
    self.roots, self.modules = frozenset(roots), frozenset(modules)

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname.split('.')[0] in self.roots or fullname in self.modules:
      return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
    return None

  def create_module(self, spec):
    module = _StandIn(spec.name)
    module.__path__ = []
    return module

  def exec_module(self, module):
    del module


def example_statements(module, function: str, first: str, last: str,
                       containing: str = '', **local_values):
  """Runs the statements of ``module.function`` from the first one that
  assigns ``first`` to the next one after it that assigns ``last``, with
  ``local_values`` as the function's locals; returns the locals after.

  migrate rewrites expressions, never adds or removes statements, so the
  same targets pick the same statements in the original and migrated copy.
  ``containing``: the first statement is the first assigning ``first`` whose
  source holds this text (a restore call, say).
  """
  with open(module.__file__, encoding='utf-8') as f:
    source = f.read()
  tree = ast.parse(source, module.__file__)
  body = next(node.body for node in tree.body
              if isinstance(node, ast.FunctionDef) and node.name == function)

  def assigns(statement, name):
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in statement.targets)

  start = next(i for i, s in enumerate(body) if assigns(s, first) and
               containing in ast.get_source_segment(source, s))
  stop = next(i for i, s in enumerate(body) if i > start and assigns(s, last))
  code = compile(ast.Module(body=body[start:stop + 1], type_ignores=[]),
                 module.__file__, 'exec')
  namespace = dict(vars(module), **local_values)
  exec(code, namespace)  # noqa: S102 - the example's own statements
  return namespace


def example_block(module, function: str, containing: str, **local_values):
  """Runs the statement list (a block at any depth of ``module.function``)
  holding the first statement whose source holds ``containing``, with
  ``local_values`` as the function's locals; returns the locals after."""
  with open(module.__file__, encoding='utf-8') as f:
    source = f.read()
  tree = ast.parse(source, module.__file__)
  function_node = next(node for node in tree.body if isinstance(
      node, ast.FunctionDef) and node.name == function)
  block = next(
      body for node in ast.walk(function_node)
      for body in (getattr(node, field, None) for field in ('body', 'orelse'))
      if isinstance(body, list) and any(
          isinstance(s, ast.stmt) and not isinstance(s, ast.FunctionDef) and
          containing in ast.get_source_segment(source, s) and not any(
              isinstance(c, ast.stmt) for c in ast.walk(s) if c is not s)
          for s in body))
  code = compile(ast.Module(body=block, type_ignores=[]), module.__file__,
                 'exec')
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


def _default_config(**changes):
  """The example's ``configs/default.py`` config, with ``changes``."""
  config = importlib.import_module('configs.default').get_config()
  config.update(changes)
  return config


def _tiny_transformer_config(**changes):
  """lm1b's and wmt's default config with a model small enough for a test,
  and ``changes``."""
  # float32 compute halves XLA's compile time on CPU; the parameters and the
  # optimizer state are float32 either way. warmup_steps=3: the schedule warms
  # up and decays within STEPS.
  return _default_config(**dict(dict(
      vocab_size=32, per_device_batch_size=2, max_target_length=8,
      max_eval_target_length=8, max_predict_length=8, num_layers=1,
      num_heads=2, emb_dim=8, qkv_dim=8, mlp_dim=16, warmup_steps=3,
      restore_checkpoints=False, use_bfloat16=False), **changes))


def _train_and_evaluate_run(mode, directory, batch_keys):
  """lm1b's and wmt's train_and_evaluate (``train_save_resume``'s
  ``mode``): its statements from the model config to the dropout keys
  (optimizer creation, its restore from ``directory`` unless ``train``,
  replication, learning-rate schedule, pmapped train step), then its
  training loop's step call on synthetic token batches with ``batch_keys``
  and its loop's save (``checkpoints.save_checkpoint``) into ``directory``.
  """
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  from flax.training import common_utils  # noqa: PLC0415 - after the stand-ins
  train = importlib.import_module('train')
  config = _tiny_transformer_config(restore_checkpoints=mode != 'train')
  created = example_statements(train, 'train_and_evaluate', 'train_config',
                               'dropout_rngs', config=config,
                               vocab_size=config.vocab_size,
                               workdir=directory)
  optimizer, step = created['optimizer'], int(created['start_step'])
  carry = {'rng': np.random.RandomState(0)}
  shape = (config.per_device_batch_size, config.max_target_length)

  def steps(count):
    nonlocal optimizer, step
    for _ in range(count):
      # Token 0 is padding: the examples weight it out of the loss.
      batch = {key: carry['rng'].randint(0, config.vocab_size,
                                         shape).astype(np.int32)
               for key in batch_keys}
      optimizer, metrics = created['p_train_step'](
          optimizer, common_utils.shard(batch),
          dropout_rng=created['dropout_rngs'])
      step += 1
      yield _unreplicated(optimizer, metrics)

  def save():  # the loop's save, at its last step
    example_block(train, 'train_and_evaluate', 'checkpoints.save_checkpoint(',
                  optimizer=optimizer, step=step - 1, workdir=directory)

  yield from train_save_resume(mode, steps, save, carry, directory,
                               lambda: jax_utils.unreplicate(optimizer))


def _lm1b_run(mode, directory):
  return _train_and_evaluate_run(mode, directory, ('inputs',))


def _wmt_run(mode, directory):
  # wmt's bleu.py builds its regular expressions at import time with
  # six.unichr, which a MagicMock cannot stand in for; on Python 3 it is chr.
  if importlib.util.find_spec('six') is None:
    sys.modules['six'] = types.SimpleNamespace(unichr=chr)
  return _train_and_evaluate_run(mode, directory, ('inputs', 'targets'))


def _lm1b():
  return _lm1b_run('train', os.path.abspath('no-checkpoints'))


def _wmt():
  return _wmt_run('train', os.path.abspath('no-checkpoints'))


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


@contextlib.contextmanager
def _platform(name):
  """``jax.local_devices()[0].platform`` reads ``name`` inside the block.

  The examples pick half precision and dynamic loss scaling by platform
  ('gpu'); the recipes run on CPU and still take that path.
  """
  devices = [types.SimpleNamespace(platform=name)]
  with mock.patch('jax.local_devices', lambda *_, **__: devices):
    yield


def _imagenet():
  from flax import jax_utils  # noqa: PLC0415
  from flax.training import common_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  models = importlib.import_module('models')
  config = _default_config(batch_size=4, warmup_epochs=1.0, num_epochs=3.0)
  steps_per_epoch = 2
  image_size = 16
  base_learning_rate = example_statements(
      train, 'train_and_evaluate', 'base_learning_rate', 'model_cls',
      config=config)['base_learning_rate']
  rng = np.random.RandomState(0)
  # float32, then float16 with dynamic loss scaling (the example's GPU path).
  for half_precision in (False, True):
    config.half_precision = half_precision
    with _platform('gpu'):
      # _ResNet1: the example's own smallest ResNet (its tests use it).
      model = train.create_model(model_cls=models._ResNet1,  # noqa: SLF001
                                 half_precision=half_precision, num_filters=4)
      state = train.create_train_state(jax.random.PRNGKey(0), config, model,
                                       image_size)
    state = jax_utils.replicate(state)
    p_train_step = example_statements(
        train, 'train_and_evaluate', 'learning_rate_fn', 'p_train_step',
        config=config, base_learning_rate=base_learning_rate,
        steps_per_epoch=steps_per_epoch, model=model)['p_train_step']
    for _ in range(STEPS):
      batch = common_utils.shard({
          'image': rng.rand(config.batch_size, image_size, image_size,
                            3).astype(model.dtype),
          'label': rng.randint(0, 1000, config.batch_size)})
      state, metrics = p_train_step(state, batch)
      host_state = jax_utils.unreplicate(state)
      yield params_of(host_state.optimizer), dict(
          jax_utils.unreplicate(metrics), model_state=host_state.model_state)


def _pixelcnn():
  from flax import jax_utils  # noqa: PLC0415
  from flax.training import common_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  config = _default_config(
      n_resnet=0,  # the smallest stack: one gated resnet per level
      n_feature=4, n_logistic_mix=2, batch_size=2, init_batch_size=2,
      learning_rate=0.01)  # large enough to move the params in 5 steps
  rng = np.random.RandomState(0)

  def images():  # 8x8: the model downsamples twice
    return rng.uniform(-1, 1, (config.batch_size, 8, 8, 3)).astype(np.float32)

  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(0))
  # Jitted: the data-dependent init runs op by op otherwise (slower to run
  # than to compile); the recipe's own choice, the same for both copies.
  initial_variables = jax.jit(functools.partial(
      train.model(config).init, train=False))(
          {'params': init_rng, 'dropout': dropout_rng}, images())['params']
  created = example_statements(
      train, 'train_and_evaluate', 'optimizer_def', 'optimizer',
      initial_variables=initial_variables)
  optimizer, ema = jax_utils.replicate(
      (created['optimizer'], initial_variables))
  p_train_step = example_statements(
      train, 'train_and_evaluate', 'learning_rate_fn', 'p_train_step',
      config=config)['p_train_step']
  for step in range(STEPS):
    batch = common_utils.shard({'image': images()})
    sharded_rngs = common_utils.shard_prng_key(jax.random.PRNGKey(step + 1))
    optimizer, ema, metrics = p_train_step(optimizer, ema, batch,
                                           sharded_rngs)
    yield params_of(jax_utils.unreplicate(optimizer)), dict(
        jax_utils.unreplicate(metrics), ema=jax_utils.unreplicate(ema))


class _SyntheticAtari:
  """The learner's end of a ppo simulator pipe, with made-up frames.

  ``ppo_lib.get_experience`` receives a frame, sends the chosen action and
  receives ``(frame, action, reward, done)``; here frames are random, the
  reward is -1, 0 or 1 and about one step in ten ends an episode.
  """

  def __init__(self, rng):
    self.rng = rng
    self.conn = self
    self.action = None

  def recv(self):
    frame = self.rng.randint(0, 256, (1, 84, 84, 4)).astype(np.uint8)
    if self.action is None:
      return frame
    action, self.action = self.action, None
    return frame, action, self.rng.randint(-1, 2), self.rng.rand() < 0.1

  def send(self, action):
    self.action = action


def _ppo():
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  ppo_lib = importlib.import_module('ppo_lib')
  models = importlib.import_module('models')
  config = _default_config(num_agents=2, actor_steps=4, batch_size=4)
  module = models.ActorCritic(num_outputs=3)
  _, subkey = jax.random.split(jax.random.PRNGKey(0))
  initial_params = models.get_initial_params(subkey, module)
  optimizer = models.create_optimizer(initial_params, config.learning_rate)
  rng = np.random.RandomState(0)
  simulators = [_SyntheticAtari(rng) for _ in range(config.num_agents)]
  np.random.seed(0)  # actions and minibatch permutations draw from it
  # ppo_lib.train's loop body, without its logging, checkpoints and tests.
  for s in range(STEPS):
    alpha = 1. - s / STEPS
    all_experiences = ppo_lib.get_experience(
        params_of(optimizer), module, simulators, config.actor_steps)
    trajectories = ppo_lib.process_experience(
        all_experiences, config.actor_steps, config.num_agents, config.gamma,
        config.lambda_)
    lr = config.learning_rate * alpha
    clip_param = config.clip_param * alpha
    losses = []
    for _ in range(config.num_epochs):
      permutation = np.random.permutation(
          config.num_agents * config.actor_steps)
      trajectories = tuple(x[permutation] for x in trajectories)
      optimizer, loss = ppo_lib.train_step(
          module, optimizer, trajectories, clip_param, config.vf_coeff,
          config.entropy_coeff, lr, config.batch_size)
      losses.append(loss)
    yield params_of(optimizer), {'loss': losses}


RECIPES = {'mnist': _mnist, 'vae': _vae, 'imagenet': _imagenet,
           'pixelcnn': _pixelcnn, 'ppo': _ppo, 'lm1b': _lm1b, 'wmt': _wmt,
           'nlp_seq': _nlp_seq}


# ---------------------------------------------------------------------------
# Resume recipes (``--resume save|restore DIR``): NAME -> function of (mode,
# directory) yielding like a recipe, through ``train_save_resume``.


def _mnist_resume(mode, directory):
  """mnist through the checkpoints a user adds (tests/_v033_mnist_checkpoints
  .py, in the copy as ``checkpointing``): its create-or-restore from
  ``directory`` (empty for a new run) and its save there."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  checkpointing = importlib.import_module('checkpointing')
  carry = {'rng': np.random.RandomState(0)}
  optimizer = checkpointing.create_or_restore_optimizer(
      train.get_initial_params(jax.random.PRNGKey(0)), directory)
  step = 0

  def steps(count):
    nonlocal optimizer, step
    for _ in range(count):
      batch = {'image': carry['rng'].rand(4, 28, 28, 1).astype(np.float32),
               'label': carry['rng'].randint(0, 10, 4)}
      optimizer, metrics = train.train_step(optimizer, batch)
      step += 1
      yield params_of(optimizer), metrics

  def save():
    checkpointing.save_optimizer(optimizer, step, directory)

  yield from train_save_resume(mode, steps, save, carry, directory,
                               lambda: optimizer)


def _dynamic_scale_values(dynamic_scale):
  """A legacy or flax DynamicScale's changing values (None: none)."""
  if dynamic_scale is None:
    return {}
  return {'fin_steps': dynamic_scale.fin_steps, 'scale': dynamic_scale.scale}


def _imagenet_resume(mode, directory, half_precision=False):
  """imagenet (float32): train_and_evaluate's statements from its restore
  helper (``restore_checkpoint(state, workdir)``, a resumed run) or from
  after it (a new one) through the replication, its train step, and its
  loop's save block (``sync_batch_stats``, its ``save_checkpoint``)."""
  from flax import jax_utils  # noqa: PLC0415
  from flax.training import common_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  models = importlib.import_module('models')
  config = _default_config(batch_size=4, warmup_epochs=1.0, num_epochs=3.0,
                           half_precision=half_precision)
  image_size = 16
  carry = {'rng': np.random.RandomState(0)}
  with _platform('gpu'):  # half precision: the example's GPU path
    model = train.create_model(model_cls=models._ResNet1,  # noqa: SLF001
                               half_precision=half_precision, num_filters=4)
    state = train.create_train_state(jax.random.PRNGKey(0), config, model,
                                     image_size)
  first, containing = (('state', 'restore_checkpoint') if mode == 'restore'
                       else ('step_offset', ''))
  state = example_statements(
      train, 'train_and_evaluate', first, 'state', containing=containing,
      state=state, workdir=directory)['state']
  base_learning_rate = example_statements(
      train, 'train_and_evaluate', 'base_learning_rate', 'model_cls',
      config=config)['base_learning_rate']
  p_train_step = example_statements(
      train, 'train_and_evaluate', 'learning_rate_fn', 'p_train_step',
      config=config, base_learning_rate=base_learning_rate,
      steps_per_epoch=2, model=model)['p_train_step']

  def steps(count):
    nonlocal state
    for _ in range(count):
      batch = common_utils.shard({
          'image': carry['rng'].rand(config.batch_size, image_size,
                                     image_size, 3).astype(model.dtype),
          'label': carry['rng'].randint(0, 1000, config.batch_size)})
      state, metrics = p_train_step(state, batch)
      host_state = jax_utils.unreplicate(state)
      yield params_of(host_state.optimizer), dict(
          jax_utils.unreplicate(metrics), model_state=host_state.model_state,
          dynamic_scale=_dynamic_scale_values(host_state.dynamic_scale))

  def save():  # the loop's save block
    nonlocal state
    state = example_block(train, 'train_and_evaluate', 'save_checkpoint(',
                          state=state, workdir=directory)['state']

  yield from train_save_resume(
      mode, steps, save, carry, directory,
      lambda: jax_utils.unreplicate(state).optimizer)


RESUME = {'mnist': _mnist_resume, 'imagenet': _imagenet_resume,
          'imagenet_half': functools.partial(_imagenet_resume,
                                             half_precision=True),
          'lm1b': _lm1b_run, 'wmt': _wmt_run}


# A resume recipe's last item: (FINAL, the optimizer or TrainState trained).
FINAL = 'final'


def save_carry(carry: dict, directory: str) -> None:
  """The harness's own loop variables (batch generator, keys), beside a
  checkpoint: what a resumed run needs besides the program's state."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  with open(os.path.join(directory, 'harness_carry.pkl'), 'wb') as f:
    pickle.dump(jax.device_get(carry), f)


def load_carry(directory: str) -> dict:
  with open(os.path.join(directory, 'harness_carry.pkl'), 'rb') as f:
    return pickle.load(f)  # noqa: S301 - written by save_carry above


def train_save_resume(mode, steps, save, carry, directory, trained):
  """A recipe's run of ``mode`` from its program's state after its start
  (a new one, or its own restore from ``directory``): ``train``: ``STEPS``
  steps; ``save``: ``STEPS`` steps not compared, the program's own save
  (``save()``) into ``directory``, ``STEPS`` steps more; ``restore``:
  ``STEPS`` steps. ``steps(count)`` yields each step's (params, metrics).
  The harness's own loop variables (``carry``: the batches' generator, the
  dropout keys) go in a pickle beside the checkpoint; the program's state
  only through its checkpoint. A resumed run ends with ``(FINAL,
  trained())``."""
  if mode == 'save':
    for _ in steps(STEPS):
      pass
    save()
    save_carry(carry, directory)
  elif mode == 'restore':
    carry.update(load_carry(directory))
  yield from steps(STEPS)
  if mode != 'train':
    yield FINAL, trained()



def final_arrays(trained) -> dict:
  """A legacy Optimizer's or a TrainState's step, params and optimizer
  moments (every array leaf of its optimizer state but scalars, as a
  sorted list: the two layouts name them differently). A tuple of them
  (an agent's optimizers): each one's under its index
  (``final/params/1/0``)."""
  if isinstance(trained, tuple):
    return {key: value for index, one in enumerate(trained)
            for key, value in _final_arrays(one, f'{index}/').items()}
  return _final_arrays(trained, '')


def _final_arrays(trained, index: str) -> dict:
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  if hasattr(trained, 'target'):
    step, params = trained.state.step, trained.target
    moments = trained.state.param_states
  else:
    step, params, moments = trained.step, trained.params, trained.opt_state
  arrays = {f'final/step/{index}'.rstrip('/'): np.asarray(int(step))}
  for key, leaf in enumerate(jax.tree_util.tree_leaves(params)):
    arrays[f'final/params/{index}{key}'] = np.asarray(leaf)
  leaves = sorted((np.asarray(m) for m in jax.tree_util.tree_leaves(moments)
                   if np.ndim(m) > 0),
                  key=lambda a: (str(a.dtype), a.shape, a.tobytes()))
  for key, leaf in enumerate(leaves):
    arrays[f'final/moments/{index}{key}'] = leaf
  return arrays


def record(steps, out: str) -> None:
  """Saves each ``(params, metrics)`` of ``steps`` to the npz ``out`` (and a
  resume recipe's ``(FINAL, trained)``: ``final_arrays``)."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed

  arrays = {}
  for step, (params, metrics) in enumerate(steps):
    if isinstance(params, str) and params == FINAL:
      arrays.update(final_arrays(metrics))
      continue
    for key, leaf in enumerate(jax.tree_util.tree_leaves(params)):
      arrays[f'step{step}/params/{key}'] = np.asarray(leaf)
    for key, value in jax.tree_util.tree_flatten_with_path(metrics)[0]:
      arrays[f'step{step}/metrics/{jax.tree_util.keystr(key)}'] = (
          np.asarray(value))
  np.savez(out, **arrays)


def main(argv):
  directory, name, out = argv[1:4]
  if '--no-shim' in argv[4:]:
    sys.meta_path.insert(0, ShimBlocker())
  sys.meta_path.insert(0, StandInFinder())
  sys.path.insert(0, os.path.abspath(directory))
  os.chdir(directory)
  if '--resume' in argv[4:]:
    from flax import io as flax_io  # noqa: PLC0415 - after the stand-ins
    # flax.io took the tensorflow stand-in for gfile: back to Python's
    # files, where the checkpoints are.
    flax_io.set_mode(flax_io.BackendMode.DEFAULT)
    mode, checkpoints = argv[argv.index('--resume') + 1:][:2]
    record(RESUME[name](mode, os.path.abspath(checkpoints)), out)
  else:
    record(RECIPES[name](), out)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
