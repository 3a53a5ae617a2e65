"""``migrate`` where optimizers go through call forms (issue 40).

jax_rl's MPO shape, one pattern a test:

* an optimizer bound by ``functools.partial`` to a loss function nested in
  a step, the partial differentiated (``jax.grad(partial(loss_fn, opt),
  has_aux=True)(params)``), the loss function stepping the optimizer and
  giving it back in its auxiliary output, a tuple nested in the returned
  one (``return loss, (opt, err)``), unpacked as ``grad, (opt, _) = ...``;
* a property of an agent class returning a tuple display that holds an
  optimizer kept on ``self``, spread into a step's call
  (``step(*self.step_args, batch)``).

Each migrates whole where every link is proven, and the migrated program
trains bit-identically to the original under the shim; one link migrate
cannot follow keeps the flow as it was, with its reason.
"""

import _legacy_imports
from test_migrate_project import _assert_same_bits
from test_migrate_project import _data
from test_migrate_project import _migrate_into
from test_migrate_project import _run
from test_migrate_project import _write

# Two nested defs named ``loss_fn`` (as in MPO.py): the differentiated one
# is told by where its name is bound, not by its name.
_DIFFERENTIATED = '''from functools import partial

import jax
import jax.numpy as jnp
from flax import optim


@jax.jit
def scale_step(optimizer, reg):
  def loss_fn(p):
    return jnp.sum(p['s'] * reg)

  grad = jax.grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad)


@jax.jit
def update(optimizer, scale_optimizer, batch):
  def loss_fn(so, params):
    err = jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)
    so = scale_step(so, jax.lax.stop_gradient(err) - 1.0)
    loss = err * jax.lax.stop_gradient(so.target['s'])
    return loss, (so, err)

  GRAD_CALL
  return optimizer.apply_gradient(grad), scale_optimizer


def train(params, batches):
  optimizer = optim.Adam(learning_rate=0.01).create(params)
  scale_optimizer = optim.Adam(learning_rate=0.1).create({'s': jnp.ones(())})
  for batch in batches:
    optimizer, scale_optimizer = update(optimizer, scale_optimizer, batch)
  return optimizer.target, scale_optimizer.target
'''

_GRAD = ('grad, (scale_optimizer, _) = jax.grad(\n'
         '      partial(loss_fn, scale_optimizer), has_aux=True)('
         'optimizer.target)')
_VALUE_AND_GRAD = ('(_, (scale_optimizer, _)), grad = jax.value_and_grad(\n'
                   '      partial(loss_fn, scale_optimizer), has_aux=True)('
                   'optimizer.target)')


def _assert_whole(results):
  for name, result in results.items():
    assert not result.plan.leftovers, (name, result.plan.leftovers)
    assert not result.left, (name, result.left)
    assert not _legacy_imports.legacy_imports(result.new), name


def _trains_alike(project, migrated):
  params, batches = _data()
  _assert_same_bits(_run(project, 'learner', params, batches),
                    _run(migrated, 'learner', params, batches))


def test_an_optimizer_bound_by_partial_and_differentiated_migrates(tmp_path):
  for index, call in enumerate((_GRAD, _VALUE_AND_GRAD)):
    project, migrated = tmp_path / f'p{index}', tmp_path / f'm{index}'
    _write(project, {'learner.py': _DIFFERENTIATED.replace('GRAD_CALL',
                                                           call)})
    results = _migrate_into(project, migrated)
    _assert_whole(results)
    learner = results['learner.py'].new.decode()
    assert "loss = err * jax.lax.stop_gradient(so.params['s'])" in learner
    assert call.replace('.target', '.params') in learner
    assert 'return optimizer.apply_gradients(grads=grad), scale_optimizer' in (
        learner)
    _trains_alike(project, migrated)


def test_an_auxiliary_optimizer_going_where_migrate_cannot_follow(tmp_path):
  # The auxiliary output kept whole in a name and unpacked later (migrate
  # does not follow a tuple into a name's uses), or the loss function also
  # called by name (then not every call of it is a gradient's): the flow
  # stays as it was, with the reason; as in the test above, it migrates.
  kept = {
      'aux': ('grad, aux = jax.grad(\n'
              '      partial(loss_fn, scale_optimizer), has_aux=True)('
              'optimizer.target)\n'
              '  scale_optimizer, _ = aux'),
      'called': _GRAD + '\n  loss_fn(scale_optimizer, optimizer.target)',
      'whole': _GRAD,
  }
  for name, call in kept.items():
    project = tmp_path / name
    _write(project, {'learner.py': _DIFFERENTIATED.replace('GRAD_CALL', call)})
    result = _migrate_into(project, tmp_path / f'{name}-m')['learner.py']
    assert (result.new == result.old) == (name != 'whole'), name
    reasons = '\n'.join(l.reason for l in result.plan.leftovers)
    assert ('`scale_optimizer` also holds values not provably a flax.optim '
            'Optimizer' in reasons) == (name != 'whole'), name


_AGENT = '''import jax
import jax.numpy as jnp
from flax import optim


@jax.jit
def step(optimizer, scale, batch):
  def loss_fn(params):
    return scale * jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)

  grad = jax.grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad)


class Agent:

  def __init__(self, params):
    self.optimizer = optim.Adam(learning_rate=0.01).create(params)
    self.scale = 0.5

  @property
  def step_args(self):
    return (self.optimizer, self.scale)

  def train_on(self, batch):
    self.optimizer = step(*self.step_args, batch)

  def result(self):
    return self.optimizer.target
READ_OTHERWISE

def train(params, batches):
  agent = Agent(params)
  for batch in batches:
    agent.train_on(batch)
  return agent.result()
'''


def test_a_property_tuple_spread_into_a_step_migrates(tmp_path):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'learner.py': _AGENT.replace('READ_OTHERWISE', '')})
  results = _migrate_into(project, migrated)
  _assert_whole(results)
  learner = results['learner.py'].new.decode()
  assert 'self.optimizer = step(*self.step_args, batch)' in learner
  assert 'return optimizer.apply_gradients(grads=grad)' in learner
  assert 'return self.optimizer.params' in learner
  _trains_alike(project, migrated)


def test_a_property_tuple_read_otherwise_keeps_the_flow(tmp_path):
  # The same tuple also read whole, its optimizer reached by index: not
  # followed, so the flow stays as it was, with the reason (read only
  # spread, as in the test above, it migrates).
  read = '''
  def first(self):
    return self.step_args[0].target
'''
  for kept, extra in ((True, read), (False, '')):
    project = tmp_path / str(kept)
    _write(project, {'learner.py': _AGENT.replace('READ_OTHERWISE', extra)})
    result = _migrate_into(project, tmp_path / f'{kept}-m')['learner.py']
    assert (result.new == result.old) == kept
    reasons = '\n'.join(l.reason for l in result.plan.leftovers)
    assert ('`self.optimizer` is returned by a method, whose callers '
            'migrate does not follow' in reasons) == kept


_NESTED = '''import jax
import jax.numpy as jnp
from flax import optim


@jax.jit
def update(optimizer, batch):
  def loss_fn(params):
    return jnp.mean((batch['x'] @ params['w'] - batch['y']) ** 2)

  loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
  return loss, (optimizer.apply_gradient(grad), grad)


def train(params, batches):
  optimizer = optim.Momentum(learning_rate=0.01, beta=0.9).create(params)
  for batch in batches:
    UNPACK
  return optimizer.target
'''


def test_a_tuple_nested_in_a_returned_one_migrates(tmp_path):
  # ``return loss, (optimizer, grad)`` unpacked as ``_, (optimizer, _) =``:
  # followed into the nested tuple; kept whole in a name and unpacked
  # later, it is not, and the flow stays as it was, with the reason.
  for kept, unpack in ((False, '_, (optimizer, _) = update(optimizer, batch)'),
                       (True, '_, pair = update(optimizer, batch)\n'
                              '    optimizer, _ = pair')):
    project, migrated = tmp_path / str(kept), tmp_path / f'{kept}-m'
    _write(project, {'learner.py': _NESTED.replace('UNPACK', unpack)})
    results = _migrate_into(project, migrated)
    result = results['learner.py']
    assert (result.new == result.old) == kept
    if kept:
      reasons = '\n'.join(l.reason for l in result.plan.leftovers)
      assert ('`optimizer` also holds values not provably a flax.optim '
              'Optimizer' in reasons)
      continue
    _assert_whole(results)
    learner = result.new.decode()
    assert ('return loss, (optimizer.apply_gradients(grads=grad), grad)'
            in learner)
    _trains_alike(project, migrated)


def test_a_returned_tuple_indexed_where_it_holds_the_optimizer(tmp_path):
  # ``update(...)[0]`` takes the optimizer out of the tuple by index, where
  # migrate does not follow it: the flow stays as it was, with the reason
  # (before: rewritten, and ``stepped.target`` met a TrainState); ``[1]``
  # takes the loss only, and the flow migrates.
  returns_pair = _NESTED.replace(
      'return loss, (optimizer.apply_gradient(grad), grad)',
      'return optimizer.apply_gradient(grad), loss')
  tails = {0: 'stepped = update(optimizer, batch)[0]\n'
              '    print(stepped.target)',
           1: 'print(update(optimizer, batch)[1])'}
  for index, tail in tails.items():
    project = tmp_path / str(index)
    _write(project, {'learner.py': returns_pair.replace('UNPACK', tail)})
    result = _migrate_into(project, tmp_path / f'{index}-m')['learner.py']
    assert (result.new == result.old) == (index == 0)
    reasons = '\n'.join(l.reason for l in result.plan.leftovers)
    assert ('gives a tuple holding an optimizer, read here by index' in
            reasons) == (index == 0)
