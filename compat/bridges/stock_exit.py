"""The stock exit: a legacy ``Optimizer`` continued by a stock Optax alias.

``compat.to_optax`` keeps flax.optim's exact rule, so its state only loads
where this library is installed. ``to_stock_optax(optimizer)`` instead
returns the nearest stock Optax transform (``optax.adam(...)``,
``optax.sgd(..., momentum=...)``...; the expression the deprecation warnings
print) and the optimizer's state poured into that transform's own state
(``ScaleByAdamState(count, mu, nu)``, ``TraceState(trace)``, ...), with a
report of two measured figures (``legacy_optim/stock_optax_deviation.json``):
``exit_rel_err``, how far continuing with the stock state moved from the
legacy continuation (exiting at step 3 of the measurement run, on today's
stack), and ``rel_err``, how far the stock rule is from the original
flax.optim (flax 0.5.3). Nothing of this library is needed to restore or
continue that state::

  tx, opt_state, report = compat.to_stock_optax(optimizer)
  print(report)  # continuing: deviates up to 3.5e-07 from the legacy ...

The state's structure always comes from the stock transform's own
``init(params)``; the values are filled by the catalogue's field mapping
(``Algorithm.stock_state``: legacy field -> stock state attribute), so no
algorithm has a converter of its own. A MultiOptimizer (or ``focus``) becomes
``optax.partition`` of the stock transforms with labels from its traversals.
"""

import dataclasses
from typing import Any, Optional

import jax
import numpy as np
import optax

from compat.bridges import optax_bridge
from flax_optim_rules import _legacy_layout
from legacy_optim import base
from legacy_optim import catalogue
from legacy_optim import multi

_COUNT = 'count'
_NEGATED = '-'


class NoStockCounterpartError(ValueError):
  """Optax has no stock transform continuing this optimizer's rule."""


@dataclasses.dataclass(frozen=True)
class StockPart:
  """The stock transform continuing one (sub-)optimizer."""
  algorithm: str  # legacy class name
  variant: str  # key of the measured deviations
  expression: str  # the stock Optax call, as Python source
  rel_err: Optional[float]  # measured deviation from flax 0.5.3
  counterpart: bool  # False: only the closest stock transform
  note: Optional[str]
  label: Optional[str] = None  # the optax.partition label (MultiOptimizer)
  # Measured deviation of the stock continuation from the legacy one (the
  # exit's own figure: what continuing with the stock state changes).
  exit_rel_err: Optional[float] = None

  @property
  def deviation(self) -> str:
    """The stock rule vs flax 0.5.3's (the catalogue's figure)."""
    return catalogue.deviation_phrase(self.variant)

  @property
  def exit_deviation(self) -> str:
    """The stock continuation vs the legacy continuation."""
    return catalogue.exit_deviation_phrase(self.variant)


@dataclasses.dataclass(frozen=True)
class StockReport:
  """What ``to_stock_optax`` built and how far it measured from flax.optim."""
  expression: str  # the whole stock transform, as Python source
  parts: tuple[StockPart, ...]
  step: int

  @property
  def rel_err(self) -> Optional[float]:
    """The largest measured deviation of the parts' stock rules from flax
    0.5.3 (None: not measured)."""
    return _largest(p.rel_err for p in self.parts)

  @property
  def exit_rel_err(self) -> Optional[float]:
    """The largest measured deviation of the parts' stock continuation from
    the legacy continuation (None: not measured): what taking the exit
    changes in a legacy run."""
    return _largest(p.exit_rel_err for p in self.parts)

  @property
  def exact_counterpart(self) -> bool:
    return all(p.counterpart for p in self.parts)

  def as_json(self) -> dict:
    return {'expression': self.expression, 'step': self.step,
            'rel_err': self.rel_err, 'exit_rel_err': self.exit_rel_err,
            'parts': [dataclasses.asdict(p) for p in self.parts]}

  def __str__(self):
    lines = [f'stock exit at step {self.step}: {self.expression}']
    for part in self.parts:
      where = f'[{part.label}] ' if part.label is not None else ''
      closest = '' if part.counterpart else ' (closest only: no counterpart)'
      lines.append(f'  {where}{part.algorithm} -> {part.expression}'
                   f'{closest}')
      lines.append(f'    continuing: {part.exit_deviation}')
      lines.append(f'    stock rule: {part.deviation}')
      if part.note:
        lines.append(f'    note: {part.note}')
    return '\n'.join(lines)


def _largest(errors) -> Optional[float]:
  errors = list(errors)
  return None if None in errors else max(errors)


def _built_in(opt_def: base.OptimizerDef) -> catalogue.Algorithm:
  """The catalogue record of the built-in ``opt_def`` is (or derives from
  without changing the rule)."""
  name = type(opt_def).__name__
  if opt_def._user_hooks():
    raise NoStockCounterpartError(
        f'{name} runs its own code ({", ".join(sorted(opt_def._user_hooks()))};'
        ' a subclass with its own rule): no stock Optax transform continues '
        'it. Keep compat.to_optax (the same numbers), or port the rule.')
  for cls in type(opt_def).__mro__:
    record = catalogue.BY_NAME.get(cls.__name__)
    if record and cls.__module__ == f'legacy_optim.{record.module}':
      return record
  raise NoStockCounterpartError(
      f'{name} is not a built-in flax.optim algorithm: no stock Optax '
      'transform is known for it. Keep compat.to_optax (the same numbers).')


class _Values:
  """Renders hyper-parameter values as names bound in the eval namespace,
  so any value (an array, a schedule) reaches the stock call as is."""

  def __init__(self):
    self.namespace = {'optax': optax}

  def __call__(self, value) -> str:
    name = f'_value{len(self.namespace)}'
    self.namespace[name] = value
    return name


def _stock_part(opt_def, hyper_params, params, closest: bool,
                label: Optional[str] = None):
  """(stock transform, StockPart, catalogue record) for one built-in def."""
  record = _built_in(opt_def)
  values = catalogue.hyper_param_values(hyper_params)
  stock = catalogue.stock_variant(record.name, values)
  if stock is None:
    raise NoStockCounterpartError(
        f'{record.name}: Optax has no stock counterpart, and no closest one '
        f'either. {catalogue.REPLACEMENTS["weight_norm"].text}.'
        if record is catalogue.WEIGHT_NORM else
        f'{record.name}: Optax has no stock counterpart.')
  if values.get('learning_rate') is None:
    raise ValueError(
        f'{record.name} has no learning rate (the legacy loop passed one to '
        'every apply_gradient); give it: to_stock_optax(optimizer, '
        'learning_rate=<number or schedule>).')
  variant, counterpart = stock.variant, stock.counterpart
  if stock.zero_bias and any(
      not np.any(np.asarray(leaf))
      for leaf in jax.tree_util.tree_leaves(params)):
    variant, counterpart = f'{stock.variant}_zero_bias', False
  # The catalogue's expression is the one the warnings print and the
  # deviation script measured: evaluating it builds exactly that transform.
  render = _Values()
  tx = eval(stock.template.format(**{k: render(v) for k, v in values.items()}),
            render.namespace)
  measured = catalogue.deviations().get('results', {}).get(variant, {})
  expression = catalogue.stock_optax(record.name, values).expression
  assert expression is not None  # ``stock`` is this same variant
  part = StockPart(record.name, variant, expression, measured.get('rel_err'),
                   counterpart, stock.note, label,
                   measured.get('exit_rel_err'))
  if not counterpart and not closest:
    which = (' for these params (a param that is exactly zero)'
             if variant.endswith('_zero_bias') else '')
    raise NoStockCounterpartError(
        f'{record.name}: Optax has no counterpart of this rule{which}'
        f'. The closest is {part.expression}: {part.deviation}'
        f'{f" ({stock.note})" if stock.note else ""}; continuing with it '
        f'{part.exit_deviation}. Pass closest=True '
        '(--closest) to continue with it anyway, or keep compat.to_optax '
        '(the same numbers).')
  return tx, part, record


def _field_columns(param_states, params, fields, selected=None):
  """One flat list (in params leaf order) per legacy state field; leaves not
  ``selected`` (or stateless) get None."""
  treedef: Any = jax.tree_util.tree_structure(params)
  flat_states = treedef.flatten_up_to(param_states)
  return {
      name: [getattr(s, name, None)
             if s is not None and (selected is None or selected[i]) else None
             for i, s in enumerate(flat_states)]
      for name in fields}


def _fill(template: Any, step, columns, mapping, params, where: str):
  """``template`` (a stock state) with the legacy values placed in it."""
  if _legacy_layout.is_named_tuple(template):
    attributes = {}
    for attribute in template._fields:
      value = getattr(template, attribute)
      shown = f'{where}.{attribute}'
      if attribute == _COUNT:
        attributes[attribute] = np.asarray(step, np.asarray(value).dtype)
      elif attribute in mapping:
        field, negate = mapping[attribute]
        attributes[attribute] = _fill_params_tree(
            value, columns[field], negate, params, shown)
      elif isinstance(value, tuple):
        attributes[attribute] = _fill(value, step, columns, mapping, params,
                                      shown)
      elif jax.tree_util.tree_leaves(value):
        raise ValueError(
            f'The stock state has {shown}, which no legacy state field maps '
            'to (legacy_optim.catalogue: stock_state).')
      else:
        attributes[attribute] = value
    named_tuple: Any = template
    return named_tuple._replace(**attributes)
  if isinstance(template, tuple):
    return tuple(_fill(inner, step, columns, mapping, params, f'{where}[{i}]')
                 for i, inner in enumerate(template))
  if jax.tree_util.tree_leaves(template):
    raise ValueError(f'Unexpected {type(template).__name__} at {where} in the '
                     'stock state.')
  return template


def _dtype(value) -> np.dtype:
  return value.dtype if hasattr(value, 'dtype') else np.asarray(value).dtype


def _fill_params_tree(template, column, negate: bool, params, shown: str):
  treedef: Any
  with_path, treedef = jax.tree_util.tree_flatten_with_path(params)
  wanted = treedef.flatten_up_to(template)
  out = []
  for (path, _), want, got in zip(with_path, wanted, column):
    if isinstance(want, optax.MaskedNode):
      out.append(want)
      continue
    name = f'{shown}{jax.tree_util.keystr(path)}'
    if got is None:
      raise ValueError(f'{name}: the legacy state has no value for it.')
    got_dtype, want_dtype = _dtype(got), _dtype(want)
    if np.shape(got) != np.shape(want) or got_dtype != want_dtype:
      raise ValueError(
          f'{name}: the stock state expects {want_dtype.name}'
          f'{list(np.shape(want))}, the legacy state holds '
          f'{got_dtype.name}{list(np.shape(got))}.')
    out.append(-got if negate else got)
  return treedef.unflatten(out)


def _check_unplaced(record, template, columns, label_text: str) -> None:
  """A legacy field the stock state has no place for must be unused."""
  present = set()

  def collect(node):
    if _legacy_layout.is_named_tuple(node):
      present.update(node._fields)
    if isinstance(node, tuple):
      for inner in node:
        collect(inner)

  collect(template)
  for field, attribute in record.stock_state.items():
    if attribute.lstrip(_NEGATED) in present:
      continue
    if any(v is not None and np.any(np.asarray(v)) for v in columns[field]):
      raise ValueError(
          f'{label_text}{record.name}: the stock state has no place for the '
          f'legacy field {field!r}, which holds non-zero values; the stock '
          'transform would drop them.')


def _mapping(record) -> dict[str, tuple[str, bool]]:
  """stock attribute -> (legacy field, negated)."""
  return {attribute.lstrip(_NEGATED): (field, attribute.startswith(_NEGATED))
          for field, attribute in record.stock_state.items()}


def _part_state(record, template, state, params, selected, label_text):
  fields = record.state_fields
  columns = _field_columns(state.param_states, params, fields, selected)
  _check_unplaced(record, template, columns, label_text)
  return _fill(template, state.step, columns, _mapping(record), params,
               f'{label_text}opt_state')


def to_stock_optax(optimizer: base.Optimizer, *, closest: bool = False,
                   **hyper_param_overrides):
  """Returns ``(tx, opt_state, report)``: a stock Optax transform continuing
  ``optimizer`` and its state in that transform's layout.

  Args:
    optimizer: a legacy ``Optimizer`` (not replicated).
    closest: also continue with the closest stock transform where Optax has
      no counterpart (Adagrad, LARS with weight decay, LAMB with a param that
      is exactly zero); the report gives its measured deviations.
    **hyper_param_overrides: as in ``compat.to_optax`` (values may be
      schedules of the step count).

  Returns:
    ``tx`` (the stock call ``report.expression`` shows), ``opt_state`` (only
    Optax types: it restores where this library is not installed) and a
    ``StockReport`` with, per part, the measured deviation of the stock
    continuation from the legacy one (``exit_rel_err``) and of the stock
    rule from flax 0.5.3 (``rel_err``), both measured by
    ``scripts/stock_optax_deviation.py``.

  Raises:
    NoStockCounterpartError (a ValueError): Optax has no stock counterpart
      (WeightNorm, a rule of your own), or only a closest one and
      ``closest`` is False; the message names the closest and its figure.
    ValueError: no learning rate, or a state that does not fit the stock
      transform's (the message names the path).
  """
  optax_bridge.check_convertible(optimizer)
  opt_def, params, state = (optimizer.optimizer_def, optimizer.target,
                            optimizer.state)
  hyper_params = opt_def.update_hyper_params(**hyper_param_overrides)
  step = int(np.asarray(state.step))
  if not isinstance(opt_def, multi.MultiOptimizer):
    tx, part, record = _stock_part(opt_def, hyper_params, params, closest)
    opt_state = _part_state(record, tx.init(params), state, params, None, '')
    return tx, opt_state, StockReport(part.expression, (part,), step)
  if opt_def._user_hooks():
    _built_in(opt_def)  # raises, naming the hooks
  labels = opt_def.labels(params)
  flat_labels = jax.tree_util.tree_leaves(labels)
  sub = [_stock_part(o, hp, params, closest, multi.sub_label(k))
         for k, (o, hp) in enumerate(zip(opt_def.sub_optimizers, hyper_params))]
  transforms = {part.label: tx for tx, part, _ in sub}
  transforms[multi.FROZEN_LABEL] = optax.set_to_zero()
  tx = optax.partition(transforms, labels)
  template = tx.init(params)
  inner = dict(template.inner_states)
  for _, part, record in sub:
    selected = [label == part.label for label in flat_labels]
    inner[part.label] = inner[part.label]._replace(inner_state=_part_state(
        record, inner[part.label].inner_state, state, params, selected,
        f'[{part.label}] '))
  expression = ('optax.partition({' + ', '.join(
      f'{part.label!r}: {part.expression}' for _, part, _ in sub) +
                f", {multi.FROZEN_LABEL!r}: optax.set_to_zero()}}, labels)")
  return tx, template._replace(inner_states=inner), StockReport(
      expression, tuple(part for _, part, _ in sub), step)
