"""``migrate`` on code that reads and writes flax.optim's state layout.

Research code reset the moments of some params by hand (``opt.replace(
state=reset(opt.state))`` building ``_AdamParamState``/``OptimizerState``),
moved the step (``opt.state.replace(step=...)``) and kept checkpoints in
flax.optim's layout (``state_dict()``/``restore_state``,
``flax.serialization``). Each project here is written for the test in those
shapes; migrated, it uses flax_optim_rules' view of the layout, trains to
the same bits as the original under the shim and gives the same state dict.
"""

from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np
from test_migrate_project import _assert_fully_migrated
from test_migrate_project import _assert_same_bits
from test_migrate_project import _migrated
from test_migrate_project import _run

from compat.codemod import migrate
import flax_optim_rules

STEPS = 3

_RESET_MOMENTS = {
    'train.py': '''import flax
import jax
import jax.numpy as jnp
from flax import optim

import moments


@flax.struct.dataclass
class TrainState:
  optimizer: optim.Optimizer


def make_state(params):
  return TrainState(optimizer=optim.Adam(0.01, beta2=0.99).create(params))


@jax.jit
def train_step(state, batch, lr):
  optimizer = state.optimizer
  optimizer = optimizer.replace(
      state=moments.reset(optimizer.state, 'b'))
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] + p['b'] - batch['y']) ** 2))(optimizer.target)
  optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  return state.replace(optimizer=optimizer)


def train(params, batches):
  state = make_state(params)
  for index, batch in enumerate(batches):
    state = train_step(state, batch, 0.01 / (index + 1))
  return state.optimizer
''',
    'moments.py': '''import jax.numpy as jnp
from flax import optim
from flax.optim import adam


def reset(state: optim.OptimizerState, prefix):
  """Zeroes the moments of the params whose name starts with prefix."""
  param_states = dict(state.param_states)
  for name, moment in param_states.items():
    if name.startswith(prefix):
      param_states[name] = adam._AdamParamState(
          jnp.zeros_like(moment.grad_ema), jnp.zeros_like(moment.grad_sq_ema))
  return optim.OptimizerState(state.step, param_states)
''',
}

# One jitted step of a module's optimizer (both fixtures below).
_STEP = '''@jax.jit
def step(optimizer, batch):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] + p['b'] - batch['y']) ** 2))(optimizer.target)
  return optimizer.apply_gradient(grad)
'''

_CHECKPOINTS = {
    'train.py': '''import flax
import jax
import jax.numpy as jnp
from flax import optim


''' + _STEP + '''

def train(params, batches):
  optimizer = optim.Momentum(0.05, beta=0.9).create(params)
  for batch in batches:
    optimizer = step(optimizer, batch)
  saved = optimizer.state_dict()
  fresh = optim.Momentum(0.05, beta=0.9).create(params)
  optimizer = fresh.restore_state(saved)
  again = flax.serialization.to_state_dict(optimizer)
  optimizer = flax.serialization.from_state_dict(fresh, again)
  return optimizer.replace(
      state=optimizer.state.replace(step=optimizer.state.step + 10))
''',
}

_HAND_BUILT = {
    'train.py': '''import jax
import jax.numpy as jnp
from flax import optim


def warm_start(params, moments_from):
  """An optimizer of the given params holding another one's moments."""
  return optim.Optimizer(optim.Adam(0.01, beta2=0.99),
                         state=moments_from.state, target=params)


''' + _STEP + '''

def train(params, batches):
  optimizer = optim.Adam(0.01, beta2=0.99).create(params)
  optimizer = step(optimizer, batches[0])
  doubled = jax.tree_util.tree_map(lambda x: 2 * x, params)
  optimizer = warm_start(doubled, optimizer)
  for batch in batches[1:]:
    optimizer = step(optimizer, batch)
  return optimizer
''',
}


def _data():
  rng = np.random.RandomState(3)
  params = {'w': jnp.asarray(rng.randn(4, 2), jnp.float32),
            'b': jnp.asarray(rng.randn(2), jnp.float32)}
  batches = [{'x': jnp.asarray(rng.randn(8, 4), jnp.float32),
              'y': jnp.asarray(rng.randn(8, 2), jnp.float32)}
             for _ in range(STEPS)]
  return params, batches


def _assert_same_state_dict(old_optimizer, new_state):
  """flax.optim's state dict of the original's optimizer is the migrated
  TrainState's, key for key and bit for bit."""
  old = serialization.to_state_dict(old_optimizer)
  new = jax.device_get(flax_optim_rules.state_dict(new_state))
  assert jax.tree_util.tree_structure(old) == jax.tree_util.tree_structure(
      new)
  _assert_same_bits(old, new)


def _trained(tmp_path, files):
  project, migrated, results = _migrated(tmp_path, files)
  _assert_fully_migrated(results)
  params, batches = _data()
  old = _run(project, 'train', params, batches)
  new = _run(migrated, 'train', params, batches)
  return results, old, new


def test_moments_reset_by_hand_in_a_helper_module(tmp_path):
  results, old, new = _trained(tmp_path, _RESET_MOMENTS)
  train, moments = results['train.py'].new, results['moments.py'].new
  assert (b'flax_optim_rules.replace_optimizer_state(optimizer, '
          b'moments.reset(flax_optim_rules.optimizer_state(optimizer), '
          b"'b'))") in train
  assert b'state: flax_optim_rules.OptimizerState' in moments
  assert b'flax_optim_rules.AdamParamState(' in moments
  assert b'flax_optim_rules.OptimizerState(state.step' in moments
  _assert_same_bits(old.target, new.params)
  assert int(old.state.step) == int(new.step) == STEPS
  _assert_same_state_dict(old, new)


def test_state_dicts_restores_and_a_moved_step(tmp_path):
  results, old, new = _trained(tmp_path, _CHECKPOINTS)
  train = results['train.py'].new
  for expected in (b'flax_optim_rules.state_dict(optimizer)',
                   b'flax_optim_rules.restore_state(fresh, saved)',
                   b'flax_optim_rules.restore_state(fresh, again)',
                   b'flax_optim_rules.optimizer_state(optimizer).replace('
                   b'step=optimizer.step + 10)'):
    assert expected in train, expected
  _assert_same_bits(old.target, new.params)
  # The step moved by hand is the TrainState's and the Optax state's.
  assert int(old.state.step) == int(new.step) == STEPS + 10
  _assert_same_state_dict(old, new)


def test_replacing_the_definition_keeps_the_flow_and_says_why(tmp_path):
  files = {'train.py': _CHECKPOINTS['train.py'].replace(
      'return optimizer.replace(\n',
      'optimizer = optimizer.replace(optimizer_def=optim.Adam(0.1))\n'
      '  return optimizer.replace(\n')}
  _, _, results = _migrated(tmp_path, files)
  result = results['train.py']
  assert result.new == result.old
  reasons = [left.reason for left in result.plan.leftovers
             if left.construct == 'optimizer_use']
  assert any('no optimizer_def' in r for r in reasons), reasons


def test_an_optimizer_built_by_hand_from_a_definition_and_a_state(tmp_path):
  results, old, new = _trained(tmp_path, _HAND_BUILT)
  assert (b'flax_optim_rules.replace_optimizer_state(train_state.TrainState.'
          b'create(apply_fn=None, params=params, tx=flax_optim_rules.adam('
          in results['train.py'].new), results['train.py'].new
  _assert_same_bits(old.target, new.params)
  assert int(old.state.step) == int(new.step) == STEPS
  _assert_same_state_dict(old, new)


def test_a_multi_optimizers_layout_links_keep_the_flow_with_why(tmp_path):
  # The view lays out one rule's transform: a module building a
  # MultiOptimizer keeps its flow, the optimizer built by hand included.
  files = {'train.py': _HAND_BUILT['train.py'].replace(
      'optim.Optimizer(optim.Adam(0.01, beta2=0.99),',
      'optim.Optimizer(optim.MultiOptimizer(\n'
      '      (optim.ModelParamTraversal(lambda path, _: True),\n'
      '       optim.Adam(0.01, beta2=0.99))),')}
  _, _, results = _migrated(tmp_path, files)
  result = results['train.py']
  assert result.new == result.old
  reasons = [(left.construct, left.reason) for left in result.plan.leftovers]
  assert ('create', 'not rewritten: this module builds multi_optimizer '
          "definitions, whose Optax state flax_optim_rules' view of "
          "flax.optim's layout does not cover (one rule's transform only)"
          ) in reasons, reasons


def test_the_stock_tier_keeps_a_flow_that_reads_the_layout():
  source = _CHECKPOINTS['train.py'].encode()
  new, plan = migrate.migrate_source(source, 'train.py', tier='stock')
  assert new == source
  assert any('--tier stock writes stock Optax rules' in left.reason
             for left in plan.leftovers), plan.leftovers
