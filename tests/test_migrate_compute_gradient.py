"""``optimizer.compute_gradient(loss_fn)`` migrates from its rule-table row.

The row of ``compute_gradient`` in legacy_optim/_rule_table.py says what
replaces a call (``call_rewrite``) and the one shape of the call it holds for
(``call_targets``: two names, a loss function returning its loss alone); the
planner reads those columns for any method. The program below (its step
jitted, as training code has it) runs as it is (through the shim) and
migrated: the losses, parameters and step must be equal bit for bit.
"""

from _migrated_copies import load_module
import jax
import jax.numpy as jnp
import numpy as np

from compat.codemod import migrate

SOURCE = b'''\
import jax
import jax.numpy as jnp
from flax import optim


def loss_fn(params, batch):
  prediction = batch['x'] @ params['w'] + params['b']
  return jnp.mean((prediction - batch['y']) ** 2)


@jax.jit
def train_step(optimizer, batch):
  loss, grad = optimizer.compute_gradient(lambda p: loss_fn(p, batch))
  return optimizer.apply_gradient(grad), loss


def train(params, batches):
  optimizer = optim.Adam(learning_rate=0.05, beta2=0.99).create(params)
  losses = []
  for batch in batches:
    optimizer, loss = train_step(optimizer, batch)
    losses.append(loss)
  return optimizer, losses
'''

# A loss function with aux: flax.optim gives three values, not the two the
# rewrite gives back.
WITH_AUX = SOURCE.replace(
    b'return jnp.mean((prediction - batch[\'y\']) ** 2)',
    b'return jnp.mean((prediction - batch[\'y\']) ** 2), prediction').replace(
        b'loss, grad = optimizer', b'loss, _, grad = optimizer')


def _batches():
  rng = np.random.RandomState(3)
  return [{'x': jnp.asarray(rng.randn(8, 4), jnp.float32),
           'y': jnp.asarray(rng.randn(8, 2), jnp.float32)}
          for _ in range(5)]


def _same_bits(a, b):
  leaves_a = jax.tree_util.tree_leaves(a)
  leaves_b = jax.tree_util.tree_leaves(b)
  assert len(leaves_a) == len(leaves_b)
  for x, y in zip(leaves_a, leaves_b):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (x, y)


def test_compute_gradient_migrates_and_trains_bit_identically(tmp_path):
  new, plan = migrate.migrate_source(SOURCE, 'fit.py')
  assert not plan.leftovers, plan.leftovers
  assert b'compute_gradient' not in new
  assert b'from flax import optim' not in new
  assert b'loss, grad = jax.value_and_grad(lambda p: loss_fn(p, batch))(' \
      b'optimizer.params)' in new
  (tmp_path / 'fit_legacy.py').write_bytes(SOURCE)
  (tmp_path / 'fit_migrated.py').write_bytes(new)
  original = load_module(tmp_path / 'fit_legacy.py', 'fit_legacy')
  rewritten = load_module(tmp_path / 'fit_migrated.py', 'fit_migrated')
  params = {'w': jnp.full((4, 2), 0.1, jnp.float32),
            'b': jnp.zeros((2,), jnp.float32)}
  old, old_losses = original.train(params, _batches())
  state, losses = rewritten.train(params, _batches())
  _same_bits(old_losses, losses)
  _same_bits(old.target, state.params)
  assert int(old.state.step) == int(state.step) == 5


def test_compute_gradient_unpacked_otherwise_stays_with_its_reason():
  new, plan = migrate.migrate_source(WITH_AUX, 'fit.py')
  assert new == WITH_AUX
  reasons = [left.reason for left in plan.leftovers]
  assert any('.compute_gradient() is rewritten where its result is unpacked '
             'into 2 names' in reason for reason in reasons), reasons
