"""``migrate`` on optimizers returned in a dict under constant keys (issue 40).

dopamine's SAC agent steps its optimizers in a module function that
returns them in one dict display with its metrics (a loop adds more
metrics under f-string keys); the agent reads each optimizer back by its
key onto ``self`` and the metrics in a loop whose test leaves the
optimizers' keys out. That flow migrates and the agent trains
bit-identically to the original under the shim; where the dict goes
anywhere migrate does not follow (passed whole, its values read without
such a test, read by a key that is not constant), the flow stays as it
was, with the reason. The agent here is written for the test in those
shapes.
"""

from test_migrate_self_holders import _kept_whole
from test_migrate_self_holders import _line
from test_migrate_self_holders import _migrates_and_trains_alike

_AGENT = '''import functools

import jax
import jax.numpy as jnp
from flax import optim


@functools.partial(jax.jit, static_argnums=(2,))
def update(network_optim, alpha_optim, scale, batch):
  def loss(p, a):
    error = batch['x'] @ p['w'] - batch['y']
    return (jnp.mean(error ** 2) * jnp.exp(a['log_alpha']) * scale,
            jnp.mean(error, axis=0))
  (value, means), grads = jax.value_and_grad(loss, argnums=(0, 1),
                                             has_aux=True)(
      network_optim.target, alpha_optim.target)
  network_optim = network_optim.apply_gradient(grads[0])
  alpha_optim = alpha_optim.apply_gradient(grads[1])
  returns = {
      'network_optim': network_optim,
      'alpha_optim': alpha_optim,
      'Losses/Critic': value,
      'Values/Alpha': jnp.exp(alpha_optim.target['log_alpha']),
  }
  for i, m in enumerate(means):
    returns.update({f'Values/MeanActions{i}': m})
  return returns


class Agent:

  def __init__(self, params):
    self.network_optimizer = optim.Adam(learning_rate=0.01).create(params)
    # (a dict target: what this test is about is the dict of returns)
    self.alpha_optimizer = optim.Adam(learning_rate=0.02).create(
        {'log_alpha': jnp.zeros(())})
    self.summaries = []

  def step(self, batch):
    train_returns = update(self.network_optimizer, self.alpha_optimizer, 2.0,
                           batch)
    self.network_optimizer = train_returns['network_optim']
    self.alpha_optimizer = train_returns['alpha_optim']
    for k in train_returns:
      if k.startswith('Losses') or k.startswith('Values'):
        self.summaries.append((k, train_returns[k]))

  def params(self):
    return self.network_optimizer.target, self.alpha_optimizer.target


def train(params, batches):
  agent = Agent(params)
  for batch in batches:
    agent.step(batch)
  return agent.params(), agent.summaries
'''

_METRICS_LOOP = '''    for k in train_returns:
      if k.startswith('Losses') or k.startswith('Values'):
        self.summaries.append((k, train_returns[k]))
'''
_ITEMS = '    for k, v in train_returns.items():\n'


def test_optimizers_returned_in_a_dict_and_read_back_by_key(tmp_path):
  new = _migrates_and_trains_alike(tmp_path, _AGENT)
  assert ('network_optim = network_optim.apply_gradients(grads=grads[0])'
          in new)
  assert "      'network_optim': network_optim,\n" in new
  assert ("    self.network_optimizer = train_returns['network_optim']\n"
          in new)
  assert ('return self.network_optimizer.params, '
          'self.alpha_optimizer.params') in new
  assert _METRICS_LOOP in new


def test_metrics_read_as_items_under_a_test_of_their_key(tmp_path):
  source = _AGENT.replace(_METRICS_LOOP, _ITEMS + '''\
      if k in ('Losses/Critic', 'Values/Alpha'):
        self.summaries.append((k, v))
''')
  new = _migrates_and_trains_alike(tmp_path, source)
  assert 'self.alpha_optimizer.params' in new


def _why_kept(tmp_path, source) -> str:
  """The reason the flow of ``source`` stays, where the network's
  optimizer is made."""
  reasons = _kept_whole(tmp_path, {'agent.py': source})
  return reasons['agent.py', _line(source,
                                   'self.network_optimizer = optim.Adam')]


def test_the_dict_passed_whole_keeps_the_flow(tmp_path):
  source = _AGENT.replace(_METRICS_LOOP, '    self.summaries.append(len('
                          'keys_of(train_returns)))\n').replace(
                              'class Agent:', 'def keys_of(returns):\n'
                              '  return sorted(returns)\n\n\nclass Agent:')
  why = _why_kept(tmp_path, source)
  assert ('update() returns optimizers in a dict, and migrate does not '
          'follow that dict where it goes: '
          f'`train_returns` (line {_line(source, "len(keys_of")}) goes into '
          '`keys_of(train_returns)`') in why


def test_every_value_read_without_a_test_keeps_the_flow(tmp_path):
  source = _AGENT.replace(_METRICS_LOOP, _ITEMS + '''\
      self.summaries.append(k)
      if k.startswith('Values'):
        self.summaries.append(v)
      else:
        self.summaries.append(jax.tree_util.tree_leaves(v)[0])
''')
  why = _why_kept(tmp_path, source)
  read = _line(source, 'tree_leaves(v)')
  assert (f"`v` (line {read}) may read an optimizer's entry: no test of the "
          "loop's key leaves out the optimizers' keys there ('alpha_optim', "
          "'network_optim')") in why


def test_a_key_that_is_not_constant_keeps_the_flow(tmp_path):
  source = _AGENT.replace(_METRICS_LOOP, '''    key = 'Losses/Critic'
    self.summaries.append(train_returns[key])
''')
  why = _why_kept(tmp_path, source)
  assert ("`train_returns` is read by `train_returns[key]` (line "
          f"{_line(source, 'train_returns[key]')}), by a key that is neither "
          'a constant nor the key of a loop over it') in why

