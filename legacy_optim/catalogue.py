"""Every built-in flax.optim algorithm and what replaces each legacy feature.

One record per built-in (``RULES`` and ``WEIGHT_NORM``): its class name and
module, its per-parameter state fields (the checkpoint format), the nearest
stock Optax expression per variant with the constructor values its deviation
from flax 0.5.3 was measured with (``scripts/stock_optax_deviation.py``,
results in ``stock_optax_deviation.json``), and the rows it gets in
``flax-optim-compat check``. ``REPLACEMENTS`` gives the replacement text of
every other legacy feature (the rule table's, ``_rule_table``). The package's
exports, the restore hints, the deprecation warnings, the source scanner,
the optimizer specs and ``check`` all read this module;
``tests/test_catalogue.py`` checks it against the classes. A new algorithm
needs its own module, a record here and tests.

Stdlib only (and the stdlib-only rule table): the scanner loads it without
importing legacy_optim (and jax).
"""

import ast
import dataclasses
import functools
import json
import math
import os
from typing import Any, Mapping, NamedTuple, Optional

# The rule table, imported relatively: the scanner loads both without
# running legacy_optim/__init__ (compat._lazy.module_without_package).
from . import _rule_table

# Section headings of migration_guide.md (the rule table's), read here by
# name (``catalogue.SECTION_LOOP``).
from ._rule_table import SECTION_ALGORITHMS  # noqa: F401
from ._rule_table import SECTION_CHECKPOINTS  # noqa: F401
from ._rule_table import SECTION_DYNAMIC_SCALE  # noqa: F401
from ._rule_table import SECTION_FIND  # noqa: F401
from ._rule_table import SECTION_INSTALL  # noqa: F401
from ._rule_table import SECTION_LOOP  # noqa: F401
from ._rule_table import SECTION_OVERRIDES  # noqa: F401
from ._rule_table import SECTION_REPLICATION  # noqa: F401
from ._rule_table import SECTION_STRICT  # noqa: F401
from ._rule_table import SECTION_TRAVERSALS  # noqa: F401
from ._rule_table import SECTION_WEIGHT_NORM  # noqa: F401
from ._rule_table import SECTIONS  # noqa: F401

# The guide ships with the package; the command prints it (or --path).
GUIDE = 'the migration guide (flax-optim-compat guide)'

DEVIATION_FILE = os.path.join(os.path.dirname(__file__),
                              'stock_optax_deviation.json')


def guide_ref(section: str) -> str:
  return f'{GUIDE}, section "{section}"'


# ----------------------------------------------------------------------------
# The built-in algorithms.


class Stock(NamedTuple):
  """The nearest stock Optax expression for one variant of an algorithm.

  ``template`` uses the legacy hyper-parameter names in braces. A variant
  with ``when`` applies when that hyper-parameter is set (not zero, False or
  None); otherwise the algorithm's variant without ``when`` does. Its
  deviation from flax 0.5.3 was measured with the constructor arguments
  ``measured_with`` (and, with ``zero_bias``, also as ``<variant>_zero_bias``
  on a layer whose bias starts at exactly 0).
  """
  variant: str  # key of the measured deviations
  template: str
  measured_with: Mapping[str, Any]
  when: Optional[str] = None
  note: Optional[str] = None  # where the stock rule notably differs
  zero_bias: bool = False
  # False: Optax has no counterpart of this variant; the expression is only
  # the closest one (the stock exit asks for consent before using it).
  counterpart: bool = True


class Check(NamedTuple):
  """One row of ``flax-optim-compat check``: ``name + label``."""
  label: str
  kwargs: Mapping[str, Any]
  # The learning rate follows a schedule: the legacy loop passes it per
  # step, the new paths get the schedule once.
  schedule: bool = False


class Algorithm(NamedTuple):
  """One built-in ``OptimizerDef``."""
  name: str  # class name (also flax.optim's)
  module: str  # submodule of legacy_optim (and of flax.optim)
  # Per-parameter state fields in layout order, as checkpoints store them.
  state_fields: tuple[str, ...]
  stock: tuple[Stock, ...] = ()  # empty: Optax has no counterpart
  checks: tuple[Check, ...] = ()
  # (flax versions, fields) of older per-parameter layouts still restored.
  older_state_fields: Optional[tuple[str, tuple[str, ...]]] = None
  # The stock exit: legacy state field -> the attribute of the stock
  # transform's state NamedTuple(s) holding the same values ('-' prefix: the
  # stock transform keeps it negated). A field whose attribute the stock
  # state lacks (RMSProp's mg uncentered, Adafactor's m without beta1) must
  # be unused (zeros or None). The step goes to every ``count``.
  stock_state: Mapping[str, str] = {}


_ADAM_MOMENTS = ('grad_ema', 'grad_sq_ema')
_ADAM_STOCK_STATE = {'grad_ema': 'mu', 'grad_sq_ema': 'nu'}
_LR = {'learning_rate': 1e-3}
_LR_WD = {'learning_rate': 1e-3, 'weight_decay': 1e-4}
_WD = 'weight_decay'
_LARS = ('optax.lars({learning_rate}, weight_decay={weight_decay}, '
         'trust_coefficient={trust_coefficient}, eps={eps}, momentum={beta}, '
         'nesterov={nesterov})')
_RMSPROP = ('optax.rmsprop({learning_rate}, decay={beta2}, eps={eps}, '
            'eps_in_sqrt=False, centered={centered})')

RULES = (
    Algorithm('GradientDescent', 'sgd', (), stock=(
        Stock('sgd', 'optax.sgd({learning_rate})', {'learning_rate': 0.1}),
    ), checks=(Check('', {'learning_rate': 0.1}),)),
    Algorithm('Momentum', 'momentum', ('momentum',), stock=(
        Stock('momentum', 'optax.sgd({learning_rate}, momentum={beta}, '
              'nesterov={nesterov})', {'learning_rate': 0.1, 'beta': 0.9}),
        Stock('momentum_wd',
              'optax.chain(optax.add_decayed_weights({weight_decay}), '
              'optax.sgd({learning_rate}, momentum={beta}, '
              'nesterov={nesterov}))',
              {'learning_rate': 0.1, 'beta': 0.9, 'weight_decay': 1e-4,
               'nesterov': True}, when=_WD),
    ), stock_state={'momentum': 'trace'}, checks=(
        Check('', {'learning_rate': 0.1, 'beta': 0.9}),
        Check('(nesterov, wd)', {'learning_rate': 0.1, 'beta': 0.8,
                                 'weight_decay': 1e-2, 'nesterov': True}),
        Check(' + lr schedule', {'beta': 0.9}, schedule=True))),
    Algorithm('Adam', 'adam', _ADAM_MOMENTS, stock=(
        Stock('adam', 'optax.adam({learning_rate}, b1={beta1}, b2={beta2}, '
              'eps={eps})', _LR),
        Stock('adam_wd', 'optax.adamw({learning_rate}, b1={beta1}, '
              'b2={beta2}, eps={eps}, weight_decay={weight_decay})', _LR_WD,
              when=_WD),
    ), stock_state=_ADAM_STOCK_STATE,
        checks=(Check('', {'learning_rate': 0.01, 'beta2': 0.99,
                          'weight_decay': 1e-3}),)),
    Algorithm('AdaBelief', 'adabelief', _ADAM_MOMENTS, stock=(
        Stock('adabelief', 'optax.adabelief({learning_rate}, b1={beta1}, '
              'b2={beta2}, eps={eps}, eps_root={eps})', _LR),
        Stock('adabelief_wd', 'optax.chain(optax.scale_by_belief(b1={beta1}, '
              'b2={beta2}, eps={eps}, eps_root={eps}), '
              'optax.add_decayed_weights({weight_decay}), '
              'optax.scale_by_learning_rate({learning_rate}))', _LR_WD,
              when=_WD),
    ), stock_state=_ADAM_STOCK_STATE,
        checks=(Check('', {'learning_rate': 0.01, 'weight_decay': 1e-3}),)),
    Algorithm('Adadelta', 'adadelta', ('sq_avg', 'acc_delta'), stock=(
        Stock('adadelta', 'optax.adadelta({learning_rate}, rho={rho}, '
              'eps={eps})', {'learning_rate': 1.0}),
        Stock('adadelta_wd', 'optax.chain(optax.scale_by_adadelta(rho={rho}, '
              'eps={eps}), optax.add_decayed_weights({weight_decay}), '
              'optax.scale_by_learning_rate({learning_rate}))',
              {'learning_rate': 1.0, 'weight_decay': 1e-4}, when=_WD),
    ), stock_state={'sq_avg': 'e_g', 'acc_delta': 'e_x'},
        checks=(Check('', {'learning_rate': 1.0, 'weight_decay': 1e-3}),)),
    Algorithm('Adafactor', 'adafactor', ('v_row', 'v_col', 'v', 'm'), stock=(
        Stock('adafactor', 'optax.adafactor({learning_rate}, '
              'min_dim_size_to_factor={min_dim_size_to_factor}, '
              'decay_rate={decay_rate}, decay_offset={step_offset}, '
              'multiply_by_parameter_scale={multiply_by_parameter_scale}, '
              'clipping_threshold={clipping_threshold}, momentum={beta1}, '
              'weight_decay_rate={weight_decay_rate}, eps={epsilon1}, '
              'factored={factored})', {'learning_rate': 1e-2},
              note=('optax fixes the parameter-scale floor at 1e-3 '
                    '(flax.optim: epsilon2)')),
    ), stock_state={'v_row': 'v_row', 'v_col': 'v_col', 'v': 'v', 'm': 'ema'},
        checks=(
        Check('', {'learning_rate': 0.01}),
        Check('(factored, beta1)', {
            'learning_rate': 0.01, 'beta1': 0.9, 'min_dim_size_to_factor': 2,
            'weight_decay_rate': 1e-3}))),
    Algorithm('Adagrad', 'adagrad', ('G',), stock=(
        Stock('adagrad', 'optax.adagrad({learning_rate}, '
              'initial_accumulator_value=0.0, eps={eps})',
              {'learning_rate': 0.1},
              note=('optax adds eps inside the square root (rsqrt(G + eps)); '
                    'flax.optim adds it outside (sqrt(G) + eps)'),
              counterpart=False),
    ), stock_state={'G': 'sum_of_squares'},
        checks=(Check('', {'learning_rate': 0.1}),)),
    Algorithm('LAMB', 'lamb', _ADAM_MOMENTS, stock=(
        Stock('lamb', 'optax.lamb({learning_rate}, b1={beta1}, b2={beta2}, '
              'eps={eps}, weight_decay={weight_decay})',
              {'learning_rate': 1e-3, 'weight_decay': 1e-2},
              note=('for a parameter that is exactly zero (e.g. a '
                    'zero-initialised bias) flax.optim uses trust ratio 0 (it '
                    'never moves), optax 1'), zero_bias=True),
    ), stock_state=_ADAM_STOCK_STATE,
        checks=(Check('', {'learning_rate': 0.01, 'weight_decay': 1e-3}),)),
    Algorithm('LARS', 'lars', ('momentum',), stock=(
        Stock('lars', _LARS, {'learning_rate': 0.1}),
        Stock('lars_wd', _LARS, {'learning_rate': 0.1, 'weight_decay': 5e-4},
              when=_WD, note=('optax computes the trust ratio from '
                              '|g + wd*p|; flax.optim from |g| + wd*|p|'),
              counterpart=False),
    ), stock_state={'momentum': '-trace'}, checks=(
        Check('', {'learning_rate': 0.1, 'weight_decay': 1e-3}),
        Check('(nesterov)', {'learning_rate': 0.1, 'weight_decay': 1e-3,
                             'eps': 1e-6, 'nesterov': True}))),
    Algorithm('RMSProp', 'rmsprop', ('v', 'mg'), stock=(
        Stock('rmsprop', _RMSPROP, _LR),
        Stock('rmsprop_centered', _RMSPROP,
              {'learning_rate': 1e-3, 'centered': True}, when='centered'),
    ), stock_state={'v': 'nu', 'mg': 'mu'}, checks=(
        Check('', {'learning_rate': 0.01}),
        Check('(centered)', {'learning_rate': 0.01, 'centered': True}))),
)

# Wraps another OptimizerDef; stock Optax has no counterpart (the exact
# tier: flax_optim_rules.weight_norm around the wrapped rule's transform).
WEIGHT_NORM = Algorithm(
    'WeightNorm', 'weight_norm',
    ('direction_state', 'scale_state', 'direction', 'scale'),
    older_state_fields=('flax <= 0.3.6',
                        ('direction_state', 'scale_state', 'mult')))

BUILT_INS = RULES + (WEIGHT_NORM,)
BY_NAME = {algorithm.name: algorithm for algorithm in BUILT_INS}
RULE_NAMES = tuple(sorted(algorithm.name for algorithm in RULES))


def algorithms_for_fields(fields) -> tuple[str, ...]:
  """The built-ins whose per-parameter state has exactly these fields."""
  fields = set(fields)
  return tuple(sorted(a.name for a in BUILT_INS
                      if set(a.state_fields) == fields))


# ----------------------------------------------------------------------------
# What replaces every other legacy feature: (replacement, guide section), by
# construct. The rule table's texts (``_rule_table``): the scanner
# prints the replacement as is; the warnings put it in a sentence.


class Replacement(NamedTuple):
  text: str
  section: str


REPLACEMENTS = {
    **{rule.construct: Replacement(rule.replacement, rule.section)
       for rule in _rule_table.RULES if rule.replacement is not None},
    _rule_table.PICKLE: Replacement(_rule_table.PICKLE_REPLACEMENT,
                                    SECTION_CHECKPOINTS),
}


# ----------------------------------------------------------------------------
# Stock Optax expressions with the user's own values.


def _is_set(value) -> bool:
  """False for zero, False and None (also as source text), else True."""
  if value is None or (isinstance(value, str) and value in ('None', 'False')):
    return False
  try:
    return callable(value) or float(value) != 0.0
  except (TypeError, ValueError):
    return True  # source text or a traced value: may be non-zero


def literal(value: Any) -> str:
  """A hyper-parameter value as Python source (a placeholder if not one)."""
  if value is None or isinstance(value, (bool, str)):
    return repr(value)
  if isinstance(value, int):
    return repr(value)
  if callable(value):
    return getattr(value, '__name__', 'schedule').replace('<lambda>',
                                                          'schedule')
  try:
    number = float(value)
  except (TypeError, ValueError):
    return '...'  # traced or otherwise not a concrete number
  if math.isfinite(number) and number == int(number) and abs(number) < 1e15:
    return repr(float(number))
  return repr(number)


class StockReplacement(NamedTuple):
  variant: Optional[str]  # key of the deviation table; None: no stock alias.
  expression: Optional[str]  # Python source; None when Optax has no match.
  note: Optional[str]  # where the stock alias differs, if it does notably.


def stock_variant(algorithm: str,
                  hyper_params: Mapping[str, Any]) -> Optional[Stock]:
  """The ``Stock`` variant of ``algorithm`` for these hyper-params (None:
  Optax has no counterpart)."""
  algorithm_record = BY_NAME.get(algorithm)
  if algorithm_record is None or not algorithm_record.stock:
    return None
  return [s for s in algorithm_record.stock
          if s.when is None or _is_set(hyper_params.get(s.when))][-1]


def stock_optax(algorithm: str, hyper_params: Mapping[str, Any],
                render=literal) -> StockReplacement:
  """The nearest stock Optax expression for ``algorithm`` with these values.

  Args:
    algorithm: the legacy class name ('Adam', 'LARS', ...).
    hyper_params: legacy hyper-parameter name -> value.
    render: value -> Python source (the scanner passes source text as is).

  Returns:
    ``StockReplacement``; ``expression`` is None for algorithms Optax has no
    counterpart of (WeightNorm).
  """
  stock = stock_variant(algorithm, hyper_params)
  if stock is None:
    return StockReplacement(None, None, None)
  values = {k: render(v) for k, v in hyper_params.items()}
  if hyper_params.get('learning_rate', 0) in (None, 'None'):
    values['learning_rate'] = 'learning_rate'
  return StockReplacement(stock.variant, stock.template.format(**values),
                          stock.note)


def hyper_param_values(hyper_params: Any) -> dict[str, Any]:
  """A hyper-params dataclass -> {name: value} (empty if not a dataclass)."""
  if dataclasses.is_dataclass(hyper_params) and not isinstance(
      hyper_params, type):
    return {f.name: getattr(hyper_params, f.name)
            for f in dataclasses.fields(hyper_params)}
  return {}


# ----------------------------------------------------------------------------
# What ``flax-optim-compat migrate`` writes for a definition (its exact
# tier). The warnings and ``scan`` name the same spelling: one voice.

MIGRATE = 'flax-optim-compat migrate'
RULES_MODULE = 'flax_optim_rules'  # the exact rules; jax and optax only


class ExactStock(NamedTuple):
  """A rule whose stock Optax alias measured bit-identical to flax 0.5.3
  (``stock_exact``): ``migrate`` writes the alias itself."""
  factory: str
  arguments: Mapping[str, str]  # legacy hyper-parameter -> alias keyword
  # Keywords that stay Python values under optax.inject_hyperparams.
  static: tuple[str, ...] = ()


EXACT_STOCK = {
    'GradientDescent': ExactStock('optax.sgd',
                                  {'learning_rate': 'learning_rate'}),
    'Momentum': ExactStock('optax.sgd', {
        'learning_rate': 'learning_rate', 'beta': 'momentum',
        'nesterov': 'nesterov'}, ('momentum', 'nesterov')),
}


def stock_exact() -> frozenset:
  """The rules all of whose stock variants measured bit-identical."""
  results = deviations().get('results', {})
  return frozenset(
      a.name for a in RULES if a.stock and all(
          (results.get(s.variant) or {}).get('rel_err') == 0
          for s in a.stock))


def migrate_call(name: str, given: Mapping[str, str],
                 defaults: Mapping[str, Optional[str]],
                 inject: bool = False, prefer_stock: bool = True,
                 rate_from_mapping: bool = False) -> str:
  """The expression ``migrate`` writes for ``flax.optim.<name>(...)``.

  Args:
    name: a built-in rule ('Adam', 'Momentum', ...).
    given: the hyper-parameters the call passes -> source text, in the
      constructor's order.
    defaults: every hyper-parameter -> its default's source text.
    inject: the learning rate is set per step (``apply_gradient(g,
      learning_rate=lr)``): the transform takes it as an injected
      hyper-parameter, 0.0 until the first step sets it if none is given.
    prefer_stock: spell the rules in ``stock_exact`` with their stock
      alias; False where it cannot be written (a weight decay that is not
      a literal: whether it is zero is known only when the program runs).
    rate_from_mapping: a ``**`` mapping written after these keywords
      starts the injected rate (``**{'learning_rate': 0.0, **mapping}``),
      so it is not set here.

  Returns:
    The stock alias for the rules in ``stock_exact`` (a non-zero weight
    decay chained first, as flax.optim skipped a zero one), else the
    keyword function of ``flax_optim_rules`` named after the algorithm's
    module with the given values: the same rule, bit for bit.
  """
  # Only a rate neither given nor defaulted starts at 0.0 (the stock path
  # passes the call's values as ``defaults``).
  rate = given.get('learning_rate', defaults.get('learning_rate'))
  if inject and rate in (None, 'None') and not rate_from_mapping:
    given = {'learning_rate': '0.0', **{
        k: v for k, v in given.items() if k != 'learning_rate'}}
  if prefer_stock and name in stock_exact():
    stock = EXACT_STOCK[name]
    values = {**defaults, **given}
    factory = stock.factory
    if inject:
      static = f', static_args={stock.static!r}' if stock.static else ''
      factory = f'optax.inject_hyperparams({factory}{static})'
    call = factory + '(' + ', '.join(
        f'{keyword}={values[legacy]}'
        for legacy, keyword in stock.arguments.items()
        if values[legacy] != 'False') + ')'
    decay = values.get('weight_decay')
    if _is_set(decay):
      try:  # a literal is written as its value (1e-4 -> 0.0001)
        decay = repr(ast.literal_eval(str(decay)))
      except (SyntaxError, ValueError):
        pass
      call = f'optax.chain(optax.add_decayed_weights({decay}), {call})'
    return call
  factory = f'{RULES_MODULE}.{BY_NAME[name].module}'
  if inject:
    factory = f'{RULES_MODULE}.inject_learning_rate({factory})'
  return factory + '(' + ', '.join(f'{k}={v}' for k, v in given.items()) + ')'


# ----------------------------------------------------------------------------
# Measured deviations (written by scripts/stock_optax_deviation.py).

@functools.lru_cache(maxsize=None)
def deviations() -> dict:
  """The committed results of ``scripts/stock_optax_deviation.py``."""
  try:
    with open(DEVIATION_FILE, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return {'results': {}}


def deviation_phrase(variant: Optional[str]) -> str:
  """'deviates up to 3.6e-07 from flax 0.5.3 ...' from the measured table."""
  table = deviations()
  result = table.get('results', {}).get(variant or '')
  if not result or result.get('rel_err') is None:
    return 'deviation from flax 0.5.3 not measured'
  steps = table.get('steps', 100)
  if result['rel_err'] == 0:
    return f'bit-identical to flax 0.5.3 over {steps} measured steps'
  return (f'deviates up to {result["rel_err"]:.2g} from flax 0.5.3 over '
          f'{steps} steps (relative error of the accumulated update)')


def exit_deviation_phrase(variant: Optional[str]) -> str:
  """'deviates up to 3.5e-07 from the legacy continuation ...': what
  continuing a legacy run with the stock exit's state changed, as measured."""
  table = deviations()
  result = table.get('results', {}).get(variant or '')
  if not result or result.get('exit_rel_err') is None:
    return 'deviation from the legacy continuation not measured'
  where = (f'measured exiting at step {table.get("exit_step", 3)} and '
           f'continuing to step {table.get("steps", 100)}')
  if result['exit_rel_err'] == 0:
    return f'bit-identical to the legacy continuation ({where})'
  return (f'deviates up to {result["exit_rel_err"]:.2g} from the legacy '
          f'continuation ({where}; relative error of the accumulated update)')
