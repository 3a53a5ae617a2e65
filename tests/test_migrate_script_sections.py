"""``migrate`` on a script that repeats its training section (issue 40).

jax3d's MobileNeRF stage scripts (notebooks exported as scripts) train in
sections, each defining ``train_step`` again, binding ``train_jstep =
jax.jit(train_step)`` again and making a new optimizer under the same
module-level name. A call of the name runs whichever def it sees; where
every def of the name takes the optimizer at the same place and gives it
back alike, and every binding of the alias wraps that name the same way,
what holds of one holds of the call, so migrate rewrites every section and
the migrated script trains bit-identically to the original under the
shim. Where a binding of the alias wraps another function, the flow stays
as it was, with the reason. The script here is written for the test in
that shape.
"""

import _legacy_imports
from test_migrate_project import _assert_same_bits
from test_migrate_project import _migrate_into
from test_migrate_project import _reasons
from test_migrate_project import _run
from test_migrate_project import _write

_SECTION = '''
def train_step(state, lr):
  def loss_fn(p):
    return jnp.mean((DATA['x'] @ p['w'] - DATA['y']) ** {power})
  loss, grad = jax.value_and_grad(loss_fn)(state.target)
  state = state.apply_gradient(grad, learning_rate=lr)
  return state, loss


train_jstep = jax.jit(train_step)
state = optim.Adam(learning_rate=0.1).create({start})
step_init = state.state.step
for i in range(step_init, 3):
  state, loss = train_jstep(state, {rate})
{result} = state.target
'''

_SCRIPT = '''import jax
import jax.numpy as jnp
import numpy as np
from flax import optim

_RNG = np.random.RandomState(7)
DATA = {'x': jnp.asarray(_RNG.randn(8, 4), jnp.float32),
        'y': jnp.asarray(_RNG.randn(8, 2), jnp.float32)}
PARAMS = {'w': jnp.asarray(_RNG.randn(4, 2), jnp.float32)}
''' + _SECTION.format(power=2, start='PARAMS', rate=0.01,
                      result='first') + _SECTION.format(
                          power=4, start='first', rate=0.02,
                          result='second') + '''

def train():
  return first, second
'''


def test_a_script_redefining_its_step_per_section_trains_alike(tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'script.py': _SCRIPT})
  result = _migrate_into(project, migrated)['script.py']
  assert not result.plan.leftovers, result.plan.leftovers
  assert not _legacy_imports.legacy_imports(result.new)
  new = result.new.decode()
  # Both sections' steps and creates, each rewritten where it is.
  assert new.count('loss, grad = jax.value_and_grad(loss_fn)(state.params)'
                   ) == 2
  assert new.count('.apply_gradients(grads=grad)') == 2
  assert new.count('state = train_state.TrainState.create(') == 2
  assert new.count('step_init = state.step') == 2
  assert 'second = state.params' in new
  _assert_same_bits(_run(project, 'script'), _run(migrated, 'script'))
  _an_alias_rebound_to_another_function_keeps_the_flow(tmp_path / 'other')


def _an_alias_rebound_to_another_function_keeps_the_flow(tmp_path):
  # The second section's alias wraps ``other_step``: a call of
  # ``train_jstep`` may run either, and neither binding is an alias.
  script = _SCRIPT.replace('train_jstep = jax.jit(train_step)\n'
                           "state = optim.Adam(learning_rate=0.1).create("
                           'first)',
                           'other_step = train_step\n'
                           'train_jstep = jax.jit(other_step)\n'
                           "state = optim.Adam(learning_rate=0.1).create("
                           'first)')
  assert script != _SCRIPT
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'script.py': script})
  results = _migrate_into(project, migrated)
  assert results['script.py'].new == results['script.py'].old
  reasons = '\n'.join(_reasons(results).values())
  assert ('`state` also holds values not provably a flax.optim Optimizer'
          in reasons)
  _assert_same_bits(_run(project, 'script'), _run(migrated, 'script'))
