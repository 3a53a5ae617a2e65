"""``migrate`` on optimizers kept on an instance (issue 40): ``self.opt``.

Agents of reinforcement-learning code keep their optimizers on ``self``:
made in ``__init__``, stepped in a method (directly or through a module
function), read in others, unpacked from a step's tuple, returned by a
property. Where every store and read of the attribute is in its class's
methods, migrate rewrites it as it rewrites a name, and the migrated agent
trains bit-identically to the original under the shim; where the attribute
is reached from outside the class, the flow stays as it was, with the
reason. Each project here is written for the test in those shapes.
"""

import ast

import _legacy_imports
import numpy as np
from test_migrate_project import _assert_same_bits
from test_migrate_project import _data
from test_migrate_project import _migrate_into
from test_migrate_project import _reasons
from test_migrate_project import _run
from test_migrate_project import _write

from compat.codemod import _givers
from compat.codemod import _names
from compat.codemod import _self_holders
from compat.codemod import _walk
from compat.codemod import migrate

_STEP = '''import jax
import jax.numpy as jnp
from flax import optim


@jax.jit
def critic_step(optimizer, batch):
  def loss(p):
    return jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
  grad = jax.grad(loss)(optimizer.target)
  return optimizer.apply_gradient(grad)

'''

# Made in __init__ (one through jax.device_put), stepped in a method
# through a module function and directly, read in another method.
_AGENT = _STEP + '''
class Agent:

  def __init__(self, params):
    critic_optimizer = optim.Adam(learning_rate=0.01).create(params)
    self.critic_optimizer = jax.device_put(critic_optimizer)
    self.actor_optimizer = optim.GradientDescent(0.01).create(params)

  def train(self, batch):
    self.critic_optimizer = critic_step(self.critic_optimizer, batch)
    grad = jax.grad(lambda p: jnp.sum(batch['x'] @ p['w']))(
        self.actor_optimizer.target)
    self.actor_optimizer = self.actor_optimizer.apply_gradient(grad)

  def params(self):
    return self.critic_optimizer.target, self.actor_optimizer.target


def train(params, batches):
  agent = Agent(params)
  for batch in batches:
    agent.train(batch)
  return agent.params()
'''

# Two optimizers made by one factory, unpacked into two attributes; a step
# whose tuple is unpacked into the attribute and a loss.
_TUPLES = _STEP + '''
@jax.jit
def actor_step(optimizer, batch):
  def loss(p):
    return jnp.mean(jnp.abs(batch['x'] @ p['w']))
  value, grad = jax.value_and_grad(loss)(optimizer.target)
  return optimizer.apply_gradient(grad), value


def make(params):
  return (optim.Adam(learning_rate=0.01).create(params),
          optim.Adam(learning_rate=0.02).create(params))


class Agent:

  def __init__(self, params):
    self.critic_optimizer, self.actor_optimizer = make(params)
    self.losses = []

  def train(self, batch):
    self.critic_optimizer = critic_step(self.critic_optimizer, batch)
    self.actor_optimizer, loss = actor_step(self.actor_optimizer, batch)
    self.losses.append(loss)

  def params(self):
    return self.critic_optimizer.target, self.actor_optimizer.target


def train(params, batches):
  agent = Agent(params)
  for batch in batches:
    agent.train(batch)
  return agent.params()
'''

# A property returning the optimizer, read through ``self`` in the class.
_PROPERTY = _STEP + '''
class Agent:

  def __init__(self, params):
    self._optimizer = optim.Adam(learning_rate=0.01).create(params)

  @property
  def optimizer(self):
    return self._optimizer

  def train(self, batch):
    self._optimizer = critic_step(self.optimizer, batch)

  def params(self):
    return self.optimizer.target


def train(params, batches):
  agent = Agent(params)
  for batch in batches:
    agent.train(batch)
  return agent.params(), agent.params()
'''


def _migrates_and_trains_alike(tmp_path, source, exact=True):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'agent.py': source})
  results = _migrate_into(project, migrated)
  result = results['agent.py']
  assert not result.plan.leftovers, result.plan.leftovers
  assert not _legacy_imports.legacy_imports(result.new)
  params, batches = _data()
  old = _run(project, 'agent', params, batches)
  new = _run(migrated, 'agent', params, batches)
  if exact:
    _assert_same_bits(old, new)
  else:
    for before, after in zip(old, new):
      np.testing.assert_allclose(after['w'], before['w'], rtol=1e-5,
                                 atol=1e-7)
  return result.new.decode()


def test_an_attribute_made_in_init_stepped_and_read_in_methods(tmp_path):
  # The direct step runs eagerly: the original's step through the shim is
  # compiled (its multiply and subtract fused), Optax's runs op by op, so
  # they agree to rounding, not to the bit (the jitted step, to the bit:
  # the other tests).
  new = _migrates_and_trains_alike(tmp_path, _AGENT, exact=False)
  assert ('self.actor_optimizer = train_state.TrainState.create('
          'apply_fn=None, params=params,') in new
  assert ('self.actor_optimizer = self.actor_optimizer.apply_gradients('
          'grads=grad)') in new
  assert ('return self.critic_optimizer.params, '
          'self.actor_optimizer.params') in new


def test_a_tuple_unpacked_into_two_attributes(tmp_path):
  new = _migrates_and_trains_alike(tmp_path, _TUPLES)
  assert ('self.critic_optimizer, self.actor_optimizer = make(params)'
          in new)
  assert 'return optimizer.apply_gradients(grads=grad), value' in new
  assert ('return self.critic_optimizer.params, '
          'self.actor_optimizer.params') in new


def test_a_property_returning_the_attribute(tmp_path):
  new = _migrates_and_trains_alike(tmp_path, _PROPERTY)
  assert 'return self.optimizer.params' in new


def _kept_whole(tmp_path, files):
  """Migrates ``files``; asserts nothing changed; the reasons by line."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, files)
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert result.new == result.old, name
  params, batches = _data()
  _assert_same_bits(_run(project, 'agent', params, batches),
                    _run(migrated, 'agent', params, batches))
  return _reasons(results)


def _line(source, text) -> int:
  """The line of ``source`` that holds ``text`` (the only one)."""
  lines = [n for n, line in enumerate(source.splitlines(), 1) if text in line]
  assert len(lines) == 1, (text, lines)
  return lines[0]


def test_an_attribute_read_outside_its_class_keeps_the_flow(tmp_path):
  # ``train`` reads ``agent.critic_optimizer``: not through the class.
  source = _TUPLES.replace('  return agent.params()\n',
                           '  return (agent.critic_optimizer.target,\n'
                           '          agent.params()[1])\n')
  reasons = _kept_whole(tmp_path, {'agent.py': source})
  why = reasons['agent.py', _line(source, '= make(params)')]
  assert '`self.critic_optimizer` takes the optimizer of the tuple' in why
  outside = _line(source, 'return (agent.critic_optimizer')
  assert (f'`.critic_optimizer` is also named at line {outside} '
          '(`agent.critic_optimizer`), outside the methods of Agent') in why


def test_an_attribute_named_in_another_module_keeps_the_flow(tmp_path):
  report = ('def report(agent):\n'
            '  return agent.actor_optimizer.state.step\n')
  reasons = _kept_whole(tmp_path, {'agent.py': _AGENT, 'report.py': report})
  why = reasons['agent.py', _line(_AGENT, 'self.actor_optimizer = optim')]
  assert 'stored in `self.actor_optimizer`' in why
  assert 'report.py:2, outside the methods of Agent' in why


def test_an_attribute_given_to_getattr_or_the_instance_handed_on_is_kept(
    tmp_path):
  by_name = _AGENT.replace(
      '  return agent.params()\n',
      "  return getattr(agent, 'critic_optimizer').target, agent.params()[1]\n")
  stored = _line(by_name, 'self.critic_optimizer = jax.device_put')
  why = _kept_whole(tmp_path / 'a', {'agent.py': by_name})['agent.py', stored]
  named = _line(by_name, "getattr(agent, 'critic_optimizer')")
  assert f"is also named at line {named} (`'critic_optimizer'`)" in why
  handed = _AGENT.replace('  def params(self):\n',
                          '  def params(self):\n    print(self)\n')
  why = _kept_whole(tmp_path / 'b', {'agent.py': handed})['agent.py', stored]
  assert 'the instance `self` itself goes into `print(self)`' in why


def test_a_library_base_class_keeps_the_attribute():
  # A base outside the project (here flax's Module) may read its
  # instances' attributes: the optimizer stays with the shim.
  source = _AGENT.replace('class Agent:', 'class Agent(nn.Module):').replace(
      'from flax import optim', 'from flax import linen as nn, optim')
  new, plan = migrate.migrate_source(source.encode())
  assert new == source.encode()
  assert any('derives from `nn.Module`, not a class of the project' in
             left.reason for left in plan.leftovers)


def test_a_store_not_provably_an_optimizer_keeps_the_attribute(tmp_path):
  # A load method restores with serialization.from_bytes, which migrate
  # does not follow (as for a name): the attribute stays, and says why.
  source = _AGENT.replace('import jax\n', 'import jax\nfrom flax import '
                          'serialization\n', 1).replace(
                              '  def params(self):\n',
                              '  def load(self, data):\n'
                              '    self.actor_optimizer = serialization.'
                              'from_bytes(\n'
                              '        self.actor_optimizer, data)\n\n'
                              '  def params(self):\n')
  reasons = _kept_whole(tmp_path, {'agent.py': source})
  why = reasons['agent.py', _line(source, 'self.actor_optimizer = optim')]
  load = _line(source, 'self.actor_optimizer = serialization')
  assert ('`self.actor_optimizer` also takes `serialization.from_bytes('
          f'self.actor_optimizer, data)` (line {load}), not provably an '
          'optimizer') in why


def test_a_subclass_reading_the_attribute_keeps_it(tmp_path):
  # The subclass's ``self.critic_optimizer`` is the same attribute of the
  # same instances, read where the base class's methods are not.
  source = _AGENT.replace('\n\ndef train(', '''

class Logged(Agent):

  def log(self):
    print(self.critic_optimizer.state.step)


def train(''')
  reasons = _kept_whole(tmp_path, {'agent.py': source})
  why = reasons['agent.py', _line(source, 'self.critic_optimizer = jax')]
  assert ('`self.critic_optimizer` is also an attribute of Logged, which '
          'shares instances with Agent') in why


def test_an_attribute_protocol_keeps_every_attribute_of_the_class():
  source = _AGENT.replace('  def params(self):\n',
                          '  def state(self):\n'
                          '    return dict(self.__dict__)\n\n'
                          '  def params(self):\n')
  new, plan = migrate.migrate_source(source.encode())
  assert new == source.encode()
  assert any('state() reaches `self.__dict__`' in left.reason
             for left in plan.leftovers)


_BASE = '''import abc


class Base(abc.ABC):

  @abc.abstractmethod
  def train(self, batch):
    """One step."""
'''


def test_a_project_base_deriving_from_abc_lets_the_attribute_migrate(
    tmp_path):
  # Siblings of one project base (an abstract class) keep attributes of
  # the same name apart: neither derives from the other.
  source = _AGENT.replace('import jax\n', 'import base\nimport jax\n', 1)
  source = source.replace('class Agent:', 'class Agent(base.Base):')
  other = ('import base\n\n\n'
           'class Other(base.Base):\n\n'
           '  def __init__(self):\n'
           '    self.critic_optimizer = None\n\n'
           '  def train(self, batch):\n'
           '    return self.critic_optimizer\n')
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'agent.py': source, 'base.py': _BASE, 'other.py': other})
  results = _migrate_into(project, migrated)
  assert not results['agent.py'].plan.leftovers
  assert b'self.critic_optimizer.params' in results['agent.py'].new
  params, batches = _data()
  for before, after in zip(_run(project, 'agent', params, batches),
                           _run(migrated, 'agent', params, batches)):
    np.testing.assert_allclose(after['w'], before['w'], rtol=1e-5, atol=1e-7)



def test_a_module_setting_attributes_by_a_computed_name_keeps_them():
  source = _AGENT.replace('  return agent.params()\n',
                          '  for name, value in {}.items():\n'
                          '    setattr(agent, name, value)\n'
                          '  return agent.params()\n')
  new, plan = migrate.migrate_source(source.encode())
  assert new == source.encode()
  assert any('`setattr(agent, name, value)` (line '
             f'{_line(source, "setattr(")}) reaches attributes by a name '
             'migrate cannot read' in left.reason for left in plan.leftovers)


def test_a_tuple_display_unpacked_into_two_attributes(tmp_path):
  source = _AGENT.replace(
      '    self.critic_optimizer = jax.device_put(critic_optimizer)\n'
      '    self.actor_optimizer = optim.GradientDescent(0.01).create(params)',
      '    actor_optimizer = optim.GradientDescent(0.01).create(params)\n'
      '    self.critic_optimizer, self.actor_optimizer = (critic_optimizer,\n'
      '                                                   actor_optimizer)')
  new = _migrates_and_trains_alike(tmp_path, source, exact=False)
  assert 'self.critic_optimizer, self.actor_optimizer = (' in new
  assert 'return self.critic_optimizer.params' in new


def test_a_subclass_in_another_module_storing_the_attribute_is_the_reason(
    tmp_path):
  # JaxFullRainbowAgent (its own module) derives from JaxDQNAgent and
  # stores ``self.optimizer`` too, here also None, no optimizer: the flow
  # stays, and the report names the subclass.
  subclass = ('import agent\n\n\n'
              'class Fuller(agent.Agent):\n\n'
              '  def reset(self, params):\n'
              '    self.actor_optimizer = agent.optim.GradientDescent(0.01)'
              '.create(params)\n\n'
              '  def forget(self):\n'
              '    self.actor_optimizer = None\n')
  reasons = _kept_whole(tmp_path, {'agent.py': _AGENT, 'fuller.py': subclass})
  why = reasons['agent.py', _line(_AGENT, 'self.actor_optimizer = optim')]
  assert ('`self.actor_optimizer` is also an attribute of Fuller, which '
          'shares instances with Agent, in another module (') in why
  assert ('fuller.py:7): not followed in ') in why
  assert ('fuller.py: `self.actor_optimizer` also takes `None` (line 10), '
          'not provably an optimizer') in why


# A base class in one module keeping ``self.critic_optimizer``, made in a
# method a subclass in another module overrides, stepped in the base's
# method the subclass runs through ``super(...)`` and in its own module's
# step (dopamine's agents: JaxDQNAgent and its subclasses' modules).
_HOLDER_BASE = _STEP + '''
class Agent:

  def __init__(self, params):
    self.build(params)

  def build(self, params):
    self.critic_optimizer = optim.Adam(learning_rate=0.01).create(params)

  def train(self, batch):
    self.critic_optimizer = critic_step(self.critic_optimizer, batch)

  def params(self):
    return self.critic_optimizer.target
'''

_SUBCLASS = '''import jax
from flax import optim

import base


@jax.jit
def actor_step(optimizer, batch):
  grad = jax.grad(lambda p: jax.numpy.sum(batch['x'] @ p['w']))(
      optimizer.target)
  return optimizer.apply_gradient(grad)


class Fuller(base.Agent):

  def build(self, params):
    self.critic_optimizer = optim.Adam(learning_rate=0.02).create(params)

  def train(self, batch):
    super(Fuller, self).train(batch)
    self.critic_optimizer = actor_step(self.critic_optimizer, batch)


def train(params, batches):
  agent = Fuller(params)
  for batch in batches:
    agent.train(batch)
  return agent.params()
'''


def _migrates_whole_and_trains_alike(tmp_path, files) -> dict:
  """Migrates the project of ``files`` (its agent in ``agent.py``): nothing
  left, no flax.optim import, and the copies train to the same bits."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, files)
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), name
  params, batches = _data()
  _assert_same_bits(_run(project, 'agent', params, batches),
                    _run(migrated, 'agent', params, batches))
  return results


def test_a_base_and_its_subclass_in_another_module_are_one_holder(tmp_path):
  results = _migrates_whole_and_trains_alike(tmp_path, {
      'base.py': _HOLDER_BASE, 'agent.py': _SUBCLASS})
  base, subclass = results['base.py'].new.decode(), (
      results['agent.py'].new.decode())
  assert ('self.critic_optimizer = train_state.TrainState.create('
          'apply_fn=None, params=params,') in base
  assert 'return optimizer.apply_gradients(grads=grad)' in base
  assert 'return self.critic_optimizer.params' in base
  assert ('self.critic_optimizer = train_state.TrainState.create('
          'apply_fn=None, params=params,') in subclass
  assert 'return optimizer.apply_gradients(grads=grad)' in subclass
  assert 'optimizer.params)' in subclass


def test_a_subclass_module_rolls_back_with_its_base_module(tmp_path):
  # The base's module keeps its flow (a definition made by a function a
  # decorator of the user's hands on, as gin's configurable does: callers
  # migrate cannot see); the subclass's module proves the attribute on its
  # own, but is linked to the base's: kept whole with it.
  held = _HOLDER_BASE.replace('from flax import optim\n', (
      'from flax import optim\n\nREGISTERED = []\n\n\n'
      'def configurable(function):\n  REGISTERED.append(function)\n'
      '  return function\n\n\n@configurable\n'
      'def make_def():\n  return optim.Adam(learning_rate=0.01)\n')).replace(
          'optim.Adam(learning_rate=0.01).create(params)',
          'make_def().create(params)')
  reasons = _kept_whole(tmp_path, {'base.py': held, 'agent.py': _SUBCLASS})
  why = reasons['agent.py', _line(_SUBCLASS, 'learning_rate=0.02')]
  assert ('stores or reads `self.critic_optimizer`, which Agent (declared '
          'at ') in why
  assert 'one holder with Fuller, migrated together or not at all' in why


# dopamine's cycle across modules: the base's module function ``train``
# steps the optimizer it is given and returns it with the loss; the base
# class and its subclass in another module store that back on
# ``self.optimizer``. ``train`` gives an optimizer only if its callers pass
# one, which they read from ``self.optimizer``, which holds what ``train``
# gave: proven together (the greatest fixpoint of ``_givers``) or not at all.
_CYCLE_BASE = '''import jax
import jax.numpy as jnp
from flax import optim


@jax.jit
def train(optimizer, batch):
  def loss(p):
    return jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
  value, grad = jax.value_and_grad(loss)(optimizer.target)
  optimizer = optimizer.apply_gradient(grad)
  return optimizer, value


class Agent:

  def __init__(self, params):
    self.build(params)
    self.losses = []

  def build(self, params):
    self.optimizer = optim.Adam(learning_rate=0.01).create(params)

  def step(self, batch):
    self.optimizer, loss = train(self.optimizer, batch)
    self.losses.append(loss)

  def params(self):
    return self.optimizer.target
'''

_CYCLE_SUBCLASS = '''import base


class Fuller(base.Agent):

  def step(self, batch):
    self.optimizer, loss = base.train(self.optimizer, batch)
    self.losses.append(2 * loss)


def train(params, batches):
  agent = Fuller(params)
  for batch in batches:
    agent.step(batch)
  return agent.params()
'''


def test_a_step_whose_optimizer_comes_back_through_a_subclass_migrates(
    tmp_path):
  results = _migrates_whole_and_trains_alike(tmp_path, {
      'base.py': _CYCLE_BASE, 'agent.py': _CYCLE_SUBCLASS})
  base = results['base.py'].new.decode()
  assert ('self.optimizer = train_state.TrainState.create(apply_fn=None, '
          'params=params,') in base
  assert 'optimizer = optimizer.apply_gradients(grads=grad)' in base
  assert 'self.optimizer, loss = train(self.optimizer, batch)' in base
  assert 'return self.optimizer.params' in base
  # The subclass's module only passes and stores the optimizer: unchanged.
  assert results['agent.py'].new == results['agent.py'].old


def test_a_cycle_with_a_return_not_an_optimizer_keeps_the_flow(tmp_path):
  # ``train`` may also return what its caller hands it as ``restored``,
  # which no caller makes an optimizer; or the subclass also stores what a
  # method is handed. Either disproves the optimistic start: the whole
  # cycle stays, and the report names the store in the subclass's module
  # that holds it (``train``'s result, which its own unproven caller
  # makes unproven).
  returns_other = _CYCLE_BASE.replace(
      'def train(optimizer, batch):',
      'def train(optimizer, batch, restored=None):').replace(
          '  optimizer = optimizer.apply_gradient(grad)\n', (
              '  if restored is not None:\n'
              '    return restored, value\n'
              '  optimizer = optimizer.apply_gradient(grad)\n'))
  stores_other = _CYCLE_SUBCLASS.replace('\n\ndef train(', (
      '\n  def load(self, state):\n    self.optimizer = state\n\n\n'
      'def train('))
  for name, base, subclass in (('a', returns_other, _CYCLE_SUBCLASS),
                               ('b', _CYCLE_BASE, stores_other)):
    reasons = _kept_whole(tmp_path / name, {'base.py': base,
                                            'agent.py': subclass})
    why = reasons['base.py', _line(base, 'self.optimizer = optim')]
    assert ('agent.py: `self.optimizer` also takes `base.train('
            f'self.optimizer, batch)` (line {_line(subclass, "base.train(")})'
            ', not provably an optimizer') in why, name


def test_a_fixpoint_that_does_not_settle_proves_from_nothing(tmp_path,
                                                            monkeypatch):
  # One round allowed: what it proves differs from the optimistic start,
  # so ``_givers`` falls back to one pass from nothing, which proves no
  # function of the cycle (as before the fixpoint): the flow stays whole.
  monkeypatch.setattr(_givers, '_MAX_ROUNDS', 1)
  reasons = _kept_whole(tmp_path, {'base.py': _CYCLE_BASE,
                                   'agent.py': _CYCLE_SUBCLASS})
  why = reasons['base.py', _line(_CYCLE_BASE, 'self.optimizer = optim')]
  assert ('`self.optimizer` also takes `base.train(self.optimizer, batch)`'
          in why)


def test_an_attribute_that_holds_no_optimizer_links_no_modules(tmp_path):
  # ``self.scale`` (a number, kept by the base, read by the subclass in
  # another module) is asked about while the flow's fixpoint still takes
  # every name for an optimizer; dropped after, it links nothing: the
  # report of the flow kept (its store not an optimizer) does not name it.
  base = _CYCLE_BASE.replace(
      '  def __init__(self, params):\n',
      '  def __init__(self, params, scale=2.0):\n    self.scale = scale\n')
  subclass = _CYCLE_SUBCLASS.replace('2 * loss', 'self.scale * loss').replace(
      '\n\ndef train(', ('\n  def load(self, state):\n'
                        '    self.optimizer = state\n\n\ndef train('))
  reasons = _kept_whole(tmp_path, {'base.py': base, 'agent.py': subclass})
  assert reasons
  assert not [why for why in reasons.values() if 'self.scale' in why]


def test_a_module_read_once_gives_each_flow_answers_of_its_own(monkeypatch):
  """The project's phases build a flow of one module again and again: its
  attributes on ``self`` are read once (in a run), and what one flow's
  questions add (an attribute disproven) is not another's."""
  tree = ast.parse(_AGENT)
  names = _names.ModuleNames(tree)
  read = []
  attributes = _self_holders.SelfAttributes
  read_class = attributes._read_class
  monkeypatch.setattr(attributes, '_read_class', lambda self, owner: (
      read.append(owner.name), read_class(self, owner))[1])
  _walk.start_run()
  try:
    _walk.keep(tree)
    one, two = attributes.of(tree, names), attributes.of(tree, names)
  finally:
    _walk.forget()
  fresh = attributes(tree, names)
  assert read == ['Agent', 'Agent']  # (once for both, once for ``fresh``)
  assert one.stores == two.stores == fresh.stores
  key = _self_holders.Key(tree.body[-2], 'critic_optimizer')
  one.unproven(key, one.stores[key][0])
  assert key in one.why_not
  assert key not in two.why_not and two.why_not == fresh.why_not
