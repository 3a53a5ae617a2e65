"""``flax_optim_rules.from_either_layout``: a migrated program resumes.

The original program (flax.optim, here the shim) wrote its Optimizer where
the migrated program keeps a TrainState. flax's ``restore_checkpoint(dir,
train_state)`` returns such a template unchanged (step 0, zero moments);
``from_either_layout(train_state, restore_checkpoint(dir, None))`` must give
every value of the file, from the original's files and the migrated
program's alike, at any nesting, or raise naming where the file differs.

Expected values come from the legacy optimizer that wrote the file (its own
``state.param_states``), from the saved TrainState, or from the files flax
0.5.3 wrote (``tests/checkpoints``, read with flax's ``msgpack_restore``).
"""

import pathlib
import subprocess
import sys
from typing import Any
import warnings

from flax import serialization
from flax import struct
from flax.training import checkpoints
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import compat
import flax_optim_rules
import legacy_optim

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / 'checkpoints'))
sys.path.insert(0, str(HERE / 'checkpoints' / 'orbax_053'))
import fixture_lib as fx  # noqa: E402
import generate as orbax_053  # noqa: E402

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

STEPS = 3


def _params():
  return {'dense': {'kernel': jnp.arange(6, dtype=jnp.float32).reshape(2, 3),
                    'bias': jnp.asarray([0.5, -0.25, 0.125], jnp.float32)}}


def _grads(step):
  return jax.tree_util.tree_map(lambda p: jnp.cos(p * (step + 1.0)),
                                _params())


def _trained_optimizer(make_def=lambda optim: optim.Adam(0.1)):
  """The original program's state: a shim Optimizer after ``STEPS`` steps."""
  optimizer = make_def(legacy_optim).create(_params())
  for step in range(STEPS):
    optimizer = optimizer.apply_gradient(_grads(step))
  return optimizer


def _fresh_train_state(tx=None):
  """The migrated program's template: a new TrainState, zero params."""
  return train_state.TrainState.create(
      apply_fn=None, params=jax.tree_util.tree_map(jnp.zeros_like, _params()),
      tx=flax_optim_rules.adam(0.1) if tx is None else tx)


def _trained_train_state(tx=None):
  """The migrated program's state after ``STEPS`` steps."""
  state = train_state.TrainState.create(
      apply_fn=None, params=_params(),
      tx=flax_optim_rules.adam(0.1) if tx is None else tx)
  for step in range(STEPS):
    state = state.apply_gradients(grads=_grads(step))
  return state


def _bits(x):
  x = np.asarray(x)
  return x.dtype.name, x.shape, x.tobytes()


def _assert_same_leaves(expected, found):
  """Same tree paths and the same bits at each."""
  exp, _ = jax.tree_util.tree_flatten_with_path(expected)
  got, _ = jax.tree_util.tree_flatten_with_path(found)
  assert [p for p, _ in exp] == [p for p, _ in got]
  for (path, e), (_, g) in zip(exp, got):
    assert _bits(e) == _bits(g), jax.tree_util.keystr(path)


def _assert_resumes_adam(optimizer, state):
  """``state`` holds the step, params and every Adam moment of the legacy
  ``optimizer`` (read from the optimizer itself, leaf by leaf)."""
  assert int(state.step) == int(optimizer.state.step) == STEPS
  assert int(state.opt_state.count) == STEPS
  _assert_same_leaves(optimizer.target, state.params)
  moments = jax.tree_util.tree_map(
      lambda s: (s.grad_ema, s.grad_sq_ema), optimizer.state.param_states,
      is_leaf=lambda s: hasattr(s, 'grad_sq_ema'))
  _assert_same_leaves(
      moments, jax.tree_util.tree_map(lambda m, v: (m, v),
                                      state.opt_state.grad_ema,
                                      state.opt_state.grad_sq_ema))


@struct.dataclass
class ExperimentState:
  """A user's dataclass holding the optimizer (imagenet's, mipnerf's)."""
  step: int
  optimizer: Any


# How a program nests its optimizer: (wrap it with a step, take it back
# out, take the step back out).
NESTINGS = {
    'alone': (lambda opt, step: opt, lambda tree: tree,
              lambda tree: tree.step),
    'dataclass_field': (lambda opt, step: ExperimentState(step, opt),
                        lambda tree: tree.optimizer, lambda tree: tree.step),
    'dict': (lambda opt, step: {'optimizer': opt, 'epoch': step},
             lambda tree: tree['optimizer'], lambda tree: tree['epoch']),
    'tuple_with_step': (lambda opt, step: (opt, step), lambda tree: tree[0],
                        lambda tree: tree[1]),
}


def _save_orbax(tmp_path, tree):
  """``tree`` written by flax's save_checkpoint, read back raw."""
  checkpoints.save_checkpoint(str(tmp_path), tree, STEPS)
  return checkpoints.restore_checkpoint(str(tmp_path), None)


def _save_msgpack(tmp_path, tree):
  """``tree`` written as msgpack bytes, read back raw."""
  del tmp_path
  return serialization.msgpack_restore(serialization.to_bytes(tree))


def _save_orbax_pytree(tmp_path, tree):
  """``tree`` written by Orbax itself, read back without a target (it gives
  lists for tuples, None for empty nodes)."""
  checkpointer = ocp.PyTreeCheckpointer()
  checkpointer.save(tmp_path / 'tree', tree)
  return checkpointer.restore(tmp_path / 'tree')


ROUTES = {'orbax': _save_orbax, 'msgpack': _save_msgpack,
          'orbax_pytree': _save_orbax_pytree}


def test_original_adam_checkpoint_resumes_in_a_train_state(tmp_path):
  """The issue's four lines: flax's restore into the TrainState gives step
  0; the raw restore read by from_either_layout gives every value."""
  optimizer = _trained_optimizer()
  checkpoints.save_checkpoint(str(tmp_path), optimizer, STEPS)
  state = flax_optim_rules.from_either_layout(
      _fresh_train_state(),
      checkpoints.restore_checkpoint(str(tmp_path), None))
  _assert_resumes_adam(optimizer, state)


@pytest.mark.parametrize('route', ROUTES)
@pytest.mark.parametrize('nesting', NESTINGS)
def test_original_layout_resumes_at_every_nesting(nesting, route, tmp_path):
  wrap, unwrap, step_of = NESTINGS[nesting]
  optimizer = _trained_optimizer()
  raw = ROUTES[route](tmp_path, wrap(optimizer, STEPS))
  restored = flax_optim_rules.from_either_layout(
      wrap(_fresh_train_state(), 0), raw)
  assert type(restored) is type(wrap(_fresh_train_state(), 0))
  _assert_resumes_adam(optimizer, unwrap(restored))
  assert int(step_of(restored)) == STEPS  # the step beside it, too.


@pytest.mark.parametrize('route', ROUTES)
@pytest.mark.parametrize('nesting', NESTINGS)
def test_migrated_layout_resumes_at_every_nesting(nesting, route, tmp_path):
  wrap = NESTINGS[nesting][0]
  saved = wrap(_trained_train_state(), STEPS)
  restored = flax_optim_rules.from_either_layout(
      wrap(_fresh_train_state(), 0), ROUTES[route](tmp_path, saved))
  assert type(restored) is type(saved)
  _assert_same_leaves(serialization.to_state_dict(saved),
                      serialization.to_state_dict(restored))


def test_migrated_programs_file_reads_back_identically(tmp_path):
  """Resume from the original's file, save as the migrated program does,
  resume again: the same state, leaf for leaf."""
  wrap = NESTINGS['dataclass_field'][0]
  template = wrap(_fresh_train_state(), 0)
  first = flax_optim_rules.from_either_layout(
      template, _save_orbax(tmp_path / 'original',
                            wrap(_trained_optimizer(), STEPS)))
  again = flax_optim_rules.from_either_layout(
      template, _save_orbax(tmp_path / 'migrated', first))
  _assert_same_leaves(serialization.to_state_dict(first),
                      serialization.to_state_dict(again))
  _assert_resumes_adam(_trained_optimizer(), again.optimizer)


def test_no_checkpoint_gives_the_template(tmp_path):
  template = {'optimizer': _fresh_train_state(), 'epoch': 0}
  raw = checkpoints.restore_checkpoint(str(tmp_path), None)
  assert raw is None  # flax's answer for a directory without checkpoints.
  assert flax_optim_rules.from_either_layout(template, raw) is template


# ---------------------------------------------- what Orbax restores today


@pytest.mark.parametrize('route', ROUTES)
@pytest.mark.parametrize('layout', ['original', 'migrated'])
def test_empty_optax_states_orbax_drops_are_read(layout, route, tmp_path):
  """An EmptyState in a chain (restored by Orbax as None) and
  GradientDescent's empty per-parameter states."""
  tx = optax.chain(optax.clip_by_global_norm(1.0), flax_optim_rules.sgd(0.1))
  if layout == 'original':
    saved = _trained_optimizer(lambda optim: optim.GradientDescent(0.1))
    expected_params, expected_step = saved.target, saved.state.step
  else:
    saved = _trained_train_state(tx)
    expected_params, expected_step = saved.params, saved.step
  restored = flax_optim_rules.from_either_layout(
      {'optimizer': _fresh_train_state(tx)},
      ROUTES[route](tmp_path, {'optimizer': saved}))['optimizer']
  assert int(restored.step) == int(expected_step) == STEPS
  assert int(restored.opt_state[1].count) == STEPS
  _assert_same_leaves(expected_params, restored.params)


def test_containers_restored_as_lists_are_read():
  optimizer = _trained_optimizer()
  raw = [serialization.to_state_dict(optimizer), np.int32(STEPS)]
  restored = flax_optim_rules.from_either_layout((_fresh_train_state(), 0),
                                                 raw)
  _assert_resumes_adam(optimizer, restored[0])
  assert int(restored[1]) == STEPS


def test_inject_learning_rate_keeps_the_template_rate():
  """flax.optim's file holds no rate: the template's injected rate stays."""
  tx = flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)(
      learning_rate=0.25)
  optimizer = _trained_optimizer()
  restored = flax_optim_rules.from_either_layout(
      _fresh_train_state(tx), serialization.to_state_dict(optimizer))
  assert float(restored.opt_state.hyperparams['learning_rate']) == 0.25
  assert int(restored.step) == STEPS
  _assert_same_leaves(optimizer.target, restored.params)


def test_legacy_tree_nodes_of_the_template_are_restored():
  optimizer = _trained_optimizer()
  template = {'opt': flax_optim_rules.legacy_tree(_fresh_train_state())}
  restored = flax_optim_rules.from_either_layout(
      template, {'opt': serialization.to_state_dict(optimizer)})
  _assert_resumes_adam(optimizer, flax_optim_rules.from_legacy_tree(
      _fresh_train_state(), restored['opt']))


# ------------------------------------------- MultiOptimizer (nested, l2p)


def _weight_decay_split(optim):
  """nested-transformer's and l2p's optimizer: no weight decay on some
  params, a frozen rest here too (no traversal selects them)."""
  decayed = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
  kept = optim.ModelParamTraversal(lambda path, _: path.endswith('bias'))
  return decayed, kept


def _multi_legacy(optim):
  decayed, kept = _weight_decay_split(optim)
  return optim.MultiOptimizer((decayed, optim.Adam(0.1, weight_decay=0.01)),
                              (kept, optim.Adam(0.1)))


def _multi_tx():
  decayed, kept = _weight_decay_split(flax_optim_rules)
  return flax_optim_rules.multi_optimizer(
      (decayed, flax_optim_rules.adam(0.1, weight_decay=0.01)),
      (kept, flax_optim_rules.adam(0.1)))


def _multi_params():
  return {**_params(), 'pos_embedding': jnp.ones((2, 2), jnp.float32)}


@pytest.mark.parametrize('route', ROUTES)
def test_original_multi_optimizer_resumes_in_its_partition(route, tmp_path):
  optimizer = _multi_legacy(legacy_optim).create(_multi_params())
  for step in range(STEPS):
    optimizer = optimizer.apply_gradient(jax.tree_util.tree_map(
        lambda p, step=step: jnp.sin(p + step), _multi_params()))
  template = {'optimizer': train_state.TrainState.create(
      apply_fn=None, params=jax.tree_util.tree_map(jnp.zeros_like,
                                                   _multi_params()),
      tx=_multi_tx())}
  state = flax_optim_rules.from_either_layout(
      template, ROUTES[route](tmp_path, {'optimizer': optimizer})
  )['optimizer']
  assert int(state.step) == STEPS
  _assert_same_leaves(optimizer.target, state.params)
  inner = state.opt_state.inner_states
  for label, path in (('0', 'kernel'), ('1', 'bias')):
    sub = inner[label].inner_state
    assert int(sub.count) == STEPS
    legacy = optimizer.state.param_states['dense'][path]
    _assert_same_leaves((legacy.grad_ema, legacy.grad_sq_ema),
                        (sub.grad_ema['dense'][path],
                         sub.grad_sq_ema['dense'][path]))
  assert optimizer.state.param_states['pos_embedding'] is None  # frozen


@pytest.mark.parametrize('route', ROUTES)
def test_migrated_multi_optimizer_reads_back(route, tmp_path):
  saved = train_state.TrainState.create(apply_fn=None, params=_multi_params(),
                                        tx=_multi_tx())
  for step in range(STEPS):
    saved = saved.apply_gradients(grads=jax.tree_util.tree_map(
        lambda p, step=step: jnp.sin(p + step), _multi_params()))
  template = train_state.TrainState.create(
      apply_fn=None, params=jax.tree_util.tree_map(jnp.zeros_like,
                                                   _multi_params()),
      tx=_multi_tx())
  restored = flax_optim_rules.from_either_layout(
      template, ROUTES[route](tmp_path, saved))
  _assert_same_leaves(serialization.to_state_dict(saved),
                      serialization.to_state_dict(restored))


def test_multi_optimizer_state_that_hides_its_params_is_named():
  """A sub-optimizer without per-parameter state (plain SGD) beside frozen
  params: the state does not say which leaves are whose."""
  decayed, kept = _weight_decay_split(flax_optim_rules)
  tx = flax_optim_rules.multi_optimizer((decayed, flax_optim_rules.sgd(0.1)),
                                        (kept, flax_optim_rules.adam(0.1)))
  template = {'opt': train_state.TrainState.create(
      apply_fn=None, params=_multi_params(), tx=tx)}
  optimizer = _multi_legacy(legacy_optim).create(_multi_params())
  with pytest.raises(ValueError, match=(
      r"^opt: the checkpoint holds flax.optim's Optimizer layout, which this "
      r'TrainState has none of: .*sub-optimizer 0 keeps no per-parameter')):
    flax_optim_rules.from_either_layout(
        template, {'opt': serialization.to_state_dict(optimizer)})


# ----------------------------------------- files flax 0.5.3 itself wrote


def _fixture_template(name):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    tx = fx.optimizer_def(name).to_optax()
  state = train_state.TrainState.create(apply_fn=None,
                                        params=fx.zero_params(name), tx=tx)
  kind = fx.case(name)['container']
  if kind == 'optimizer':
    return state
  if kind == 'tuple_ema':
    return (state, fx.zero_params(name))
  if kind == 'dict':
    return {'optimizer': state, 'epoch': 0}
  return fx.TrainState(step=0, optimizer=state,
                       dynamic_scale=legacy_optim.DynamicScale())


def _lookup(tree, path):
  for key in path:
    tree = tree[key]
  return tree


@pytest.mark.parametrize('name', fx.one_rule_cases() + [
    'multi', 'dict_container', 'tuple_ema', 'train_state'])
def test_flax_053_checkpoints_resume_in_train_states(name):
  written = serialization.msgpack_restore(fx.checkpoint_bytes(name))
  restored = flax_optim_rules.from_either_layout(
      _fixture_template(name), checkpoints.restore_checkpoint(
          str(fx.checkpoint_path(name).parent), None))
  state = fx.optimizer_in(name, restored)
  assert int(state.step) == fx.case(name)['step']
  fx.assert_identical(_lookup(written, fx.optimizer_path(name)),
                      flax_optim_rules.state_dict(state))
  # Whatever the container holds beside the optimizer is the file's too.
  everything = serialization.to_state_dict(restored)
  optimizer_key = fx.optimizer_path(name)[:1]
  for key, value in written.items() if optimizer_key else ():
    if (key,) != optimizer_key:
      _assert_same_leaves(value, everything[key])


@pytest.mark.parametrize('name', ['adam', 'momentum', 'rmsprop', 'sgd',
                                  'multi_adam_on_kernels'])
def test_flax_053_classes_orbax_checkpoints_resume(name):
  """Orbax files flax 0.5.3's own classes wrote on today's flax."""
  tx = orbax_053.CASES[name](legacy_optim).to_optax()
  template = train_state.TrainState.create(
      apply_fn=None, params=jax.tree_util.tree_map(jnp.zeros_like,
                                                   orbax_053.params()), tx=tx)
  fixture = HERE / 'checkpoints' / 'orbax_053' / name
  restored = flax_optim_rules.from_either_layout(
      template, checkpoints.restore_checkpoint(str(fixture), None))
  assert int(restored.step) == orbax_053.STEPS
  expected = serialization.msgpack_restore(
      (fixture / 'expected.msgpack').read_bytes())
  fx.assert_identical(expected, jax.tree_util.tree_map(
      np.asarray, flax_optim_rules.state_dict(restored)))


# ------------------------------------------------- checkpoints that differ


def test_a_train_state_of_neither_layout_is_named():
  with pytest.raises(ValueError) as raised:
    flax_optim_rules.from_either_layout(
        {'optimizer': _fresh_train_state(), 'epoch': 0},
        {'optimizer': {'weights': np.zeros(3)}, 'epoch': 3})
  message = str(raised.value)
  assert message.startswith('optimizer: ')
  assert "['opt_state', 'params', 'step']" in message
  assert "['state', 'target']" in message
  assert "unexpected ['weights']" in message


def test_a_container_of_other_keys_is_named():
  with pytest.raises(ValueError, match=(
      r"^<root>: expected the keys \['epoch', 'optimizer'\]; missing "
      r"\['epoch'\], unexpected \['step'\]")):
    flax_optim_rules.from_either_layout(
        {'optimizer': _fresh_train_state(), 'epoch': 0},
        {'optimizer': serialization.to_state_dict(_trained_optimizer()),
         'step': 3})


def test_an_original_checkpoint_of_other_params_is_named():
  written = serialization.to_state_dict(_trained_optimizer())
  del written['state']['param_states']['dense']['bias']
  with pytest.raises(ValueError, match=(
      r"^opt/state/param_states/dense: expected the keys \['bias', "
      r"'kernel'\]; missing \['bias'\], unexpected \[\]")):
    flax_optim_rules.from_either_layout({'opt': _fresh_train_state()},
                                        {'opt': written})


def test_a_migrated_checkpoint_of_other_moments_is_named():
  written = serialization.to_state_dict(_trained_train_state())
  written['opt_state']['grad_ema']['dense']['extra'] = np.zeros(2)
  with pytest.raises(ValueError, match=(
      r"^opt_state/grad_ema/dense: expected the keys \['bias', 'kernel'\]; "
      r"missing \[\], unexpected \['extra'\]")):
    flax_optim_rules.from_either_layout(_fresh_train_state(), written)


def test_a_leaf_where_the_template_has_a_tree_is_named():
  with pytest.raises(ValueError, match=r'^1: expected a dict with keys'):
    flax_optim_rules.from_either_layout(
        (_fresh_train_state(), {'a': 0}),
        {'0': serialization.to_state_dict(_trained_train_state()),
         '1': np.zeros(2)})


def test_an_original_checkpoint_for_a_state_without_its_layout_is_named():
  tx = optax.adamw(0.1)  # stock Optax: flax.optim had no such state.
  with pytest.raises(ValueError, match=(
      r"^<root>: the checkpoint holds flax.optim's Optimizer layout")):
    flax_optim_rules.from_either_layout(
        _fresh_train_state(tx),
        serialization.to_state_dict(_trained_optimizer()))


# --------------------------------------- the shim's strict restore, too


def test_compat_restore_checkpoint_reads_the_original_into_a_train_state(
    tmp_path):
  optimizer = _trained_optimizer()
  checkpoints.save_checkpoint(str(tmp_path), {'opt': optimizer}, STEPS)
  restored = compat.restore_checkpoint(tmp_path,
                                       {'opt': _fresh_train_state()})
  _assert_resumes_adam(optimizer, restored['opt'])


def test_compat_restore_checkpoint_names_what_fits_neither_layout(tmp_path):
  checkpoints.save_checkpoint(
      str(tmp_path),
      {'opt': _trained_optimizer(lambda optim: optim.Momentum(0.1))}, STEPS)
  with pytest.raises(ValueError) as raised:
    compat.restore_checkpoint(tmp_path, {'opt': _fresh_train_state()})
  message = str(raised.value)
  assert 'opt/params: expected a dict with keys {dense}, found no entry' in (
      message)  # the differences, as before; and why neither layout fits:
  assert ("opt/state/param_states/dense/bias: expected the keys "
          "['grad_ema', 'grad_sq_ema']; missing ['grad_ema', 'grad_sq_ema'], "
          "unexpected ['momentum']") in message


def test_without_flax_plain_containers_are_restored():
  """Code that never loaded flax (an Orbax-only program) gets flax's
  plain-container layout from this package itself."""
  script = (
      'import sys\n'
      'import numpy as np\n'
      'import flax_optim_rules\n'
      'restored = flax_optim_rules.from_either_layout(\n'
      "    {'w': [np.zeros(2), None], 'n': (0,)}, {'w': [np.ones(2)],\n"
      "                                            'n': [3]})\n"
      "assert 'flax' not in sys.modules, 'flax was imported'\n"
      "assert isinstance(restored['n'], tuple) and restored['n'] == (3,)\n"
      "assert restored['w'][1] is None\n"
      "assert restored['w'][0].tolist() == [1, 1]\n"
  )
  subprocess.run([sys.executable, '-c', script], check=True,
                 cwd=HERE.parent, timeout=120)
