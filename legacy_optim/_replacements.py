"""What replaces each legacy ``flax.optim`` feature: one table for all users.

The deprecation warnings, the source scanner (``python -m compat scan``), the
deviation benchmark (``scripts/stock_optax_deviation.py``) and the migration
guide all read this module, so the stock Optax expression a warning prints is
exactly the expression whose deviation from flax 0.5.3 was measured.

Stdlib only: the scanner loads it without importing legacy_optim (and jax).
"""

import dataclasses
import json
import math
import os
from typing import Any, Mapping, NamedTuple, Optional

# The guide ships with the package; the command prints it (or --path).
GUIDE = 'the migration guide (flax-optim-compat guide)'

# Section headings of migration_guide.md (tests check that each exists).
SECTION_INSTALL = 'Step 0: Install and run unchanged'
SECTION_FIND = 'Step 1: Read the warnings and scan the code'
SECTION_ALGORITHMS = (
    'Step 2: Swap each optimizer definition for its Optax transform')
SECTION_TRAVERSALS = 'Traversals and MultiOptimizer'
SECTION_OVERRIDES = 'Per-step hyper-parameter overrides'
SECTION_WEIGHT_NORM = 'Weight normalization'
SECTION_LOOP = 'Step 3: Move the training loop to TrainState or nnx.Optimizer'
SECTION_REPLICATION = 'Replication'
SECTION_DYNAMIC_SCALE = 'Mixed precision (DynamicScale)'
SECTION_CHECKPOINTS = 'Step 4: Convert checkpoints'
SECTION_STRICT = 'Step 5: Remove the shim and turn on strict mode'

SECTIONS = (SECTION_INSTALL, SECTION_FIND, SECTION_ALGORITHMS,
            SECTION_TRAVERSALS, SECTION_OVERRIDES, SECTION_WEIGHT_NORM,
            SECTION_LOOP, SECTION_REPLICATION, SECTION_DYNAMIC_SCALE,
            SECTION_CHECKPOINTS, SECTION_STRICT)

DEVIATION_FILE = os.path.join(os.path.dirname(__file__),
                              'stock_optax_deviation.json')


def guide_ref(section: str) -> str:
  return f'{GUIDE}, section "{section}"'


# ----------------------------------------------------------------------------
# Stock Optax expressions, per algorithm variant.
#
# Templates use the legacy hyper-parameter names in braces; ``render`` fills
# them with Python literals. A variant is picked from the hyper-params (e.g.
# Adam with a non-zero weight decay is ``adamw``).

_TEMPLATES = {
    'sgd': 'optax.sgd({learning_rate})',
    'momentum': ('optax.sgd({learning_rate}, momentum={beta}, '
                 'nesterov={nesterov})'),
    'momentum_wd': ('optax.chain(optax.add_decayed_weights({weight_decay}), '
                    'optax.sgd({learning_rate}, momentum={beta}, '
                    'nesterov={nesterov}))'),
    'adam': 'optax.adam({learning_rate}, b1={beta1}, b2={beta2}, eps={eps})',
    'adam_wd': ('optax.adamw({learning_rate}, b1={beta1}, b2={beta2}, '
                'eps={eps}, weight_decay={weight_decay})'),
    'adabelief': ('optax.adabelief({learning_rate}, b1={beta1}, b2={beta2}, '
                  'eps={eps}, eps_root={eps})'),
    'adabelief_wd': ('optax.chain(optax.scale_by_belief(b1={beta1}, '
                     'b2={beta2}, eps={eps}, eps_root={eps}), '
                     'optax.add_decayed_weights({weight_decay}), '
                     'optax.scale_by_learning_rate({learning_rate}))'),
    'adadelta': 'optax.adadelta({learning_rate}, rho={rho}, eps={eps})',
    'adadelta_wd': ('optax.chain(optax.scale_by_adadelta(rho={rho}, '
                    'eps={eps}), optax.add_decayed_weights({weight_decay}), '
                    'optax.scale_by_learning_rate({learning_rate}))'),
    'adagrad': ('optax.adagrad({learning_rate}, initial_accumulator_value=0.0, '
                'eps={eps})'),
    'rmsprop': ('optax.rmsprop({learning_rate}, decay={beta2}, eps={eps}, '
                'eps_in_sqrt=False, centered={centered})'),
    'lamb': ('optax.lamb({learning_rate}, b1={beta1}, b2={beta2}, eps={eps}, '
             'weight_decay={weight_decay})'),
    'lars': ('optax.lars({learning_rate}, weight_decay={weight_decay}, '
             'trust_coefficient={trust_coefficient}, eps={eps}, '
             'momentum={beta}, nesterov={nesterov})'),
    'adafactor': ('optax.adafactor({learning_rate}, '
                  'min_dim_size_to_factor={min_dim_size_to_factor}, '
                  'decay_rate={decay_rate}, decay_offset={step_offset}, '
                  'multiply_by_parameter_scale={multiply_by_parameter_scale}, '
                  'clipping_threshold={clipping_threshold}, momentum={beta1}, '
                  'weight_decay_rate={weight_decay_rate}, eps={epsilon1}, '
                  'factored={factored})'),
}

# Why the nearest stock alias differs, where it does (guide and warnings).
_NOTES = {
    'adagrad': ('optax adds eps inside the square root (rsqrt(G + eps)); '
                'flax.optim adds it outside (sqrt(G) + eps)'),
    'lars_wd': ('optax computes the trust ratio from |g + wd*p|; flax.optim '
                'from |g| + wd*|p|'),
    'lamb': ('for a parameter that is exactly zero (e.g. a zero-initialised '
             'bias) flax.optim uses trust ratio 0 (it never moves), optax 1'),
    'adafactor': ('optax fixes the parameter-scale floor at 1e-3 '
                  '(flax.optim: epsilon2)'),
}


def _is_zero(value) -> bool:
  try:
    return value is not None and not callable(value) and float(value) == 0.0
  except (TypeError, ValueError):
    return False


def _variant(algorithm: str, hp: Mapping[str, Any]) -> Optional[str]:
  """The variant key of ``_TEMPLATES`` (and of the deviation table)."""
  wd = '' if _is_zero(hp.get('weight_decay', 0.0)) else '_wd'
  return {
      'GradientDescent': lambda: 'sgd',
      'Momentum': lambda: 'momentum' + wd,
      'Adam': lambda: 'adam' + wd,
      'AdaBelief': lambda: 'adabelief' + wd,
      'Adadelta': lambda: 'adadelta' + wd,
      'Adagrad': lambda: 'adagrad',
      'RMSProp': lambda: 'rmsprop' + (
          '_centered' if hp.get('centered') else ''),
      'LAMB': lambda: 'lamb',
      'LARS': lambda: 'lars' + wd,
      'Adafactor': lambda: 'adafactor',
  }.get(algorithm, lambda: None)()


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
  variant = _variant(algorithm, hyper_params)
  if variant is None:
    return StockReplacement(None, None, None)
  values = {k: render(v) for k, v in hyper_params.items()}
  if hyper_params.get('learning_rate', 0) in (None, 'None'):
    values['learning_rate'] = 'learning_rate'
  family = variant.split('_')[0]
  expression = _TEMPLATES.get(variant, _TEMPLATES[family]).format(**values)
  note = _NOTES.get(variant) or _NOTES.get(family)
  return StockReplacement(variant, expression, note)


def hyper_param_values(hyper_params: Any) -> dict[str, Any]:
  """A hyper-params dataclass -> {name: value} (empty if not a dataclass)."""
  if dataclasses.is_dataclass(hyper_params) and not isinstance(
      hyper_params, type):
    return {f.name: getattr(hyper_params, f.name)
            for f in dataclasses.fields(hyper_params)}
  return {}


# ----------------------------------------------------------------------------
# Measured deviations (written by scripts/stock_optax_deviation.py).

_deviations: Optional[dict] = None


def deviations() -> dict:
  """The committed results of ``scripts/stock_optax_deviation.py``."""
  global _deviations
  if _deviations is None:
    try:
      with open(DEVIATION_FILE, encoding='utf-8') as f:
        _deviations = json.load(f)
    except (OSError, ValueError):
      _deviations = {'results': {}}
  return _deviations


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
