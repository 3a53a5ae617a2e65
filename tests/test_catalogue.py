"""The algorithm catalogue agrees with the classes it describes.

``legacy_optim.catalogue`` is the one hand-written list of the built-in
algorithms; everything else (exports, restore hints, warnings, the scanner,
specs, ``check``) derives from it. These tests hold it to the classes:
names, modules, per-parameter state fields, the hyper-parameter names its
templates and rows use, and the measured deviations it cites.
"""

import dataclasses
import importlib
import inspect
import json
import pickle
import pkgutil
import string

import jax.numpy as jnp
import pytest

import flax_optim_rules
import legacy_optim
from legacy_optim import base
from legacy_optim import catalogue

NAMES = sorted(catalogue.BY_NAME)


def _class(algorithm):
  return getattr(importlib.import_module(
      f'legacy_optim.{algorithm.module}'), algorithm.name)


def _defaults(cls) -> dict:
  return {p.name: p.default
          for p in inspect.signature(cls.__init__).parameters.values()}


def _constructor_parameters(cls) -> set[str]:
  return set(inspect.signature(cls.__init__).parameters) - {'self'}


def test_every_built_in_definition_is_catalogued():
  # Every OptimizerDef class defined in the package, minus the base, the
  # two that hold other optimizers and the one that holds an Optax transform
  # (not algorithms), is in the catalogue.
  defined = set()
  for module_info in pkgutil.iter_modules(legacy_optim.__path__):
    module = importlib.import_module(f'legacy_optim.{module_info.name}')
    defined |= {v.__name__ for v in vars(module).values()
                if isinstance(v, type) and issubclass(v, base.OptimizerDef)
                and v.__module__ == module.__name__}
  assert defined - {'OptimizerDef', 'MultiOptimizer', 'ReplicatedOptimizer',
                    'OptaxOptimizerDef'} == set(NAMES)


@pytest.mark.parametrize('name', catalogue.RULE_NAMES)
def test_rule_named_is_the_rules_function_of_the_catalogued_module(name):
  # What migrate writes for getattr(flax.optim, name)(...): the function
  # named after the rule's module, with the class's own keywords.
  function = flax_optim_rules.rule_named(name)
  assert function is getattr(flax_optim_rules,
                             catalogue.BY_NAME[name].module)
  constructor = inspect.signature(_class(catalogue.BY_NAME[name]).__init__)
  assert list(inspect.signature(function).parameters) == list(
      constructor.parameters)[1:]


@pytest.mark.parametrize('name', ['WeightNorm', 'MultiOptimizer', 'adam', 3])
def test_rule_named_refuses_what_is_no_update_rule(name):
  with pytest.raises(ValueError, match=r'rule_named\(.*expected one of '
                     r'AdaBelief, Adadelta'):
    flax_optim_rules.rule_named(name)


@pytest.mark.parametrize('name', NAMES)
def test_name_and_module_are_the_classes(name):
  algorithm = catalogue.BY_NAME[name]
  cls = _class(algorithm)
  assert cls.__name__ == name and cls.__module__ == (
      f'legacy_optim.{algorithm.module}')
  assert getattr(legacy_optim, name) is cls and name in legacy_optim.__all__


@pytest.mark.parametrize('name', NAMES)
def test_state_fields_are_the_per_parameter_dataclass_fields(name):
  algorithm = catalogue.BY_NAME[name]
  opt_def = _class(algorithm)(legacy_optim.Momentum(0.1)) if (
      name == 'WeightNorm') else _class(algorithm)(0.1)
  # What the class actually stores for one parameter.
  state = opt_def.init_param_state(jnp.zeros((3, 2)))
  if not algorithm.state_fields:
    assert state == ()
  else:
    assert tuple(f.name for f in dataclasses.fields(state)) == (
        algorithm.state_fields)
  if name != 'WeightNorm':
    assert opt_def._param_state_fields == algorithm.state_fields


@pytest.mark.parametrize('name', sorted(a.name for a in catalogue.RULES))
def test_optax_state_holds_the_step_and_each_field(name):
  algorithm = catalogue.BY_NAME[name]
  opt_def = _class(algorithm)(0.1)
  params = {'w': jnp.ones((3, 2))}
  legacy = opt_def.init_state(params)
  opt_state = opt_def.to_optax_state(legacy, params)
  assert int(opt_def.from_optax_state(opt_state, params).step) == 0
  module = importlib.import_module(f'legacy_optim.{algorithm.module}')
  named = [v for v in vars(module).values()
           if isinstance(v, type) and v.__name__.endswith('State') and
           getattr(v, '_fields', ())[:1] == ('count',) and
           v.__module__ == module.__name__ and len(v._fields) > 1]
  for state_cls in named:  # the derived NamedTuples pickle by name
    assert state_cls._fields == ('count',) + algorithm.state_fields
    assert pickle.loads(pickle.dumps(state_cls(*state_cls._fields))) == (
        state_cls(*state_cls._fields))


@pytest.mark.parametrize('name', NAMES)
def test_templates_and_rows_use_the_constructors_hyper_parameters(name):
  algorithm = catalogue.BY_NAME[name]
  accepted = _constructor_parameters(_class(algorithm))
  used = set()
  for stock in algorithm.stock:
    used |= {field for _, field, _, _ in string.Formatter().parse(
        stock.template) if field}
    used |= {stock.when} - {None}
    used |= set(stock.measured_with)
  for check in algorithm.checks:
    used |= set(check.kwargs)
  assert used <= accepted, sorted(used - accepted)


@pytest.mark.parametrize('name', NAMES)
def test_each_stock_variant_has_exactly_one_default(name):
  stock = catalogue.BY_NAME[name].stock
  if stock:
    assert [s.when for s in stock].count(None) == 1
    assert stock[0].when is None


def test_measured_deviations_are_the_catalogued_measurements():
  with open(catalogue.DEVIATION_FILE, encoding='utf-8') as f:
    results = json.load(f)['results']
  stocks = [(a, s) for a in catalogue.RULES for s in a.stock]
  measured = {s.variant for _, s in stocks} | {
      f'{s.variant}_zero_bias' for _, s in stocks if s.zero_bias}
  assert {k for k, r in results.items() if r['rel_err'] is not None} == (
      measured)
  for algorithm, stock in stocks:
    # Measured with this variant's own expression.
    hyper_params = {**_defaults(_class(algorithm)), **stock.measured_with}
    found = catalogue.stock_optax(algorithm.name, hyper_params)
    assert found.variant == stock.variant
    assert results[stock.variant]['stock'] == found.expression


def test_every_stock_variant_has_its_measured_exit_figure():
  with open(catalogue.DEVIATION_FILE, encoding='utf-8') as f:
    table = json.load(f)
  assert table['exit_step'] == 3
  for key, result in table['results'].items():
    by_scale = result['exit_rel_err_by_grad_scale']
    if result['rel_err'] is None:  # no stock alias: nothing to exit to
      assert result['exit_rel_err'] is None and by_scale is None, key
      continue
    assert set(by_scale) == set(table['grad_scales']), key
    assert result['exit_rel_err'] == max(by_scale.values()), key
    assert 0 <= result['exit_rel_err'] <= 2, key


def test_exit_phrase_quotes_the_exit_column_not_the_flax_one():
  results = catalogue.deviations()['results']
  adam = catalogue.exit_deviation_phrase('adam')
  assert f'deviates up to {results["adam"]["exit_rel_err"]:.2g} from the ' \
      'legacy continuation (measured exiting at step 3' in adam
  assert 'flax 0.5.3' not in adam
  assert catalogue.exit_deviation_phrase('momentum').startswith(
      'bit-identical to the legacy continuation')
  assert catalogue.exit_deviation_phrase('weight_norm') == (
      'deviation from the legacy continuation not measured')


def _variant(name, **values):
  defaults = _defaults(_class(catalogue.BY_NAME[name]))
  return catalogue.stock_optax(name, {**defaults, **values}).variant


def test_variant_follows_the_selecting_hyper_parameter():
  # Values as the warnings see them and as the scanner sees them (source).
  assert _variant('Adam', weight_decay=0.0) == 'adam'
  assert _variant('Adam', weight_decay='0') == 'adam'
  assert _variant('Adam', weight_decay='FLAGS.wd') == 'adam_wd'
  assert _variant('RMSProp', centered='False') == 'rmsprop'
  assert _variant('RMSProp', centered=True) == 'rmsprop_centered'
  assert catalogue.stock_optax('WeightNorm', {}).expression is None


def test_algorithms_for_fields_names_every_algorithm_with_those_fields():
  assert catalogue.algorithms_for_fields(('grad_sq_ema', 'grad_ema')) == (
      'AdaBelief', 'Adam', 'LAMB')
  assert catalogue.algorithms_for_fields(('momentum',)) == ('LARS', 'Momentum')
  assert catalogue.algorithms_for_fields(()) == ('GradientDescent',)
  assert catalogue.algorithms_for_fields(('nope',)) == ()
