"""How a flax.optim rule's construction is rewritten: its exact spelling
(``flax_optim_rules``, or stock Optax where measured bit-identical), or
its nearest stock alias (``--tier stock``). Stdlib only."""

import ast
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _flow
from compat.codemod import _names
from compat.codemod import _plan_edits
from compat.codemod import _plan_records

_RULES = _plan_records.RULES_MODULE  # the module migrated code imports
_CATALOGUE = _plan_records.CATALOGUE


class PlanRules(_plan_edits.PlanEdits):
  """Plans each ``optim.Adam(...)``-like definition. Part of
  ``_rewrite_plan.Planner``, whose ``__init__`` sets the state."""

  def _given_arguments(self, node, name):
    """``{parameter: value node}`` of a constructor call, or None where
    ``*`` or ``**`` hide some."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords):
      return None
    return self._bound_arguments(node, name)

  @staticmethod
  def _bound_arguments(node, name) -> dict:
    """``{parameter: value node}`` of the arguments a constructor call
    names or places (its ``**`` mappings aside)."""
    params = [p for p, _ in _names.legacy_signatures()[name]]
    given = dict(zip(params, node.args))
    given.update({k.arg: k.value for k in node.keywords if k.arg})
    return given

  def _plan_algorithm(self, node, name) -> Optional[str]:
    if name == _names.RULE_BY_NAME:
      return self._plan_rule_by_name(node)
    if name == _CATALOGUE.WEIGHT_NORM.name and self.tier == 'exact':
      return self._plan_weight_norm(node, name)
    if name not in _plan_records.RULE_NAMES:
      return (f'{name}: {_CATALOGUE.REPLACEMENTS["weight_norm"].text}'
              if name == _CATALOGUE.WEIGHT_NORM.name else
              _codes.filled_note(_codes.NOT_BUILT_IN, name=name))
    given = self._given_arguments(node, name)
    if given is None:
      return self._plan_spread_rule(node, name)
    if self.tier == 'stock':
      return self._plan_stock(node, name, given)
    if name not in _plan_records.STOCK_EXACT:
      return self._plan_exact_rule(node, name, given)
    params = [p for p, _ in _names.legacy_signatures()[name]]
    defaults = dict(_names.legacy_signatures()[name])
    values = {p: given.get(p, defaults[p]) for p in params}
    decay = values.get('weight_decay')
    decay_literal = None
    if decay is not None:
      if isinstance(decay, ast.AST):
        try:
          decay_literal = _literal(decay)
        except ValueError:
          # The stock spelling must know whether the decay is zero (flax.optim
          # skipped a zero decay term); the rules' function decides that on
          # the value itself when the definition is built, as flax.optim did.
          return self._plan_exact_rule(node, name, given, stock=False)
      else:
        decay_literal = _literal(decay)
    missing_rate = _flow.is_none(values['learning_rate'])
    if missing_rate and not self.inject:
      return _codes.note(_codes.NO_LEARNING_RATE)
    # Source spans stay placeholders (edits inside them still apply); the
    # decay is written as the literal it is (zero: no decay term).
    parts = {p: v for p, v in values.items() if isinstance(v, ast.AST)}
    texts = {p: 'None' if _flow.is_none(v) else '{%s}' % p if p in parts else
             _plan_records.literal_template(str(v)) for p, v in values.items()}
    if 'weight_decay' in texts:
      texts['weight_decay'] = repr(decay_literal)
    # A missing rate is set before every step (tree_set).
    call = _CATALOGUE.migrate_call(name, {}, texts, self.inject)
    self._require_tx_imports()
    self.edit(node, call, 'algorithm', **parts)
    return None

  def _plan_weight_norm(self, node, name) -> Optional[str]:
    """``optim.WeightNorm(opt_def, wn_decay=d)`` ->
    ``flax_optim_rules.weight_norm(opt_def, wn_decay=d)``: the same rule
    around the wrapped definition, which is rewritten where it is made (a
    per-step rate is set in its injected state: tree_set finds it there)."""
    given = self._given_arguments(node, name)
    if given is None:
      return _codes.note(_codes.STARRED_ARGUMENTS)
    wrapped = given.get('wrapped_optimizer')
    if wrapped is None or not self.flow.is_def(wrapped):
      return _codes.filled_note(_codes.WRAPPED_UNPROVEN, name=name)
    keywords = ''.join(f', {p}={{{p}}}' for p in ('wn_decay', 'wn_eps')
                       if p in given)
    self.imports.append((_RULES, None, None))
    self.edit(node, f'{_RULES}.{_CATALOGUE.WEIGHT_NORM.module}('
              f'{{wrapped_optimizer}}{keywords})', 'algorithm', **given)
    return None

  def _missing_rate(self, given) -> Optional[str]:
    if not _flow.is_none(given.get('learning_rate')) or self.inject:
      return None
    return _codes.note(_codes.NO_LEARNING_RATE)

  def _plan_exact_rule(self, node, name, given, stock: bool = True,
                       spreads=()) -> Optional[str]:
    """``optim.Adam(...)`` -> ``flax_optim_rules.adam(...)`` (same rule);
    ``spreads``: the ``**`` mappings the call passes on after ``given``
    (which may hold the rate)."""
    merged, reason = self._rate_mapping(given, spreads)
    if reason:
      return reason
    params = [p for p, _ in _names.legacy_signatures()[name]]
    texts = {p: 'None' if _flow.is_none(given[p]) else '{%s}' % p
             for p in params if p in given}
    # A missing rate is set before every step (tree_set).
    call = _CATALOGUE.migrate_call(name, texts, {}, self.inject,
                                   prefer_stock=stock,
                                   rate_from_mapping=merged is not None)
    return self._edit_rule_call(node, call, given, spreads, merged)

  def _rate_mapping(self, given, spreads) -> tuple:
    """``(mapping, reason)``: the one ``**`` mapping that may set the rate
    a step injects where the call gives none, written
    ``**{'learning_rate': 0.0, **mapping}``: 0.0 unless the mapping sets it,
    as flax.optim took it from there (``learning_rate=0.0, **mapping``
    would pass it twice). ``(None, None)``: nothing to merge (the rate is
    given or not injected, or the mappings are dict literals without it);
    a reason where no rate can be set at all (none given, injected or
    passed by a mapping) or two mappings may each set it."""
    if not spreads:
      return None, self._missing_rate(given)
    if not self.inject or 'learning_rate' in given:
      return None, None
    setting = [spread for spread in spreads if 'learning_rate' in (
        _plan_records.literal_dict_keys(spread, self.tree) or
        {'learning_rate'})]
    if len(setting) > 1:
      return None, _codes.filled_note(
          _codes.RATE_SET_TWICE, first=self.text(setting[0]),
          second=self.text(setting[1]))
    return (setting[0] if setting else None), None

  def _edit_rule_call(self, node, call, given, spreads, merged):
    """Writes ``call`` (a rule's call text with placeholders for
    ``given``), the ``**`` mappings passed on after its keywords;
    ``merged``: the one that may set the injected rate."""
    parts = {f'spread{i}': spread for i, spread in enumerate(spreads)}
    texts = ["**{{'learning_rate': 0.0, **{%s}}}" % part if spread is merged
             else '**{%s}' % part for part, spread in parts.items()]
    if texts:
      call = call[:-1] + (', ' if not call.endswith('()') else '') + (
          ', '.join(texts)) + ')'
    self.imports.append((_RULES, None, None))
    if self.inject:
      self._require_tx_imports()  # optax.tree_utils.tree_set per step
    self.edit(node, call, 'algorithm', **given, **parts)
    return None

  def _plan_rule_by_name(self, node) -> Optional[str]:
    """``getattr(flax.optim, name)(**kw)`` -> ``flax_optim_rules.rule_named(
    name)(**kw)``: the rules' functions take the classes' keywords, and each
    takes the rate first (the only position every rule shares)."""
    if self.tier == 'stock':
      return _codes.filled_note(_codes.BY_NAME_STOCK, rules=_RULES)
    if len(node.args) > 1 or any(isinstance(a, ast.Starred)
                                 for a in node.args):
      return _codes.note(_codes.BY_NAME_POSITIONAL)
    given = dict(zip(['learning_rate'], node.args))
    given.update({k.arg: k.value for k in node.keywords if k.arg})
    spreads = [k.value for k in node.keywords if k.arg is None]
    merged, reason = self._rate_mapping(given, spreads)
    if reason:
      return reason
    texts = {p: 'None' if _flow.is_none(v) else '{%s}' % p
             for p, v in given.items()}
    if self.inject and 'learning_rate' not in given and merged is None:
      texts = {'learning_rate': '0.0', **texts}  # set before every step
    factory = f'{_RULES}.rule_named({{rule_name}})'
    if self.inject:
      factory = f'{_RULES}.inject_learning_rate({factory})'
    call = factory + '(' + ', '.join(f'{k}={v}' for k, v in texts.items()) + ')'
    return self._edit_rule_call(node, call, {
        **given, 'rule_name': node.func.args[1]}, spreads, merged)

  def _plan_spread_rule(self, node, name) -> Optional[str]:
    """``optim.Adam(lr, **kwargs)`` -> ``flax_optim_rules.adam(
    learning_rate=lr, **kwargs)``: the rules' functions take flax.optim's
    keywords, so a ``**`` mapping passes on as it is, whatever it holds (a
    stock alias renames them; a ``*`` sequence fills positions by order).
    A per-step rate starts at 0.0 where nothing sets it."""
    if any(isinstance(a, ast.Starred) for a in node.args):
      return _codes.note(_codes.POSITIONAL_STARRED)
    if self.tier == 'stock':
      return _codes.note(_codes.STOCK_SPREAD)
    spreads = [k.value for k in node.keywords if k.arg is None]
    return self._plan_exact_rule(node, name, self._bound_arguments(
        node, name), stock=False, spreads=spreads)

  def _plan_stock(self, node, name, given) -> Optional[str]:
    """The nearest stock Optax alias, its deviation in a comment."""
    reason = self._missing_rate(given)
    if reason:
      return reason
    if self.inject:
      return _codes.note(_codes.STOCK_NO_INJECT)
    defaults = dict(_names.legacy_signatures()[name])
    texts = {p: self.text(given[p]) if p in given else (default or 'None')
             for p, default in defaults.items()}
    # Literal values are written out (they select the variant: a zero
    # weight decay is no decay); expressions stay spans of the source, so
    # edits inside them still apply.
    values = {p: ('{%s}' % p if p in given and not isinstance(
        given[p], ast.Constant) else _plan_records.literal_template(text))
              for p, text in texts.items()}
    stock = _CATALOGUE.stock_optax(name, texts, render=str)
    expression = _CATALOGUE.stock_optax(name, values, render=str).expression
    statement = node
    while not isinstance(statement, ast.stmt):
      statement = self.parents[statement]
    line = self.source.splitlines()[statement.lineno - 1].decode('utf-8')
    indent = line[:len(line) - len(line.lstrip())]
    note = f' ({stock.note})' if stock.note else ''
    comment = (f'{indent}# stock Optax for flax.optim {name}: '
               f'{_CATALOGUE.deviation_phrase(stock.variant)}{note}\n')
    self._require_tx_imports()
    self.edit(node, expression, 'algorithm_stock', **{
        p: v for p, v in given.items() if not isinstance(v, ast.Constant)})
    line_start = self._offsets[statement.lineno - 1]
    self.edits.append(_plan_records.Edit(
        line_start, line_start, _plan_records.literal_template(comment), (),
        node.lineno, 'algorithm_stock'))
    return None


def _literal(value):
  """``ast.literal_eval(value)`` (a node or its source), a number read
  directly: each call of ``literal_eval`` leaves a cycle of closures for
  the collector, which ``scan`` keeps paused while it plans modules
  (``scan.without_cycle_collection``)."""
  node = ast.parse(value.lstrip(' \t'), mode='eval').body if isinstance(
      value, str) else value
  signs = {ast.USub: -1, ast.UAdd: 1}
  sign = signs.get(type(node.op)) if isinstance(node, ast.UnaryOp) else 1
  number = node.operand if isinstance(node, ast.UnaryOp) else node
  if sign and isinstance(number, ast.Constant) and type(number.value) in (
      int, float):
    return sign * number.value
  return ast.literal_eval(node)
