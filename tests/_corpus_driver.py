"""Child process: train one corpus repository's own train step.

  python tests/_corpus_driver.py REPO_DIR NAME OUT_NPZ [--no-shim]
      [--resume save|restore CHECKPOINTS]

``REPO_DIR`` holds the repository (tests/corpus/repos.toml, got by
scripts/corpus.py) as written or as ``migrate --tier exact`` rewrote it. The
recipe for ``NAME`` builds a small model with the repository's own code,
creates the optimizer with its own code and calls its own train step
``STEPS`` times on synthetic batches; after every step the parameters and
metrics go to ``OUT_NPZ`` (tests/test_corpus_train.py compares two runs).

``--no-shim`` (the migrated copy): this library is out of reach. The
``flax.optim`` import alias is off (the caller sets
``LEGACY_OPTIM_IMPORT_HOOK=0``) and importing ``legacy_optim``, ``compat``
or ``flax_optim_compat`` raises ``ModuleNotFoundError``, so the migrated
code runs on flax, Optax and ``flax_optim_rules`` alone.

Modules used only by data pipelines, logging and checkpoint writers are
stand-ins (tests/_v033_driver.py's ``StandInFinder``); ``--resume`` recipes
(``RESUME``) save in or restore from ``CHECKPOINTS`` with the repository's
own checkpoint code (clu's through tests/_clu_files.py).
"""

import collections
import contextlib
import dataclasses
import functools
import importlib
import io
import itertools
import os
import pathlib
import pickle
import shutil
import sys
import types
from unittest import mock

import _clu_files
import _v033_driver
import numpy as np

STEPS = _v033_driver.STEPS


# ---------------------------------------------------------------------------
# Recipes: NAME -> (sys.path entries under REPO_DIR, stand-in roots,
# stand-in modules, function yielding (params, metrics) after each step).


def _vit_setup(rng_of):
  """vit's ``train`` module, its replicated update function for a small
  ViT, its params and config, and a batch maker drawing from the random
  state ``rng_of()`` gives."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  import ml_collections  # noqa: PLC0415
  train = importlib.import_module('vit_jax.train')
  models = importlib.import_module('vit_jax.models')
  utils = importlib.import_module('vit_jax.utils')
  model_config = ml_collections.ConfigDict(dict(
      model_name='tiny', patches=dict(size=(4, 4)), hidden_size=8,
      transformer=dict(mlp_dim=16, num_heads=2, num_layers=1,
                       attention_dropout_rate=0., dropout_rate=0.),
      classifier='token', representation_size=None))
  model = models.VisionTransformer(num_classes=3, **model_config)
  images = np.random.RandomState(0).rand(1, 4, 8, 8, 3).astype(np.float32)
  params = model.init(jax.random.PRNGKey(0), images[0],
                      train=False)['params']
  config = ml_collections.ConfigDict(dict(optim_dtype='float32',
                                          grad_norm_clip=1.0))
  lr_fn = utils.create_learning_rate_schedule(
      total_steps=10, base=0.03, decay_type='cosine', warmup_steps=2)
  update_fn_repl = train.make_update_fn(apply_fn=model.apply, accum_steps=1,
                                        lr_fn=lr_fn)

  def batch():
    rng = rng_of()
    return {'image': rng.rand(1, 4, 8, 8, 3).astype(np.float32),
            'label': np.eye(3, dtype=np.float32)[rng.randint(0, 3, (1, 4))]}

  return train, update_fn_repl, params, config, batch


def _vit():
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  rng = np.random.RandomState(1)
  train, update_fn_repl, params, config, batch = _vit_setup(lambda: rng)
  opt = _v033_driver.example_statements(
      train, 'train_and_evaluate', 'opt', 'initial_step', params=params,
      config=config)['opt']
  opt_repl = jax_utils.replicate(opt)
  rng_repl = jax_utils.replicate(jax.random.PRNGKey(0))
  for step in range(1, STEPS + 1):
    opt_repl, loss_repl, rng_repl = update_fn_repl(
        opt_repl, jax_utils.replicate(step), batch(), rng_repl)
    yield (_v033_driver.params_of(jax_utils.unreplicate(opt_repl)),
           {'loss': jax_utils.unreplicate(loss_repl)})


def _vit_resume(mode, directory):
  """vit's own save (its training loop's ``save_checkpoint`` statement)
  after ``STEPS`` steps, or its own restore (train_and_evaluate's
  statements from the optimizer's creation through its replication, the
  restore among them, ``workdir`` the checkpoints' directory); then
  ``STEPS`` steps more. vit saves the step just trained and its loop
  resumes at the step restored: the original goes on at that step too, so
  both runs see the same learning rates. The harness's loop variables go
  in a pickle beside the checkpoint (see ``_mipnerf_resume``)."""
  from flax import io as flax_io  # noqa: PLC0415
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  carry = {'rng': np.random.RandomState(1),
           'rng_repl': jax_utils.replicate(jax.random.PRNGKey(0))}
  train, update_fn_repl, params, config, batch = _vit_setup(
      lambda: carry['rng'])
  # A new run finds no checkpoint in the empty directory; a resumed one
  # finds the original's.
  created = _v033_driver.example_statements(
      train, 'train_and_evaluate', 'opt', 'opt_repl', params=params,
      config=config, workdir=directory)
  opt_repl, initial_step = created['opt_repl'], int(created['initial_step'])

  def steps(count):
    nonlocal opt_repl
    for step in range(initial_step, initial_step + count):
      opt_repl, loss_repl, carry['rng_repl'] = update_fn_repl(
          opt_repl, jax_utils.replicate(step), batch(), carry['rng_repl'])
      yield (_v033_driver.params_of(jax_utils.unreplicate(opt_repl)),
             {'loss': jax_utils.unreplicate(loss_repl)})

  if mode == 'save':
    for _ in steps(STEPS):
      pass
    initial_step += STEPS - 1  # the step saved: where vit resumes
    _v033_driver.example_block(
        train, 'train_and_evaluate', 'checkpoint_path =', opt_repl=opt_repl,
        step=initial_step, workdir=directory)
    _v033_driver.save_carry(carry, directory)
  else:
    carry.update(_v033_driver.load_carry(directory))
  yield from steps(STEPS)
  yield _v033_driver.FINAL, jax_utils.unreplicate(opt_repl)


def _nested_setup():
  """nested's ``train`` module, its config, a small model and its
  ``TrainState``, and ``train_and_evaluate``'s learning-rate schedule."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  config = importlib.import_module('configs.cifar_nest').get_config()
  model, state = train.create_train_state(
      config, jax.random.PRNGKey(0), input_shape=(2, 32, 32, 3),
      num_classes=10)
  learning_rate_fn = _v033_driver.example_statements(
      train, 'train_and_evaluate', 'base_learning_rate', 'learning_rate_fn',
      config=config, global_batch_size=2, steps_per_epoch=10,
  )['learning_rate_fn']
  return train, config, model, state, learning_rate_fn


def _nested_step(p_train_step, state, rng, step):
  """One call of nested's pmapped train step on a batch drawn from
  ``rng``: the state, its params and metrics."""
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  batch = {'image': rng.rand(1, 2, 32, 32, 3).astype(np.float32),
           'label': np.eye(10, dtype=np.float32)[rng.randint(0, 10, (1, 2))]}
  state, metrics_update = p_train_step(
      state=state, batch=batch,
      rng=jax.random.split(jax.random.PRNGKey(step), 1))
  return state, (_v033_driver.params_of(jax_utils.unreplicate(state).optimizer),
                 jax_utils.unreplicate(metrics_update))


def _nested():
  train, config, model, state, learning_rate_fn = _nested_setup()
  p_train_step = _v033_driver.example_statements(
      train, 'train_and_evaluate', 'disable_l2_wd', 'p_train_step',
      config=config, model=model, state=state,
      learning_rate_fn=learning_rate_fn)
  state, p_train_step = p_train_step['state'], p_train_step['p_train_step']
  rng = np.random.RandomState(0)
  for step in range(STEPS):
    state, trained = _nested_step(p_train_step, state, rng, step)
    yield trained


def _nested_resume(mode, directory):
  """nested's own checkpoint code: clu's ``MultihostCheckpoint`` in
  ``directory`` (tests/_clu_files.py: clu's module as installed, its
  TensorFlow bookkeeping in files). ``train_and_evaluate``'s statements
  from the checkpoint's directory to the pmapped step (its
  ``restore_or_initialize`` among them: a new run writes the first
  checkpoint, a resumed one restores the latest), ``STEPS`` steps and its
  own save (``ckpt.save(...)``) on a new run; then ``STEPS`` steps more
  from the step the state holds."""
  train, config, model, state, learning_rate_fn = _nested_setup()
  yield from _clu_loop_resume(
      mode, directory, train, 'train_and_evaluate', _nested_step,
      config=config, model=model, state=state,
      learning_rate_fn=learning_rate_fn)


def _clu_loop_resume(mode, directory, train, function, step, **inputs):
  """A train loop that keeps its state in clu's ``MultihostCheckpoint``
  (nested's, l2p's): ``function``'s statements of module ``train`` from
  the checkpoint's directory to the pmapped step, given ``inputs``, on a
  new run ``STEPS`` steps and the loop's own save (``ckpt.save(...)``);
  then ``STEPS`` steps more from the step the state holds.
  ``step(p_train_step, state, rng, i)`` runs one step."""
  from flax import jax_utils  # noqa: PLC0415
  _clu_files.use_files(train.checkpoint)
  created = _v033_driver.example_statements(
      train, function, 'checkpoint_dir', 'p_train_step', workdir=directory,
      **inputs)
  state, p_train_step = created['state'], created['p_train_step']
  carry = {'rng': np.random.RandomState(0)}

  def steps(first):
    nonlocal state
    for i in range(first, first + STEPS):
      state, trained = step(p_train_step, state, carry['rng'], i)
      yield trained

  if mode == 'save':
    for _ in steps(created['initial_step']):
      pass
    _v033_driver.example_block(train, function, 'ckpt.save(',
                               ckpt=created['ckpt'], state=state)
    _v033_driver.save_carry(carry, directory)
  else:
    carry.update(_v033_driver.load_carry(directory))
  yield from steps(int(jax_utils.unreplicate(state).step) + 1)
  yield _v033_driver.FINAL, jax_utils.unreplicate(state).optimizer


def _l2p_setup():
  """l2p's ``train_continual`` module, its L2P config for split CIFAR-100
  made small, the model and TrainState its ``create_train_state`` makes,
  and what ``train_and_evaluate_per_task`` takes for task 0 besides them
  (its learning-rate schedule among them)."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train_continual')
  vit = importlib.import_module('models.vit')
  # A ViT of one block on 8x8 images (four 4x4 patches), in l2p's own
  # registry of model configs under a name its create_model builds (one
  # starting with "ViT"); its dropout on.
  tiny = vit.get_testing_config()
  tiny.name, tiny.hidden_size = 'ViT-tiny', 8
  tiny.patches.size = (4, 4)
  tiny.transformer.mlp_dim = 16
  vit.MODEL_CONFIGS[tiny.name] = tiny
  # L2P as its paper trains it: a pool of 4 prompts of length 2, the 2
  # nearest (by the frozen ViT's [cls] feature) prepended, the key pulled
  # toward them; the encoder, embedding and [cls] frozen (MultiOptimizer:
  # Adam, its second optimizer's learning rate 0); the classes of other
  # tasks masked out; a checkpoint in every task.
  config = importlib.import_module('configs.cifar100_l2p').get_config()
  config.update(model_name=tiny.name, per_device_batch_size=2,
                learning_rate=1., save_last_ckpt_only=False)
  config.continual.update(num_tasks=2, num_classes_per_task=2)
  config.prompt_pool_param.update(pool_size=4, length=2, top_k=2)
  num_total_class = 4
  model, state = train.create_train_state(
      config, jax.random.PRNGKey(0), input_shape=(2, 8, 8, 3),
      num_classes=num_total_class)
  # train_and_evaluate's block building the frozen ViT whose [cls] feature
  # picks the prompts; its weights as initialized (no pretrained ones here).
  train_ds = types.SimpleNamespace(element_spec={
      'image': types.SimpleNamespace(shape=(1, 2, 8, 8, 3))})
  original = _v033_driver.example_block(
      train, 'train_and_evaluate', 'vit.create_original_vit(',
      config=config, num_total_class=num_total_class,
      rng=jax.random.PRNGKey(1), train_ds=train_ds,
      utils_vit=types.SimpleNamespace(
          load_pretrained=lambda init_params, **_: init_params))
  task = dict(task_id=0, num_total_class=num_total_class,
              class_mask_list=[np.arange(2), np.arange(2, 4)],
              original_vit_model=original['original_vit_model'],
              original_vit_params=original['original_vit_params'])
  # Task 0 holds 20 examples: 10 steps an epoch.
  task['learning_rate_fn'] = _v033_driver.example_statements(
      train, 'train_and_evaluate_per_task', 'global_batch_size',
      'learning_rate_fn', config=config, review_trick=None,
      replay_buffer=None, class_stats_list=[(20, 4), (20, 4)], **task,
  )['learning_rate_fn']
  return train, config, model, state, task


def _l2p_step(p_train_step, state, rng, step):
  """``train_and_evaluate_per_task``'s loop body at ``step`` (its train
  step on a batch of task 0's classes drawn from ``rng``), without its
  evaluation, logging and checkpoints: the state and what the recipe
  records (with l2p's own step and model state)."""
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  batch = {'image': rng.rand(1, 2, 8, 8, 3).astype(np.float32),
           'label': rng.randint(0, 2, (1, 2)).astype(np.int32)}
  drop_out_rng_step = jax.random.fold_in(jax.random.PRNGKey(2), step)
  state, metrics_update = p_train_step(
      state=state, batch=batch,
      rng=jax.random.split(drop_out_rng_step, jax.local_device_count()))
  single = jax_utils.unreplicate(state)
  return state, (_v033_driver.params_of(single.optimizer),
                 {'metrics': jax_utils.unreplicate(metrics_update),
                  'step': single.step, 'model_state': single.model_state})


def _l2p():
  train, config, model, state, task = _l2p_setup()
  created = _v033_driver.example_statements(
      train, 'train_and_evaluate_per_task', 'disable_l2_wd', 'p_train_step',
      config=config, model=model, state=state, initial_step=1, **task)
  state, p_train_step = created['state'], created['p_train_step']
  rng = np.random.RandomState(0)
  for step in range(1, STEPS + 1):
    state, trained = _l2p_step(p_train_step, state, rng, step)
    yield trained


def _l2p_resume(mode, directory):
  """l2p's own checkpoint code: clu's ``MultihostCheckpoint`` in
  ``directory`` (tests/_clu_files.py), run by ``_clu_loop_resume``:
  ``train_and_evaluate_per_task``'s statements from the checkpoint's
  directory to the pmapped step (``restore_or_initialize`` among them), on
  a new run ``STEPS`` steps and its loop's save (``ckpt.save(...)``); then
  ``STEPS`` steps more from the step the state holds. The train step binds
  the step a run starts at (``initial_step``), which l2p's constant
  learning rate (its config's) does not read: the original runs on as if
  never interrupted."""
  train, config, model, state, task = _l2p_setup()
  yield from _clu_loop_resume(
      mode, directory, train, 'train_and_evaluate_per_task', _l2p_step,
      config=config, model=model, state=state, **task)


@contextlib.contextmanager
def _broadcast_to_takes_lists():
  """``jnp.broadcast_to([x], shape)`` as the jax of its time ran it (the
  list as ``jnp.asarray`` makes it); today's jax refuses a list there.

  nerfies' volumetric rendering (``model_utils.py``) calls it so: a removal
  next to flax.optim that neither ``migrate`` nor the runtime layer serves,
  served here to both copies alike so that their optimizer code is what
  the comparison sees.
  """
  import jax.numpy as jnp  # noqa: PLC0415 - after the stand-ins
  broadcast_to = jnp.broadcast_to

  def lenient(array, shape, *args, **kwargs):
    if isinstance(array, (list, tuple)):
      array = jnp.asarray(array)
    return broadcast_to(array, shape, *args, **kwargs)

  with mock.patch.object(jnp, 'broadcast_to', lenient):
    yield


def _nerfies():
  return _nerfies_run('train', os.path.abspath('no-checkpoints'))


def _nerfies_run(mode, directory):
  return _nerf_training(mode, directory, _nerfies_start,
                        ('warp_alpha', 'time_alpha'))


def _hypernerf():
  return _hypernerf_run('train', os.path.abspath('no-checkpoints'))


def _hypernerf_run(mode, directory):
  return _nerf_training(mode, directory, _hypernerf_start,
                        ('nerf_alpha', 'warp_alpha', 'hyper_alpha',
                         'hyper_sheet_alpha'))


def _nerf_train_module():
  """The repository's ``train`` module, flax.io back on Python's files."""
  from flax import io as flax_io  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  # nerfies' train.py parses the command line's jax flags at import, which
  # validates its required flags (--base_folder); the recipe has none.
  with mock.patch.object(jax.config, 'parse_flags_with_absl', lambda: None):
    return importlib.import_module('train')


def _nerfies_start(directory):
  """nerfies' ``train`` and main's statements from its schedules to the
  dropout keys (a small model's creation, its optimizer's and the restore
  from ``directory`` among them)."""
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = _nerf_train_module()
  configs = importlib.import_module('nerfies.configs')
  # A small NeRF with the deformation field (nerfies' own warp) on, its
  # coarse and fine levels. The schedules are tuples: schedules.from_config
  # reads a mapping through collections.Mapping, gone since Python 3.10.
  model_config = configs.ModelConfig(
      nerf_trunk_depth=2, nerf_trunk_width=8, nerf_rgb_branch_depth=1,
      nerf_rgb_branch_width=8, nerf_skips=(1,), num_coarse_samples=4,
      num_fine_samples=4, num_nerf_point_freqs=2, num_nerf_viewdir_freqs=2,
      use_warp=True, num_warp_freqs=2, num_warp_features=4,
      use_appearance_metadata=True, appearance_metadata_dims=2)
  train_config = configs.TrainConfig(
      batch_size=4, lr_schedule=('exponential', 0.01, 0.001, 10),
      warp_alpha_schedule=('linear', 0., 2., 10))
  datasource = types.SimpleNamespace(appearance_ids=[0, 1], camera_ids=[0],
                                     warp_ids=[0, 1], near=0.5, far=2.)
  return train, _v033_driver.example_statements(
      train, 'main', 'learning_rate_sched', 'keys', model_config=model_config,
      train_config=train_config, datasource=datasource,
      devices=jax.local_devices(), rng=jax.random.PRNGKey(0),
      checkpoint_dir=directory, summary_dir='unused', config_str='')


def _hypernerf_start(directory):
  """hypernerf's ``train`` and main's statements from its schedules to the
  dropout keys (its optimizer's creation and the restore from
  ``directory`` among them) for a small model made by its own
  ``construct_nerf``."""
  import gin  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = _nerf_train_module()
  # A small HyperNeRF through its own gin bindings: both levels, the SE(3)
  # warp field with its embeddings, a narrow MLP with its skip connection.
  gin.parse_config([
      'NerfModel.nerf_trunk_depth = 2', 'NerfModel.nerf_trunk_width = 8',
      'NerfModel.nerf_rgb_branch_width = 8', 'NerfModel.nerf_skips = (1,)',
      'NerfModel.num_coarse_samples = 4', 'NerfModel.num_fine_samples = 4',
      'NerfModel.spatial_point_max_deg = 2', 'NerfModel.viewdir_max_deg = 1',
      'NerfModel.use_warp = True', 'SE3Field.trunk_depth = 2',
      'SE3Field.trunk_width = 8', 'SE3Field.max_deg = 2'])
  train_config = train.configs.TrainConfig(
      batch_size=4, lr_schedule=('exponential', 0.01, 0.001, 10),
      warp_alpha_schedule=('linear', 0., 2., 10), use_warp_reg_loss=True,
      warp_reg_loss_weight=0.001)
  # The ids as tuples: jit hashes the model (static in train_step's
  # jitted parts), with them.
  datasource = types.SimpleNamespace(
      embeddings_dict={'warp': (0, 1), 'appearance': (0, 1),
                       'camera': (0,)}, near=0.5, far=2.)
  params = {}
  model, params['model'] = train.models.construct_nerf(
      jax.random.PRNGKey(1), batch_size=train_config.batch_size,
      embeddings_dict=datasource.embeddings_dict, near=datasource.near,
      far=datasource.far)
  return train, _v033_driver.example_statements(
      train, 'main', 'learning_rate_sched', 'keys', train_config=train_config,
      datasource=datasource, model=model, params=params,
      devices=jax.local_devices(), rng=jax.random.PRNGKey(0),
      # main writes its gin config into exp_dir: the copy's own directory.
      checkpoint_dir=directory, exp_dir=pathlib.Path(os.getcwd()),
      summary_dir='unused')


def _nerf_training(mode, directory, start, alphas):
  """nerfies' or hypernerf's training (``_v033_driver.train_save_resume``'s
  ``mode``):
  ``start(directory)``'s statements of main (its restore from
  ``directory`` among them), its training loop's body (the state's
  ``alphas`` from their schedules each step), its own save (the loop's
  ``training.save_checkpoint``) into ``directory``."""
  with _broadcast_to_takes_lists():
    yield from _nerf_steps(mode, directory, start, alphas)


def _nerf_steps(mode, directory, start, alphas):
  from flax import jax_utils  # noqa: PLC0415
  train, created = start(directory)
  state, scalar_params = created['state'], created['scalar_params']
  step = int(created['init_step'])
  carry = {'rng': np.random.RandomState(0), 'keys': created['keys']}
  shape = (1, int(created['train_config'].batch_size))  # (devices, rays)

  def steps(count):
    nonlocal state, scalar_params, step
    # main's training loop body, without its logging and checkpoints.
    for _ in range(count):
      rng = carry['rng']
      batch = {
          'origins': rng.randn(*shape, 3).astype(np.float32),
          'directions': rng.randn(*shape, 3).astype(np.float32),
          'rgb': rng.rand(*shape, 3).astype(np.float32),
          'metadata': {key: rng.randint(0, 2, (*shape, 1)).astype(np.uint32)
                       for key in ('warp', 'camera', 'appearance')},
      }
      scalar_params = scalar_params.replace(
          learning_rate=created['learning_rate_sched'](step),
          elastic_loss_weight=created['elastic_loss_weight_sched'](step))
      state = state.replace(**{
          alpha: jax_utils.replicate(created[f'{alpha}_sched'](step))
          for alpha in alphas})
      state, stats, carry['keys'] = created['ptrain_step'](
          carry['keys'], state, batch, scalar_params)[:3]
      step += 1
      yield (_v033_driver.params_of(jax_utils.unreplicate(state).optimizer),
             jax_utils.unreplicate(stats))

  def save():
    _v033_driver.example_block(
        train, 'main', 'training.save_checkpoint(checkpoint_dir, state',
        checkpoint_dir=directory, state=state)

  yield from _v033_driver.train_save_resume(
      mode, steps, save, carry, directory,
      lambda: jax_utils.unreplicate(state).optimizer)


def _mipnerf_setup(rng_of):
  """mipnerf's ``train`` module, a batch maker drawing from the random
  state ``rng_of()`` gives, and ``main``'s statements up to ``train_pstep``
  for a small model."""
  import gin  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  train = importlib.import_module('train')
  models = importlib.import_module('internal.models')
  utils = importlib.import_module('internal.utils')
  # A small mip-NeRF through the repository's own gin bindings: both
  # levels, few samples, a narrow MLP with its skip connection.
  gin.parse_config([
      'MipNerfModel.num_samples = 4', 'MipNerfModel.max_deg_point = 2',
      'MipNerfModel.deg_view = 1', 'MLP.net_depth = 2', 'MLP.net_width = 8',
      'MLP.net_width_condition = 4', 'MLP.skip_layer = 1'])
  # The schedule warms up over 2 steps and decays over 10.
  config = utils.Config(lr_init=1e-2, lr_final=1e-3, lr_delay_steps=2,
                        max_steps=10, grad_max_norm=1.)
  rays = 4  # per device

  def batch():
    rng = rng_of()
    directions = rng.randn(1, rays, 3).astype(np.float32)
    return {'rays': utils.Rays(
        origins=rng.randn(1, rays, 3).astype(np.float32),
        directions=directions,
        viewdirs=directions / np.linalg.norm(directions, axis=-1,
                                             keepdims=True),
        radii=rng.rand(1, rays, 1).astype(np.float32) * 0.01,
        lossmult=np.ones((1, rays, 1), np.float32),
        near=np.full((1, rays, 1), config.near, np.float32),
        far=np.full((1, rays, 1), config.far, np.float32)),
            'pixels': rng.rand(1, rays, 3).astype(np.float32)}

  model, variables = models.construct_mipnerf(jax.random.PRNGKey(0),
                                              batch())
  created = _v033_driver.example_statements(
      train, 'main', 'optimizer', 'train_pstep', model=model,
      variables=variables, config=config)
  return train, batch, created


def _mipnerf():
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  rng = np.random.RandomState(0)
  train, batch, created = _mipnerf_setup(lambda: rng)
  created = _v033_driver.example_statements(
      train, 'main', 'init_step', 'state', state=created['state'],
      learning_rate_fn=created['learning_rate_fn'],
      train_pstep=created['train_pstep'])
  state, keys = created['state'], jax.random.split(jax.random.PRNGKey(1), 1)
  # main's training loop body, without its logging and checkpoints.
  for step in range(int(created['init_step']),
                    int(created['init_step']) + STEPS):
    lr = created['learning_rate_fn'](step)
    state, stats, keys = created['train_pstep'](keys, state, batch(), lr)
    yield (_v033_driver.params_of(jax_utils.unreplicate(state).optimizer),
           {'lr': lr, 'stats': jax_utils.unreplicate(stats)})


def _mipnerf_resume(mode, directory):
  """mipnerf's training (``_v033_driver.train_save_resume``'s ``save`` or
  ``restore``):
  its own save (its training loop's save block), or its own restore
  (main's ``restore_checkpoint`` statement through its replication)."""
  from flax import io as flax_io  # noqa: PLC0415
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  carry = {'rng': np.random.RandomState(0),
           'keys': jax.random.split(jax.random.PRNGKey(1), 1)}
  train, batch, created = _mipnerf_setup(lambda: carry['rng'])
  flags = types.SimpleNamespace(train_dir=directory)
  # A new run: main's statements from init_step (after its restore); a
  # resumed one: from its restore statement.
  first, containing = (('state', 'restore_checkpoint') if mode == 'restore'
                       else ('init_step', ''))
  resumed = _v033_driver.example_statements(
      train, 'main', first, 'state', containing=containing,
      state=created['state'], FLAGS=flags)
  state, step = resumed['state'], int(resumed['init_step'])

  def steps(count):
    nonlocal state, step
    for _ in range(count):
      lr = created['learning_rate_fn'](step)
      state, stats, carry['keys'] = created['train_pstep'](
          carry['keys'], state, batch(), lr)
      step += 1
      yield (_v033_driver.params_of(jax_utils.unreplicate(state).optimizer),
             {'lr': lr, 'stats': jax_utils.unreplicate(stats)})

  def save():  # the loop's save block, at its last step
    _v033_driver.example_block(train, 'main', 'state_to_save =', state=state,
                               step=step - 1, FLAGS=flags)

  yield from _v033_driver.train_save_resume(
      mode, steps, save, carry, directory,
      lambda: jax_utils.unreplicate(state).optimizer)


def _scenic_setup(rng_of, workdir='', checkpoint=False):
  """scenic's classification trainer, a batch maker drawing from the random
  state ``rng_of()`` gives, and ``train``'s statements from its model to
  ``train_step_pmapped`` (initialization, optimizer, TrainState, restore if
  ``checkpoint``, replication) for a small ResNet with Adam."""
  import flax  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  import ml_collections  # noqa: PLC0415
  trainer = importlib.import_module('scenic.train_lib.classification_trainer')
  resnet = importlib.import_module('scenic.projects.baselines.resnet')
  # scenic's initialize_model unpacks ``model_def.init(...).pop('params')``
  # as (rest, params): the flax of its time returned a FrozenDict, whose pop
  # does that; today's returns a dict. A removal next to flax.optim that
  # migrate reports and leaves (_corpus_train.SERVED), served here to both
  # copies alike.
  flax.config.update('flax_return_frozendict', True)
  # A ResNet of one strided block (batch norm: a model state to restore),
  # Adam with weight decay, the gradient clipped, decay applied explicitly
  # too, and a learning rate warming up over 2 steps.
  config = ml_collections.ConfigDict(dict(
      num_filters=4, num_layers=5, batch_size=4, num_training_steps=10,
      count_flops=False, optimizer='adam',
      optimizer_configs=dict(beta1=0.9, beta2=0.99, weight_decay=1e-3),
      lr_configs=dict(learning_rate_schedule='compound',
                      factors='constant*linear_warmup', warmup_steps=2,
                      base_learning_rate=0.01),
      max_grad_norm=1., explicit_weight_decay=1e-4, checkpoint=checkpoint,
      debug_train=False, debug_eval=False, log_eval_steps=10))
  dataset = types.SimpleNamespace(meta_data=dict(
      input_shape=(-1, 8, 8, 3), num_classes=3, num_train_examples=40,
      num_eval_examples=4))

  def batch():
    rng = rng_of()
    return {'inputs': rng.rand(1, 4, 8, 8, 3).astype(np.float32),
            'label': rng.randint(0, 3, (1, 4)),
            'batch_mask': np.ones((1, 4), np.float32)}

  created = _v033_driver.example_statements(
      trainer, 'train', 'model', 'train_step_pmapped',
      rng=jax.random.PRNGKey(0), config=config,
      model_cls=resnet.ResNetClassificationModel, dataset=dataset,
      workdir=workdir)
  return trainer, batch, created


def _scenic_step(created, state, batch):
  """``train``'s loop body, without its logging and checkpoints: the state
  after one step and what the recipe records of it (with the rest of
  scenic's TrainState: its batch statistics and rng, which a step's params
  and metrics do not show)."""
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  state, metrics, lr = created['train_step_pmapped'](state, batch)
  single = jax_utils.unreplicate(state)
  return state, (_v033_driver.params_of(single.optimizer),
                 {'lr': jax_utils.unreplicate(lr),
                  'metrics': jax_utils.unreplicate(metrics),
                  'model_state': single.model_state, 'rng': single.rng,
                  'global_step': single.global_step})


def _scenic():
  rng = np.random.RandomState(0)
  _, batch, created = _scenic_setup(lambda: rng)
  state = created['train_state']
  for _ in range(STEPS):
    state, recorded = _scenic_step(created, state, batch())
    yield recorded


def _scenic_resume(mode, directory):
  """scenic's own save (``train``'s checkpointing block: its replicas'
  model state synced, ``train_utils.save_checkpoint``) after ``STEPS``
  steps, or its own restore (``train``'s ``train_utils.restore_checkpoint``
  statement, config.checkpoint on, through its replication); then ``STEPS``
  steps more. The batches' generator goes in a pickle beside the checkpoint;
  the program's state (its rng included) only through its checkpoint."""
  from flax import io as flax_io  # noqa: PLC0415
  from flax import jax_utils  # noqa: PLC0415
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  carry = {'rng': np.random.RandomState(0)}
  if mode == 'restore':
    carry.update(_v033_driver.load_carry(directory))
  # A new run finds no checkpoint in the empty directory and starts afresh.
  trainer, batch, created = _scenic_setup(lambda: carry['rng'], directory,
                                          checkpoint=True)
  state = created['train_state']

  def steps(count):
    nonlocal state
    for _ in range(count):
      state, recorded = _scenic_step(created, state, batch())
      yield recorded

  if mode == 'save':
    for _ in steps(STEPS):
      pass
    # The shallower of train's two blocks syncing the model state: the
    # checkpointing one, which then saves (lead_host).
    state = _v033_driver.example_block(
        trainer, 'train', 'sync_model_state_across_replicas',
        train_state=state, lead_host=True, workdir=directory,
        chrono=types.SimpleNamespace(accum_train_time=0))['train_state']
    _v033_driver.save_carry(carry, directory)
  yield from steps(STEPS)
  yield _v033_driver.FINAL, jax_utils.unreplicate(state).optimizer


def _score_sde_start(workdir):
  """score_sde's ``run_lib``, a small DDPM's config and ``train``'s
  statements from its first key to ``rng = state.rng`` (the optimizer's
  creation and the restore from ``workdir``'s checkpoints-meta among them),
  with the SDE and the pmapped train step ``train`` builds."""
  from flax import io as flax_io  # noqa: PLC0415 - after the stand-ins
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  run_lib = importlib.import_module('run_lib')
  # DDPM's own config, small: one resolution of 4x4 images (32 channels:
  # flax's GroupNorm makes 32 groups), discrete VP-SDE training. Its
  # warmup (State.step / warmup) ends within the steps, the preemption
  # snapshot every step (its checkpoint is named by the step).
  config = importlib.import_module('configs.vp.ddpm.cifar10').get_config()
  config.training.update(batch_size=2, n_jitted_steps=1,
                         snapshot_freq_for_preemption=1)
  config.data.image_size = 4
  config.model.update(nf=32, ch_mult=(1,), num_res_blocks=1,
                      attn_resolutions=())
  config.optim.warmup = STEPS + 2
  created = _v033_driver.example_statements(
      run_lib, 'train', 'rng', 'rng', config=config, workdir=workdir)
  sde = _v033_driver.example_block(run_lib, 'train', 'sde_lib.VPSDE(',
                                   config=config)['sde']
  created.update(_v033_driver.example_statements(
      run_lib, 'train', 'optimize_fn', 'p_train_step', config=config,
      sde=sde, score_model=created['score_model']))
  return run_lib, config, created


def _score_sde_run(mode, directory):
  """score_sde's training (``_v033_driver.train_save_resume``'s ``mode``):
  ``train``'s
  statements to its restore from ``directory``; its own save (the block of
  its preemption snapshot) there. The loop's key goes through the
  checkpoint (``saved_state.replace(rng=rng)``, ``rng = state.rng``)."""
  from flax import jax_utils  # noqa: PLC0415
  import jax  # noqa: PLC0415 - after the stand-ins are installed
  import jax.numpy as jnp  # noqa: PLC0415
  run_lib, config, created = _score_sde_start(directory)
  pstate = jax_utils.replicate(created['state'])
  step, rng = int(created['initial_step']), created['rng']
  if mode != 'restore':
    # train's, after replicating; it folds a restored key again, where an
    # uninterrupted run goes on with it: the harness goes on.
    rng = jax.random.fold_in(rng, jax.process_index())
  scaler = run_lib.datasets.get_data_scaler(config)
  shape = (1, 1, 2, 4, 4, 3)  # (devices, jitted steps, batch, H, W, C)

  def steps(count):
    nonlocal pstate, rng, step
    # train's loop body, without its logging, evaluation and snapshots.
    for _ in range(count):
      batch = {'image': scaler(np.random.RandomState(step).rand(*shape)
                               .astype(np.float32))}
      rng, *next_rng = jax.random.split(rng, num=jax.local_device_count() + 1)
      (_, pstate), ploss = created['p_train_step'](
          (jnp.asarray(next_rng), pstate), batch)
      step += 1
      state = jax_utils.unreplicate(pstate)
      yield (_v033_driver.params_of(state.optimizer),
             {'loss': jax_utils.unreplicate(ploss), 'step': state.step,
              'params_ema': state.params_ema})

  def save():  # the snapshot block, at the loop's last step
    _v033_driver.example_block(
        run_lib, 'train', 'checkpoints.save_checkpoint(checkpoint_meta_dir',
        pstate=pstate, rng=rng, step=step - 1, config=config,
        checkpoint_meta_dir=created['checkpoint_meta_dir'])

  yield from _v033_driver.train_save_resume(
      mode, steps, save, {}, directory,
      lambda: jax_utils.unreplicate(pstate).optimizer)


def _score_sde():
  return _score_sde_run('train', os.path.abspath('no-checkpoints'))


def _restarted_run(mode, directory, program):
  """A run of ``mode`` (``train``, ``save`` or ``restore``) of a program
  whose checkpoint holds less than its training state, so that its resumed
  run is a new start from it (jaxrl's and jax_rl's agents: a new agent,
  then its own restore from ``directory``): ``save``: ``STEPS`` steps not
  compared, its own save, then the original too goes on as its resumed run
  does, through its own restore of its own checkpoint; then (every mode)
  ``STEPS`` steps, and after a resume ``(FINAL, its optimizers)``.

  ``program``: ``start()`` the program new; ``save(agent)`` its own save
  into ``directory``, returning what the harness carries beside it (what
  the program keeps out of its checkpoint); ``restore(carried)`` the
  program as its own restore makes it, ``carried`` put back; ``steps(agent,
  count)`` yielding each step's (params, metrics); ``optimizers(agent)``.
  """
  if mode == 'restore':
    agent = program.restore(_v033_driver.load_carry(directory))
  else:
    agent = program.start()
  if mode == 'save':
    for _ in program.steps(agent, STEPS):
      pass
    _v033_driver.save_carry(program.save(agent), directory)
    agent = program.restore(_v033_driver.load_carry(directory))
  yield from program.steps(agent, STEPS)
  if mode != 'train':
    yield _v033_driver.FINAL, program.optimizers(agent)


# jaxrl's learners: (module, class, small arguments, the Models its
# __init__ creates, in that order). SAC's target critic is updated every
# 2nd step (its critic optimizer's step read); AWAC's actor Adam has
# flax.optim's weight decay; BC's policy is a mixture.
_JAXRL_LEARNERS = {
    'sac': ('jax_rl.agents.sac.sac_learner', 'SACLearner',
            dict(hidden_dims=(8, 8), target_update_period=2),
            ('actor', 'critic', 'target_critic', 'temp')),
    'awac': ('jax_rl.agents.awac.awac_learner', 'AWACLearner',
             dict(actor_hidden_dims=(8, 8), critic_hidden_dims=(8, 8),
                  actor_optim_kwargs={'learning_rate': 3e-4,
                                      'weight_decay': 1e-4}),
             ('actor', 'critic', 'target_critic')),
    'bc': ('jax_rl.agents.bc.bc_learner', 'BCLearner',
           dict(hidden_dims=(8, 8)), ('actor',)),
}


def _jaxrl_learner(name, directory=None):
  """jaxrl's learner ``name`` for 3 observations and 2 actions, made by
  its own ``__init__``. ``directory``: each Model ``__init__`` creates goes
  through jaxrl's own restore (``Model.load``: the params saved, no
  optimizer) before ``__init__`` gives it its optimizer
  (``with_optimizer``): the way jaxrl's checkpoint (params only)
  resumes."""
  module_name, class_name, arguments, models = _JAXRL_LEARNERS[name]
  module = importlib.import_module(module_name)
  create_model = module.create_model
  saved = iter(models)

  def create_loaded(model_def, inputs):
    model = create_model(model_def, inputs)
    return model.load(os.path.join(directory, f'{name}_{next(saved)}'))

  with mock.patch.object(module, 'create_model',
                         create_loaded if directory else create_model):
    return getattr(module, class_name)(
        seed=0, observations=np.zeros((1, 3), np.float32),
        actions=np.zeros((1, 2), np.float32), **arguments)


def _jaxrl_models(name, learner) -> dict:
  """A learner's Models by name: where each learner keeps them."""
  holder = {'sac': lambda: learner.sac, 'awac': lambda: learner.models,
            'bc': lambda: learner}[name]()
  return {model: getattr(holder, model) for model in _JAXRL_LEARNERS[name][3]}


def _jaxrl_steps(agent, count):
  """``count`` calls of each learner's own ``update`` on a batch drawn
  from ``agent['rng']``, then its own ``sample_actions`` (its policy's
  params read through its optimizer): each Model's params, the update's
  info and the actions sampled."""
  batch_type = importlib.import_module('jax_rl.datasets.dataset').Batch
  rng = agent['rng']
  for _ in range(count):
    batch = batch_type(
        observations=rng.randn(4, 3).astype(np.float32),
        actions=rng.uniform(-1, 1, (4, 2)).astype(np.float32),
        rewards=rng.randn(4).astype(np.float32),
        masks=rng.randint(0, 2, 4).astype(np.float32),
        next_observations=rng.randn(4, 3).astype(np.float32))
    params, metrics = {}, {}
    for name in _JAXRL_LEARNERS:
      learner = agent[name]
      metrics[name] = {'info': learner.update(batch),
                       'actions': learner.sample_actions(batch.observations)}
      params[name] = {
          model_name: model.params if model.optimizer is None else
          _v033_driver.params_of(model.optimizer)
          for model_name, model in _jaxrl_models(name, learner).items()}
    yield params, metrics


def _jaxrl_save(agent, directory):
  """jaxrl's own save (``Model.save``: the params) of each Model."""
  for name in _JAXRL_LEARNERS:
    for model_name, model in _jaxrl_models(name, agent[name]).items():
      model.save(os.path.join(directory, f'{name}_{model_name}'))
  return {'rng': agent['rng']}


def _jaxrl_start(directory=None):
  return {name: _jaxrl_learner(name, directory) for name in _JAXRL_LEARNERS}


def _jaxrl_run(mode, directory):
  return _restarted_run(mode, directory, types.SimpleNamespace(
      start=lambda: {**_jaxrl_start(), 'rng': np.random.RandomState(0)},
      save=lambda agent: _jaxrl_save(agent, directory),
      restore=lambda carried: {**_jaxrl_start(directory), **carried},
      steps=_jaxrl_steps,
      optimizers=lambda agent: tuple(
          model.optimizer for name in _JAXRL_LEARNERS
          for model in _jaxrl_models(name, agent[name]).values()
          if model.optimizer is not None)))


def _jaxrl():
  return _jaxrl_run('train', os.path.abspath('no-checkpoints'))


# jax_rl's agents: name -> (arguments of its class beyond the shared ones,
# arguments of its ``train`` beyond the buffer and batch size). TD3's and
# SAC's actor is stepped every 2nd call; MPO copies its online networks to
# its targets every 2nd call (its ``target_freq``) and draws 4 actions per
# state for its E-step.
_JAX_RL_AGENTS = {
    'TD3': (dict(policy_freq=2), {}),
    'SAC': (dict(policy_freq=2), {}),
    'MPO': (dict(target_freq=2), dict(action_sample_size=4)),
}
# Every optimizer an agent may hold: SAC's temperature, MPO's two Lagrange
# multipliers (neither saved by its agent's ``save``).
_JAX_RL_OPTIMIZERS = ('actor_optimizer', 'critic_optimizer',
                      'log_alpha_optimizer', 'mu_lagrange_optimizer',
                      'sig_lagrange_optimizer')
# What each step records beside the optimizers' params, where an agent has
# it: the target networks, the iteration count, MPO's temperature (its
# E-step's solution, carried to the next step).
_JAX_RL_METRICS = ('critic_target_params', 'actor_target_params',
                   'total_it', 'temp')


def _gradient_as_float64(minimize):
  """scipy's ``minimize`` as the scipy of MPO's time ran SLSQP: the
  gradient went to its Fortran routine cast to float64; today's refuses any
  other dtype. MPO's E-step hands it jax's float32 gradient of its dual
  (``jac=``); served to both copies alike, like
  ``_broadcast_to_takes_lists``."""

  def minimize_casting(fun, x0, *args, jac=None, **kwargs):
    def gradient(x, *more):
      return np.asarray(jac(x, *more), np.float64)

    return minimize(fun, x0, *args, jac=gradient if callable(jac) else jac,
                    **kwargs)

  return minimize_casting


def _jax_rl_agents():
  """jax_rl's TD3, SAC and MPO (their own classes; their networks the
  repository's, 256 units wide) for 3 state and 2 action dimensions
  (``_JAX_RL_AGENTS``' arguments), and the repository's replay buffer
  holding 64 synthetic transitions."""
  from flax import io as flax_io  # noqa: PLC0415 - after the stand-ins
  saving = importlib.import_module('jax_rl.saving')
  # saving.py writes through tensorflow's gfile (a stand-in here): flax.io's
  # file functions on Python's files serve it, where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  saving.gfile = flax_io
  mpo = importlib.import_module('jax_rl.MPO')
  mpo.minimize = _gradient_as_float64(mpo.minimize)
  buffer = importlib.import_module('jax_rl.buffers').ReplayBuffer(
      3, 2, max_size=64)
  rng = np.random.RandomState(0)
  for _ in range(64):
    buffer.add(rng.randn(3), rng.uniform(-1, 1, 2), rng.randn(3),
               rng.randn(), float(rng.rand() < 0.1))
  agents = {name: getattr(importlib.import_module(f'jax_rl.{name}'), name)(
      state_dim=3, action_dim=2, max_action=1., seed=0, **arguments)
            for name, (arguments, _) in _JAX_RL_AGENTS.items()}
  return {'buffer': buffer, **agents}


def _jax_rl_optimizers(agent):
  """An agent's optimizers, by name (``_JAX_RL_OPTIMIZERS``)."""
  return {name: getattr(agent, name) for name in _JAX_RL_OPTIMIZERS
          if hasattr(agent, name)}


def _jax_rl_steps(agents, count):
  """``count`` calls of each agent's own ``train`` (a batch of 8 drawn
  from the buffer by its own key sequence): each optimizer's params and
  the agent's ``_JAX_RL_METRICS``."""
  for _ in range(count):
    params, metrics = {}, {}
    for name, (_, arguments) in _JAX_RL_AGENTS.items():
      agent = agents[name]
      agent.train(agents['buffer'], batch_size=8, **arguments)
      params[name] = {key: _v033_driver.params_of(optimizer) for key,
                      optimizer in _jax_rl_optimizers(agent).items()}
      metrics[name] = {key: getattr(agent, key) for key in _JAX_RL_METRICS
                       if hasattr(agent, key)}
    yield params, metrics


def _jax_rl_save(agents, directory):
  """Each agent's own save (its ``save``: critic and actor optimizers,
  through jax_rl's ``save_model``); the harness carries what it keeps out
  of its checkpoint (its key sequence, its iteration count: main_gym's
  resumed run restarts both) so that what differs is its checkpoint's.
  What neither the checkpoint nor the harness keeps (SAC's temperature
  optimizer, MPO's Lagrange optimizers and temperature) starts new in the
  original's own restore as in the migrated copy's."""
  for name in _JAX_RL_AGENTS:
    agents[name].save(os.path.join(directory, name))
  return {name: (agents[name].rng.internal_state, agents[name].total_it)
          for name in _JAX_RL_AGENTS}


def _jax_rl_restore(directory, carried):
  """New agents and their own restore (``load``, as main_gym resumes),
  the harness's carried values put back."""
  agents = _jax_rl_agents()
  for name in _JAX_RL_AGENTS:
    agents[name].load(os.path.join(directory, name))
    agents[name].rng.replace_internal_state(carried[name][0])
    agents[name].total_it = carried[name][1]
  return agents


def _jax_rl_run(mode, directory):
  return _restarted_run(mode, directory, types.SimpleNamespace(
      start=_jax_rl_agents,
      save=lambda agents: _jax_rl_save(agents, directory),
      restore=lambda carried: _jax_rl_restore(directory, carried),
      steps=_jax_rl_steps,
      optimizers=lambda agents: tuple(
          optimizer for name in _JAX_RL_AGENTS
          for optimizer in _jax_rl_optimizers(agents[name]).values())))


def _jax_rl():
  return _jax_rl_run('train', os.path.abspath('no-checkpoints'))


# dopamine's JAX agents (its own classes, small): DQN over 4 observations
# and 2 actions (its ClassicControlDQNNetwork), SAC over 3 observations and
# 2 actions (its SACNetwork, 16 units wide), whose temperature optimizer is
# made over one bare array (``create(jnp.zeros(1))``).
_DOPAMINE_BATCH = 8


def _tfp_without_tensorflow():
  """Imports tensorflow_probability's jax substrate as it imports where
  tensorflow is not installed: seeing the tensorflow stand-in, it would
  copy its functions' docstrings from the stand-in's mocks (and fail)."""
  stand_ins = [finder for finder in sys.meta_path
               if isinstance(finder, _v033_driver.StandInFinder)]
  for finder in stand_ins:
    sys.meta_path.remove(finder)
  try:
    importlib.import_module('tensorflow_probability.substrates.jax')
  finally:
    sys.meta_path[:0] = stand_ins


def _dopamine_agents():
  """A new DQN and SAC agent, seeded. atari_lib is outside the corpus's
  paths (a stand-in): its network output type, a namedtuple the networks
  return and the train step reads ``.q_values`` of, is served as dopamine
  defines it, to both copies alike."""
  import jax.numpy as jnp  # noqa: PLC0415 - after the stand-ins
  _tfp_without_tensorflow()
  atari_lib = importlib.import_module('dopamine.discrete_domains.atari_lib')
  atari_lib.DQNNetworkType = collections.namedtuple('dqn_network',
                                                    ['q_values'])
  dqn = importlib.import_module('dopamine.jax.agents.dqn.dqn_agent')
  sac = importlib.import_module('dopamine.jax.agents.sac.sac_agent')
  networks = importlib.import_module('dopamine.jax.networks')
  return {
      'dqn': dqn.JaxDQNAgent(
          num_actions=2, observation_shape=(4,), stack_size=1,
          observation_dtype=jnp.float32,
          network=networks.ClassicControlDQNNetwork, seed=0),
      'sac': sac.SACAgent(action_shape=(2,),
                          action_limits=(-np.ones(2), np.ones(2)),
                          observation_shape=(3,), hidden_units=16, seed=0),
  }


def _dopamine_batch(rng, observations, actions):
  """Synthetic transitions as the agents' replay buffers give them
  (stacked states of one frame): ``actions`` an int for discrete ones
  (their count), a tuple for continuous ones (their shape)."""
  def states():
    return rng.randn(_DOPAMINE_BATCH, observations, 1).astype(np.float32)
  if isinstance(actions, int):
    action = rng.randint(actions, size=_DOPAMINE_BATCH).astype(np.int32)
  else:
    action = rng.uniform(-1, 1, (_DOPAMINE_BATCH, *actions)).astype(
        np.float32)
  return (states(), action, states(),
          rng.randn(_DOPAMINE_BATCH).astype(np.float32),
          (rng.rand(_DOPAMINE_BATCH) < 0.1).astype(np.float32))


def _dopamine_steps(agents, count):
  """``count`` steps of each agent's module-level jitted ``train``, called
  as its ``_train_step`` calls it (its replay buffer is a stand-in: the
  batches are synthetic), then its own target update (DQN's every 2nd
  step). Each optimizer's params, the losses and the target params."""
  import jax  # noqa: PLC0415 - after the stand-ins
  dqn, sac = agents['dqn'], agents['sac']
  dqn_train = sys.modules[type(dqn).__module__].train
  sac_train = sys.modules[type(sac).__module__].train
  for _ in range(count):
    dqn.optimizer, loss = dqn_train(
        dqn.network_def, dqn.target_network_params, dqn.optimizer,
        *_dopamine_batch(agents['rng'], 4, 2), dqn.cumulative_gamma,
        dqn._loss_type)  # noqa: SLF001 - the agent's own argument
    dqn.training_steps += 1
    if dqn.training_steps % 2 == 0:
      dqn._sync_weights()  # noqa: SLF001 - its own target update
    sac._rng, key = jax.random.split(sac._rng)  # noqa: SLF001 - as it does
    returns = sac_train(
        sac.network_def, sac.network_optimizer, sac.target_params,
        sac.alpha_optimizer, key, *_dopamine_batch(agents['rng'], 3, (2,)),
        sac.cumulative_gamma, sac.target_entropy, sac.reward_scale_factor)
    sac.network_optimizer = returns.pop('network_optim')
    sac.alpha_optimizer = returns.pop('alpha_optim')
    sac._maybe_sync_weights()  # noqa: SLF001 - its own target update
    sac.training_steps += 1
    yield ({'dqn': _v033_driver.params_of(dqn.optimizer),
            'sac': _v033_driver.params_of(sac.network_optimizer),
            'alpha': _v033_driver.params_of(sac.alpha_optimizer)},
           {'dqn': {'loss': loss, 'target': dqn.target_network_params},
            'sac': {**returns, 'target': sac.target_params}})


def _dopamine_save(agents, directory):
  """Each agent's own ``bundle_and_checkpoint`` (its params, not its
  optimizer's state), pickled as dopamine's Checkpointer pickles it; the
  harness carries its batch generator. flax of dopamine's time made linen
  params FrozenDicts, which DQN's ``unbundle`` asks for (else it converts
  a pre-linen checkpoint): the bundle's params are frozen so."""
  import flax  # noqa: PLC0415 - after the stand-ins
  import jax  # noqa: PLC0415 - after the stand-ins
  for name in ('dqn', 'sac'):
    bundle = agents[name].bundle_and_checkpoint(directory, 0)
    for key in ('online_params', 'target_params', 'network_params'):
      if key in bundle:
        bundle[key] = flax.core.freeze(bundle[key])
    with open(os.path.join(directory, f'{name}.bundle'), 'wb') as f:
      pickle.dump(jax.device_get(bundle), f)
  return {'rng': agents['rng']}


def _dopamine_restore(directory, carried):
  """New agents and their own ``unbundle`` of the pickled bundles (which
  creates their optimizers again), the batch generator put back."""
  agents = _dopamine_agents()
  for name in ('dqn', 'sac'):
    with open(os.path.join(directory, f'{name}.bundle'), 'rb') as f:
      bundle = pickle.load(f)  # noqa: S301 - written by _dopamine_save
    assert agents[name].unbundle(directory, 0, bundle)
  return {**agents, **carried}


def _dopamine_run(mode, directory):
  return _restarted_run(mode, directory, types.SimpleNamespace(
      start=lambda: {**_dopamine_agents(), 'rng': np.random.RandomState(0)},
      save=lambda agents: _dopamine_save(agents, directory),
      restore=lambda carried: _dopamine_restore(directory, carried),
      steps=_dopamine_steps,
      optimizers=lambda agents: (agents['dqn'].optimizer,
                                 agents['sac'].network_optimizer,
                                 agents['sac'].alpha_optimizer)))


def _dopamine():
  return _dopamine_run('train', os.path.abspath('no-checkpoints'))


# ble's wind-field VAE, small: its own classes with 1 hidden layer of 8
# units, 4 latents and a 3x3 grid of 2 pressure levels and 2 time slices
# (flow fields 2x2). Its generator module builds them through
# ``vae.model()`` and ``vae.FieldShape()``, and the VAE its sub-networks
# through the names ``Encoder`` and ``Decoder``: those names are made small.
_BLE_FIELD = dict(latlng_slices=3, flow_field_width=2, pressure_slices=2,
                  time_slices=2)
_BLE_BATCH = 4


@contextlib.contextmanager
def _hashed_dataclasses(*names):
  """While it lasts, the dataclasses named get a hash (``unsafe_hash``).

  ble's vae gives its modules a ``FieldShape()`` (a plain dataclass, so
  without a hash) as a field's default: the Python of its time took that,
  today's refuses an unhashable default. Served to both copies alike, as
  ``_broadcast_to_takes_lists`` serves nerfies.
  """
  dataclass = dataclasses.dataclass

  def hashed(cls=None, /, **kwargs):
    if cls is None:
      return functools.partial(hashed, **kwargs)
    if cls.__name__ in names:
      kwargs.setdefault('unsafe_hash', True)
    return dataclass(cls, **kwargs)

  with mock.patch.object(dataclasses, 'dataclass', hashed):
    yield


def _ble_generator(directory):
  """ble's ``learn_wind_field_generator``, its VAE small, and ``train``'s
  statements from the params' init to the epoch it starts at: the Adam
  optimizer's creation and the restore from ``directory`` (empty for a new
  run, as its ``checkpoint_directory`` flag starts) among them."""
  from flax import io as flax_io  # noqa: PLC0415 - after the stand-ins
  import jax  # noqa: PLC0415 - after the stand-ins
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  with _hashed_dataclasses('FieldShape'):
    vae = importlib.import_module(
        'balloon_learning_environment.generative.vae')
  field = vae.FieldShape(**_BLE_FIELD)
  small = dict(num_hidden_layers=1, hidden_layer_network_width=8)
  vae.FieldShape = functools.partial(vae.FieldShape, **_BLE_FIELD)
  vae.Encoder = functools.partial(vae.Encoder, **small)
  vae.Decoder = functools.partial(vae.Decoder, field_shape=field, **small)
  vae.model = functools.partial(vae.WindFieldVAE, num_latents=4,
                                field_shape=field)
  generator = importlib.import_module(
      'balloon_learning_environment.generative.learn_wind_field_generator')
  flags = types.SimpleNamespace(checkpoint_directory=directory,
                                bootstrap_directory='')
  created = _v033_driver.example_statements(
      generator, 'train', 'params', 'epoch', key=jax.random.PRNGKey(0),
      rng=jax.random.PRNGKey(1), learning_rate=1e-3, num_batches_per_epoch=1,
      FLAGS=flags)
  return generator, created, field.grid_shape()


def _ble_run(mode, directory):
  """ble's VAE training (``_v033_driver.train_save_resume``'s ``mode``):
  one batch an epoch (so its epoch is its optimizer's step + 1 after a
  restore), its module-level jitted ``train_step`` with its own KL
  schedule's coefficient; its own save (the loop's ``save_checkpoint``
  block, the epoch just trained). Its loop key and the batches' generator
  are the harness's carry (its key is seeded by the time)."""
  import jax  # noqa: PLC0415 - after the stand-ins
  generator, created, grid = _ble_generator(directory)
  optimizer, epoch = created['optimizer'], int(created['epoch'])
  carry = {'batches': np.random.RandomState(0), 'rng': created['rng']}

  def steps(count):
    nonlocal optimizer, epoch
    for _ in range(count):
      kl_coefficient = generator.step_schedule(
          epoch, start_value=0.5, increment=2., frequency=2, max_val=4.)
      batch = carry['batches'].randn(_BLE_BATCH, *grid).astype(np.float32)
      carry['rng'], key = jax.random.split(carry['rng'])
      optimizer, loss, mse, kld, sigma = generator.train_step(
          optimizer, batch, key, kl_coefficient)
      yield (_v033_driver.params_of(optimizer),
             {'loss': loss, 'mse': mse, 'kld': kld, 'sigma': sigma,
              'epoch': epoch})
      epoch += 1

  def save():  # the loop's save block, at the epoch just trained
    _v033_driver.example_block(
        generator, 'train', 'checkpoints.save_checkpoint(',
        FLAGS=created['FLAGS'], optimizer=optimizer, epoch=epoch - 1)

  yield from _v033_driver.train_save_resume(mode, steps, save, carry,
                                            directory, lambda: optimizer)


def _ble():
  return _ble_run('train', os.path.abspath('no-checkpoints'))


# ub's deterministic ViT (baselines/jft/deterministic.py) and its
# checkpoint_utils, small: 4 images of 8x8x3 a batch, 3 classes, Adam with
# flax.optim's own weight decay besides ub's (config.weight_decay), global
# gradient clipping and ub's warmup+linear learning-rate schedule.
_UB_BATCH = 4
_UB_CLASSES = 3


class _UbBatches:
  """The training set as ``deterministic.main`` reads it: its image spec
  (the model's input shape) and ``skip`` (a resumed run skips the steps
  its checkpoint holds); batch ``k`` (local devices first) is drawn from
  seed ``k``, so a resumed run sees the batches the first one would."""

  element_spec = {'image': types.SimpleNamespace(
      shape=(1, _UB_BATCH, 8, 8, 3))}

  def __init__(self, start=0):
    self.start = start

  def skip(self, count):
    return _UbBatches(self.start + count)

  def __iter__(self):
    for index in itertools.count(self.start):
      rng = np.random.RandomState(index)
      yield {'image': rng.rand(1, _UB_BATCH, 8, 8, 3).astype(np.float32),
             'labels': np.eye(_UB_CLASSES, dtype=np.float32)[
                 rng.randint(0, _UB_CLASSES, (1, _UB_BATCH))]}


def _ub_vision_transformer(num_classes, hidden_size):
  """``ub.models.vision_transformer`` as main calls it, small: the model
  (uncertainty_baselines' package, outside the corpus's paths, with no
  flax.optim code) is served to both copies alike. Like ub's ViT it
  returns the logits and its outputs (``pre_logits``), takes ``train``
  and drops out with the ``dropout`` key."""
  import flax.linen as nn  # noqa: PLC0415 - after the stand-ins

  class TinyViT(nn.Module):
    @nn.compact
    def __call__(self, images, train):
      x = nn.Dense(hidden_size, name='embedding')(
          images.reshape((images.shape[0], -1)))
      x = nn.Dropout(0.1, deterministic=not train)(nn.gelu(x))
      pre_logits = nn.tanh(nn.Dense(hidden_size, name='pre_logits')(x))
      return (nn.Dense(num_classes, name='head')(pre_logits),
              {'pre_logits': pre_logits})

  return TinyViT()


class _UbGFile(io.FileIO):
  """tensorflow's ``gfile.GFile`` as checkpoint_utils reads it (its
  ``size``, for its reads in parallel), on Python's files."""

  def size(self):
    return os.fstat(self.fileno()).st_size


def _ub_gfile_rename(source, target, overwrite=False):
  assert overwrite, 'checkpoint_utils renames over its checkpoint'
  os.replace(source, target)


def _ub_config(mode):
  """A small config in ub's fields (its experiments' Adam pre-training
  ones). A checkpointing run stops after ``STEPS`` steps at its
  ``testing_failure_step`` (ub's simulated preemption) with a checkpoint
  of that step; run again, it resumes from it and trains to its end."""
  import ml_collections  # noqa: PLC0415 - after the stand-ins
  config = ml_collections.ConfigDict(dict(
      seed=0, dataset='synthetic', train_split='train', val_split='val',
      pp_train='', pp_eval='', shuffle_buffer_size=1, batch_size=_UB_BATCH,
      num_classes=_UB_CLASSES, init_head_bias=-2.0,
      model=dict(hidden_size=8), optim_name='Adam',
      optim=dict(beta1=0.9, beta2=0.999, weight_decay=0.03),
      weight_decay=0.1, grad_clip_norm=1.0,
      lr=dict(base=0.01, warmup_steps=2, decay_type='linear',
              linear_end=1e-5),
      total_steps=STEPS))
  if mode != 'train':
    config.total_steps = 2 * STEPS
    config.checkpoint_steps = STEPS
    config.testing_failure_step = STEPS
  return config


def _ub_main(config, directory):
  """``deterministic.main``'s statements from its seed to the last before
  its training loop (``output_dir``: ``directory``): the optimizer's
  creation, its pmapped ``update_fn``, ``maybe_load_checkpoint`` (a resume
  where ``directory`` holds its checkpoint), the dataset's and learning
  rates' iterators from the step restored. Its input pipeline serves
  ``_UbBatches``; tensorflow's gfile, checkpoint_utils' file access, is
  served on Python's files. Returns the module and main's locals."""
  import multiprocessing.pool  # noqa: PLC0415, F401 - main's ThreadPool
  # al_utils subclasses clu's DatasetBuilder (a protocol): a stand-in's
  # mock as a base class would make a mock of the class, not a class.
  importlib.import_module('clu.deterministic_data').DatasetBuilder = type(
      'DatasetBuilder', (), {})
  deterministic = importlib.import_module('deterministic')
  deterministic.ub.models.vision_transformer = _ub_vision_transformer
  deterministic.checkpoint_utils.gfile = types.SimpleNamespace(
      GFile=_UbGFile, exists=os.path.exists, rename=_ub_gfile_rename)
  deterministic.input_utils.get_data = lambda **_: _UbBatches()
  deterministic.input_utils.get_num_examples = lambda *_, **__: 64
  return deterministic, _v033_driver.example_statements(
      deterministic, 'main', 'seed', 'fewshot_results', config=config,
      output_dir=directory)


def _ub_steps(deterministic, main):
  """main's training loop over ``main``'s locals, as its loop calls them:
  ``update_fn`` on the next batch and learning rate, then its checkpoint
  block where its ``itstime`` says (the save through main's
  ``ThreadPool``, waited for), to its last step or its
  ``testing_failure_step``; its pool closed as main ends. Each step's
  params, measurements and loop key."""
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  config, total_steps = main['config'], main['total_steps']
  for step in range(main['first_step'] + 1, total_steps + 1):
    batch = next(main['train_iter'])
    main['opt_repl'], main['train_loop_rngs'], measurements = main[
        'update_fn'](main['opt_repl'], next(main['lr_iter']),
                     batch['image'], batch['labels'],
                     rng=main['train_loop_rngs'])
    if deterministic.train_utils.itstime(
        step, config.get('checkpoint_steps'), total_steps, process=0):
      main['checkpoint_writer'] = _v033_driver.example_block(
          deterministic, 'main', 'checkpoint_utils.CheckpointData(',
          **{**main, 'step': step})['checkpoint_writer']
      main['checkpoint_writer'].get()
    yield (_v033_driver.params_of(jax_utils.unreplicate(main['opt_repl'])),
           {'measurements': jax_utils.unreplicate(measurements),
            'rngs': main['train_loop_rngs']})
    if config.get('testing_failure_step') == step:
      break
  main['pool'].close()  # as main ends
  main['pool'].join()


def _ub_run(mode, directory):
  """ub's own preemption and resume: ``save``: main runs ``STEPS`` steps
  (not compared) and stops with its checkpoint in ``directory``, which
  the original resumes from by itself in a copy (``continued``);
  ``restore``: main resumes from ``directory``'s checkpoint. Then
  ``STEPS`` steps, and after a resume ``(FINAL, its optimizer)``. All of
  the run's state (optimizer, loop key, the dataset's position) goes
  through ub's checkpoint: the harness carries nothing."""
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  config = _ub_config(mode)
  if mode == 'save':
    for _ in _ub_steps(*_ub_main(config, directory)):
      pass
    continued = os.path.join(directory, 'continued')
    os.mkdir(continued)
    shutil.copy(os.path.join(directory, 'checkpoint.npz'), continued)
    directory = continued
  deterministic, main = _ub_main(config, directory)
  yield from _ub_steps(deterministic, main)
  if mode != 'train':
    yield _v033_driver.FINAL, jax_utils.unreplicate(main['opt_repl'])


def _ub():
  return _ub_run('train', os.path.abspath('no-checkpoints'))


# jax3d's NeSF NeRF trainer (jax3d/projects/nesf: its TrainState dataclass
# holds the optimizer, which its own checkpoint functions save and restore),
# small: a NeRF MLP 2 deep and 8 wide, 4 coarse and 4 fine samples a ray, no
# semantic head, 8 rays a step on one device. mobilenerf, which pickles its
# optimizer, is held by migrate; its trainers are not run.
_JAX3D_RAYS = 8
_JAX3D_LIB = 'jax3d.projects.nesf.nerfstatic'


def _tf_dataset_a_class():
  """The tensorflow stand-in's ``tf.data.Dataset`` made a class of its
  own: jax3d's tree functions (``zeros_like``, ``shape_dtype_like``) ask
  ``isinstance(leaf, tf.data.Dataset)`` of every leaf, which a mock
  refuses; no value the recipe holds is one."""
  tensorflow = importlib.import_module('tensorflow')
  tensorflow.data.Dataset = type('Dataset', (), {})


def _jax3d_setup(directory):
  """train_lib, its ``ConfigParams`` (small, checkpoints under
  ``directory``) and ``train``'s statements from the model's init to
  ``train_pstep`` (the optimizer's creation and its TrainState among
  them); its random state as ``train`` forks it."""
  from flax import io as flax_io  # noqa: PLC0415 - after the stand-ins
  # flax.io took the tensorflow stand-in for gfile: back to Python's files,
  # where the checkpoints are, and to the error flax.io takes without
  # tensorflow for a directory not there yet (the first save's, which flax
  # makes then; the stand-in's mock is no exception class).
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  flax_io.NotFoundError = FileNotFoundError
  _tf_dataset_a_class()
  train_lib = importlib.import_module(f'{_JAX3D_LIB}.train_lib')
  models = importlib.import_module(f'{_JAX3D_LIB}.models.models')
  config = importlib.import_module(f'{_JAX3D_LIB}.utils.config')
  datasets = importlib.import_module(f'{_JAX3D_LIB}.datasets')
  params = config.ConfigParams(
      # One scene, its data never read (the batches are synthetic).
      datasets=datasets.DatasetParams(data_dir=directory,
                                      batch_size=_JAX3D_RAYS),
      models=models.NerfParams(
          net_depth=2, net_width=8, net_depth_condition=1,
          net_width_condition=4, skip_layer=1, max_deg_point=2, deg_view=1,
          num_coarse_samples=4, num_fine_samples=4),
      train=config.TrainParams(
          train_dir=directory, train_steps=20, lr_init=1e-2, lr_final=1e-3,
          lr_delay_steps=2, lr_delay_mult=0.1, clip_grads_by_norm=1.,
          weight_decay_mult=1))
  rng = train_lib.jax3d.RandomState(params.train.random_seed)
  created = _v033_driver.example_statements(
      train_lib, 'train', 'initialized_model', 'model', params=params,
      rng=rng, placeholder_batch=None)
  created = _v033_driver.example_statements(
      train_lib, 'train', 'optimizer', 'train_pstep', params=params,
      initialized_model=created['initialized_model'],
      model=created['model'], max_steps=params.train.train_steps)
  return train_lib, params, rng, created


def _jax3d_batch(train_lib, rng):
  """Synthetic rays of one scene, drawn from ``rng``, as its dataset
  yields them to ``train_pstep`` (a leading device axis)."""
  import jax  # noqa: PLC0415 - after the stand-ins
  shapes = train_lib.types.Batch.as_types(
      target_batch_shape=(1, _JAX3D_RAYS))

  def draw(spec):
    if np.issubdtype(spec.dtype, np.integer):
      return np.zeros(spec.shape, spec.dtype)
    return rng.rand(*spec.shape).astype(spec.dtype)
  return jax.tree_util.tree_map(draw, train_lib.jax3d.shape_dtype_like(shapes))


def _jax3d_run(mode, directory):
  """jax3d's NeRF training (``_v033_driver.train_save_resume``'s ``mode``):
  ``train``'s own restore statements (its ``restore_opt_checkpoint``, the
  step it resumes at, the replication), then its loop's train step as the
  loop calls it (its keys folded from the step; logging and the dataset
  iterator left out); its own save (the loop's ``save_every`` block, the
  step just trained, no dataset state: the batches are the harness's)."""
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  import jax  # noqa: PLC0415 - after the stand-ins
  train_lib, params, rng, created = _jax3d_setup(directory)
  save_dir = train_lib.train_utils.checkpoint_dir(params)
  resumed = _v033_driver.example_statements(
      train_lib, 'train', 'state', 'init_step',
      containing='restore_opt_checkpoint', state=created['state'],
      save_dir=save_dir)
  replicated = _v033_driver.example_statements(
      train_lib, 'train', 'state', 'n_local_devices', containing='replicate',
      state=resumed['state'])
  state, step = replicated['state'], int(resumed['init_step'])
  rng.fold_in(jax.process_index())
  carry = {'rng': np.random.RandomState(0)}

  def steps(count):
    nonlocal state, step
    for _ in range(count):
      lr = created['learning_rate_fn'](step)
      keys = rng.fold_in_stateless(step).next(
          replicated['n_local_devices'])
      outputs = created['train_pstep'](
          keys, state, _jax3d_batch(train_lib, carry['rng']), lr)
      state = outputs.train_state
      yield (_v033_driver.params_of(jax_utils.unreplicate(state).optimizer),
             {'lr': lr, 'stats': jax_utils.unreplicate(outputs.stats)})
      step += 1

  def save():  # the loop's save block (not the one after the loop), at the
    # step just trained
    _v033_driver.example_block(
        train_lib, 'train', 'step=step,', state=state, ds_state=None,
        step=step - 1, save_dir=save_dir, params=params)

  yield from _v033_driver.train_save_resume(
      mode, steps, save, carry, directory,
      lambda: jax_utils.unreplicate(state).optimizer)


def _jax3d():
  return _jax3d_run('train', os.path.abspath('no-checkpoints'))


# meliad's language model, small, through the repository's own gin files
# (its base Transformer-XL config and its tiny test size) with bindings
# making it smaller still: 1 layer of 2 heads of 4, embeddings of 8, a
# vocabulary of 16; tiny_test's sequences of 256 tokens in 2 windows of
# 128 (the XL cache, the model's state, carried from window to window and
# step to step; its dropout tiles are 128 long), dropout on. Its trainer
# configures flax.optim's Adafactor (with momentum) and a cosine schedule
# warming up over 2 steps.
_MELIAD_GIN = ('transformer/configs/base_htrans.gin',
               'transformer/configs/size/tiny_test.gin')
_MELIAD_BINDINGS = (
    'NUM_LAYERS = 1', 'NUM_HEADS = 2', 'HEAD_DIM = 4', 'EMBED_DIM = 8',
    'MLP_DIM = 16', 'NUM_EMBEDDINGS = 16', 'DTYPE = "float32"',
    'training_loop.Trainer.warmup_steps = 2',
    'training_loop.Trainer.max_scheduled_steps = 10')


def _meliad_trainer(directory, carry):
  """meliad's ``Trainer`` as its gin files configure it, small
  (``_MELIAD_BINDINGS``), checkpointing in ``directory``; its training
  data synthetic token sequences drawn from ``carry['rng']``."""
  import flax  # noqa: PLC0415 - after the stand-ins
  from flax import io as flax_io  # noqa: PLC0415
  import gin  # noqa: PLC0415
  # training_loop reads and makes its working directory through
  # tensorflow's gfile (a stand-in): flax.io's on Python's files serves it,
  # where the checkpoints are.
  flax_io.set_mode(flax_io.BackendMode.DEFAULT)
  training_loop = importlib.import_module('training_loop')
  training_loop.gfile = flax_io
  # initialize_model unpacks ``variables.pop("params")`` as (state,
  # params): the flax of its time returned a FrozenDict, whose pop does
  # that; today's returns a dict. Served to both copies alike, as scenic's.
  flax.config.update('flax_return_frozendict', True)
  gin.add_config_file_search_path('transformer/configs')
  gin.parse_config_files_and_bindings(list(_MELIAD_GIN),
                                      list(_MELIAD_BINDINGS))

  def batches():
    while True:  # (drawn when read: a restored carry is what is read)
      rng = carry['rng']
      yield {'targets': rng.randint(0, 16, (1, 256)).astype(np.int32),
             'start_of_sequence': rng.rand(1) < 0.5,
             'epoch': np.zeros(1, np.int32)}

  return training_loop.Trainer(get_training_dataset_iterator=batches,
                               workdir=directory)


def _meliad_run(mode, directory):
  """meliad's training (``_v033_driver.train_save_resume``'s ``mode``):
  its Trainer's own ``initialize_model`` (the model, its optimizer from
  the gin-configured definition, its own ``restore_checkpoint`` from
  ``directory``: none for a new run), its train task (``run_step``: its
  pmapped ``train_step``), the body of ``train``'s loop without tests,
  logs and callbacks, and its own ``save_checkpoint`` at the step just
  trained, from which ``initialize_model`` resumes at the next."""
  from flax import jax_utils  # noqa: PLC0415 - after the stand-ins
  carry = {'rng': np.random.RandomState(0)}
  trainer = _meliad_trainer(directory, carry)
  tstate, step, imodel, prngs = trainer.initialize_model()
  task = trainer.create_training_task('train', imodel, prngs, {})

  def steps(count):
    nonlocal tstate, step
    for _ in range(count):
      tstate, metrics = task.run_step(tstate, task.get_next_input(), step)
      del metrics['step_time']  # (the wall clock's)
      single = jax_utils.unreplicate(tstate)
      step += 1
      yield (_v033_driver.params_of(single.optimizer),
             {'metrics': metrics, 'state': single.state})

  def save():  # train's save block, at the step just trained
    trainer.save_checkpoint(tstate, step - 1, None)

  yield from _v033_driver.train_save_resume(
      mode, steps, save, carry, directory,
      lambda: jax_utils.unreplicate(tstate).optimizer)


def _meliad():
  return _meliad_run('train', os.path.abspath('no-checkpoints'))


RESUME = {'ble': _ble_run, 'dopamine': _dopamine_run,
          'hypernerf': _hypernerf_run, 'jax3d': _jax3d_run,
          'jax_rl': _jax_rl_run, 'jaxrl': _jaxrl_run, 'l2p': _l2p_resume,
          'meliad': _meliad_run, 'mipnerf': _mipnerf_resume,
          'nerfies': _nerfies_run, 'nested': _nested_resume,
          'scenic': _scenic_resume, 'score_sde': _score_sde_run,
          'ub': _ub_run, 'vit': _vit_resume}

# nerfies' and hypernerf's data pipelines and visualisation.
_NERF_STAND_INS = ('tensorflow', 'cv2', 'imageio', 'matplotlib', 'PIL', 'tqdm')

RECIPES = {
    # gym: the package's environment registration on import; tensorflow:
    # the wind-field reservoir's (the recipe's batches are synthetic); absl
    # and gin are real.
    'ble': (('.',), ('gym', 'tensorflow'), ('flax.metrics.tensorboard',),
            _ble),
    'vit': (('.',), ('tensorflow', 'tensorflow_datasets', 'tensorflow_text',
                     'clu', 'flaxformer', 'pandas', 'tqdm', 'einops'),
            (), _vit),
    'nested': (('.',), ('tensorflow', 'tensorflow_datasets', 'augment'),
               tuple(f'clu.{m}' for m in (  # clu.checkpoint: _clu_files
                   'deterministic_data', 'metric_writers',
                   'parameter_overview', 'periodic_actions', 'platform')),
               _nested),
    'l2p': (('.',), ('tensorflow', 'tensorflow_datasets',
                     'tensorflow_addons'),
            tuple(f'clu.{m}' for m in (  # clu.checkpoint: _clu_files
                'deterministic_data', 'metric_writers', 'parameter_overview',
                'periodic_actions', 'platform')),
            _l2p),
    'nerfies': (('.',), _NERF_STAND_INS, ('flax.metrics.tensorboard',),
                _nerfies),
    'hypernerf': (('.',), _NERF_STAND_INS, ('flax.metrics.tensorboard',),
                  _hypernerf),
    'mipnerf': (('.',), ('tensorflow', 'cv2', 'matplotlib', 'PIL'),
                ('flax.metrics.tensorboard',), _mipnerf),
    'scenic': (('.',), ('tensorflow', 'tensorflow_datasets', 'clu'), (),
               _scenic),
    # six: its evaluation module's (for Inception), not installed by tox.
    'score_sde': (('.',), ('tensorflow', 'tensorflow_gan', 'tensorflow_hub',
                           'tensorflow_datasets', 'PIL', 'six'),
                  ('flax.metrics.tensorboard',), _score_sde),
    # Environments, offline data sets and video: gym's spaces and wrappers,
    # d4rl's and the AWAC data's loaders, dm_control through dmc2gym; the
    # learners never call them (tensorflow_probability's distributions,
    # the policies', are real).
    'jaxrl': (('.',), ('gym', 'd4rl', 'dmc2gym', 'imageio', 'gdown'), (),
              _jaxrl),
    # tensorflow: saving.py's gfile, served by flax.io (_jax_rl_agents);
    # haiku's PRNGSequence, the agents' key sequence, is real, and so is
    # scipy's SLSQP in MPO's E-step (_gradient_as_float64).
    'jax_rl': (('.',), ('tensorflow',), (), _jax_rl),
    # tensorflow: checkpoint and summary calls the recipe does not make
    # (the bundle's gfile check: a stand-in's answer is true);
    # tensorflow_probability's distributions, SAC's policy's, are real. The
    # modules outside the corpus's paths (dopamine's TF agents, atari_lib,
    # the replay buffers) are stand-ins.
    'dopamine': (('.',), ('tensorflow',), tuple(
        f'dopamine.{m}' for m in (
            'agents', 'agents.dqn', 'agents.dqn.dqn_agent',
            'discrete_domains', 'discrete_domains.atari_lib',
            'replay_memory', 'replay_memory.circular_replay_buffer',
            'replay_memory.prioritized_replay_buffer')), _dopamine),
    # Data pipelines, evaluation metrics and logging: tensorflow (and its
    # gfile, served by _ub_main), tensorflow_datasets, clu, robustness
    # metrics, sklearn (OOD metrics); uncertainty_baselines' package (its
    # models, one served by _ub_main, and its datasets).
    'ub': (('baselines/jft',), ('tensorflow', 'tensorflow_datasets', 'clu',
                                'robustness_metrics', 'sklearn',
                                'uncertainty_baselines'), (), _ub),
    # NeSF's data pipelines (tensorflow, tensorflow_datasets, sunds, einops),
    # images and video (PIL, imageio, mediapy, skimage), progress bars
    # (etils' etqdm imports tqdm), tensorflow's types in its annotations
    # (tf.data.Dataset: _tf_dataset_a_class) and its summary writer's
    # tensorboard; the recipe's batches are synthetic. chex, gin and etils
    # are real.
    'jax3d': (('.',), ('tensorflow', 'tensorflow_datasets', 'sunds', 'einops',
                       'PIL', 'imageio', 'mediapy', 'skimage', 'tqdm'),
              ('flax.metrics.tensorboard',), _jax3d),
    # tensorflow: the trainer's gfile (served by flax.io: _meliad_trainer)
    # and the text data pipeline's; seqio: that pipeline's vocabularies;
    # clu: the metric writers (the recipe writes no summaries).
    'meliad': (('.',), ('tensorflow', 'seqio', 'clu'), (), _meliad),
}


def main(argv):
  directory, name, out = argv[1:4]
  paths, roots, modules, recipe = RECIPES[name]
  if '--no-shim' in argv[4:]:
    sys.meta_path.insert(0, _v033_driver.ShimBlocker())
  sys.meta_path.insert(0, _v033_driver.StandInFinder(roots, modules))
  for path in reversed(paths):
    sys.path.insert(0, os.path.abspath(os.path.join(directory, path)))
  os.chdir(directory)
  if '--resume' in argv[4:]:
    mode, checkpoints = argv[argv.index('--resume') + 1:][:2]
    _v033_driver.record(RESUME[name](mode, os.path.abspath(checkpoints)), out)
    return 0
  _v033_driver.record(recipe(), out)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
