"""``flax_optim_rules.legacy_tree``: a TrainState as flax.optim's pytree.

Research code saved ``{'opt': optimizer, ...}`` as ``.npz`` files (leaves in
flatten order, named by the state dict's keys) and loaded them back by
unflattening into a template. The reference is real flax 0.5.3: the
Optimizer objects it built (``golden/objects.json``: key paths, order,
dtypes and shapes; ``objects.npz``: its leaves after one step) and the
checkpoints it wrote (``tests/checkpoints``).
"""

import dataclasses
import functools
import pathlib
import pickle
import sys
import warnings

import chex
from flax import jax_utils
from flax import serialization
from flax.training import train_state
from golden import object_cases
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_legacy_objects as objects

import flax_optim_rules
import legacy_optim.catalogue

sys.path.insert(0, str(pathlib.Path(__file__).parent / 'checkpoints'))
import fixture_lib as fx  # noqa: E402

# One rule each: the cases a TrainState of one flax_optim_rules transform
# holds (MultiOptimizer, WeightNorm and focus have no such layout).
CASES = [case for case in object_cases.CASES
         if case['focus'] is None and
         case['optimizer'].get('algo') not in (
             None, 'WeightNorm', 'MultiOptimizer')]


def _rule(case):
  spec = case['optimizer']
  return flax_optim_rules.rule_named(spec['algo'])(**spec['kwargs'])


def _as_jax(tree):
  return jax.tree_util.tree_map(jnp.asarray, tree)


def _created(case):
  return train_state.TrainState.create(
      apply_fn=None, params=_as_jax(object_cases.params(case)),
      tx=_rule(case))


@functools.cache
def _stepped(name):
  case = object_cases.CASES_BY_NAME[name]
  return _created(case).apply_gradients(
      grads=_as_jax(object_cases.grads(case, 0)))


def _without_node_types(form):
  """Paths, dtypes and shapes: the class names are this package's."""
  return {part: [{k: v for k, v in entry.items() if k != 'node_types'}
                 for entry in entries] for part, entries in form.items()}


def test_every_single_rule_algorithm_is_covered():
  assert {case['optimizer']['algo'] for case in CASES} == {
      'GradientDescent', 'Momentum', 'Adam', 'AdaBelief', 'Adadelta',
      'Adafactor', 'Adagrad', 'LAMB', 'LARS', 'RMSProp'}


@pytest.mark.parametrize('jit', [False, True], ids=['eager', 'jit'])
@pytest.mark.parametrize('case', CASES, ids=objects._ids)
def test_tree_is_flax_053s_optimizer_pytree(case, jit):
  make = jax.jit(flax_optim_rules.legacy_tree) if jit else (
      flax_optim_rules.legacy_tree)
  tree = make(_stepped(case['name']))
  recorded = objects._recorded(case)['structure']
  objects.assert_same_form(_without_node_types(recorded),
                           _without_node_types(objects.neutral(tree)))
  # flax 0.5.3's values after one step, leaf for leaf in its order.
  chex.assert_trees_all_close(
      jax.tree_util.tree_leaves(tree), objects._arrays(case, 'stepped'),
      rtol=objects.RTOL, atol=objects.ATOL)
  assert tree.state.step.dtype == jnp.int32


@pytest.mark.parametrize('case', CASES, ids=objects._ids)
def test_flax_053_leaves_load_through_the_tree_into_a_train_state(case):
  flax_leaves = objects._arrays(case, 'stepped')
  template = _created(case)
  loaded = jax.tree_util.tree_structure(
      flax_optim_rules.legacy_tree(template)).unflatten(flax_leaves)
  restored = flax_optim_rules.from_legacy_tree(template, loaded)

  # Every value of the file where flax.optim had it, untouched.
  chex.assert_trees_all_equal(
      jax.tree_util.tree_leaves(flax_optim_rules.legacy_tree(restored)),
      flax_leaves)
  # And in the Optax fields a TrainState stepped here holds it in.
  stepped = _stepped(case['name'])
  assert int(restored.step) == 1
  chex.assert_trees_all_close(restored.params, stepped.params,
                              rtol=objects.RTOL, atol=objects.ATOL)
  chex.assert_trees_all_close(restored.opt_state, stepped.opt_state,
                              rtol=objects.RTOL, atol=objects.ATOL)
  chex.assert_trees_all_equal_structs(restored.opt_state, stepped.opt_state)


def _named_leaves(tree):
  """``(name, leaf)`` in flatten order, each named by its state-dict keys:
  how research code's ``.npz`` checkpoints named them."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  tokens = serialization.to_state_dict(treedef.unflatten(range(len(leaves))))
  names = {}

  def visit(node, path):
    if isinstance(node, dict):
      for key, child in node.items():
        visit(child, path + (key,))
    else:
      names[node] = '/'.join(path)

  visit(tokens, ())
  return [(names[i], leaf) for i, leaf in enumerate(leaves)]


@pytest.mark.parametrize('case', CASES, ids=objects._ids)
def test_npz_names_are_flax_053s(case, tmp_path):
  tree = flax_optim_rules.legacy_tree(_stepped(case['name']))
  named = _named_leaves({'opt': tree})
  recorded = objects._recorded(case)['structure']['leaves']
  assert [name for name, _ in named] == [
      '/'.join(['opt'] + [str(key) for _, key in leaf['path']])
      for leaf in recorded]

  # Saved as such a file and loaded back into the tree's template.
  path = tmp_path / 'checkpoint.npz'
  np.savez(path, **dict(named))
  with np.load(path) as data:
    values = list(data.values())
  template = {'opt': flax_optim_rules.legacy_tree(_created(case))}
  loaded = jax.tree_util.tree_structure(template).unflatten(values)
  restored = flax_optim_rules.from_legacy_tree(_created(case), loaded['opt'])
  chex.assert_trees_all_equal(
      jax.device_get(restored.opt_state),
      jax.device_get(_stepped(case['name']).opt_state))
  assert int(restored.step) == 1


@pytest.mark.parametrize('name', fx.one_rule_cases())
def test_flax_053_checkpoint_restores_through_flax_and_writes_it_back(name):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    tx = fx.optimizer_def(name).to_optax()
  template = train_state.TrainState.create(
      apply_fn=None, params=fx.zero_params(name), tx=tx)
  tree = serialization.from_bytes(flax_optim_rules.legacy_tree(template),
                                  fx.checkpoint_bytes(name))
  restored = flax_optim_rules.from_legacy_tree(template, tree)
  assert int(restored.step) == fx.case(name)['step']
  written = serialization.msgpack_restore(fx.checkpoint_bytes(name))
  fx.assert_identical(written, serialization.to_state_dict(
      flax_optim_rules.legacy_tree(restored)))
  assert serialization.to_bytes(
      flax_optim_rules.legacy_tree(restored)) == fx.checkpoint_bytes(name)


def test_replace_keeps_the_tree_and_changes_the_field():
  tree = flax_optim_rules.legacy_tree(_stepped('adam'))
  params = jax.tree_util.tree_map(jnp.zeros_like, tree.target)
  replaced = tree.replace(target=params)
  assert type(replaced) is flax_optim_rules.LegacyOptimizerTree
  assert replaced.target is params and replaced.state is tree.state


def test_from_legacy_tree_takes_a_state_dict_and_a_train_state():
  stepped = _stepped('adam')
  template = _created(object_cases.CASES_BY_NAME['adam'])
  from_dict = flax_optim_rules.from_legacy_tree(
      template, flax_optim_rules.state_dict(stepped))
  chex.assert_trees_all_equal(from_dict.opt_state, stepped.opt_state)
  assert flax_optim_rules.from_legacy_tree(template, stepped) is stepped


def test_from_legacy_tree_names_what_it_got():
  template = _created(object_cases.CASES_BY_NAME['adam'])
  with pytest.raises(ValueError, match='LegacyOptimizerTree.*got list'):
    flax_optim_rules.from_legacy_tree(template, [1, 2])


def test_a_rule_without_flax_optims_layout_is_refused_by_name():
  state = train_state.TrainState.create(
      apply_fn=None, params={'w': jnp.ones(2)},
      tx=flax_optim_rules.weight_norm(
          flax_optim_rules.adam(learning_rate=0.1)))
  with pytest.raises(TypeError, match='no flax.optim layout'):
    flax_optim_rules.legacy_tree(state)


def test_tree_pickles_and_bytes_round_trip():
  tree = jax.device_get(flax_optim_rules.legacy_tree(_stepped('lamb')))
  data = serialization.to_bytes(tree)
  back = serialization.from_bytes(
      flax_optim_rules.legacy_tree(_created(
          object_cases.CASES_BY_NAME['lamb'])), data)
  assert type(back) is flax_optim_rules.LegacyOptimizerTree
  chex.assert_trees_all_equal(back, tree)
  unpickled = pickle.loads(pickle.dumps(tree))
  assert type(unpickled) is flax_optim_rules.LegacyOptimizerTree
  chex.assert_trees_all_equal(unpickled, tree)


def test_the_catalogues_pickle_advice_runs():
  """A TrainState does not pickle (its tx holds local functions), so the
  catalogue advises pickling its legacy tree: that pickles, and the state
  read back from it is the one pickled, optimizer state included."""
  advice = legacy_optim.catalogue.REPLACEMENTS['pickle'].text
  assert 'does not pickle' in advice
  assert 'pickle flax_optim_rules.legacy_tree(state)' in advice
  assert 'flax_optim_rules.from_legacy_tree(state, tree)' in advice
  stepped = _stepped('adam')
  with pytest.raises((pickle.PicklingError, AttributeError, TypeError),
                     match='local'):
    pickle.dumps(stepped)
  tree = pickle.loads(pickle.dumps(flax_optim_rules.legacy_tree(stepped)))
  state = flax_optim_rules.from_legacy_tree(
      _created(object_cases.CASES_BY_NAME['adam']), tree)
  chex.assert_trees_all_equal(
      (state.step, state.params, state.opt_state),
      (stepped.step, stepped.params, stepped.opt_state))


def _multi_rule(case):
  """``flax_optim_rules.multi_optimizer`` of a MultiOptimizer case whose
  traversals select paths containing given texts."""
  pairs = []
  for selector, spec in case['optimizer']['parts']:
    assert selector['kind'] == 'path_contains', selector
    traversal = flax_optim_rules.ModelParamTraversal(
        lambda path, _, texts=tuple(selector['texts']): any(
            text in path for text in texts))
    pairs.append((traversal, flax_optim_rules.rule_named(spec['algo'])(
        **spec['kwargs'])))
  return flax_optim_rules.multi_optimizer(*pairs)


def test_multi_optimizer_tree_is_flax_053s_and_loads_back():
  """A multi_optimizer's TrainState has MultiOptimizer's pytree (a leaf no
  traversal selects has None), and flax 0.5.3's leaves load back into it."""
  case = object_cases.CASES_BY_NAME['multi_adam_momentum']
  template = train_state.TrainState.create(
      apply_fn=None, params=_as_jax(object_cases.params(case)),
      tx=_multi_rule(case))
  stepped = template.apply_gradients(
      grads=_as_jax(object_cases.grads(case, 0)))
  tree = flax_optim_rules.legacy_tree(stepped)
  objects.assert_same_form(
      _without_node_types(objects._recorded(case)['structure']),
      _without_node_types(objects.neutral(tree)))
  flax_leaves = objects._arrays(case, 'stepped')
  chex.assert_trees_all_close(jax.tree_util.tree_leaves(tree), flax_leaves,
                              rtol=objects.RTOL, atol=objects.ATOL)
  loaded = flax_optim_rules.from_legacy_tree(
      template, jax.tree_util.tree_structure(tree).unflatten(flax_leaves))
  chex.assert_trees_all_equal(
      jax.tree_util.tree_leaves(flax_optim_rules.legacy_tree(loaded)),
      flax_leaves)
  chex.assert_trees_all_equal_structs(loaded.opt_state, stepped.opt_state)


# ------------------------------------------------- what a tree walker sees
# migrate proves a generic tree walker whose first act on a dataclass node
# is ``flax.serialization.to_state_dict(node)`` (``compat.codemod.
# _tree_walkers``): it rests on what follows, on real objects. The shim's
# Optimizer (what the original program had) and legacy_tree of the
# TrainState (what the migrated one has there) are both dataclasses, and
# their state dicts are equal: the same nested dicts (names, order), the
# same kinds of leaf. Where the leaves are tokens
# (``treedef.unflatten(range(n))``, how ub names its leaves) the two are
# equal outright; where the TrainState holds the Optimizer's values (a
# resumed program), bit for bit; trained apart, to the rules' tolerance.
_STEPS = 3


def _shim_stepped(case, steps=_STEPS):
  optimizer = objects._create(case)
  for step in range(steps):
    optimizer = objects._step(case, optimizer, step)
  return optimizer


def _rules_stepped(case, template, steps=_STEPS):
  for step in range(steps):
    template = template.apply_gradients(
        grads=_as_jax(object_cases.grads(case, step)))
  return template


def _tokens(tree):
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef.unflatten(range(len(leaves)))


def _paths(state_dict, prefix=()) -> dict:
  """``{path: the leaf's class}`` in the dict's own order; a node that is
  not a dict is a leaf (a walker's ``else``)."""
  if isinstance(state_dict, dict):
    out = {}
    for key, child in state_dict.items():
      out.update(_paths(child, prefix + (key,)))
    return out
  return {prefix: type(state_dict)}


def _bits(state_dict) -> list:
  return [(np.asarray(leaf).dtype, np.shape(leaf), np.asarray(leaf).tobytes())
          for leaf in jax.tree_util.tree_leaves(state_dict)]


def _assert_walked_alike(optimizer, tree, template):
  """What a walker sees of either after its state-dict prelude."""
  assert dataclasses.is_dataclass(optimizer)
  assert dataclasses.is_dataclass(tree)
  old, new = (serialization.to_state_dict(t) for t in (optimizer, tree))
  # Nested dicts down to the leaves: the same keys in the same order, the
  # same classes of leaf.
  assert list(_paths(old).items()) == list(_paths(new).items())
  assert [b[:2] for b in _bits(old)] == [b[:2] for b in _bits(new)]
  chex.assert_trees_all_close(old, new, rtol=objects.RTOL, atol=objects.ATOL)
  tokens_old, tokens_new = (serialization.to_state_dict(_tokens(t))
                            for t in (optimizer, tree))
  assert tokens_old == tokens_new
  assert list(_paths(tokens_old).items()) == list(
      _paths(tokens_new).items())
  # The Optimizer's own values in the TrainState: the same bits.
  resumed = flax_optim_rules.legacy_tree(
      flax_optim_rules.from_legacy_tree(template, old))
  assert dataclasses.is_dataclass(resumed)
  resumed = serialization.to_state_dict(resumed)
  assert list(_paths(old).items()) == list(_paths(resumed).items())
  assert _bits(old) == _bits(resumed)


@pytest.mark.parametrize('case', CASES, ids=objects._ids)
def test_a_walkers_state_dict_of_the_optimizer_and_of_the_tree_are_equal(
    case):
  template = _created(case)
  _assert_walked_alike(_shim_stepped(case), flax_optim_rules.legacy_tree(
      _rules_stepped(case, template)), template)


def test_a_walkers_state_dict_of_a_multi_optimizer_and_its_tree_are_equal():
  case = object_cases.CASES_BY_NAME['multi_adam_momentum']
  template = train_state.TrainState.create(
      apply_fn=None, params=_as_jax(object_cases.params(case)),
      tx=_multi_rule(case))
  _assert_walked_alike(_shim_stepped(case), flax_optim_rules.legacy_tree(
      _rules_stepped(case, template)), template)


def test_a_walkers_state_dict_of_replicated_ones_are_equal():
  case = object_cases.CASES_BY_NAME['adam']
  optimizer = jax_utils.replicate(_shim_stepped(case))
  tree = jax_utils.replicate(flax_optim_rules.legacy_tree(
      _rules_stepped(case, _created(case))))
  assert int(optimizer.state.step[0]) == int(tree.state.step[0]) == _STEPS
  _assert_walked_alike(optimizer, tree, jax_utils.replicate(_created(case)))
