"""``migrate`` on a class of the user's that wraps its optimizer (issue 40).

jaxrl's shape: a ``flax.struct`` dataclass ``Model`` with an ``optimizer:
Optional[Optimizer]`` field, a method that makes the optimizer and one,
``apply_gradient(loss_fn)``, that steps it inside; another module reaches
those methods through a parameter annotated ``Model`` or through an
attribute of a ``Pair`` (annotated ``Model`` there), the pair typed by
its parameter's annotation or by a helper's tuple returning its
``replace``; a method empties the field (``.replace(optimizer=None)``).
The calls of the user's own ``apply_gradient`` are no flax.optim use:
they stay, the method's body is rewritten with the field's flow, and the
migrated program trains bit-identically to the original under the shim.
A receiver migrate cannot type keeps the flow as it was.
"""

import _legacy_imports
from test_migrate_project import _assert_same_bits
from test_migrate_project import _data
from test_migrate_project import _migrate_into
from test_migrate_project import _run
from test_migrate_project import _write

_COMMON = '''from typing import Any, Optional, Tuple

import flax
import jax
from flax import optim


@flax.struct.dataclass
class Model:
  params: Optional[dict] = None
  optimizer: Optional[optim.Optimizer] = None

  def with_optimizer(self, learning_rate):
    optimizer = optim.Adam(learning_rate).create(self.params)
    return self.replace(params=None, optimizer=optimizer)

  def apply_gradient(self, loss_fn) -> Tuple[Any, 'Model']:
    grad, info = jax.grad(loss_fn, has_aux=True)(self.optimizer.target)
    new_optimizer = self.optimizer.apply_gradient(grad)
    return self.replace(optimizer=new_optimizer), info

  def frozen(self):
    return self.replace(params=self.optimizer.target, optimizer=None)


@flax.struct.dataclass
class Pair:
  actor: Model
  critic: Model


# A helper handing the holder back in a tuple, through its ``replace``
# (jaxrl's ``models, v1, v2 = get_value(models, ...)``).
def counted(pair: Pair, batch):
  new_pair = pair.replace(actor=pair.actor)
  return new_pair, batch['x'].shape[0]


class Names:
  # Another class with an attribute ``critic``, not annotated: what
  # ``x.critic`` is follows from the class ``x`` is typed by.
  def __init__(self):
    self.critic = 'critic'
'''

_LEARNER = '''import jax
import jax.numpy as jnp

from common import Model
from common import Pair
from common import counted


def _loss(batch):
  def loss_fn(p):
    loss = jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
    return loss, {'loss': loss}
  return loss_fn


@jax.jit
def update_actor(actor: Model, batch):
  return actor.apply_gradient(_loss(batch))


@jax.jit
def update_pair(pair: Pair, batch):
  pair, size = counted(pair, batch)
  critic, _ = pair.critic.apply_gradient(_loss(batch))
  return pair.replace(critic=critic)


def train(params, batches):
  actor = Model(params=params).with_optimizer(0.01)
  pair = Pair(actor=actor, critic=Model(params=params).with_optimizer(0.02))
  for batch in batches:
    actor, _ = update_actor(actor, batch)
    pair = update_pair(pair, batch)
  return actor.frozen().params, pair.critic.optimizer.target
'''


def test_a_model_class_wrapping_its_optimizer_trains_alike(tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'common.py': _COMMON, 'learner.py': _LEARNER})
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not result.left, (name, result.left)
    assert not _legacy_imports.legacy_imports(result.new), name
  common = results['common.py'].new.decode()
  assert 'optimizer: Optional[train_state.TrainState] = None' in common
  assert 'new_optimizer = self.optimizer.apply_gradients(grads=grad)' in (
      common)
  assert ('return self.replace(params=self.optimizer.params, '
          'optimizer=None)') in common
  learner = results['learner.py'].new.decode()
  # The user's own method is called as before; the field reads change.
  assert 'return actor.apply_gradient(_loss(batch))' in learner
  assert 'critic, _ = pair.critic.apply_gradient(_loss(batch))' in learner
  assert 'return actor.frozen().params, pair.critic.optimizer.params' in (
      learner)
  params, batches = _data()
  old_actor, old_critic = _run(project, 'learner', params, batches)
  new_actor, new_critic = _run(migrated, 'learner', params, batches)
  _assert_same_bits(old_actor, new_actor)
  _assert_same_bits(old_critic, new_critic)


def test_an_untyped_receiver_keeps_the_flow(tmp_path):
  # ``update_actor(actor, batch)`` unannotated: ``actor.apply_gradient``
  # may be an Optimizer's, so the field's flow stays whole; annotated, the
  # same project migrates whole.
  learner = _LEARNER.replace('def update_actor(actor: Model, batch)',
                             'def update_actor(actor, batch)')
  for source, kept in ((learner, True), (_LEARNER, False)):
    files = {'common.py': _COMMON, 'learner.py': source}
    project, migrated = tmp_path / str(kept) / 'p', tmp_path / str(kept) / 'm'
    _write(project, files)
    results = _migrate_into(project, migrated)
    assert kept == all(r.new == r.old for r in results.values())
  reasons = '\n'.join(l.reason for l in (
      _migrate_into(tmp_path / 'True' / 'p', tmp_path / 'again')[
          'learner.py'].left))
  assert 'not provably a flax.optim Optimizer' in reasons


_EMPTIED = {
    'state.py': '''from typing import Optional

import flax
from flax import optim


@flax.struct.dataclass
class Holder:
  params: Optional[dict] = None
  optimizer: Optional[optim.Optimizer] = None

  def frozen(self):
    return self.replace(params=self.optimizer.target, optimizer=None)
''',
    'trainer.py': '''import jax
import jax.numpy as jnp
from flax import optim

import state as state_lib


@jax.jit
def train_step(holder, batch):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] - batch['y']) ** 2))(holder.optimizer.target)
  return holder.replace(optimizer=holder.optimizer.apply_gradient(grad))


def train(params, batches):
  holder = state_lib.Holder(optimizer=optim.Adam(0.01).create(params))
  for batch in batches:
    holder = train_step(holder, batch)
  return holder.frozen().params
''',
}


def test_none_stored_in_an_optional_optimizer_field_migrates(tmp_path):
  # ``.replace(optimizer=None)`` empties the field: None before and after,
  # so the field's flow migrates (before: "`None` goes into the field ...
  # not provably a flax.optim Optimizer", and the whole flow stayed).
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, _EMPTIED)
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert not result.left, (name, result.left)
  assert ('return self.replace(params=self.optimizer.params, '
          'optimizer=None)') in results['state.py'].new.decode()
  params, batches = _data()
  _assert_same_bits(_run(project, 'trainer', params, batches),
                    _run(migrated, 'trainer', params, batches))


def test_a_definition_passed_to_the_holder_method_migrates_with_it(
    tmp_path):
  # jaxrl's ``with_optimizer(self, optim_def)``, given ``optim.Adam(...)``
  # by every call in another module: the definitions migrate with the
  # field's flow (``_def_params``; before, the flow stayed for "migrate
  # does not follow a definition passed as an argument").
  common = _COMMON.replace(
      '''  def with_optimizer(self, learning_rate):
    optimizer = optim.Adam(learning_rate).create(self.params)''',
      '''  def with_optimizer(self, optim_def):
    optimizer = optim_def.create(self.params)''')
  learner = 'from flax import optim\n' + _LEARNER.replace(
      'with_optimizer(0.01)', 'with_optimizer(optim.Adam(0.01))').replace(
          'with_optimizer(0.02)', 'with_optimizer(optim.Adam(0.02))')
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'common.py': common, 'learner.py': learner})
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert not result.left, (name, result.left)
    assert not _legacy_imports.legacy_imports(result.new), name
  params, batches = _data()
  for old, new in zip(_run(project, 'learner', params, batches),
                      _run(migrated, 'learner', params, batches)):
    _assert_same_bits(old, new)
