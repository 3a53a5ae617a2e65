"""``migrate`` on a definition passed as an argument (issue 40).

jaxrl's shape: a ``flax.struct`` dataclass ``Model`` whose method
``with_optimizer(self, optim_def)`` makes its optimizer by
``optim_def.create(self.params)``; learners in another module make the
definitions (``optim.Adam(learning_rate=lr)``) and hand them over, on a
receiver typed by a helper returning ``Model(...)`` and by the method
giving its instance back (``actor = actor.with_optimizer(...)``). Every
call passes a definition: the definitions, the optimizer made from them
and every use migrate together, and the migrated program trains
bit-identically to the original under the shim. One call passing what
migrate cannot prove a definition keeps the whole flow, with its reason.
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
class Holder:
  params: Optional[dict] = None
  optimizer: Optional[optim.Optimizer] = None

  def made_with(self, rule):
    optimizer = rule.create(self.params)
    return self.replace(params=None, optimizer=optimizer)

  def apply_gradient(self, loss_fn) -> Tuple[Any, 'Holder']:
    grad, info = jax.grad(loss_fn, has_aux=True)(self.optimizer.target)
    return self.replace(optimizer=self.optimizer.apply_gradient(grad)), info


def make_holder(params):
  return Holder(params=params)
'''

_LEARNER = '''import jax
import jax.numpy as jnp
from flax import optim

from common import Holder
from common import make_holder


def _loss(batch):
  def loss_fn(p):
    loss = jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
    return loss, {'loss': loss}
  return loss_fn


@jax.jit
def update(holder: Holder, batch):
  return holder.apply_gradient(_loss(batch))


def train(params, batches):
  first = make_holder(params)
  first = first.made_with(optim.Adam(learning_rate=0.01))
  second = make_holder(params).made_with(optim.Momentum(0.02, beta=0.8))
  return fit(first, second, batches)


def fit(first, second, batches):
  for batch in batches:
    first, _ = update(first, batch)
    second, _ = update(second, batch)
  return first.optimizer.target, second.optimizer.target
'''


def test_a_definition_every_caller_passes_migrates_with_its_flow(tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'common.py': _COMMON, 'learner.py': _LEARNER})
  results = _migrate_into(project, migrated)
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not result.left, (name, result.left)
    assert not _legacy_imports.legacy_imports(result.new), name
  common = results['common.py'].new.decode()
  assert ('optimizer = train_state.TrainState.create(apply_fn=None, '
          'params=self.params, tx=rule)') in common
  learner = results['learner.py'].new.decode()
  assert ('first = first.made_with(flax_optim_rules.adam('
          'learning_rate=0.01))') in learner
  assert ('second = make_holder(params).made_with('
          'optax.sgd(learning_rate=0.02, momentum=0.8))') in learner
  assert 'return first.optimizer.params, second.optimizer.params' in learner
  params, batches = _data()
  old_first, old_second = _run(project, 'learner', params, batches)
  new_first, new_second = _run(migrated, 'learner', params, batches)
  _assert_same_bits(old_first, new_first)
  _assert_same_bits(old_second, new_second)


def test_one_caller_passing_no_provable_definition_keeps_the_flow(tmp_path):
  # A third call hands over a definition it was given itself (a parameter
  # of a function nobody calls): not provably a flax.optim definition, so
  # every module of the flow stays as it was, with today's reason; without
  # that call, the same project migrates whole.
  unproven = _LEARNER + '''

def train_with(params, given):
  return make_holder(params).made_with(given)
'''
  for source, kept in ((unproven, True), (_LEARNER, False)):
    project = tmp_path / str(kept) / 'project'
    _write(project, {'common.py': _COMMON, 'learner.py': source})
    results = _migrate_into(project, tmp_path / str(kept) / 'migrated')
    assert kept == all(r.new == r.old for r in results.values())
    assert kept == any(r.new == r.old for r in results.values())
    if kept:
      common = results['common.py']
      reasons = '\n'.join(
          l.reason for l in [*common.left, *common.plan.leftovers])
      assert ('of the parameter `rule` of made_with(), and migrate does '
              'not follow a definition passed as an argument') in reasons
