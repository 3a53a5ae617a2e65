"""Legacy traversals, MultiOptimizer, focus and ReplicatedOptimizer."""

import warnings

import _devices
import chex
from flax import core
from flax import traverse_util as flax_traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flax_optim_rules
import legacy_optim as optim
from legacy_optim import traverse_util as tu

# Cases needing 8 fake devices run in one child process (see _devices.py).
DEVICE_CASES = _devices.Cases(n_devices=8)


def _params():
  return {
      'Dense_0': {'kernel': jnp.full((2, 3), 1.0), 'bias': jnp.zeros(3)},
      'Dense_1': {'kernel': jnp.full((3, 1), -1.0), 'bias': jnp.ones(1)},
      'scale': jnp.asarray(2.0),
  }


def _grads():
  return jax.tree_util.tree_map(lambda p: jnp.full_like(p, 0.5), _params())


# -------------------------------------------------------------- traversals


def test_item_attr_each_tree_filter_merge():
  data = {'a': [1, 2, 3], 'b': (4, 5)}
  assert list(tu.t_identity['a'].each().iterate(data)) == [1, 2, 3]
  assert tu.t_identity['a'].each().update(lambda x: -x, data) == {
      'a': [-1, -2, -3], 'b': (4, 5)}
  assert list(tu.t_identity.tree().filter(lambda x: x % 2).iterate(
      data)) == [1, 3, 5]
  merged = tu.t_identity.merge(tu.t_identity['a'], tu.t_identity['b'])
  assert list(merged.iterate(data)) == [[1, 2, 3], (4, 5)]
  assert tu.t_identity['b'][1:].update(lambda x: x * 10, data)['b'] == (4, 50)
  assert data == {'a': [1, 2, 3], 'b': (4, 5)}  # inputs never mutated


def test_attr_traversal_rebuilds_namedtuples_and_dataclasses():
  point = chex.dataclass(frozen=True)(type('P', (), {'__annotations__': {
      'x': int, 'y': int}}))(x=1, y=2)
  assert tu.t_identity.x.update(lambda v: v + 1, point).x == 2
  from collections import namedtuple
  nt = namedtuple('NT', 'x y')(1, 2)
  assert tu.t_identity.y.update(lambda v: v * 3, nt) == (1, 6)


def test_set_checks_the_number_of_values():
  t = tu.t_identity['a'].each()
  assert t.set([7, 8], {'a': [1, 2]}) == {'a': [7, 8]}
  with pytest.raises(ValueError, match='Not enough values'):
    t.set([7], {'a': [1, 2]})
  with pytest.raises(ValueError, match='Too many values'):
    t.set([7, 8, 9], {'a': [1, 2]})


def test_each_rejects_other_containers():
  with pytest.raises(ValueError, match='list, tuple or dict'):
    tu.TraverseEach().update(lambda x: x, {1, 2})


def test_model_param_traversal_paths_and_frozen_dicts():
  seen = []
  trav = tu.ModelParamTraversal(
      lambda path, value: seen.append(path) or path.endswith('/bias'))
  params = core.freeze(_params())
  biases = list(trav.iterate(params))
  assert seen == ['/Dense_0/bias', '/Dense_0/kernel', '/Dense_1/bias',
                  '/Dense_1/kernel', '/scale']
  assert [b.shape for b in biases] == [(3,), (1,)]
  updated = trav.update(lambda x: x + 1, params)
  assert isinstance(updated, core.FrozenDict)
  chex.assert_trees_all_equal(updated['Dense_1']['bias'], jnp.full(1, 2.0))
  with pytest.raises(ValueError, match='nested dict'):
    list(trav.iterate([1, 2]))


# ---------------------------------------------------------- MultiOptimizer


def _kernel_bias_multi(traverse_module):
  kernels = traverse_module.ModelParamTraversal(
      lambda p, _: p.endswith('kernel'))
  biases = traverse_module.ModelParamTraversal(lambda p, _: p.endswith('bias'))
  return optim.MultiOptimizer((kernels, optim.GradientDescent(0.1)),
                              (biases, optim.Momentum(0.5, beta=0.5)))


@pytest.mark.parametrize('traverse_module', [tu, flax_traverse_util],
                         ids=['legacy', 'today_flax'])
def test_multi_optimizer_routes_leaves(traverse_module):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    opt_def = _kernel_bias_multi(traverse_module)
  opt = opt_def.create(_params())
  assert opt.state.param_states['scale'] is None
  assert opt.state.param_states['Dense_0']['kernel'] == ()
  assert type(opt.state.param_states['Dense_0']['bias']).__name__ == (
      '_MomentumParamState')
  opt = jax.jit(lambda o, g: o.apply_gradient(g))(opt, _grads())
  opt = opt.apply_gradient(_grads())
  # kernels: plain SGD, two steps of 0.1 * 0.5.
  chex.assert_trees_all_close(opt.target['Dense_0']['kernel'],
                              jnp.full((2, 3), 0.9), rtol=1e-6)
  # biases: momentum 0.5 -> m = 0.5, 0.75; steps 0.25 + 0.375.
  chex.assert_trees_all_close(opt.target['Dense_1']['bias'],
                              jnp.full(1, 1.0 - 0.625), rtol=1e-6)
  # The leaf no traversal selects keeps its value and a None state.
  chex.assert_trees_all_equal(opt.target['scale'], jnp.asarray(2.0))
  assert opt.state.param_states['scale'] is None
  assert int(opt.state.step) == 2


def test_multi_optimizer_overrides():
  opt_def = _kernel_bias_multi(tu)
  opt = opt_def.create(_params())
  # A plain override applies to every sub-optimizer.
  both = opt.apply_gradient(_grads(), learning_rate=0.0)
  chex.assert_trees_all_equal(both.target, opt.target)
  # hyper_params=[...] sets each sub-optimizer separately.
  hp_k, hp_b = opt_def.hyper_params
  per_sub = opt.apply_gradient(
      _grads(), hyper_params=[hp_k.replace(learning_rate=0.0), hp_b])
  chex.assert_trees_all_equal(per_sub.target['Dense_0']['kernel'],
                              opt.target['Dense_0']['kernel'])
  assert not np.array_equal(per_sub.target['Dense_0']['bias'],
                            opt.target['Dense_0']['bias'])
  with pytest.raises(ValueError, match='2 sub-optimizers'):
    opt.apply_gradient(_grads(), hyper_params=[hp_k])
  with pytest.raises(TypeError, match='valid names'):
    opt.apply_gradient(_grads(), beta=0.1)  # GradientDescent has no beta


def test_overlap_error_names_each_overlapping_leaf():
  everything = tu.ModelParamTraversal(lambda p, _: True)
  biases = tu.ModelParamTraversal(lambda p, _: p.endswith('bias'))
  opt_def = optim.MultiOptimizer((everything, optim.GradientDescent(0.1)),
                                 (biases, optim.Momentum(0.1)))
  with pytest.raises(ValueError) as e:
    opt_def.create(_params())
  overlapping, _, matches = str(e.value).partition('. ')
  assert "['Dense_0']['bias']" in overlapping
  assert "['Dense_1']['bias']" in overlapping
  assert 'kernel' not in overlapping
  # Then flax.optim's own tree of the optimizers matching each leaf.
  assert "'Dense_0': {'bias': [0, 1], 'kernel': [0]}" in matches


def test_value_based_filters_see_the_real_leaves():
  matrices = tu.ModelParamTraversal(lambda _, value: value.ndim == 2)
  opt = optim.GradientDescent(1.0).create(_params(), focus=matrices)
  opt = opt.apply_gradient(_grads())
  chex.assert_trees_all_equal(opt.target['Dense_0']['bias'], jnp.zeros(3))
  chex.assert_trees_all_equal(opt.target['Dense_0']['kernel'],
                              jnp.full((2, 3), 0.5))


def test_focus_on_a_subtree_with_composed_traversal():
  focus = tu.t_identity['Dense_1'].tree()
  opt = optim.Momentum(0.1).create(_params(), focus=focus)
  assert isinstance(opt.optimizer_def, optim.MultiOptimizer)
  opt = opt.apply_gradient(_grads())
  chex.assert_trees_all_equal(opt.target['Dense_0'], _params()['Dense_0'])
  assert not np.array_equal(opt.target['Dense_1']['kernel'],
                            _params()['Dense_1']['kernel'])


def test_traversal_selecting_a_container_is_rejected():
  with pytest.raises(TypeError, match='must select leaves'):
    optim.GradientDescent(0.1).create(_params(),
                                      focus=tu.t_identity['Dense_0'])


def test_bad_multi_optimizer_arguments():
  with pytest.raises(ValueError, match='at least one'):
    optim.MultiOptimizer()
  with pytest.raises(TypeError, match='argument 0'):
    optim.MultiOptimizer((tu.t_identity, 0.1))


# ------------------------------------------- ReplicatedOptimizer, 8 devices


@DEVICE_CASES.register()
def replicated_optimizer_averages_over_8_devices():
  assert jax.local_device_count() == 8
  rng = np.random.default_rng(0)
  params = {'w': jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
            'b': jnp.asarray(rng.standard_normal(3), jnp.float32)}
  per_device = [jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), params)
                for _ in range(8)]
  stacked = jax.tree_util.tree_map(lambda *g: jnp.stack(g), *per_device)

  opt = optim.Momentum(0.1, nesterov=True).create(params)
  rep = opt.replicate(axis_name='devices')
  step = jax.pmap(lambda o, g: o.apply_gradient(g, learning_rate=0.05),
                  axis_name='devices')
  for _ in range(3):
    rep = step(rep, stacked)
  # Single device, the legacy arithmetic: psum(g) / psum(1).
  mean = jax.tree_util.tree_map(
      lambda g: jax.pmap(lambda x: jax.lax.psum(x, 'i') /
                         jax.lax.psum(1, 'i'), axis_name='i')(g)[0], stacked)
  single = opt
  one_step = jax.jit(lambda o, g: o.apply_gradient(g, learning_rate=0.05))
  for _ in range(3):
    single = one_step(single, mean)
  chex.assert_trees_all_equal(rep.unreplicate().target, single.target)
  sd = rep.state_dict()
  assert sd['state']['step'].shape == (), sd['state']['step'].shape
  restored = rep.restore_state(sd)
  chex.assert_trees_all_equal(restored.target, rep.target)


outcomes, test_on_8_devices = DEVICE_CASES.pytest_items(__file__)


if __name__ == '__main__':
  DEVICE_CASES.main()


# ----------------------- flax_optim_rules.multi_optimizer (migrated code)


def _rules_pairs(inject=False):
  adam = flax_optim_rules.adam
  momentum = flax_optim_rules.momentum
  if inject:
    adam = flax_optim_rules.inject_learning_rate(adam)
    momentum = flax_optim_rules.inject_learning_rate(momentum)
  kernels = flax_optim_rules.ModelParamTraversal(
      lambda path, _: path.endswith('/kernel'))
  biases = flax_optim_rules.ModelParamTraversal(
      lambda path, _: path.endswith('/bias'))
  return ((kernels, adam(learning_rate=0.01, weight_decay=0.1)),
          (biases, momentum(learning_rate=0.1, beta=0.9)))


def _shim_multi():
  kernels = tu.ModelParamTraversal(lambda path, _: path.endswith('/kernel'))
  biases = tu.ModelParamTraversal(lambda path, _: path.endswith('/bias'))
  return optim.MultiOptimizer(
      (kernels, optim.Adam(learning_rate=0.01, weight_decay=0.1)),
      (biases, optim.Momentum(learning_rate=0.1, beta=0.9)))


def _set_every_rate(opt_state, rate):
  return optax.tree_utils.tree_set(opt_state, learning_rate=rate)


def _keep_rates(opt_state, _):
  return opt_state


def _rules_step(tx, set_rates):
  """A jitted step of ``tx`` after ``set_rates(opt_state, rates)``."""

  @jax.jit
  def step_fn(params, opt_state, grads, rates):
    opt_state = set_rates(opt_state, rates)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  return step_fn


def _step_grads(step):
  rng = np.random.default_rng(step)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype),
      _params())


def test_rules_traversal_labels_name_each_leaf():
  kernels, biases = (pair[0] for pair in _rules_pairs())
  assert flax_optim_rules.traversal_labels(_params(), kernels, biases) == {
      'Dense_0': {'kernel': '0', 'bias': '1'},
      'Dense_1': {'kernel': '0', 'bias': '1'},
      'scale': 'frozen'}
  labels = flax_optim_rules.traversal_labels(
      core.freeze(_params()), biases, kernels)
  assert labels['Dense_1'] == {'kernel': '1', 'bias': '0'}
  matrices = flax_optim_rules.ModelParamTraversal(
      lambda _, value: value.ndim == 2)
  assert flax_optim_rules.traversal_labels(_params(), matrices)[
      'Dense_0'] == {'kernel': '0', 'bias': 'frozen'}


def test_rules_multi_optimizer_steps_as_the_shims_multi_optimizer():
  # Jitted, as train steps are (eager, the shim reproduces flax.optim's
  # op-by-op rounding, which an Optax transform does not: see _eager.py).
  shim_step = jax.jit(
      lambda opt, grads, rate: opt.apply_gradient(grads, learning_rate=rate))
  for inject in (False, True):
    tx = flax_optim_rules.multi_optimizer(*_rules_pairs(inject))
    # apply_gradient(g, learning_rate=lr) sets every rule's rate.
    step_fn = _rules_step(tx, _set_every_rate if inject else _keep_rates)
    shim = _shim_multi().create(_params())
    params = _params()
    opt_state = tx.init(params)
    for step in range(5):
      grads = _step_grads(step)
      if inject:
        rate = 0.05 / (step + 1)
        shim = shim_step(shim, grads, rate)
      else:
        rate = None
        shim = jax.jit(lambda opt, grads: opt.apply_gradient(grads))(
            shim, grads)
      params, opt_state = step_fn(params, opt_state, grads, rate)
      chex.assert_trees_all_equal(params, shim.target)
    chex.assert_trees_all_equal(params['scale'], jnp.asarray(2.0))
    assert not np.array_equal(params['Dense_0']['kernel'],
                              _params()['Dense_0']['kernel'])


class _LoggingMulti(flax_optim_rules.MultiRuleDef):
  """A user's MultiOptimizer subclass as migrate keeps it: logs, then the
  base makes the state."""

  def __init__(self, *pairs):
    super().__init__(*pairs)
    self.logged = []

  def init_state(self, params):
    for index, traversal in enumerate(self.traversals):
      self.logged += [(index, path) for path in ('/Dense_0/bias', '/scale')
                      if traversal._filter_fn(path, None)]  # pylint: disable=protected-access
    return super().init_state(params)


def test_multi_rule_def_runs_its_init_state_and_steps_as_multi_optimizer():
  rule = _LoggingMulti(*_rules_pairs())
  tx = rule.to_optax()
  assert rule.logged == []
  opt_state = tx.init(_params())
  assert rule.logged == [(1, '/Dense_0/bias')]
  reference = flax_optim_rules.multi_optimizer(*_rules_pairs())
  reference_state = reference.init(_params())
  chex.assert_trees_all_equal(opt_state, reference_state)
  params, reference_params = _params(), _params()
  for step in range(3):
    grads = _step_grads(step)
    params, opt_state = _rules_step(tx, _keep_rates)(
        params, opt_state, grads, None)
    reference_params, reference_state = _rules_step(reference, _keep_rates)(
        reference_params, reference_state, grads, None)
  chex.assert_trees_all_equal(params, reference_params)
  chex.assert_trees_all_equal(opt_state, reference_state)


def test_rules_multi_optimizer_errors_name_the_argument_and_the_leaves():
  everything = flax_optim_rules.ModelParamTraversal(lambda p, _: True)
  biases = flax_optim_rules.ModelParamTraversal(
      lambda p, _: p.endswith('bias'))
  with pytest.raises(ValueError) as e:
    flax_optim_rules.traversal_labels(_params(), everything, biases)
  overlapping = str(e.value).partition('. ')[0]
  assert "['Dense_0']['bias'] (optimizers [0, 1])" in overlapping
  assert 'kernel' not in overlapping
  with pytest.raises(TypeError, match='argument 2 must be a'):
    flax_optim_rules.multi_optimizer((everything, optax.sgd(0.1)),
                                     (tu.t_identity, optax.sgd(0.1)))
  with pytest.raises(TypeError, match='argument 1 must be a'):
    flax_optim_rules.traversal_labels(_params(), tu.t_identity)


def test_rules_set_learning_rates_is_the_shims_per_sub_optimizer_override():
  # apply_gradient(g, hyper_params=[hp0.replace(learning_rate=a), ...]).
  hp_kernels, hp_biases = _shim_multi().hyper_params

  @jax.jit
  def shim_step(opt, grads, rates):
    return opt.apply_gradient(grads, hyper_params=[
        hp_kernels.replace(learning_rate=rates[0]),
        hp_biases.replace(learning_rate=rates[1])])

  tx = flax_optim_rules.multi_optimizer(*_rules_pairs(inject=True))
  step_fn = _rules_step(tx, flax_optim_rules.set_learning_rates)

  shim = _shim_multi().create(_params())
  params = _params()
  opt_state = tx.init(params)
  for step in range(5):
    grads = _step_grads(step)
    rates = [0.02 / (step + 1), 0.3 / (step + 1)]
    shim = shim_step(shim, grads, rates)
    params, opt_state = step_fn(params, opt_state, grads, rates)
    chex.assert_trees_all_equal(params, shim.target)
  with pytest.raises(ValueError, match='got 3 learning rates'):
    flax_optim_rules.set_learning_rates(opt_state, [0.1, 0.1, 0.1])
  plain = flax_optim_rules.multi_optimizer(*_rules_pairs(inject=False))
  with pytest.raises(ValueError, match='sub-optimizer 0 .* no injected'):
    flax_optim_rules.set_learning_rates(plain.init(params), [0.1, 0.1])
