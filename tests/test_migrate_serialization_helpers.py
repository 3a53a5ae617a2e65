"""``migrate`` through the user's own save/load helpers (issue 40).

Agents saved their optimizers with small functions of their own that only
hand the value to flax.serialization (``save_model(f, opt)`` writes
``to_bytes(opt)``, ``opt = load_model(f, opt)`` returns ``from_bytes(opt,
...)``). migrate follows the optimizer through such a call and leaves the
helper as it is: the call gives it flax.optim's tree of the TrainState and
turns what it restores back into one. So the migrated agent writes the
very bytes the original wrote, and resumes from the original's file
bit-identically.
"""

import shutil

import _legacy_imports
from test_migrate_project import _assert_same_bits
from test_migrate_project import _data
from test_migrate_project import _migrate_into
from test_migrate_project import _reasons
from test_migrate_project import _run
from test_migrate_project import _write

from compat.codemod import migrate
from compat.codemod import scan

_SAVING = '''from flax import serialization


def save_model(filename, model):
  with open(filename, 'wb') as fp:
    fp.write(serialization.to_bytes(model))


def load_model(filename, model):
  with open(filename, 'rb') as fp:
    return serialization.from_bytes(model, fp.read())
'''

_AGENT = '''import jax
import jax.numpy as jnp
from flax import optim

from saving import load_model
from saving import save_model


@jax.jit
def critic_step(optimizer, batch):
  def loss(p):
    return jnp.mean((batch['x'] @ p['w'] - batch['y']) ** 2)
  grad = jax.grad(loss)(optimizer.target)
  return optimizer.apply_gradient(grad)


class Agent:

  def __init__(self, params):
    critic_optimizer = optim.Adam(learning_rate=0.01).create(params)
    self.critic_optimizer = jax.device_put(critic_optimizer)

  def train(self, batch):
    self.critic_optimizer = critic_step(self.critic_optimizer, batch)

  def save(self, filename):
    save_model(filename, self.critic_optimizer)

  def load(self, filename):
    self.critic_optimizer = load_model(filename, self.critic_optimizer)
    self.critic_optimizer = jax.device_put(self.critic_optimizer)

  def params(self):
    return self.critic_optimizer.target


def train(params, batches, filename, resume):
  agent = Agent(params)
  if resume:
    agent.load(filename)
  for batch in batches:
    agent.train(batch)
  agent.save(filename)
  return agent.params()
'''

# The helpers in the agent's own module, one given its optimizer by keyword.
_ONE_MODULE = _AGENT.replace(
    'save_model(filename, self.critic_optimizer)',
    'save_model(filename, model=self.critic_optimizer)').replace(
        'from saving import load_model\nfrom saving import save_model\n',
        _SAVING.replace('from flax import serialization',
                        'from flax import serialization\n'))


def _line(source, text):
  return next(number for number, line in enumerate(source.splitlines(), 1)
              if text in line)


def _project(tmp_path, files):
  project, migrated = tmp_path / 'project', tmp_path / 'migrated'
  _write(project, files)
  return project, migrated, _migrate_into(project, migrated)


def _writes_alike_and_resumes_from_old_files(tmp_path, project, migrated):
  params, batches = _data()
  first, rest = batches[:2], batches[2:]
  old_file, new_file = tmp_path / 'old.msgpack', tmp_path / 'new.msgpack'
  old = _run(project, 'agent', params, first, str(old_file), False)
  new = _run(migrated, 'agent', params, first, str(new_file), False)
  _assert_same_bits(old, new)
  # flax.optim's layout at both ends: the same bytes.
  assert new_file.read_bytes() == old_file.read_bytes()
  # The migrated agent resumes from the file the original wrote.
  shutil.copy(old_file, new_file)
  old = _run(project, 'agent', params, rest, str(old_file), True)
  new = _run(migrated, 'agent', params, rest, str(new_file), True)
  _assert_same_bits(old, new)
  assert new_file.read_bytes() == old_file.read_bytes()


def _helpers_doing_more_keep_the_flow(tmp_path):
  # One also reads the optimizer's target: not only flax.serialization's.
  saving = _SAVING.replace(
      '    return serialization.from_bytes(model, fp.read())\n',
      '    print(model.target)\n'
      '    return serialization.from_bytes(model, fp.read())\n')
  _, _, results = _project(tmp_path / 'a', {'agent.py': _AGENT,
                                           'saving.py': saving})
  assert results['agent.py'].new == _AGENT.encode()
  reasons = '\n'.join(_reasons(results).values())
  assert ('also takes `load_model(filename, self.critic_optimizer)`'
          in reasons), reasons
  # A restore whose result is not returned as it is.
  saving = _SAVING.replace(
      '    return serialization.from_bytes(model, fp.read())\n',
      '    restored = serialization.from_bytes(model, fp.read())\n'
      '  return restored\n')
  _, _, results = _project(tmp_path / 'b', {'agent.py': _AGENT,
                                           'saving.py': saving})
  assert results['agent.py'].new == _AGENT.encode()
  # A parameter annotated optim.Optimizer is its own module's flow (its
  # body rewritten for a TrainState): no tree of the optimizer goes there.
  saving = _SAVING.replace('from flax import serialization',
                           'from flax import optim, serialization').replace(
                               'filename, model)',
                               'filename, model: optim.Optimizer)')
  _, _, results = _project(tmp_path / 'c', {'agent.py': _AGENT,
                                           'saving.py': saving})
  assert b'legacy_tree' not in results['agent.py'].new


def test_helpers_of_another_module_save_and_restore_flax_optims_layout(
    tmp_path):
  project, migrated, results = _project(
      tmp_path, {'agent.py': _AGENT, 'saving.py': _SAVING})
  agent = results['agent.py']
  assert not agent.plan.leftovers, agent.plan.leftovers
  assert not _legacy_imports.legacy_imports(agent.new)
  assert (b'save_model(filename, flax_optim_rules.legacy_tree('
          b'self.critic_optimizer))') in agent.new
  assert (b'self.critic_optimizer = flax_optim_rules.from_legacy_tree('
          b'self.critic_optimizer, load_model(filename, flax_optim_rules.'
          b'legacy_tree(self.critic_optimizer)))') in agent.new
  assert results['saving.py'].new == _SAVING.encode()  # kept as it is
  # scan, whose model reads the helper's module too, agrees: no escape,
  # and a finding on each call through a helper (what migrate writes).
  findings = scan.scan_paths([str(project)]).findings
  assert not [f for f in findings if f.construct == 'optimizer_escape']
  helped = {f.line for f in findings if f.construct == 'checkpoint' and (
      f.replacement.startswith('flax_optim_rules.legacy_tree(opt)'))}
  assert helped == {_line(_AGENT, 'save_model(filename, self'),
                    _line(_AGENT, 'self.critic_optimizer = load_model')}
  _writes_alike_and_resumes_from_old_files(tmp_path, project, migrated)
  _helpers_doing_more_keep_the_flow(tmp_path / 'more')


def test_helpers_of_the_same_module_are_kept_as_they_are(tmp_path):
  project, migrated, results = _project(tmp_path, {'agent.py': _ONE_MODULE})
  agent = results['agent.py']
  assert not agent.plan.leftovers, agent.plan.leftovers
  assert not agent.plan.notes, agent.plan.notes
  assert (b'def load_model(filename, model):\n'
          b'  with open(filename, \'rb\') as fp:\n'
          b'    return serialization.from_bytes(model, fp.read())\n'
          ) in agent.new
  _writes_alike_and_resumes_from_old_files(tmp_path, project, migrated)
  # --tier stock: the stock transform's state has no flax.optim tree, so
  # the flow stays whole with the reason, never half migrated.
  new, plan = migrate.migrate_source(_ONE_MODULE.encode(), tier='stock')
  assert new == _ONE_MODULE.encode()
  assert any('--tier stock writes stock Optax rules' in left.reason
             for left in plan.leftovers)
