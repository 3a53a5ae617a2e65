"""``migrate`` of an optimizer kept in a dict saved or loaded as a tree.

Research code checkpointed ``{'opt': optimizer, 'extra': ...}`` itself: it
flattened the dict into ``.npz`` files and resumed by unflattening a file's
leaves into a template built the same way, then took the optimizer back out.
Migrated, both ends keep flax.optim's layout
(``flax_optim_rules.legacy_tree`` / ``from_legacy_tree``): the files the
migrated program writes are the original's, byte for byte, and each program
resumes from the other's files. Where the dict is used otherwise, the flow
stays whole with the reason. The projects are small modules written here in
the shapes ub's and scenic's checkpoint helpers have.
"""

import shutil

import numpy as np
import pytest
import test_migrate_project as project_tests

from compat.codemod import migrate

_CHECKPOINT_LIB = '''"""Saves and loads trees as .npz files, positionally."""
import jax
import numpy as np


def save_checkpoint(tree, path):
  leaves, _ = jax.tree_util.tree_flatten(tree)
  np.savez(path, *[np.asarray(x) for x in leaves])


def load_checkpoint(tree, path):
  if not tree:
    raise ValueError('a template is needed')
  with np.load(path) as data:
    values = list(data.values())
  treedef = jax.tree_util.tree_structure(tree)
  tree = jax.tree_util.tree_unflatten(treedef, values)
  return tree
'''

_TRAIN = '''"""Trains, checkpoints {'opt': ..., 'extra': ...} and resumes."""
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import optim

import checkpoint_lib


def loss(params, batch):
  return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)


@jax.jit
def step(opt, batch):
  grad = jax.grad(loss)(opt.target, batch)
  return opt.apply_gradient(grad)


def restore_params(opt, path):
  """A loader of files another program wrote: only .target/.state read."""
  def load(treedef, path):
    with np.load(path) as data:
      return treedef.unflatten(list(data.values()))
  checkpoint_tree = {'opt': opt, 'extra': {'seen': 0}}
  _, checkpoint_tree = jax.tree_util.tree_flatten(checkpoint_tree)
  checkpoint = load(checkpoint_tree, path)
  return checkpoint['opt'].target, int(checkpoint['opt'].state.step)


def train(params, batches, workdir, resume=False):
  opt = optim.Adam(learning_rate=0.01, beta2=0.99).create(params)
  extra = {'seen': 0}
  path = os.path.join(workdir, 'checkpoint.npz')
  if resume:
    checkpoint_tree = {'opt': opt, 'extra': extra}
    checkpoint = checkpoint_lib.load_checkpoint(checkpoint_tree, path)
    opt, extra = checkpoint['opt'], checkpoint['extra']
    extra = checkpoint.get('extra', extra)
  for batch in batches:
    opt = step(opt, batch)
  checkpoint_lib.save_checkpoint(dict(opt=opt, extra=extra), path)
  params, steps = restore_params(opt, path)
  return opt, params, steps
'''


def _migrated_project(tmp_path, train=_TRAIN):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  project_tests._write(project, {'checkpoint_lib.py': _CHECKPOINT_LIB,
                                 'train.py': train})
  results = project_tests._migrate_into(project, migrated)
  return project, migrated, results


def _npz(path) -> list:
  with np.load(path) as data:
    return [(name, value.dtype, value.tobytes())
            for name, value in data.items()]


def _train(directory, workdir, batches, resume):
  params, _ = project_tests._data()
  return project_tests._run(directory, 'train', params, batches,
                            str(workdir), resume)


def test_npz_checkpoints_keep_flax_optims_layout_at_both_ends(tmp_path):
  project, migrated, results = _migrated_project(tmp_path)
  project_tests._assert_fully_migrated(results)
  new = results['train.py'].new.decode()
  assert "{'opt': flax_optim_rules.legacy_tree(opt), 'extra': extra}" in new
  assert ("opt, extra = flax_optim_rules.from_legacy_tree(opt, "
          "checkpoint['opt']), checkpoint['extra']") in new
  assert 'dict(opt=flax_optim_rules.legacy_tree(opt), extra=extra)' in new
  assert results['checkpoint_lib.py'].new == results[
      'checkpoint_lib.py'].old  # the helpers only see trees

  _, batches = project_tests._data()
  first, rest = batches[:2], batches[2:]
  runs = {}
  for name, directory in (('old', project), ('new', migrated)):
    workdir = tmp_path / f'work_{name}'
    workdir.mkdir()
    runs[name, 1] = _train(directory, workdir, first, False)
    shutil.copy(workdir / 'checkpoint.npz', tmp_path / f'{name}_1.npz')
    runs[name, 2] = _train(directory, workdir, rest, True)
    shutil.copy(workdir / 'checkpoint.npz', tmp_path / f'{name}_2.npz')
  for index in (1, 2):
    # The same file, leaf for leaf and bit for bit.
    assert _npz(tmp_path / f'old_{index}.npz') == _npz(
        tmp_path / f'new_{index}.npz')
    old_opt, old_params, old_steps = runs['old', index]
    new_opt, new_params, new_steps = runs['new', index]
    project_tests._assert_same_bits(old_opt.target, new_opt.params)
    project_tests._assert_same_bits(old_opt.state, new_opt.opt_state)
    project_tests._assert_same_bits(old_params, new_params)
    assert old_steps == new_steps == int(new_opt.step) == 2 * index

  # Each program resumes from the file the other wrote.
  for reader, writer in (('new', 'old'), ('old', 'new')):
    directory = migrated if reader == 'new' else project
    workdir = tmp_path / f'{reader}_reads_{writer}'
    workdir.mkdir()
    shutil.copy(tmp_path / f'{writer}_1.npz', workdir / 'checkpoint.npz')
    _train(directory, workdir, rest, True)
    assert _npz(workdir / 'checkpoint.npz') == _npz(
        tmp_path / f'{reader}_2.npz')


_LOAD = ("    checkpoint = checkpoint_lib.load_checkpoint(checkpoint_tree, "
         "path)\n")
_UNCHANGED_CASES = {
    # The optimizer read back is stepped where it is read.
    'entry_used_as_optimizer': (
        "    opt, extra = checkpoint['opt'], checkpoint['extra']\n",
        "    opt = checkpoint['opt'].apply_gradient(opt.target)\n",
        'uses it otherwise than as `.target` or `.state`'),
    # The dict goes where migrate does not see it taken only as a tree.
    'dict_passed_elsewhere': (
        _LOAD, _LOAD + "    print(len(checkpoint_tree))\n",
        'is passed to `len(...)`'),
    # A helper reads the optimizer's entry and steps it.
    'helper_steps_the_entry': (
        "  treedef = jax.tree_util.tree_structure(tree)\n",
        "  tree['opt'].apply_gradient(tree['opt'].target)\n"
        "  treedef = jax.tree_util.tree_structure(tree)\n",
        'in load_checkpoint()'),
    # The optimizer's entry read with .get.
    'entry_read_with_get': (
        "    extra = checkpoint.get('extra', extra)\n",
        "    opt = checkpoint.get('opt', opt)\n",
        'used here as `checkpoint.get`'),
    # A helper's tree function stops at nodes it chooses (``is_leaf``):
    # its leaves may be the optimizer itself.
    'tree_function_given_is_leaf': (
        "  leaves, _ = jax.tree_util.tree_flatten(tree)\n",
        "  leaves, _ = jax.tree_util.tree_flatten(\n"
        "      tree, is_leaf=lambda x: hasattr(x, 'apply_gradient'))\n",
        'in save_checkpoint(): `leaves` (made from the dict'),
    # A closure reads the dict: its uses are not followed.
    'dict_read_in_a_closure': (
        "    opt, extra = checkpoint['opt'], checkpoint['extra']\n",
        "    opt, extra = checkpoint['opt'], checkpoint['extra']\n"
        "    show = lambda: checkpoint_tree['opt'].apply_gradient(None)\n",
        'read inside `lambda`, nested here'),
    # The template is stepped between the dict and the read back.
    'template_rebound_between': (
        _LOAD, "    opt = step(opt, batches[0])\n" + _LOAD,
        '`opt` is assigned between the dict'),
    # What the entry is read back into is not always an optimizer.
    'read_back_into_another_name': (
        "    opt, extra = checkpoint['opt'], checkpoint['extra']\n",
        "    restored = None\n"
        "    restored, extra = checkpoint['opt'], checkpoint['extra']\n",
        '`restored` takes the optimizer read back'),
    # The dict is kept where it is built: its readers are not known.
    'dict_returned': (
        "  return opt, params, steps\n",
        "  return {'opt': opt}, params, steps\n",
        'not only as a tree'),
}


@pytest.mark.parametrize('case', sorted(_UNCHANGED_CASES))
def test_a_dict_used_otherwise_keeps_the_flow_naming_why(tmp_path, case):
  old, new, reason = _UNCHANGED_CASES[case]
  files = {'train.py': _TRAIN, 'checkpoint_lib.py': _CHECKPOINT_LIB}
  name = 'checkpoint_lib.py' if old in _CHECKPOINT_LIB else 'train.py'
  assert files[name].count(old) == 1, old
  files[name] = files[name].replace(old, new)
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  project_tests._write(project, files)
  results = project_tests._migrate_into(project, migrated)
  project_tests._assert_unchanged(results)
  reasons = '\n'.join(
      left.reason for left in results['train.py'].plan.leftovers)
  assert reason in reasons, reasons


def test_helpers_of_a_module_no_dotted_name_is_unique_to_are_read(tmp_path):
  # Two directories migrated together, each with a lib.py: neither file
  # has a dotted name of its own, and the helpers it calls by name are
  # still its own module's functions.
  train = _TRAIN.replace('import checkpoint_lib\n', '').replace(
      'checkpoint_lib.', '')
  single = _CHECKPOINT_LIB.replace('import jax\nimport numpy as np\n', '')
  first, second = tmp_path / 'first', tmp_path / 'second'
  project_tests._write(first, {'lib.py': train + single})
  project_tests._write(second, {'lib.py': 'VALUE = 1\n'})
  sources, results = migrate.migrate_paths([str(first), str(second)])
  result = results[sources.index(str(first / 'lib.py'))]
  assert not result.plan.leftovers, result.plan.leftovers
  assert b'flax_optim_rules.from_legacy_tree(opt, checkpoint' in result.new
