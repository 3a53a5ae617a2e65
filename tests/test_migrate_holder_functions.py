"""``migrate`` where an optimizer goes into a project function and comes
back out through a holder the function returns (ub's checkpoint helpers).

The shape of uncertainty-baselines' ``checkpoint_utils``: a dataclass
``CheckpointData`` whose ``optimizer`` field is annotated
``flax.optim.Optimizer``; ``maybe_load_checkpoint(init_optimizer=...)``
restores ``{'opt': init_optimizer, 'extra': ...}`` from an .npz by the
tree's structure and returns a ``CheckpointData``; the training script
rebinds its name to the field read back (``opt_cpu =
checkpoint_data.optimizer``), replaces the target, steps with a learning
rate per step, fetches the optimizer to the host with ``jax.tree.map``
and saves it through the holder and the generic walker of
``test_migrate_unsafe_fixes`` (so the whole flow needs
``--unsafe-fixes``). The modules are small ones written here; migrated,
the program trains to the same bits, writes the same files, and each
program resumes from the other's.
"""

import shutil

import test_migrate_project as project_tests
import test_migrate_unsafe_fixes as unsafe_tests

from compat.codemod import migrate

_HOLDER_HELPERS = unsafe_tests._CHECKPOINT_LIB + '''

@dataclasses.dataclass
class CheckpointData:
  optimizer: flax.optim.Optimizer
  seen: int


def maybe_load_checkpoint(init_optimizer: flax.optim.Optimizer, path,
                          resume):
  optimizer = init_optimizer
  extra = dict(seen=0)
  if resume:
    checkpoint_tree = {'opt': init_optimizer, 'extra': extra}
    checkpoint = load_checkpoint(checkpoint_tree, path)
    optimizer, extra = checkpoint['opt'], checkpoint['extra']
  return CheckpointData(optimizer=optimizer, seen=int(extra['seen']))


def checkpoint_trained_model(checkpoint_data: CheckpointData, path):
  tree = dict(opt=checkpoint_data.optimizer,
              extra=dict(seen=checkpoint_data.seen))
  save_checkpoint(tree, path)
'''.replace('import flax\n', 'import flax\nimport flax.optim\n', 1)

_HOLDER_TRAIN = '''"""Resumes through the helpers' holder, trains, saves."""
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np

import checkpoint_utils


def loss(params, batch):
  return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)


@jax.jit
def update_fn(opt, batch, lr):
  grad = jax.grad(loss)(opt.target, batch)
  return opt.apply_gradient(grad, learning_rate=lr)


def train(params, batches, workdir, resume=False):
  opt_def = flax.optim.Momentum(learning_rate=0.1, beta=0.9)
  opt_cpu = jax.jit(opt_def.create)(params)
  path = os.path.join(workdir, 'checkpoint.npz')
  checkpoint_data = checkpoint_utils.maybe_load_checkpoint(
      init_optimizer=opt_cpu, path=path, resume=resume)
  opt_cpu = checkpoint_data.optimizer
  opt_cpu = opt_cpu.replace(
      target=jax.tree_util.tree_map(lambda x: x * 1.0, opt_cpu.target))
  first_step = int(opt_cpu.state.step)
  opt = opt_cpu
  seen = checkpoint_data.seen
  for index, batch in enumerate(batches):
    opt = update_fn(opt, batch, 0.05 / (first_step + index + 1))
    seen += 1
  opt_cpu = jax.tree.map(np.asarray, opt)
  checkpoint_data = checkpoint_utils.CheckpointData(
      optimizer=opt_cpu, seen=seen)
  checkpoint_utils.checkpoint_trained_model(checkpoint_data, path)
  return opt
'''

_FILES = {'checkpoint_utils.py': _HOLDER_HELPERS, 'train.py': _HOLDER_TRAIN}


def _migrated(tmp_path, files, unsafe_fixes):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  project_tests._write(project, files)
  sources, results = migrate.migrate_paths([str(project)],
                                           unsafe_fixes=unsafe_fixes)
  named = {}
  for path, result in zip(sources, results):
    name = path[len(str(project)) + 1:]
    (migrated / name).parent.mkdir(parents=True, exist_ok=True)
    (migrated / name).write_bytes(result.new)
    named[name] = result
  return project, migrated, named


def _assert_trains_and_resumes_alike(tmp_path, project, migrated):
  """Both programs train two steps, save, resume and train two more: the
  same bits and files; each resumes from the file the other wrote."""
  _, batches = project_tests._data()
  first, rest = batches[:2], batches[2:]
  runs = {}
  for name, directory in (('old', project), ('new', migrated)):
    workdir = tmp_path / f'work_{name}'
    workdir.mkdir()
    runs[name, 1] = unsafe_tests._train(directory, workdir, first, False)
    shutil.copy(workdir / 'checkpoint.npz', tmp_path / f'{name}_1.npz')
    runs[name, 2] = unsafe_tests._train(directory, workdir, rest, True)
    shutil.copy(workdir / 'checkpoint.npz', tmp_path / f'{name}_2.npz')
  for index in (1, 2):
    assert unsafe_tests._npz(tmp_path / f'old_{index}.npz') == (
        unsafe_tests._npz(tmp_path / f'new_{index}.npz'))
    old, new = runs['old', index], runs['new', index]
    project_tests._assert_same_bits(old.target, new.params)
    assert int(old.state.step) == int(new.step) == 2 * index
  for reader, writer in (('new', 'old'), ('old', 'new')):
    directory = migrated if reader == 'new' else project
    workdir = tmp_path / f'{reader}_reads_{writer}'
    workdir.mkdir()
    shutil.copy(tmp_path / f'{writer}_1.npz', workdir / 'checkpoint.npz')
    unsafe_tests._train(directory, workdir, rest, True)
    assert unsafe_tests._npz(workdir / 'checkpoint.npz') == (
        unsafe_tests._npz(tmp_path / f'{reader}_2.npz'))


def test_without_the_option_the_flow_stays_and_names_the_walker(tmp_path):
  _, _, results = _migrated(tmp_path, _FILES, unsafe_fixes=False)
  project_tests._assert_unchanged(results)
  reasons = '\n'.join(l.reason for l in results['checkpoint_utils.py'].plan
                      .leftovers)
  assert 'an unsafe fix is available, hidden without --unsafe-fixes' in (
      reasons)
  assert 'not provably' not in reasons, reasons


def test_into_a_project_function_and_out_through_its_holder(tmp_path):
  # Before: `jax.tree.map` (jax's newer spelling of tree_util.tree_map) was
  # not known to keep its tree's classes, so `opt_cpu` held a value "not
  # provably an optimizer", the holder's field with it, and the flow into
  # maybe_load_checkpoint() and out through CheckpointData stayed.
  project, migrated, results = _migrated(tmp_path, _FILES, unsafe_fixes=True)
  project_tests._assert_fully_migrated(results)
  helpers = results['checkpoint_utils.py'].new.decode()
  assert 'optimizer: train_state.TrainState\n' in helpers
  assert ("checkpoint_tree = {'opt': flax_optim_rules.legacy_tree("
          "init_optimizer), 'extra': extra}") in helpers
  assert ("optimizer, extra = flax_optim_rules.from_legacy_tree("
          "init_optimizer, checkpoint['opt']), checkpoint['extra']") in helpers
  assert 'opt=flax_optim_rules.legacy_tree(checkpoint_data.optimizer),' in (
      helpers)
  train = results['train.py'].new.decode()
  assert '  opt_cpu = checkpoint_data.optimizer\n' in train
  assert ('opt_cpu = opt_cpu.replace(params=jax.tree_util.tree_map('
          'lambda x: x * 1.0, opt_cpu.params))') in train
  assert 'first_step = int(opt_cpu.step)' in train
  assert 'opt_cpu = jax.tree.map(np.asarray, opt)' in train
  assert 'optax.tree_utils.tree_set(opt.opt_state, learning_rate=lr)' in (
      train)
  _assert_trains_and_resumes_alike(tmp_path, project, migrated)


# bit_deterministic's shape: `checkpoint` names the tree loaded on resume
# first, then, in the loop, the dict a pool's thread saves.
_NAME_REUSED = unsafe_tests._TRAIN.replace(
    'import os\n', 'import multiprocessing.pool\nimport os\n').replace(
        "  for batch in batches:\n    opt = step(opt, batch)\n"
        "  checkpoint_lib.save_checkpoint({'opt': opt, 'extra': extra}, "
        'path)\n',
        '  pool = multiprocessing.pool.ThreadPool(1)\n'
        '  for batch in batches:\n'
        '    opt = step(opt, batch)\n'
        "    checkpoint = {'opt': opt, 'extra': extra}\n"
        '    writer = pool.apply_async(checkpoint_lib.save_checkpoint,\n'
        '                              (checkpoint, path))\n'
        '    writer.get()\n'
        '  pool.close()\n')


def test_a_name_bound_to_the_loaded_tree_then_to_the_saved_dict(tmp_path):
  # Before: `checkpoint['opt']` (the loaded tree, read before the loop) was
  # taken for a read of the dict the loop builds later, where `opt` may
  # name another value: the flow stayed.
  assert _NAME_REUSED.count('pool.apply_async') == 1
  files = {'checkpoint_lib.py': unsafe_tests._CHECKPOINT_LIB,
           'train.py': _NAME_REUSED}
  project, migrated, results = _migrated(tmp_path, files, unsafe_fixes=True)
  project_tests._assert_fully_migrated(results)
  train = results['train.py'].new.decode()
  assert ("    checkpoint = {'opt': flax_optim_rules.legacy_tree(opt), "
          "'extra': extra}\n") in train
  assert ("    opt, extra = flax_optim_rules.from_legacy_tree(opt, "
          "checkpoint['opt']), checkpoint['extra']\n") in train
  _, batches = project_tests._data()
  for name, directory in (('old', project), ('new', migrated)):
    workdir = tmp_path / f'work_{name}'
    workdir.mkdir()
    unsafe_tests._train(directory, workdir, batches[:2], False)
    unsafe_tests._train(directory, workdir, batches[2:], True)
    shutil.copy(workdir / 'checkpoint.npz', tmp_path / f'{name}.npz')
  assert unsafe_tests._npz(tmp_path / 'old.npz') == unsafe_tests._npz(
      tmp_path / 'new.npz')


def test_a_read_before_the_dict_in_the_same_loop_keeps_the_flow(tmp_path):
  # The loop's next turn reads the dict the last one built: `opt` has
  # been stepped since, so the read is no copy of what `opt` names there.
  train = _NAME_REUSED.replace(
      '    opt = step(opt, batch)\n',
      "    if batch is not batches[0]:\n"
      "      opt, extra = checkpoint['opt'], checkpoint['extra']\n"
      '    opt = step(opt, batch)\n')
  files = {'checkpoint_lib.py': unsafe_tests._CHECKPOINT_LIB,
           'train.py': train}
  _, _, results = _migrated(tmp_path, files, unsafe_fixes=True)
  project_tests._assert_unchanged(results)
  reasons = '\n'.join(l.reason for l in results['train.py'].plan.leftovers)
  assert "`checkpoint['opt']` is read back where `opt` may name another " \
      'value than the one put into the dict' in reasons, reasons


def test_script_directories_given_as_separate_paths_keep_their_own_helpers(
    tmp_path):
  # ub's corpus row names two directories (baselines/jft and
  # experimental/multimodal), each with its own checkpoint_utils.py that
  # its scripts import as `import checkpoint_utils`. Before: under either
  # path the module's only name was `checkpoint_utils`, which two files
  # share, so no call of it linked and every flow through it stayed. Now
  # each also has its name under the directory holding both paths, as one
  # scan of that directory would give it.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  helpers = project_tests._SCRIPT_DIRECTORY_HELPERS
  main = project_tests._SCRIPT_DIRECTORY_MAIN
  project_tests._write(project, {
      'exp_a/helpers.py': helpers, 'exp_a/main.py': main,
      'exp_b/helpers.py': helpers.replace('0.01', '0.02'),
      'exp_b/main.py': main})
  sources, results = migrate.migrate_paths(
      [str(project / 'exp_a'), str(project / 'exp_b')])
  named = {}
  for path, result in zip(sources, results):
    name = path[len(str(project)) + 1:]
    (migrated / name).parent.mkdir(parents=True, exist_ok=True)
    (migrated / name).write_bytes(result.new)
    named[name] = result
  assert sorted(named) == ['exp_a/helpers.py', 'exp_a/main.py',
                           'exp_b/helpers.py', 'exp_b/main.py']
  project_tests._assert_fully_migrated(named)
  for directory in ('exp_a', 'exp_b'):
    assert b'train_state.TrainState.create(' in named[
        f'{directory}/helpers.py'].new
    project_tests._assert_trains_alike(project / directory,
                                       migrated / directory, 'main')
