"""The stock exit: legacy state poured into stock Optax transforms' states.

Each case trains 3 legacy steps, converts with ``compat.to_stock_optax`` and
takes one more step both ways. The stock rule differs from flax.optim only
as the catalogue measured, so one step agrees to float32 rounding; the same
step from a fresh stock state (the state lost) is far off, which is what a
wrong field mapping would give.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import compat
from compat.bridges import stock_exit
import legacy_optim
from legacy_optim import catalogue

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

_RNG = np.random.default_rng(0)
PARAMS = {'w': jnp.asarray(_RNG.normal(size=(4, 130)), jnp.float32),
          'b': jnp.asarray(_RNG.normal(size=(130,)), jnp.float32)}
GRADS = [jax.tree_util.tree_map(
    lambda x: jnp.asarray(_RNG.normal(size=x.shape) * 0.1, jnp.float32),
    PARAMS) for _ in range(4)]


def _kernels_and_biases(kernel_def, bias_def):
  return legacy_optim.MultiOptimizer(
      (legacy_optim.ModelParamTraversal(lambda path, _: 'w' in path),
       kernel_def),
      (legacy_optim.ModelParamTraversal(lambda path, _: 'b' in path),
       bias_def))


# (legacy def, expected variant, closest needed)
CASES = {
    'sgd': (lambda o: o.GradientDescent(0.1), 'sgd', False),
    'momentum': (lambda o: o.Momentum(0.1, 0.9), 'momentum', False),
    'nesterov_wd': (lambda o: o.Momentum(0.1, 0.9, weight_decay=1e-3,
                                         nesterov=True), 'momentum_wd', False),
    'adam': (lambda o: o.Adam(1e-3), 'adam', False),
    'adamw': (lambda o: o.Adam(1e-3, weight_decay=1e-3), 'adam_wd', False),
    'adabelief': (lambda o: o.AdaBelief(1e-3), 'adabelief', False),
    'adadelta': (lambda o: o.Adadelta(1.0), 'adadelta', False),
    'adafactor': (lambda o: o.Adafactor(1e-2), 'adafactor', False),
    'adafactor_factored_momentum': (
        lambda o: o.Adafactor(1e-2, beta1=0.9, min_dim_size_to_factor=2),
        'adafactor', False),
    'adagrad': (lambda o: o.Adagrad(0.1), 'adagrad', True),
    'lamb': (lambda o: o.LAMB(1e-3), 'lamb', False),
    'lars': (lambda o: o.LARS(0.1), 'lars', False),
    'lars_wd': (lambda o: o.LARS(0.1, weight_decay=1e-3), 'lars_wd', True),
    'rmsprop': (lambda o: o.RMSProp(1e-3), 'rmsprop', False),
    'rmsprop_centered': (lambda o: o.RMSProp(1e-3, centered=True),
                         'rmsprop_centered', False),
}


def _trained(opt_def):
  optimizer = opt_def.create(PARAMS)
  for grads in GRADS[:3]:
    optimizer = optimizer.apply_gradient(grads)
  return optimizer


def _relative_change_error(start, got, want):
  return max(float(jnp.linalg.norm(g - w) / jnp.linalg.norm(w - s))
             for s, g, w in zip(*map(jax.tree_util.tree_leaves,
                                     (start, got, want))))


def _stock_step(tx, opt_state, params):
  updates, _ = tx.update(GRADS[3], opt_state, params)
  return optax.apply_updates(params, updates)


@pytest.mark.parametrize('name', sorted(CASES))
def test_stock_state_continues_the_legacy_run(name):
  make, variant, closest = CASES[name]
  optimizer = _trained(make(legacy_optim))
  tx, opt_state, report = compat.to_stock_optax(optimizer, closest=closest)
  assert [p.variant for p in report.parts] == [variant]
  assert report.rel_err == catalogue.deviations()['results'][variant][
      'rel_err']
  assert report.exit_rel_err == catalogue.deviations()['results'][variant][
      'exit_rel_err']
  assert report.step == 3
  # Only Optax's own types: nothing of this library in the state.
  assert not any('legacy_optim' in type(node).__module__ or
                 'compat' in type(node).__module__
                 for node in jax.tree_util.tree_leaves(
                     opt_state, is_leaf=lambda x: x is not opt_state))
  assert jax.tree_util.tree_structure(opt_state) == (
      jax.tree_util.tree_structure(tx.init(PARAMS)))
  want = optimizer.apply_gradient(GRADS[3]).target
  continued = _relative_change_error(
      optimizer.target, _stock_step(tx, opt_state, optimizer.target), want)
  lost = _relative_change_error(
      optimizer.target, _stock_step(tx, tx.init(PARAMS), optimizer.target),
      want)
  # The closest-only rules differ in their formula (LARS with weight decay:
  # 6e-3 in this one step), the others only in rounding.
  assert continued < (2e-2 if closest else 1e-4), continued
  if catalogue.BY_NAME[report.parts[0].algorithm].state_fields:
    assert lost > 10 * continued and lost > 0.1, (continued, lost)


def test_multi_optimizer_becomes_a_partition_of_stock_transforms():
  opt_def = _kernels_and_biases(legacy_optim.Adam(1e-3),
                                legacy_optim.Momentum(0.1, 0.9))
  optimizer = _trained(opt_def)
  tx, opt_state, report = compat.to_stock_optax(optimizer)
  assert [(p.label, p.variant) for p in report.parts] == [
      ('0', 'adam'), ('1', 'momentum')]
  assert report.expression.startswith("optax.partition({'0': optax.adam(")
  results = catalogue.deviations()['results']
  assert report.exit_rel_err == max(results['adam']['exit_rel_err'],
                                    results['momentum']['exit_rel_err'])
  # Both figures, labelled, for each part.
  text = str(report)
  assert text.count('continuing: ') == 2 and text.count('stock rule: ') == 2
  assert (f'continuing: deviates up to {results["adam"]["exit_rel_err"]:.2g}'
          ' from the legacy continuation') in text
  assert (f'stock rule: deviates up to {results["adam"]["rel_err"]:.2g} '
          'from flax 0.5.3') in text
  inner = opt_state.inner_states
  np.testing.assert_array_equal(
      inner['0'].inner_state[0].mu['w'],
      optimizer.state.param_states['w'].grad_ema)
  assert isinstance(inner['0'].inner_state[0].mu['b'], optax.MaskedNode)
  np.testing.assert_array_equal(
      inner['1'].inner_state[0].trace['b'],
      optimizer.state.param_states['b'].momentum)
  want = optimizer.apply_gradient(GRADS[3]).target
  assert _relative_change_error(
      optimizer.target, _stock_step(tx, opt_state, optimizer.target),
      want) < 1e-4


def test_lars_momentum_is_negated_into_the_trace():
  optimizer = _trained(legacy_optim.LARS(0.1))
  _, opt_state, _ = compat.to_stock_optax(optimizer)
  np.testing.assert_array_equal(opt_state[-1].trace['w'],
                                -optimizer.state.param_states['w'].momentum)


@pytest.mark.parametrize('name', ['adagrad', 'lars_wd'])
def test_no_counterpart_names_the_closest_with_its_figure(name):
  optimizer = _trained(CASES[name][0](legacy_optim))
  figure = catalogue.deviations()['results'][CASES[name][1]]['rel_err']
  with pytest.raises(stock_exit.NoStockCounterpartError,
                     match=rf'no counterpart.*closest is optax\.'
                     rf'.*{figure:.2g}.*closest=True'):
    compat.to_stock_optax(optimizer)


def test_lamb_with_a_zero_param_reports_the_zero_bias_figure():
  params = dict(PARAMS, b=jnp.zeros_like(PARAMS['b']))
  optimizer = legacy_optim.LAMB(1e-3).create(params)
  with pytest.raises(stock_exit.NoStockCounterpartError, match='exactly zero'):
    compat.to_stock_optax(optimizer)
  _, _, report = compat.to_stock_optax(optimizer, closest=True)
  assert report.parts[0].variant == 'lamb_zero_bias'
  assert report.rel_err == 1.0


def test_weight_norm_and_own_rules_have_no_stock_exit():
  optimizer = legacy_optim.WeightNorm(legacy_optim.Adam(1e-3)).create(PARAMS)
  with pytest.raises(stock_exit.NoStockCounterpartError,
                     match='WeightNorm.*no stock counterpart'):
    compat.to_stock_optax(optimizer, closest=True)

  class MyMomentum(legacy_optim.Momentum):

    def apply_param_gradient(self, step, hyper_params, param, state, grad):
      return super().apply_param_gradient(step, hyper_params, param, state,
                                          grad)

  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    optimizer = MyMomentum(0.1).create(PARAMS)
  with pytest.raises(stock_exit.NoStockCounterpartError,
                     match='apply_param_gradient'):
    compat.to_stock_optax(optimizer)


def test_a_missing_learning_rate_must_be_given():
  optimizer = legacy_optim.Adam().create(PARAMS)
  with pytest.raises(ValueError, match='no learning rate'):
    compat.to_stock_optax(optimizer)
  tx, _, report = compat.to_stock_optax(optimizer, learning_rate=1e-3)
  assert report.expression.startswith('optax.adam(0.001')


def test_every_stock_state_mapping_names_real_fields():
  for algorithm in catalogue.RULES:
    assert set(algorithm.stock_state) <= set(algorithm.state_fields), (
        algorithm.name)
    # Every stateful rule maps each of its fields.
    assert set(algorithm.stock_state) == set(algorithm.state_fields), (
        algorithm.name)
