"""An optimizer over one bare array migrates to a TrainState that steps one.

flax.optim steps a single array (dopamine's SAC keeps its temperature as
``optimizer_def.create(jnp.zeros(1))``); flax's TrainState cannot step one
(``apply_gradients`` asks whether a key is in the gradients first). Where a
``create`` of a module's flow is provably given an array or a number,
every ``create`` of that flow makes ``flax_optim_rules.train_state``'s
TrainState instead (the others may be given an array too: one restored
from a checkpoint), and so do those of the modules whose optimizers may
meet these (one holder kept in two modules); other flows are written as
before.
"""

import importlib
import json
import shutil
import sys

import _legacy_imports
import _migrated_copies
from _migrated_copies import load_module
from flax.training import train_state
import jax.numpy as jnp
import numpy as np
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

# A second create of the same flow, over what the caller restored: not
# provably an array, and one here.
RESUMED = TEMPERATURE + b'''

def resume(log_alpha, steps):
  optimizer = optim.Adam(learning_rate=0.1).create(log_alpha)
  for _ in range(steps):
    optimizer = step(optimizer, 0.5)
  return optimizer.target
'''

ARRAY_STATE = b'rules_train_state.TrainState.create(apply_fn=None'
FLAX_STATE = b'= train_state.TrainState.create(apply_fn=None'


def test_flaxs_train_state_cannot_step_a_bare_array():
  # Why these flows need another TrainState (and the day flax steps one,
  # they need it no longer).
  state = train_state.TrainState.create(apply_fn=None, params=jnp.zeros(1),
                                        tx=optax.adam(0.1))
  with pytest.raises(TypeError):
    state.apply_gradients(grads=jnp.ones(1))


def _migrated_and_original(tmp_path, source):
  """The modules of ``source`` as written (on the shim) and migrated, the
  migrated text: nothing left, no flax.optim import."""
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert not plan.leftovers, plan.leftovers
  assert not _legacy_imports.legacy_imports(new)
  (tmp_path / 'original.py').write_bytes(source)
  (tmp_path / 'migrated.py').write_bytes(new)
  return (load_module(tmp_path / 'original.py', 'temperature_original'),
          load_module(tmp_path / 'migrated.py', 'temperature_migrated'), new)


def _assert_same_bits(got, want):
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype and got.shape == want.shape
  assert got.tobytes() == want.tobytes(), (got, want)


def test_an_optimizer_over_an_array_bound_to_a_name_trains_alike(tmp_path):
  original, migrated, new = _migrated_and_original(tmp_path, TEMPERATURE)
  assert new.count(ARRAY_STATE) == 1 and FLAX_STATE not in new
  _assert_same_bits(migrated.train(5), original.train(5))


@pytest.mark.parametrize('target', [
    b'jnp.zeros(1)', b'jnp.full((2,), 0.5)', b'1.0', b'-1.0',
    b'jax.random.normal(jax.random.PRNGKey(0), (3,))'])
def test_an_optimizer_over_an_array_written_in_create_trains_alike(
    tmp_path, target):
  source = TEMPERATURE.replace(b'.create(log_alpha)',
                               b'.create(' + target + b')')
  original, migrated, new = _migrated_and_original(tmp_path, source)
  assert ARRAY_STATE in new
  _assert_same_bits(migrated.train(4), original.train(4))


def test_a_jitted_create_over_an_array_trains_alike(tmp_path):
  source = TEMPERATURE.replace(
      b'optim.Adam(learning_rate=0.1).create(log_alpha)',
      b'jax.jit(optim.Adam(learning_rate=0.1).create)(log_alpha)')
  original, migrated, new = _migrated_and_original(tmp_path, source)
  assert b'rules_train_state.TrainState.create(apply_fn=None, ' in new
  _assert_same_bits(migrated.train(4), original.train(4))


def test_every_create_of_the_flow_makes_the_state_that_steps_arrays(
    tmp_path):
  original, migrated, new = _migrated_and_original(tmp_path, RESUMED)
  assert new.count(ARRAY_STATE) == 2 and FLAX_STATE not in new
  # The restored create is given an array: flax's TrainState would raise.
  _assert_same_bits(migrated.resume(migrated.train(2), 3),
                    original.resume(original.train(2), 3))


def test_a_dict_create_beside_an_array_create_makes_the_same_state(
    tmp_path):
  source = RESUMED + b'''

def train_dict(steps):
  optimizer = optim.Adam(learning_rate=0.1).create({'a': jnp.ones(2)})
  for _ in range(steps):
    optimizer = optimizer.apply_gradient({'a': jnp.full((2,), 0.25)})
  return optimizer.target['a']
'''
  original, migrated, new = _migrated_and_original(tmp_path, source)
  assert new.count(ARRAY_STATE) == 3 and FLAX_STATE not in new
  _assert_same_bits(migrated.train_dict(3), original.train_dict(3))


@pytest.mark.parametrize('binding', [
    # a dict of arrays: flax's TrainState steps it
    (b'log_alpha = jnp.zeros(1)', b"log_alpha = {'value': jnp.zeros(1)}"),
    # bound to an array once and to something else once: not proven
    (b'log_alpha = jnp.zeros(1)',
     b'log_alpha = jnp.zeros(1)\n  log_alpha = restore(log_alpha)'),
])
def test_a_target_not_proven_an_array_migrates_as_before(binding):
  source = TEMPERATURE.replace(*binding)
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert not plan.leftovers
  assert FLAX_STATE in new and b'rules_train_state' not in new


def test_a_parameter_is_not_proven_an_array():
  source = TEMPERATURE.replace(b'def train(steps):\n  log_alpha = '
                               b'jnp.zeros(1)\n',
                               b'def train(steps, log_alpha):\n')
  new, plan = migrate.migrate_source(source, 'temperature.py')
  assert not plan.leftovers
  assert FLAX_STATE in new and b'rules_train_state' not in new


HOLDER_BASE = b'''\
import jax
import jax.numpy as jnp
from flax import optim


class Agent:

  def __init__(self):
    self.alpha_optimizer = optim.Adam(learning_rate=0.1).create(jnp.zeros(1))

  def step(self):
    grad = jax.grad(lambda a: (a * a + a).sum())(self.alpha_optimizer.target)
    self.alpha_optimizer = self.alpha_optimizer.apply_gradient(grad)
    return self.alpha_optimizer.target
'''

# A subclass in another module creates the same holder's optimizer again,
# over what it restores (an array here, not provably one there).
HOLDER_SUBCLASS = b'''\
from flax import optim

import base


class Resumed(base.Agent):

  def restore(self, log_alpha):
    self.alpha_optimizer = optim.Adam(learning_rate=0.1).create(log_alpha)
'''


def _resumed_run(directory):
  """The project's agent stepped twice, made again over its last value
  (``restore``) and stepped three times more: each step's value."""
  sys.path.insert(0, str(directory))
  try:
    agent = importlib.import_module('agent').Resumed()
    values = [agent.step() for _ in range(2)]
    agent.restore(values[-1])
    return values + [agent.step() for _ in range(3)]
  finally:
    sys.path.remove(str(directory))
    for name in ('agent', 'base'):
      sys.modules.pop(name, None)


def test_a_holder_kept_in_two_modules_makes_the_same_state_in_both(
    tmp_path):
  project = tmp_path / 'project'
  project.mkdir()
  (project / 'base.py').write_bytes(HOLDER_BASE)
  (project / 'agent.py').write_bytes(HOLDER_SUBCLASS)
  original, migrated, problems = _migrated_copies.copies(project, tmp_path)
  assert not problems, problems
  for name in ('base.py', 'agent.py'):
    new = (migrated / name).read_bytes()
    assert new.count(ARRAY_STATE) == 1 and FLAX_STATE not in new, name
  for got, want in zip(_resumed_run(migrated), _resumed_run(original),
                       strict=True):
    _assert_same_bits(got, want)


# The same subclass in a notebook, which builds it, steps it, restores it
# and steps it again.
HOLDER_NOTEBOOK_RUN = b'''\
agent = Resumed()
values = [agent.step() for _ in range(2)]
agent.restore(values[-1])
values += [agent.step() for _ in range(3)]
'''


def _notebook(*cells) -> bytes:
  return json.dumps({
      'cells': [{'cell_type': 'code', 'metadata': {}, 'execution_count': None,
                 'outputs': [], 'source': cell.decode().splitlines(True)}
                for cell in cells],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}).encode()


def _notebook_code(path) -> str:
  """The notebook's code cells, in order, as its kernel runs them."""
  return ''.join(''.join(cell['source'])
                 for cell in json.loads(path.read_bytes())['cells'])


def _notebook_run(directory):
  """The values the notebook of ``directory`` computes, beside the
  project's modules."""
  code = _notebook_code(directory / 'demo.ipynb')
  namespace: dict = {}
  sys.path.insert(0, str(directory))
  try:
    exec(compile(code, str(directory / 'demo.ipynb'), 'exec'), namespace)  # noqa: S102 - the test's own notebook
    return namespace['values']
  finally:
    sys.path.remove(str(directory))
    sys.modules.pop('base', None)


def test_a_notebook_sharing_a_holder_makes_the_same_state(tmp_path):
  # A notebook's creates of a holder whose module makes the state that
  # steps arrays make it too: flax's TrainState over the restored array
  # would fail at the notebook's next step.
  original = tmp_path / 'original'
  original.mkdir()
  (original / 'base.py').write_bytes(HOLDER_BASE)
  (original / 'demo.ipynb').write_bytes(_notebook(
      HOLDER_SUBCLASS,
      HOLDER_NOTEBOOK_RUN))
  migrated = tmp_path / 'migrated'
  shutil.copytree(original, migrated)
  sources, results = migrate.migrate_paths([str(migrated)], 'exact')
  for path, result in zip(sources, results, strict=True):
    assert result.error is None and not result.plan.leftovers, path
    with open(path, 'wb') as f:
      f.write(result.new)
  new = _notebook_code(migrated / 'demo.ipynb').encode()
  assert new.count(ARRAY_STATE) == 1 and FLAX_STATE not in new
  assert not _legacy_imports.legacy_imports(new)
  for got, want in zip(_notebook_run(migrated), _notebook_run(original),
                       strict=True):
    _assert_same_bits(got, want)
