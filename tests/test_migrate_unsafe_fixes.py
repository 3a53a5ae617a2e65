"""``migrate --unsafe-fixes``: fixes that rest on an assumption the report
states (ruff's *unsafe* applicability), applied only where asked.

The first: a generic tree walker. Checkpoint helpers in the shape of ub's
name the leaves of ``{'opt': optimizer, 'extra': ...}`` with a recursion of
their own that asks each node only its kind (``_traverse_with_names``), so
migrate cannot prove the dict is only taken apart as a tree there. Taking
the function for a generic walker, the flow migrates with the dict in
flax.optim's layout (``flax_optim_rules.legacy_tree``): the walker writes
the files it wrote. Without the option nothing changes and the report names
the fix; a function that reads a member of the Optimizer is no walker, with
the option too.

ub's own walker first turns a dataclass node into its state dict: there the
fix is proven (safe), applied without the option and noted with what is
proven; the walkers of the unsafe tests here read their node before that
(``if tree is None``), which keeps them outside what is proven. The modules
are small ones written here in the shape of ub's helpers.
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
  if tree is None:  # read before it is converted: not proven
    return
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

# ub's own walker (baselines/jft/checkpoint_utils.py): its first statement
# that reads the node replaces a dataclass by its state dict.
_UB_WALKER = '''def _traverse_with_names(tree):
  if dataclasses.is_dataclass(tree):
    tree = flax.serialization.to_state_dict(tree)
  if isinstance(tree, dict) or isinstance(tree, flax.core.FrozenDict):
    keys = sorted(tree.keys())
    for key in keys:
      for path, v in _traverse_with_names(tree[key]):
        yield (key + "/" + path).rstrip("/"), v
  else:
    yield "", tree
'''
_UB_LIB = (
    _CHECKPOINT_LIB[:_CHECKPOINT_LIB.index('def _traverse_with_names')] +
    _UB_WALKER +
    _CHECKPOINT_LIB[_CHECKPOINT_LIB.index('\n\ndef _flatten_with_names'):])


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

  _assert_trains_and_resumes_alike(tmp_path, project, migrated)


def _assert_trains_and_resumes_alike(tmp_path, project, migrated):
  """Both programs train to the same bits and write the same files, and
  each resumes from the file the other wrote."""
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


def test_a_walker_that_first_takes_the_state_dict_is_a_proven_fix(tmp_path):
  # Before: the same unsafe fix as any walker, hidden without the option
  # (nothing changed). The Optimizer and legacy_tree(...) are dataclasses
  # with equal state dicts (tests/test_legacy_tree.py), and the walker
  # meets nothing of either but that state dict: proven, applied by the
  # exact tier.
  assert _UB_LIB.count('def _traverse_with_names(tree):\n  if dataclasses') == 1
  project, migrated, results = _migrated(tmp_path, unsafe_fixes=False,
                                         library=_UB_LIB)
  project_tests._assert_fully_migrated(results)
  assert results['checkpoint_lib.py'].new == results['checkpoint_lib.py'].old
  new = results['train.py'].new.decode()
  assert ("checkpoint_lib.save_checkpoint({'opt': "
          "flax_optim_rules.legacy_tree(opt), 'extra': extra}, path)") in new
  assert ("opt, extra = flax_optim_rules.from_legacy_tree(opt, "
          "checkpoint['opt']), checkpoint['extra']") in new
  listed = list(results.values())
  assert not migrate.unsafe_fixes_applied(listed)
  assert not migrate.unsafe_fixes_held(listed)
  assert not migrate.unsafe_fixes_hidden(listed)
  (note,) = [n for n in results['train.py'].plan.notes
             if n.construct == 'optimizer_escape']
  assert note.line == 31 and note.reason.startswith(
      f'proven fix applied: {_WALKER} replaces a dataclass node by '
      'flax.serialization.to_state_dict(node) before anything else reads it')
  report = migrate.format_report(listed, [], 'exact')
  assert '## Unsafe fixes' not in report
  assert '- line 31 (optimizer_escape): `' in report
  assert note.reason in report
  _assert_trains_and_resumes_alike(tmp_path, project, migrated)


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


def _ub_walker(old='', new=''):
  assert not old or _UB_WALKER.count(old) == 1, old
  return 'import dataclasses\nimport flax\nimport jax\n\n\n' + (
      _UB_WALKER.replace(old, new))


_PRELUDE = ('  if dataclasses.is_dataclass(tree):\n'
            '    tree = flax.serialization.to_state_dict(tree)\n')
_KIND_TEST = ('  if isinstance(tree, dict) or isinstance(tree, '
              'flax.core.FrozenDict):\n')
_PROVEN, _UNSAFE = 'proven', 'unsafe'


@pytest.mark.parametrize('source, walks', [
    (_UB_LIB, _PROVEN),
    (_ub_walker(), _PROVEN),
    # It also names the module by its import (`from flax import ...`).
    (_ub_walker('flax.serialization.to_state_dict', 'serialization.'
                'to_state_dict').replace(
                    'import jax\n', 'from flax import serialization\n'),
     _PROVEN),
    (_CHECKPOINT_LIB, _UNSAFE),  # `if tree is None` reads it first
    # No prelude: the dict test first, a dataclass given back as a leaf.
    (_ub_walker(_PRELUDE, ''), _UNSAFE),
    # The prelude after the kind test: the dataclass meets it first.
    (_ub_walker(_PRELUDE + _KIND_TEST, _KIND_TEST + '  ' + _PRELUDE.replace(
        '\n  ', '\n    ')), _UNSAFE),
    # Read before the prelude.
    (_ub_walker(_PRELUDE, '  assert tree is not None\n' + _PRELUDE),
     _UNSAFE),
    # Converted by something else: the dataclass stays one.
    (_ub_walker('flax.serialization.to_state_dict(tree)',
                'jax.device_get(tree)'), _UNSAFE),
    # The conversion asked of something else than the node itself.
    (_ub_walker('to_state_dict(tree)', 'to_state_dict(tree or {})'), None),
    # More in the prelude's branch, or an `else`.
    (_ub_walker('    tree = flax', '    tree is None\n    tree = flax'),
     _UNSAFE),
    (_ub_walker(_PRELUDE, _PRELUDE + '  else:\n'
                '    tree = jax.device_get(tree)\n'), _UNSAFE),
    # The name bound again later (here by the loop).
    (_ub_walker('for key in keys:', 'for key in keys:\n      tree = '
                'jax.device_get(tree)'), _UNSAFE),
    # dataclasses.asdict is no tree function: no walker (as before).
    (_ub_walker('flax.serialization.to_state_dict(tree)',
                'dataclasses.asdict(tree)'), None),
    (_ITEMS_WALKER, _UNSAFE),  # entries by .items(), leaves returned
    # No recursion: it walks nothing.
    (_ITEMS_WALKER.replace('leaves(child, prefix + (key,))', '[child]'),
     None),
    # No kind test: every node would be taken apart alike, dicts or not.
    (_ITEMS_WALKER.replace('isinstance(node, (dict, flax.core.FrozenDict))',
                           'node'), None),
    # An entry read by a constant key: the Optimizer's own.
    (_ITEMS_WALKER.replace('return [(prefix, node)]',
                           "return [(prefix, node['target'])]"), None),
])
def test_the_walker_shape(source, walks):
  tree = ast.parse(source)
  names = _names.ModuleNames(tree, path='lib.py')
  function = [n for n in tree.body if isinstance(n, ast.FunctionDef)][0]
  parameter = _names.parameter_names(function)[0]
  walker = _tree_walkers.walker(function, names, parameter,
                                _legacy_trees._TREE_CALLS)
  assert (walker and (_PROVEN if walker.proven else _UNSAFE)) == walks, (
      walker)
  if walker is None:
    return
  assert walker.grounds.startswith(f'{function.name}() (lib.py:')
  # The unsafe ones keep their assumption word for word.
  assert (' is taken for a generic tree walker: ' in walker.grounds) == (
      not walker.proven)
  assert (' replaces a dataclass node by ' in walker.grounds) == (
      walker.proven)
