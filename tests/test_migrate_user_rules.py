"""``migrate`` on a user's own ``OptimizerDef`` subclass (issue 24, point 5).

The class stays as the user wrote it on ``flax_optim_rules.RuleDef``; its
calls become definitions (``.to_optax()``, the rate injected where it is set
per step) and the rest of each flow moves to ``TrainState``. The patterns are
the corpus's (vision_transformer's ``momentum_clip.Optimizer`` used from
``train.py``; t5x's and scenic's own rules), in small modules written here:
migrated, the project trains bit-identically to the original under the shim
with no flax.optim, legacy_optim or compat import; where one use cannot be
followed, the class and every module of its flow stay as they were.
"""

import ast
import json
import sys

import numpy as np
import pytest
from test_migrate_project import _assert_fully_migrated
from test_migrate_project import _assert_same_bits
from test_migrate_project import _migrate_into
from test_migrate_project import _run
from test_migrate_project import _write

from compat import testing
from compat.codemod import _user_rules
from compat.codemod import migrate

STEPS = 5

# A half-precision momentum rule with global-norm clipping that overrides
# the tree-level apply_gradient and builds OptimizerState by hand.
_RULES = '''"""The user's own rule."""
import flax
import flax.optim
import jax
import jax.numpy as jnp


class ClippedMomentum(flax.optim.OptimizerDef):
  """Momentum kept in half precision, gradients clipped by global norm."""

  @flax.struct.dataclass
  class HyperParams:
    learning_rate: float
    beta: float
    grad_norm_clip: float

  @flax.struct.dataclass
  class State:
    momentum: jax.Array

  def __init__(self, learning_rate=None, beta=0.9, grad_norm_clip=1.0):
    super().__init__(
        ClippedMomentum.HyperParams(learning_rate, beta, grad_norm_clip))

  def init_param_state(self, param):
    return ClippedMomentum.State(jnp.zeros_like(param, jnp.bfloat16))

  def apply_gradient(self, hyper_params, params, state, grads):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    states = treedef.flatten_up_to(state.param_states)
    grads = treedef.flatten_up_to(grads)
    norm = jnp.sqrt(sum(jnp.vdot(g, g) for g in grads))
    factor = jnp.minimum(1.0, hyper_params.grad_norm_clip / norm)
    out = [self.apply_param_gradient(state.step, hyper_params, p, s,
                                     factor * g)
           for p, s, g in zip(leaves, states, grads)]
    new_params = jax.tree_util.tree_unflatten(treedef, [o[0] for o in out])
    new_states = jax.tree_util.tree_unflatten(treedef, [o[1] for o in out])
    return new_params, flax.optim.OptimizerState(state.step + 1, new_states)

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    del step
    momentum = hyper_params.beta * state.momentum + grad
    new_param = param - hyper_params.learning_rate * momentum
    return new_param, ClippedMomentum.State(momentum.astype(jnp.bfloat16))
'''

# The training module: creates the rule's optimizer, replicates it, and
# steps it in a pmapped step that a factory returns, with a per-step rate.
_TRAIN = '''"""Training with the user's rule (as vit's train.py)."""
from flax import jax_utils
import jax
import jax.numpy as jnp

import rules


def make_update_fn(lr_fn):

  def update_fn(opt, step, batch):
    def loss_fn(params):
      return jnp.mean((batch['x'] @ params['w'] + params['b'] - batch['y'])
                      ** 2)
    g = jax.grad(loss_fn)(opt.target)
    g = jax.lax.pmean(g, axis_name='batch')
    opt = opt.apply_gradient(g, learning_rate=lr_fn(step))
    return opt

  return jax.pmap(update_fn, axis_name='batch')


def train(params, batches):
  update_fn_repl = make_update_fn(lambda step: 0.1 / (1.0 + step))
  opt = rules.ClippedMomentum(beta=0.8).create(params)
  opt_repl = jax_utils.replicate(opt)
  del opt
  for step, batch in enumerate(batches):
    batch = jax.tree_util.tree_map(lambda x: x[None], batch)
    opt_repl = update_fn_repl(opt_repl, jax_utils.replicate(step), batch)
  return jax_utils.unreplicate(opt_repl).target
'''

# A per-leaf-only rule used in its own module, ``from flax import optim``.
_LEAF_RULE = '''"""A per-leaf rule created where it is defined."""
import jax
import jax.numpy as jnp
from flax import optim
from flax import struct


class Sign(optim.OptimizerDef):

  @struct.dataclass
  class HyperParams:
    learning_rate: float

  def __init__(self, learning_rate=0.01):
    super().__init__(Sign.HyperParams(learning_rate))

  def init_param_state(self, param):
    return ()

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    return param - hyper_params.learning_rate * jnp.sign(grad), state


@jax.jit
def train_step(optimizer, batch):
  def loss_fn(params):
    return jnp.mean((batch['x'] @ params['w'] + params['b'] - batch['y']) ** 2)
  return optimizer.apply_gradient(jax.grad(loss_fn)(optimizer.target))


def train(params, batches):
  optimizer = Sign(learning_rate=0.05).create(params)
  for batch in batches:
    optimizer = train_step(optimizer, batch)
  return optimizer.target
'''


def _data():
  rng = np.random.RandomState(3)
  params = {'w': rng.randn(4, 2).astype(np.float32),
            'b': np.zeros((2,), np.float32)}
  batches = [{'x': rng.randn(8, 4).astype(np.float32),
              'y': rng.randn(8, 2).astype(np.float32)} for _ in range(STEPS)]
  return params, batches


def _migrated_completely(tmp_path, files):
  """``(project, migrated, results)``: ``files`` written and migrated, with
  nothing left and no flax.optim, legacy_optim or compat import."""
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, files)
  results = _migrate_into(project, migrated)
  _assert_fully_migrated(results)
  return project, migrated, results


def test_a_rule_from_another_module_trains_identically_without_the_shim(
    tmp_path):
  project, migrated, results = _migrated_completely(
      tmp_path, {'rules.py': _RULES, 'train.py': _TRAIN})
  rules = results['rules.py'].new
  assert b'class ClippedMomentum(flax_optim_rules.RuleDef):' in rules
  assert b'flax_optim_rules.RuleState(state.step + 1, new_states)' in rules
  assert b'import flax\n' in rules and b'flax.optim' not in rules
  train = results['train.py'].new
  assert (b'tx=flax_optim_rules.inject_learning_rate(rules.ClippedMomentum('
          b'beta=0.8))(learning_rate=0.0))') in train
  assert b'opt.params' in train and b'.target' not in train
  notes = [n.reason for n in results['rules.py'].plan.notes]
  assert any('port it to a plain optax.GradientTransformation' in n
             for n in notes), notes
  params, batches = _data()
  _assert_same_bits(_run(project, 'train', params, batches),
                    _run(migrated, 'train', params, batches))


def test_a_per_leaf_rule_used_in_its_module_trains_identically(tmp_path):
  project, migrated, results = _migrated_completely(
      tmp_path, {'sign.py': _LEAF_RULE})
  result = results['sign.py']
  assert b'class Sign(flax_optim_rules.RuleDef):' in result.new
  assert b'tx=Sign(learning_rate=0.05).to_optax())' in result.new
  params, batches = _data()
  _assert_same_bits(_run(project, 'sign', params, batches),
                    _run(migrated, 'sign', params, batches))


def test_a_use_migrate_cannot_follow_keeps_the_class_and_its_flow(tmp_path):
  # The rule class handed to code migrate does not see: the class keeps its
  # flax.optim base, and the module that calls it is kept with it.
  escaping = _TRAIN.replace(
      'def train(params, batches):',
      'def registry():\n  return {"clipped": rules.ClippedMomentum}\n\n\n'
      'def train(params, batches):')
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'rules.py': _RULES, 'train.py': escaping})
  results = _migrate_into(project, migrated)
  rules = results['rules.py']
  assert b'class ClippedMomentum(flax.optim.OptimizerDef):' in rules.new
  assert any('cannot follow' in left.reason and
             left.construct == 'algorithm'
             for left in rules.plan.leftovers), rules.plan.leftovers
  assert b'.create(params)' in results['train.py'].new


@pytest.mark.parametrize('body, why', [
    ('class Mine(optim.Adam):\n  pass\n', 'only a direct subclass'),
    ('class Mine(optim.OptimizerDef):\n'
     '  def restore(self, target, state, sd):\n'
     '    return self.restore_state(target, state, sd)\n',
     'uses restore_state'),
], ids=['subclass_of_a_builtin', 'asks_for_what_rule_def_lacks'])
def test_a_class_that_cannot_move_stays_with_the_reason(body, why):
  source = f'from flax import optim\n\n\n{body}\n\nx = Mine(0.1).create({{}})\n'
  new, plan = migrate.migrate_source(source.encode(), 'mine.py')
  assert new == source.encode()
  assert any(why in left.reason and
             left.construct == 'optimizer_def_subclass'
             for left in plan.leftovers), plan.leftovers


def test_write_puts_a_port_test_beside_the_rule_and_never_overwrites(
    tmp_path):
  project = tmp_path / 'project'
  _write(project, {'rules.py': _RULES, 'train.py': _TRAIN})
  sources, results = migrate.migrate_paths([str(project)])
  said = migrate.write_port_tests([str(project)], sources, results)
  test_path = project / 'rules_port_test.py'
  assert test_path.exists() and 'written' in said[0], said
  text = test_path.read_text()
  assert 'from compat import testing' in text
  assert 'RULE = rules.ClippedMomentum(learning_rate=1e-2)' in text
  test_path.write_text('# mine\n')
  said = migrate.write_port_tests([str(project)], sources, results)
  assert test_path.read_text() == '# mine\n' and 'exists' in said[0]


def _port_test_module(tmp_path, port_body):
  """The written port test with ``port()``'s body replaced (as the user
  fills it in), imported with the rule module beside it."""
  (tmp_path / 'rules.py').write_text(_RULES.replace(
      'flax.optim.OptimizerDef', 'flax_optim_rules.RuleDef').replace(
          'flax.optim.OptimizerState', 'flax_optim_rules.RuleState').replace(
              'import flax.optim', 'import flax_optim_rules'))
  source = _user_rules.port_test_source('rules', _rules_class())
  if port_body is not None:
    head, _, _ = source.partition('  """Your plain Optax version')
    tail = source[source.index('def _gradients'):]
    source = head + f'  return {port_body}\n\n\n' + tail
  return source


def _rules_class():
  return next(n for n in ast.parse(_RULES).body if isinstance(n, ast.ClassDef))


@pytest.mark.parametrize('port_body, outcome', [
    (None, NotImplementedError),
    ('optax.sgd(1e-2, momentum=0.9)', testing.TrainingDivergence),
    ('RULE.to_optax()', None),
], ids=['before_the_port', 'a_wrong_port', 'a_port_equal_to_the_rule'])
def test_the_port_test_fails_until_the_port_trains_like_the_rule(
    tmp_path, port_body, outcome):
  source = _port_test_module(tmp_path, port_body)
  namespace = {}
  sys.path.insert(0, str(tmp_path))
  try:
    exec(compile(source, 'rules_port_test.py', 'exec'), namespace)  # noqa: S102
    if outcome is None:
      namespace['test_port_trains_like_the_kept_rule']()
    else:
      with pytest.raises(outcome):
        namespace['test_port_trains_like_the_kept_rule']()
  finally:
    sys.path.remove(str(tmp_path))
    sys.modules.pop('rules', None)


def test_a_class_named_only_in_a_config_file_stays(tmp_path):
  # t5x's Adafactor: its gin files configure it, so no Python call of it is
  # seen; their callers would still expect a flax.optim OptimizerDef.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'rules.py': _RULES,
                   'configs/base.gin': 'OPTIMIZER = @rules.ClippedMomentum()\n'
                                       'rules.ClippedMomentum.beta = 0.9\n'})
  result = _migrate_into(project, migrated)['rules.py']
  assert result.new == result.old
  assert any('ClippedMomentum is called nowhere in the scanned code but named '
             f'at {project}/configs/base.gin:1' in left.reason
             for left in result.plan.leftovers), result.plan.leftovers


def test_a_class_called_and_named_nowhere_moves_onto_rule_def(tmp_path):
  # The scanned tree is the program: nothing in it calls or names the class,
  # so it moves onto RuleDef like a called one, and the report says its
  # contract changed for callers outside the tree.
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, {'rules.py': _RULES})
  result = _migrate_into(project, migrated)['rules.py']
  assert b'class ClippedMomentum(flax_optim_rules.RuleDef):' in result.new
  assert not result.plan.leftovers, result.plan.leftovers
  notes = {n.construct: n.reason for n in result.plan.notes}
  assert 'it is now a flax_optim_rules.RuleDef' in notes['called_nowhere']
  assert 'kept as your own rule' in notes['optimizer_def_subclass']


def _notebook(*cells):
  return json.dumps({
      'cells': [{'cell_type': 'code', 'execution_count': None, 'metadata': {},
                 'outputs': [], 'source': cell.splitlines(keepends=True)}
                for cell in cells],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 0}, indent=1)


def test_a_notebook_calling_the_rule_moves_with_it(tmp_path):
  # vision_transformer's notebook: it creates the rule's optimizer and steps
  # it with train.py's pmapped step, which sets the rate per step.
  notebook = _notebook(
      'import rules\nimport train\nfrom flax import jax_utils\n',
      'update_fn_repl = train.make_update_fn(lambda step: 0.1)\n'
      'opt = rules.ClippedMomentum(beta=0.8).create(params)\n'
      'opt_repl = jax_utils.replicate(opt)\n')
  _, _, results = _migrated_completely(
      tmp_path, {'rules.py': _RULES, 'train.py': _TRAIN,
                 'run.ipynb': notebook})
  assert (b'flax_optim_rules.inject_learning_rate(rules.ClippedMomentum('
          b'beta=0.8))(learning_rate=0.0))') in results['run.ipynb'].new
