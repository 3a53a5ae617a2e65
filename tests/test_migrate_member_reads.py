"""``migrate`` on reads of an Optimizer's members that the rule table
(legacy_optim/_rule_table.py ``MEMBERS``) rewrites (its ``read_rewrite``
column).

``optimizer.optimizer_def.create(params)`` reads the definition back out of
an optimizer to start afresh (new moments, step 0) from some params. Its
TrainState counterpart is ``TrainState.create(..., tx=state.tx)``: the same
rule, so the same numbers. Any other use of the definition read back (its
``hyper_params``, a name bound to it) has no counterpart and keeps the flow.
"""

import jax
import jax.numpy as jnp
from test_migrate import assert_no_legacy_import
from test_migrate import assert_same_bits
from test_migrate import load_module

from compat.codemod import migrate

_RESTART = b'''import jax
import jax.numpy as jnp
from flax import optim


def loss(params, x):
  return jnp.sum((params['w'] * x - params['b']) ** 2)


def train(params, xs):
  optimizer = optim.Adam(learning_rate=0.05, beta2=0.99).create(params)
  for x in xs:
    optimizer = optimizer.apply_gradient(jax.grad(loss)(optimizer.target, x))
  # Fresh moments from the params reached so far.
  restarted = optimizer.optimizer_def.create(optimizer.target)
  for x in xs:
    restarted = restarted.apply_gradient(
        jax.grad(loss)(restarted.target, x))
  return restarted
'''


def _xs():
  return [jnp.asarray([1.0, -0.5, 2.0]) * (i + 1) for i in range(3)]


def test_a_definition_read_back_creates_the_same_optimizer(tmp_path):
  new, plan = migrate.migrate_source(_RESTART, 'restart.py')
  assert not plan.leftovers, plan.leftovers
  assert_no_legacy_import(new)
  assert b'tx=optimizer.tx)' in new
  (tmp_path / 'old.py').write_bytes(_RESTART)
  (tmp_path / 'new.py').write_bytes(new)
  params = {'w': jnp.asarray([0.3, 1.0, -2.0]), 'b': jnp.asarray(0.5)}
  old = load_module(str(tmp_path / 'old.py'), 'restart_old').train(
      params, _xs())
  state = load_module(str(tmp_path / 'new.py'), 'restart_new').train(
      params, _xs())
  assert_same_bits(old.target, state.params)
  assert int(old.state.step) == int(state.step) == len(_xs())
  assert jax.tree_util.tree_leaves(state.opt_state)


def test_a_definition_read_back_used_otherwise_keeps_its_flow():
  # (A guard that the rewrite stays where it is the same program: it holds
  # before the rewrite was added too.)
  source = _RESTART.replace(
      b'  # Fresh moments', b'  print(optimizer.optimizer_def.hyper_params)\n'
      b'  # Fresh moments')
  new, plan = migrate.migrate_source(source, 'restart.py')
  assert new == source
  assert any('hyper_params to read' in left.reason
             for left in plan.leftovers), plan.leftovers
