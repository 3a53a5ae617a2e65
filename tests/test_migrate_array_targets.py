"""An optimizer over one bare array stays on the shim, with its reason.

flax.optim steps a single array (dopamine's SAC keeps its temperature as
``optimizer_def.create(jnp.zeros(1))``); flax's TrainState cannot step one
(``apply_gradients`` asks whether a key is in the gradients first). A flow
whose ``create`` is provably given an array or a number is kept whole.
"""

from _migrated_copies import load_module
from flax.training import train_state
import jax.numpy as jnp
import optax
import pytest

from compat.codemod import migrate

TEMPERATURE = b'''\
import jax
import jax.numpy as jnp
from flax import optim


def step(optimizer, target_entropy):
  grad = jax.grad(lambda a: -(a * target_entropy).sum())(optimizer.target)
  return optimizer.apply_gradient(grad)


def train(steps):
  log_alpha = jnp.zeros(1)
  optimizer = optim.Adam(learning_rate=0.1).create(log_alpha)
  for _ in range(steps):
    optimizer = step(optimizer, 0.5)
  return optimizer.target
'''

REASON = 'create() is given a single array'


def test_train_state_cannot_step_a_bare_array():
  # Why the flow is kept: were it rewritten, its first step would raise.
  state = train_state.TrainState.create(apply_fn=None, params=jnp.zeros(1),
                                        tx=optax.adam(0.1))
  with pytest.raises(TypeError):
    state.apply_gradients(grads=jnp.ones(1))


def test_an_optimizer_over_an_array_bound_to_a_name_stays_and_runs(tmp_path):
  new, plan = migrate.migrate_source(TEMPERATURE, 'temperature.py')
  assert new == TEMPERATURE
  reasons = [left.reason for left in plan.leftovers]
  assert any(REASON in reason for reason in reasons), reasons
  (tmp_path / 'temperature.py').write_bytes(new)
  kept = load_module(tmp_path / 'temperature.py', 'temperature_kept')
  assert kept.train(3).shape == (1,)  # through the shim, as before


@pytest.mark.parametrize('target', [
    b'jnp.zeros(1)', b'jnp.full((2,), 0.5)', b'1.0', b'-1.0',
    b'jax.random.normal(jax.random.PRNGKey(0), (3,))'])
def test_an_optimizer_over_an_array_written_in_create_stays(target):
  source = TEMPERATURE.replace(b'.create(log_alpha)',
                               b'.create(' + target + b')')
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert new == source
  assert any(REASON in left.reason for left in plan.leftovers)


def test_a_jitted_create_over_an_array_stays():
  source = TEMPERATURE.replace(
      b'optim.Adam(learning_rate=0.1).create(log_alpha)',
      b'jax.jit(optim.Adam(learning_rate=0.1).create)(log_alpha)')
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert new == source
  assert any(REASON in left.reason for left in plan.leftovers)


@pytest.mark.parametrize('binding', [
    # a dict of arrays: TrainState steps it
    (b'log_alpha = jnp.zeros(1)', b"log_alpha = {'value': jnp.zeros(1)}"),
    # bound to an array once and to something else once: not proven
    (b'log_alpha = jnp.zeros(1)',
     b'log_alpha = jnp.zeros(1)\n  log_alpha = restore(log_alpha)'),
])
def test_a_target_not_proven_an_array_migrates_as_before(binding):
  source = TEMPERATURE.replace(*binding)
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert not any(REASON in left.reason for left in plan.leftovers)
  assert b'TrainState.create(apply_fn=None' in new


def test_a_parameter_is_not_proven_an_array():
  source = TEMPERATURE.replace(b'def train(steps):\n  log_alpha = '
                               b'jnp.zeros(1)\n',
                               b'def train(steps, log_alpha):\n')
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert not any(REASON in left.reason for left in plan.leftovers)
  assert b'TrainState.create(apply_fn=None' in new
