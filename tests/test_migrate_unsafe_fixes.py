"""``migrate --unsafe-fixes``: fixes that rest on an assumption the report
states (ruff's *unsafe* applicability), applied only where asked.

The first: a generic tree walker. ub's checkpoint helpers name the leaves
of ``{'opt': optimizer, 'extra': ...}`` with a recursion of their own that
asks each node only its kind (``_traverse_with_names``), so migrate cannot
prove the dict is only taken apart as a tree there. Taking the function for
a generic walker, the flow migrates with the dict in flax.optim's layout
(``flax_optim_rules.legacy_tree``): the walker writes the files it wrote.
Without the option nothing changes and the report names the fix; a function
that reads a member of the Optimizer is no walker, with the option too. The
modules are small ones written here in the shape of ub's helpers.
"""

import ast
import os
import shutil

import numpy as np
import pytest
import test_migrate_project as project_tests

from compat.codemod import _legacy_trees
from compat.codemod import _names
from compat.codemod import _tree_walkers
from compat.codemod import migrate

_CHECKPOINT_LIB = '''"""Saves named leaves to .npz, loads them by place."""
import dataclasses

import flax
import jax
import numpy as np


def _traverse_with_names(tree):
  if dataclasses.is_dataclass(tree):
    tree = flax.serialization.to_state_dict(tree)
  if isinstance(tree, (dict, flax.core.FrozenDict)):
    for key in sorted(tree.keys()):
      for path, leaf in _traverse_with_names(tree[key]):
        yield (key + '/' + path).rstrip('/'), leaf
  else:
    yield '', tree


def _flatten_with_names(tree):
  values, treedef = jax.tree_util.tree_flatten(tree)
  tokens = treedef.unflatten(list(range(len(values))))
  names, order = zip(*_traverse_with_names(tokens))
  inverse = np.argsort(order)
  return [(names[i], value) for i, value in zip(inverse, values)]


def save_checkpoint(tree, path):
  named = {name: np.asarray(value)
           for name, value in _flatten_with_names(tree)}
  np.savez(path, **named)


def load_checkpoint(tree, path):
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
from flax import optim

import checkpoint_lib


def loss(params, batch):
  return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)


@jax.jit
def step(opt, batch):
  grad = jax.grad(loss)(opt.target, batch)
  return opt.apply_gradient(grad)


def train(params, batches, workdir, resume=False):
  opt = optim.Adam(learning_rate=0.01, beta2=0.99).create(params)
  extra = {'seen': 0}
  path = os.path.join(workdir, 'checkpoint.npz')
  if resume:
    checkpoint_tree = {'opt': opt, 'extra': extra}
    checkpoint = checkpoint_lib.load_checkpoint(checkpoint_tree, path)
    opt, extra = checkpoint['opt'], checkpoint['extra']
  for batch in batches:
    opt = step(opt, batch)
  checkpoint_lib.save_checkpoint({'opt': opt, 'extra': extra}, path)
  return opt
'''

_WALKER = '_traverse_with_names() (checkpoint_lib.py:9)'


def _migrated(tmp_path, unsafe_fixes, library=_CHECKPOINT_LIB):
  """The project written, migrated as one tree into ``migrated``:
  ``(project, migrated, {name: FileResult})``."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  project_tests._write(project, {'checkpoint_lib.py': library,
                                 'train.py': _TRAIN})
  cwd = os.getcwd()
  os.chdir(project)  # the paths the report shows: relative, short
  try:
    sources, results = migrate.migrate_paths(['.'],
                                             unsafe_fixes=unsafe_fixes)
  finally:
    os.chdir(cwd)
  named = {}
  for path, result in zip(sources, results):
    name = os.path.relpath(path, '.')
    (migrated / name).parent.mkdir(parents=True, exist_ok=True)
    (migrated / name).write_bytes(result.new)
    named[name] = result
  return project, migrated, named


def _npz(path) -> list:
  with np.load(path) as data:
    return [(name, value.dtype, value.tobytes())
            for name, value in data.items()]


def _train(directory, workdir, batches, resume):
  params, _ = project_tests._data()
  return project_tests._run(directory, 'train', params, batches,
                            str(workdir), resume)


def test_without_the_option_nothing_changes_and_the_fix_is_named(tmp_path):
  _, _, results = _migrated(tmp_path, unsafe_fixes=False)
  project_tests._assert_unchanged(results)
  train = results['train.py']
  (escape,) = [l for l in train.plan.leftovers
               if l.construct == 'optimizer_escape']
  assert escape.line == 31  # the save through the walker
  assert 'an unsafe fix is available, hidden without --unsafe-fixes' in (
      escape.reason)
  assert f'{_WALKER} is taken for a generic tree walker' in escape.reason
  listed = list(results.values())
  summary = migrate.format_summary(listed, [])
  assert summary.endswith(
      '1 hidden fix can be enabled with the `--unsafe-fixes` option (each '
      'rests on the assumption named above)'), summary
  report = migrate.format_report(listed, [], 'exact')
  assert '## Unsafe fixes' in report
  assert (f"- train.py:31: `checkpoint_lib.save_checkpoint({{'opt': opt, "
          f"'extra': extra}}, path)`: {_WALKER} is taken for a generic tree "
          'walker') in report


def test_with_the_option_the_flow_migrates_and_keeps_the_files(tmp_path):
  project, migrated, results = _migrated(tmp_path, unsafe_fixes=True)
  project_tests._assert_fully_migrated(results)
  assert results['checkpoint_lib.py'].new == results['checkpoint_lib.py'].old
  new = results['train.py'].new.decode()
  assert ("checkpoint_lib.save_checkpoint({'opt': "
          "flax_optim_rules.legacy_tree(opt), 'extra': extra}, path)") in new
  (applied,) = migrate.unsafe_fixes_applied(list(results.values()))
  assert applied[0] == 'train.py' and applied[1].line == 31
  assert applied[1].reason.startswith(
      f'{_WALKER} is taken for a generic tree walker')
  summary = migrate.format_summary(list(results.values()), [])
  assert f'train.py:31: unsafe fix applied: {_WALKER}' in summary
  assert 'hidden fix' not in summary

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
    # The walker wrote the same file: names, order and bits.
    assert _npz(tmp_path / f'old_{index}.npz') == _npz(
        tmp_path / f'new_{index}.npz')
    old, new = runs['old', index], runs['new', index]
    project_tests._assert_same_bits(old.target, new.params)
    project_tests._assert_same_bits(old.state, new.opt_state)
    assert int(old.state.step) == int(new.step) == 2 * index
  # Each program resumes from the file the other wrote.
  for reader, writer in (('new', 'old'), ('old', 'new')):
    directory = migrated if reader == 'new' else project
    workdir = tmp_path / f'{reader}_reads_{writer}'
    workdir.mkdir()
    shutil.copy(tmp_path / f'{writer}_1.npz', workdir / 'checkpoint.npz')
    _train(directory, workdir, rest, True)
    assert _npz(workdir / 'checkpoint.npz') == _npz(
        tmp_path / f'{reader}_2.npz')


_NOT_WALKERS = {
    # It reads the Optimizer's params by name: a TrainState has none.
    'reads_target': (
        '    tree = flax.serialization.to_state_dict(tree)\n',
        "    tree = {'target': tree.target}\n"),
    # It asks a node for a member of the Optimizer.
    'probes_a_member': (
        '  if dataclasses.is_dataclass(tree):\n',
        "  if hasattr(tree, 'apply_gradient'):\n"),
    # It tells a node by its class's name: the two kinds of node differ.
    'tests_the_class_name': (
        '  if dataclasses.is_dataclass(tree):\n',
        "  if type(tree).__name__ == 'Optimizer':\n"),
    # It hands a node to code migrate does not see.
    'hands_a_node_elsewhere': (
        "    yield '', tree\n", "    yield '', repr(tree)\n"),
}


@pytest.mark.parametrize('case', sorted(_NOT_WALKERS))
def test_a_function_that_is_no_walker_keeps_the_flow_with_the_option(
    tmp_path, case):
  old, new = _NOT_WALKERS[case]
  assert _CHECKPOINT_LIB.count(old) == 1, old
  library = _CHECKPOINT_LIB.replace(old, new)
  _, _, results = _migrated(tmp_path, unsafe_fixes=True, library=library)
  project_tests._assert_unchanged(results)
  reasons = '\n'.join(l.reason for l in results['train.py'].plan.leftovers)
  assert 'in _traverse_with_names()' in reasons, reasons
  assert 'unsafe fix' not in reasons and 'generic tree walker' not in reasons
  assert not migrate.unsafe_fixes_applied(list(results.values()))


def test_the_command_line_takes_the_option(tmp_path, capsys):
  project = tmp_path / 'project'
  project_tests._write(project, {'checkpoint_lib.py': _CHECKPOINT_LIB,
                                 'train.py': _TRAIN})
  assert migrate.main([str(project), '--out', str(tmp_path / 'a')]) == 1
  hidden = capsys.readouterr().out
  assert '1 hidden fix can be enabled with the `--unsafe-fixes` option' in (
      hidden)
  assert migrate.main([str(project), '--out', str(tmp_path / 'b'),
                       '--unsafe-fixes']) == 0
  applied = capsys.readouterr().out
  assert 'train.py:31: unsafe fix applied: _traverse_with_names()' in applied
  assert b'legacy_tree(opt)' in (tmp_path / 'b' / 'train.py').read_bytes()


def test_an_enabled_fix_whose_flow_another_link_holds_is_not_applied(
    tmp_path):
  train = _TRAIN.replace('  return opt\n', '  kept = [opt]\n  return kept[0]\n')
  project = tmp_path / 'project'
  project_tests._write(project, {'checkpoint_lib.py': _CHECKPOINT_LIB,
                                 'train.py': train})
  _, results = migrate.migrate_paths([str(project)], unsafe_fixes=True)
  assert all(r.new == r.old for r in results)
  assert not migrate.unsafe_fixes_applied(results)
  (held,) = migrate.unsafe_fixes_held(results)
  assert held[1].line == 31
  report = migrate.format_report(results, [], 'exact')
  assert 'Enabled, not applied: the flow each is in stays as it was' in report
  assert 'hidden fix' not in migrate.format_summary(results, [])


_ITEMS_WALKER = '''
import flax


def leaves(node, prefix=()):
  if isinstance(node, (dict, flax.core.FrozenDict)):
    return [leaf for key, child in node.items()
            for leaf in leaves(child, prefix + (key,))]
  return [(prefix, node)]
'''


@pytest.mark.parametrize('source, walks', [
    (_CHECKPOINT_LIB, True),
    (_ITEMS_WALKER, True),  # entries by .items(), leaves returned
    # No recursion: it walks nothing.
    (_ITEMS_WALKER.replace('leaves(child, prefix + (key,))', '[child]'),
     False),
    # No kind test: every node would be taken apart alike, dicts or not.
    (_ITEMS_WALKER.replace('isinstance(node, (dict, flax.core.FrozenDict))',
                           'node'), False),
    # An entry read by a constant key: the Optimizer's own.
    (_ITEMS_WALKER.replace('return [(prefix, node)]',
                           "return [(prefix, node['target'])]"), False),
])
def test_the_walker_shape(source, walks):
  tree = ast.parse(source)
  names = _names.ModuleNames(tree, path='lib.py')
  function = [n for n in tree.body if isinstance(n, ast.FunctionDef)][0]
  parameter = _names.parameter_names(function)[0]
  assumption = _tree_walkers.walker_assumption(
      function, names, parameter, _legacy_trees._TREE_CALLS)
  assert (assumption is not None) == walks, assumption
  if walks:
    assert assumption.startswith(f'{function.name}() (lib.py:')
