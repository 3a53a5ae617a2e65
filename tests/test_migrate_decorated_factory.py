"""``migrate`` on a definition factory wrapped by a decorator (issue 40).

dopamine's shape: ``create_optimizer(name)`` returns a flax.optim
definition and is decorated with gin's ``configurable``; the agent class
creates its optimizer from it and keeps it on ``self``, a subclass in
another module does the same through ``base.create_optimizer``. Its body
proves what it returns, but not what the decorator does with it: a
library's decorator may call the body and hand back what it returns, or
register the function so that a config file (outside the scanned code)
calls it. So migrating the factory rests on an assumption: without
``--unsafe-fixes`` the flow stays whole and the report names the fix and
its assumption; with it, the project migrates and trains bit-identically to
the original under the shim, and the report lists the fix applied. The
decorator here is the fixture's own (gin is no test dependency); it hands
calls through as gin's does.
"""

import _legacy_imports
import test_migrate_holder_functions as holder_tests
from test_migrate_project import _assert_same_bits
from test_migrate_project import _data
from test_migrate_project import _reasons
from test_migrate_project import _run

from compat.codemod import migrate

_BASE = '''import functools

import jax
import jax.numpy as jnp
from flax import optim


def configurable(function):
  @functools.wraps(function)
  def configured(*args, **kwargs):
    return function(*args, **kwargs)
  return configured


@configurable
def create_optimizer(name='adam', learning_rate=0.01):
  if name == 'adam':
    return optim.Adam(learning_rate=learning_rate)
  elif name == 'sgd':
    return optim.GradientDescent(learning_rate=learning_rate)
  else:
    raise ValueError(name)


@functools.partial(jax.jit, static_argnums=(0,))
def train(scale, optimizer, batch):
  def loss_fn(p):
    return jnp.mean((batch['x'] @ p['w'] * scale - batch['y']) ** 2)
  loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
  optimizer = optimizer.apply_gradient(grad)
  return optimizer, loss


class Agent(object):

  def __init__(self, params, optimizer='adam'):
    self._optimizer_name = optimizer
    self._params = params
    self._build()

  def _build(self):
    optimizer_def = create_optimizer(self._optimizer_name)
    self.optimizer = optimizer_def.create(self._params)

  @property
  def online_params(self):
    return self.optimizer.target

  def step(self, batch):
    self.optimizer, loss = train(1.0, self.optimizer, batch)
    return loss
'''

_SUB = '''import base


class SubAgent(base.Agent):

  def _build(self):
    optimizer_def = base.create_optimizer(self._optimizer_name,
                                          learning_rate=0.05)
    self.optimizer = optimizer_def.create(self._params)


def train(params, batches):
  agents = [base.Agent(params), SubAgent(params, 'sgd')]
  for batch in batches:
    for agent in agents:
      agent.step(batch)
  return [agent.online_params for agent in agents]
'''

_DEF_LINE = _BASE.splitlines().index(
    "def create_optimizer(name='adam', learning_rate=0.01):") + 1
_ASSUMPTION = ('`@configurable` of create_optimizer() hands each call to its '
               'body and gives back what the body returns')


def _migrated(tmp_path, unsafe_fixes):
  return holder_tests._migrated(tmp_path, {'base.py': _BASE, 'sub.py': _SUB},
                                unsafe_fixes)


def test_a_decorated_factory_migrates_only_with_unsafe_fixes(tmp_path):
  _, _, results = _migrated(tmp_path / 'safe', unsafe_fixes=False)
  assert all(r.new == r.old for r in results.values())
  held = '\n'.join(_reasons(results).values())
  assert 'create_optimizer() is decorated with `configurable`' in held
  assert 'an unsafe fix is available, hidden without --unsafe-fixes' in held
  assert _ASSUMPTION in held
  (hidden,) = migrate.unsafe_fixes_hidden(list(results.values()))
  assert hidden[1].line == _DEF_LINE
  project, migrated, results = _migrated(tmp_path / 'unsafe',
                                         unsafe_fixes=True)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), name
  (applied,) = migrate.unsafe_fixes_applied(list(results.values()))
  assert applied[1].line == _DEF_LINE and _ASSUMPTION in applied[1].reason
  base, sub = (results[n].new.decode() for n in ('base.py', 'sub.py'))
  assert 'return flax_optim_rules.adam(learning_rate=learning_rate)' in base
  assert ('self.optimizer = train_state.TrainState.create(apply_fn=None, '
          'params=self._params, tx=optimizer_def)') in base
  assert 'return self.optimizer.params' in base
  assert ('self.optimizer = train_state.TrainState.create(apply_fn=None, '
          'params=self._params, tx=optimizer_def)') in sub
  params, batches = _data()
  _assert_same_bits(_run(project, 'sub', params, batches),
                    _run(migrated, 'sub', params, batches))
