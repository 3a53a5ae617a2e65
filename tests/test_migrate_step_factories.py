"""``migrate`` where a module of helpers builds the update step and the
training script steps the optimizer with it (uncertainty-baselines'
``deterministic_utils.create_update_fn``, big_vision's alike), also
through a name the script binds to one of several such modules by its
config (ub's ``model_utils = deterministic_utils`` or
``batchensemble_utils``).

The step is nested in its factory under ``@functools.partial(jax.jit)``
and never called in its own module: its optimizer parameter is proven by
the calls in other modules (``_step_calls``), each one, directly or
through a function the script hands the step to (``finetune(update_fn=
...)``). Migrated, the program trains to the same bits as the original
under the shim; a call that passes something else, or a step that goes
where its calls are not seen, keeps the flow as it was; so does a module
alias that goes where it is not followed.
"""

import test_migrate_project as project_tests

_UTILS = '''import functools

import jax
import jax.numpy as jnp


def create_update_fn(scale):

  @functools.partial(jax.jit)
  def update_fn(opt, lr, batch):
    def loss_fn(params):
      error = batch['x'] @ params['w'] - scale * batch['y']
      return jnp.mean(error ** 2)
    loss, grad = jax.value_and_grad(loss_fn)(opt.target)
    opt = opt.apply_gradient(grad, learning_rate=lr)
    return opt, loss

  return update_fn
'''

_TRAIN = '''import flax
import jax

import utils


def finetune(*, update_fn, opt, batches):
  losses = []
  for step, batch in enumerate(batches):
    opt, loss = update_fn(opt, 0.05 / (step + 1), batch)
    losses.append(loss)
  return jax.device_get(opt), losses


def train(params, batches):
  opt_def = flax.optim.Momentum(learning_rate=0.1, beta=0.9)
  opt = jax.jit(opt_def.create)(params)
  update_fn = utils.create_update_fn(2.0)
  opt, _ = update_fn(opt, 0.1, batches[0])
  opt, losses = finetune(update_fn=update_fn, opt=opt, batches=batches[1:])
  assert len(losses) == len(batches) - 1
  return opt
'''

_FILES = {'utils.py': _UTILS, 'train.py': _TRAIN}


def test_a_step_built_elsewhere_is_proven_by_its_calls(tmp_path):
  project, migrated, results = project_tests._migrated(tmp_path, _FILES)
  project_tests._assert_fully_migrated(results)
  helpers = results['utils.py'].new
  assert b'loss_fn)(opt.params)' in helpers
  assert b'.apply_gradients(grads=grad)' in helpers
  assert b'@functools.partial(jax.jit)' in helpers
  assert b'inject_hyperparams' in results['train.py'].new
  project_tests._assert_trains_alike(project, migrated, 'train')


def test_a_step_whose_calls_are_not_all_seen_keeps_its_flow(tmp_path):
  held = {
      'another value passed': ('train.py',
                               'opt, _ = update_fn(opt, 0.1, batches[0])',
                               'update_fn(opt.target, 0.1, batches[0])'),
      'the step stored': ('train.py', '  opt, _ = update_fn(',
                          '  kept = [update_fn]\n  opt, _ = update_fn('),
      'the factory passed on': ('train.py', '  update_fn = utils.',
                                '  print(utils.create_update_fn)\n'
                                '  update_fn = utils.'),
  }
  for what, (name, old, new) in held.items():
    files = dict(_FILES)
    assert old in files[name], what
    files[name] = files[name].replace(old, new)
    _, _, results = project_tests._migrated(
        tmp_path / what.replace(' ', '_'), files)
    project_tests._assert_unchanged(results)


# The script picks the helpers' module by its config; both modules define
# the factory, and the steps they build differ (a scale, a clipped
# gradient) and name their last parameter differently.
_CLIPPED_UTILS = _UTILS.replace(
    '    opt = opt.apply_gradient(grad, learning_rate=lr)',
    '    grad = jax.tree_util.tree_map(lambda g: jnp.clip(g, -0.5, 0.5), '
    'grad)\n    opt = opt.apply_gradient(grad, learning_rate=lr)').replace(
        'batch', 'examples')

_CHOSEN_TRAIN = _TRAIN.replace('import utils\n', 'import clipped_utils\n'
                               'import utils\n').replace(
    '  update_fn = utils.create_update_fn(2.0)',
    '  if clipped:\n    model_utils = clipped_utils\n  else:\n'
    '    model_utils = utils\n'
    '  update_fn = model_utils.create_update_fn(2.0)').replace(
        'def train(params, batches):', 'def train(params, batches, '
        'clipped=True):')

_CHOSEN_FILES = {'utils.py': _UTILS, 'clipped_utils.py': _CLIPPED_UTILS,
                 'train.py': _CHOSEN_TRAIN}


def test_a_module_alias_chosen_by_config_runs_each_modules_step(tmp_path):
  project, migrated, results = project_tests._migrated(tmp_path,
                                                       _CHOSEN_FILES)
  project_tests._assert_fully_migrated(results)
  for name in ('utils.py', 'clipped_utils.py'):
    assert b'.apply_gradients(grads=grad)' in results[name].new, name
  assert b'model_utils.create_update_fn(2.0)' in results['train.py'].new
  for clipped in (True, False):
    project_tests._assert_trains_alike(project, migrated, 'train', clipped)


def test_a_module_alias_going_elsewhere_keeps_the_flows(tmp_path):
  held = {
      'the alias passed on': ('  update_fn = model_utils.',
                              '  print(model_utils)\n'
                              '  update_fn = model_utils.'),
      'the alias bound otherwise': ('    model_utils = utils\n',
                                    '    model_utils = make_utils()\n'),
  }
  for what, (old, new) in held.items():
    files = dict(_CHOSEN_FILES)
    assert old in files['train.py'], what
    files['train.py'] = files['train.py'].replace(old, new)
    _, _, results = project_tests._migrated(
        tmp_path / what.replace(' ', '_'), files)
    project_tests._assert_unchanged(results)


# The alias runs plain functions of the modules: one steps the optimizer
# with a rate per step (the script's definition gets the rate injected),
# the other reads it.
_STEPPER = '''import jax
import jax.numpy as jnp


@jax.jit
def step(opt, batch, lr):
  def loss_fn(params):
    return jnp.mean((batch['x'] @ params['w'] - SCALE * batch['y']) ** 2)
  return opt.apply_gradient(jax.grad(loss_fn)(opt.target), learning_rate=lr)


def norm(opt):
  return jnp.sum(opt.target['w'] ** 2)
'''

_STEPPER_TRAIN = '''import flax

import plain_steps
import scaled_steps


def train(params, batches, scaled=False):
  if scaled:
    steps = scaled_steps
  else:
    steps = plain_steps
  opt = flax.optim.Momentum(learning_rate=0.01, beta=0.9).create(params)
  for index, batch in enumerate(batches):
    opt = steps.step(opt, batch, 0.01 / (index + 1))
  assert steps.norm(opt) > 0
  return opt
'''


def test_a_module_alias_runs_each_modules_function_taking_the_optimizer(
    tmp_path):
  files = {'plain_steps.py': 'SCALE = 1.0\n' + _STEPPER,
           'scaled_steps.py': 'SCALE = 3.0\n' + _STEPPER,
           'train.py': _STEPPER_TRAIN}
  project, migrated, results = project_tests._migrated(tmp_path, files)
  project_tests._assert_fully_migrated(results)
  assert b'inject_learning_rate' in results['train.py'].new or (
      b'inject_hyperparams' in results['train.py'].new)
  for scaled in (True, False):
    project_tests._assert_trains_alike(project, migrated, 'train', scaled)
