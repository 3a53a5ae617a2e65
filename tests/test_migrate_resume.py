"""A migrated program resumes from the checkpoints its original wrote.

A user migrates a long experiment part way through: the original program
(under the shim) has written checkpoints with its own save code; the
migrated program resumes with its own restore code. Each project here is
written for the test in the shape of one restore route of real programs
(flax's v0.3.3 lm1b/wmt, imagenet, mipnerf, score_sde, vit, nested). It trains 3
steps under the shim and saves; the migrated copy resumes from that file
and trains 3 more: params, step and every moment are the bits of the
original's uninterrupted 6-step run.
"""

import sys

import _clu_files
from flax import serialization
import jax
import numpy as np
import pytest
from test_migrate_project import _assert_fully_migrated
from test_migrate_project import _assert_same_bits
from test_migrate_project import _migrated
from test_migrate_project import _run

from compat.codemod import migrate
import flax_optim_rules

STEPS = 3

_HEAD = '''import flax
import jax
import jax.numpy as jnp
from flax import optim
from flax import serialization
from flax.training import checkpoints


@jax.jit
def step(optimizer, batch):
  grad = jax.grad(lambda p: jnp.mean(
      (batch['x'] @ p['w'] + p['b'] - batch['y']) ** 2))(optimizer.target)
  return optimizer.apply_gradient(grad)


'''

# Each ``train(params, batches, workdir, resume)`` returns the optimizer
# and the step its own code counts (a holder's field, a tuple's element).
_ROUTES = {
    # lm1b/wmt: the optimizer alone.
    'optimizer_alone': '''def train(params, batches, workdir, resume):
  optimizer = optim.Adam(0.1, beta2=0.99).create(params)
  if resume:
    optimizer = checkpoints.restore_checkpoint(workdir, optimizer)
  for batch in batches:
    optimizer = step(optimizer, batch)
  checkpoints.save_checkpoint(workdir, optimizer, int(optimizer.state.step),
                              overwrite=True)
  return optimizer, optimizer.state.step
''',
    # imagenet: a flax.struct dataclass, restored by a helper given it
    # (here by keyword).
    'struct_dataclass': '''@flax.struct.dataclass
class TrainState:
  step: int
  optimizer: optim.Optimizer


@jax.jit
def train_step(state, batch):
  return state.replace(step=state.step + 1,
                       optimizer=step(state.optimizer, batch))


def restore_checkpoint(state, workdir):
  return checkpoints.restore_checkpoint(workdir, target=state)


def train(params, batches, workdir, resume):
  optimizer = optim.Momentum(0.1, beta=0.9).create(params)
  state = TrainState(step=0, optimizer=optimizer)
  if resume:
    state = restore_checkpoint(state, workdir)
  for batch in batches:
    state = train_step(state, batch)
  checkpoints.save_checkpoint(workdir, state, int(state.step),
                              overwrite=True)
  return state.optimizer, state.step
''',
    # nerfies: restored where it is made, then rebound by a step the flow
    # does not follow (what the name holds at the restore decides).
    'restored_where_made': '''@flax.struct.dataclass
class TrainState:
  optimizer: optim.Optimizer


def train_step(state, batch):
  return state.replace(optimizer=step(state.optimizer, batch)), None


STEP_FUNCTIONS = {'train': train_step}


def train(params, batches, workdir, resume):
  state = TrainState(optimizer=optim.Adam(0.1, beta2=0.99).create(params))
  if resume:
    state = checkpoints.restore_checkpoint(workdir, state)
  for batch in batches:
    state, _ = STEP_FUNCTIONS['train'](state, batch)
  checkpoints.save_checkpoint(workdir, state,
                              int(state.optimizer.state.step), overwrite=True)
  return state.optimizer, state.optimizer.state.step
''',
    # scenic: a MultiOptimizer of two rules in a dataclass.
    'multi_optimizer': '''@flax.struct.dataclass
class TrainState:
  global_step: int
  optimizer: optim.Optimizer


def train(params, batches, workdir, resume):
  weights = optim.ModelParamTraversal(lambda path, _: path.endswith('w'))
  biases = optim.ModelParamTraversal(lambda path, _: path.endswith('b'))
  optimizer = optim.MultiOptimizer(
      (weights, optim.Adam(0.1, beta2=0.99)),
      (biases, optim.Momentum(0.1, beta=0.9))).create(params)
  state = TrainState(global_step=0, optimizer=optimizer)
  if resume:
    state = checkpoints.restore_checkpoint(workdir, state)
  for batch in batches:
    state = state.replace(global_step=state.global_step + 1,
                          optimizer=step(state.optimizer, batch))
  checkpoints.save_checkpoint(workdir, state, int(state.global_step),
                              overwrite=True)
  return state.optimizer, state.global_step
''',
    # vit: a tuple of the optimizer and the step, keywords kept.
    'tuple_with_the_step': '''def train(params, batches, workdir, resume):
  optimizer = optim.Adam(0.1, beta2=0.99).create(params)
  initial_step = 0
  if resume:
    optimizer, initial_step = checkpoints.restore_checkpoint(
        workdir, (optimizer, initial_step), prefix='ckpt_')
  for batch in batches:
    optimizer = step(optimizer, batch)
    initial_step += 1
  checkpoints.save_checkpoint(workdir, (optimizer, initial_step),
                              initial_step, prefix='ckpt_', overwrite=True)
  return optimizer, initial_step
''',
    # A dict of the optimizer and other values (kept in flax.optim's
    # layout at both ends, as ``_legacy_trees`` keeps dicts saved as trees).
    'dict_display': '''def train(params, batches, workdir, resume):
  optimizer = optim.Adam(0.1, beta2=0.99).create(params)
  epoch = 0
  if resume:
    checkpoint = checkpoints.restore_checkpoint(
        workdir, {'optimizer': optimizer, 'epoch': epoch})
    optimizer, epoch = checkpoint['optimizer'], checkpoint['epoch']
  for batch in batches:
    optimizer = step(optimizer, batch)
  checkpoints.save_checkpoint(workdir, {'optimizer': optimizer,
                                        'epoch': epoch + 1},
                              int(optimizer.state.step), overwrite=True)
  return optimizer, optimizer.state.step
''',
    # score_sde: flax.serialization's bytes of a dataclass.
    'from_bytes': '''@flax.struct.dataclass
class State:
  step: int
  optimizer: optim.Optimizer


def restore(path, state):
  with open(path, 'rb') as f:
    return serialization.from_bytes(state, f.read())


def train(params, batches, workdir, resume):
  state = State(step=0, optimizer=optim.Adam(0.1, beta2=0.99).create(params))
  path = workdir + '/state.msgpack'
  if resume:
    state = restore(path, state)
  for batch in batches:
    state = state.replace(step=state.step + 1,
                          optimizer=step(state.optimizer, batch))
  with open(path, 'wb') as f:
    f.write(serialization.to_bytes(state))
  return state.optimizer, state.step
''',
    # hypernerf: WeightNorm by a flag, off (its restore reads both layouts;
    # an old file of a WeightNorm optimizer is refused: see below).
    'weight_norm_in_the_module': '''USE_WEIGHT_NORM = False


@flax.struct.dataclass
class TrainState:
  optimizer: optim.Optimizer


def train(params, batches, workdir, resume):
  optimizer_def = optim.Adam(0.1, beta2=0.99)
  if USE_WEIGHT_NORM:
    optimizer_def = optim.WeightNorm(optimizer_def)
  state = TrainState(optimizer=optimizer_def.create(params))
  if resume:
    state = checkpoints.restore_checkpoint(workdir, state)
  for batch in batches:
    state = state.replace(optimizer=step(state.optimizer, batch))
  checkpoints.save_checkpoint(workdir, state,
                              int(state.optimizer.state.step), overwrite=True)
  return state.optimizer, state.optimizer.state.step
''',
    # nested, l2p: clu's MultihostCheckpoint (flax's bytes of a dataclass),
    # restored or, in a new run, initialized.
    'clu_checkpoint': '''from clu import checkpoint as clu_checkpoint


@flax.struct.dataclass
class TrainState:
  step: int
  optimizer: optim.Optimizer


def train(params, batches, workdir, resume):
  del resume  # (restore_or_initialize: the directory decides)
  optimizer = optim.Adam(0.1, beta2=0.99).create(params)
  state = TrainState(step=0, optimizer=optimizer)
  ckpt = clu_checkpoint.MultihostCheckpoint(workdir + '/checkpoints')
  state = ckpt.restore_or_initialize(state)
  for batch in batches:
    state = state.replace(step=state.step + 1,
                          optimizer=step(state.optimizer, batch))
  ckpt.save(state)
  return state.optimizer, state.step
''',
    # l2p: the state reaches clu's restore through ``**kwargs`` (migrate
    # cannot tell what it holds; clu's checkpoint holds the whole state).
    'clu_checkpoint_of_kwargs': '''from clu import checkpoint as clu_checkpoint


@flax.struct.dataclass
class TrainState:
  step: int
  optimizer: optim.Optimizer


def resume_or_start(workdir, *, state):
  ckpt = clu_checkpoint.MultihostCheckpoint(workdir + '/checkpoints')
  return ckpt, ckpt.restore_or_initialize(state)


def train(params, batches, workdir, resume):
  del resume  # (restore_or_initialize: the directory decides)
  optimizer = optim.Momentum(0.1, beta=0.9).create(params)
  kwargs = {'state': TrainState(step=0, optimizer=optimizer)}
  ckpt, state = resume_or_start(workdir, **kwargs)
  for batch in batches:
    state = state.replace(step=state.step + 1,
                          optimizer=step(state.optimizer, batch))
  ckpt.save(state)
  return state.optimizer, state.step
''',
    # A state dict read raw, then given to from_state_dict.
    'from_state_dict': '''@flax.struct.dataclass
class State:
  step: int
  optimizer: optim.Optimizer


def train(params, batches, workdir, resume):
  optimizer = optim.Momentum(0.1, beta=0.9).create(params)
  state = State(step=0, optimizer=optimizer)
  if resume:
    raw = checkpoints.restore_checkpoint(workdir, None)
    state = serialization.from_state_dict(state, raw)
  for batch in batches:
    state = state.replace(step=state.step + 1,
                          optimizer=step(state.optimizer, batch))
  checkpoints.save_checkpoint(workdir, state, int(state.step),
                              overwrite=True)
  return state.optimizer, state.step
''',
}

# What the migrated restore reads (the rewrite's spelling).
_REWRITTEN = {
    'optimizer_alone': 'flax_optim_rules.from_either_layout(optimizer, '
                       'checkpoints.restore_checkpoint(workdir, None))',
    'struct_dataclass': 'flax_optim_rules.from_either_layout(state, '
                        'checkpoints.restore_checkpoint(workdir, '
                        'target=None))',
    'multi_optimizer': 'flax_optim_rules.from_either_layout(state, '
                       'checkpoints.restore_checkpoint(workdir, None))',
    'restored_where_made': 'flax_optim_rules.from_either_layout(state, '
                           'checkpoints.restore_checkpoint(workdir, None))',
    'tuple_with_the_step': (
        'flax_optim_rules.from_either_layout((optimizer, initial_step), '
        'checkpoints.restore_checkpoint(\n        workdir, None, '
        "prefix='ckpt_'))"),
    'dict_display': ('optimizer, epoch = flax_optim_rules.from_legacy_tree('
                     "optimizer, checkpoint['optimizer']), "
                     "checkpoint['epoch']"),
    'from_bytes': 'flax_optim_rules.from_either_layout(state, '
                  'serialization.msgpack_restore(f.read()))',
    'from_state_dict': 'flax_optim_rules.from_either_layout(state, raw)',
    'weight_norm_in_the_module': 'flax_optim_rules.from_either_layout(state, '
                                 'checkpoints.restore_checkpoint(workdir, '
                                 'None))',
    'clu_checkpoint': (
        '(flax_optim_rules.from_either_layout(state, ckpt.restore(None)) if '
        'ckpt.get_latest_checkpoint_to_restore_from() is not None else '
        'ckpt.restore_or_initialize(state))'),
    'clu_checkpoint_of_kwargs': (
        'ckpt, (flax_optim_rules.from_either_layout(state, ckpt.restore(None))'
        ' if ckpt.get_latest_checkpoint_to_restore_from() is not None else '
        'ckpt.restore_or_initialize(state))'),
}


def _data():
  rng = np.random.RandomState(11)
  params = {'w': np.asarray(rng.randn(4, 2), np.float32),
            'b': np.asarray(rng.randn(2), np.float32)}
  batches = [{'x': np.asarray(rng.randn(8, 4), np.float32),
              'y': np.asarray(rng.randn(8, 2), np.float32)}
             for _ in range(2 * STEPS)]
  return jax.tree_util.tree_map(jax.numpy.asarray, (params, batches))


def _assert_resumed_as_uninterrupted(old, new):
  """The migrated run's TrainState is the original's Optimizer: params,
  step and every moment (flax.optim's state dict of each), bit for bit;
  the step its own code counts too."""
  (old_optimizer, old_count), (new_state, new_count) = old, new
  assert int(old_count) == int(new_count) == 2 * STEPS
  old_dict = serialization.to_state_dict(old_optimizer)
  new_dict = jax.device_get(flax_optim_rules.state_dict(new_state))
  assert jax.tree_util.tree_structure(old_dict) == (
      jax.tree_util.tree_structure(new_dict))
  _assert_same_bits(old_dict, new_dict)
  assert int(new_state.step) == 2 * STEPS


# clu is not one of the test extras (its releases pin jax and flax floors of
# their own): its routes run in `tox -e slow`, which installs it.
_CLU_ROUTES = frozenset(route for route in _ROUTES if route.startswith('clu'))


@pytest.mark.parametrize('route', [
    pytest.param(route, marks=pytest.mark.slow) if route in _CLU_ROUTES
    else route for route in sorted(_ROUTES)])
def test_the_migrated_program_resumes_from_the_originals_checkpoint(
    tmp_path, route, monkeypatch):
  if route in _CLU_ROUTES:
    # clu's checkpoint module (TensorFlow keeps its bookkeeping only).
    monkeypatch.setitem(sys.modules, 'clu.checkpoint',
                        _clu_files.clu_checkpoint_module())
  _assert_resumes(tmp_path, {'train.py': _HEAD + _ROUTES[route]},
                  _REWRITTEN[route])


def _assert_resumes(tmp_path, files, rewritten):
  """The project ``files`` migrates fully, its ``train.py`` holds
  ``rewritten``, and its migrated program resumes from its original's
  checkpoint as if never interrupted. Returns migrate's results."""
  project, migrated, results = _migrated(tmp_path, files)
  _assert_fully_migrated(results)
  assert rewritten in results['train.py'].new.decode()
  params, batches = _data()
  whole, resumed = tmp_path / 'whole', tmp_path / 'resumed'
  whole.mkdir()
  resumed.mkdir()
  old = _run(project, 'train', params, batches, str(whole), False)
  _run(project, 'train', params, batches[:STEPS], str(resumed), False)
  new = _run(migrated, 'train', params, batches[STEPS:], str(resumed), True)
  _assert_resumed_as_uninterrupted(old, new)
  _, again = migrate.migrate_paths([str(migrated)])
  assert all(result.new == result.old for result in again)
  return results


# meliad: the state class of another module, known by a module-level alias
# of it, restored by a method of the trainer that its other method calls
# through ``self``.
_ALIASED_STATE_MODULE = '''from typing import Any

import flax
from flax import optim


@flax.struct.dataclass
class TrainState:
  optimizer: optim.Optimizer
  state: Any
'''

_ALIASED_STATE = _HEAD + '''import state_lib

TrainState = state_lib.TrainState


class Trainer:

  def __init__(self, workdir):
    self.workdir = workdir

  def restore_checkpoint(self, train_state: TrainState) -> TrainState:
    return checkpoints.restore_checkpoint(self.workdir, train_state)

  def initialize(self, params, resume):
    optimizer = optim.Adam(0.1, beta2=0.99).create(params)
    tstate = TrainState(optimizer, {'cache': jnp.ones(2)})
    if resume:
      tstate = self.restore_checkpoint(tstate)
    return tstate


def train(params, batches, workdir, resume):
  tstate = Trainer(workdir).initialize(params, resume)
  for batch in batches:
    tstate = TrainState(step(tstate.optimizer, batch), tstate.state)
  checkpoints.save_checkpoint(workdir, tstate,
                              int(tstate.optimizer.state.step), overwrite=True)
  return tstate.optimizer, tstate.optimizer.state.step
'''


def test_a_state_class_known_by_a_module_alias_resumes_from_the_original(
    tmp_path):
  results = _assert_resumes(
      tmp_path, {'state_lib.py': _ALIASED_STATE_MODULE,
                 'train.py': _ALIASED_STATE},
      'flax_optim_rules.from_either_layout(train_state, '
      'checkpoints.restore_checkpoint(self.workdir, None))')
  # The trainer's own restore method is no other library's restore: no
  # note sends the user to convert files it reads.
  assert not [note for note in results['train.py'].plan.notes
              if note.construct == 'checkpoint'], results['train.py'].plan.notes


_UNSEEN_RESTORES = _HEAD + '''import templates


@flax.struct.dataclass
class State:
  step: int
  optimizer: optim.Optimizer


def train(params, batches, workdir, ckpt):
  state = State(step=0, optimizer=optim.Adam(0.1).create(params))
  state = ckpt.restore_or_initialize(state)
  extra = checkpoints.restore_checkpoint(workdir, templates.extra())
  for batch in batches:
    state = state.replace(optimizer=step(state.optimizer, batch))
  return state, extra
'''


def test_a_restore_migrate_cannot_rewrite_is_noted_with_the_convert_command(
    tmp_path, capsys):
  # A restore_or_initialize of a checkpoint given as a parameter is
  # another library's restore (migrate cannot see it is clu's), and the
  # template another module makes is not seen: the flow migrates,
  # and the report and the terminal say what old checkpoints need there.
  project = tmp_path / 'project'
  project.mkdir()
  (project / 'train.py').write_text(_UNSEEN_RESTORES)
  lines = _UNSEEN_RESTORES.splitlines()
  clu_line = 1 + next(i for i, l in enumerate(lines)
                      if 'restore_or_initialize' in l)
  flax_line = 1 + next(i for i, l in enumerate(lines)
                       if 'templates.extra()' in l)
  migrate.main([str(project), '--out', str(tmp_path / 'out'),
                '--report', str(tmp_path / 'report.md')])
  terminal = capsys.readouterr().out
  report = (tmp_path / 'report.md').read_text()
  expected = {
      clu_line: '`ckpt.restore_or_initialize` is not a restore migrate '
                'rewrites',
      flax_line: 'migrate cannot tell whether `templates.extra()` holds an '
                 'optimizer it migrates'}
  for line, why in expected.items():
    assert f'train.py:{line}: note (checkpoint): this restore is not ' \
        f'rewritten to read both checkpoint layouts: {why}' in terminal, \
        terminal
    assert f'- line {line} (checkpoint): ' in report, report
    assert why in report
  assert terminal.count('flax-optim-compat convert SRC DST --to '
                        'train_state') == 2
  assert 'left (' not in terminal  # the flow migrated


def test_an_old_checkpoint_of_a_weight_norm_optimizer_is_refused_and_noted(
    tmp_path, capsys):
  # from_either_layout has no view of WeightNorm's state in flax.optim's
  # layout: the migrated restore raises naming the path, never gives the
  # template back, and the report and terminal name the convert command.
  source = _HEAD + _ROUTES['weight_norm_in_the_module'].replace(
      'USE_WEIGHT_NORM = False', 'USE_WEIGHT_NORM = True')
  project, migrated, results = _migrated(tmp_path, {'train.py': source})
  _assert_fully_migrated(results)
  assert _REWRITTEN['weight_norm_in_the_module'] in (
      results['train.py'].new.decode())
  params, batches = _data()
  workdir = tmp_path / 'checkpoints'
  workdir.mkdir()
  _run(project, 'train', params, batches[:STEPS], str(workdir), False)
  with pytest.raises(ValueError, match="optimizer: the checkpoint holds "
                     "flax.optim's Optimizer layout"):
    _run(migrated, 'train', params, batches[STEPS:], str(workdir), True)
  migrate.main([str(project), '--out', str(tmp_path / 'out')])
  line = 1 + next(i for i, text in enumerate(source.splitlines())
                  if 'restore_checkpoint(' in text)
  assert (f'train.py:{line}: note (checkpoint): this restore is rewritten '
          'to read both checkpoint layouts, but this module builds '
          'weight_norm definitions') in capsys.readouterr().out
