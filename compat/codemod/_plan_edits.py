"""How a module's rewrite plan records what it does: the edits of source
spans, the leftovers with their reasons, the imports it needs, the
statements it deletes. Stdlib only."""

import ast

from compat.codemod import _plan_records


class PlanEdits:
  """The spans, edits, leftovers and imports a ``Planner`` records. Part of
  ``_rewrite_plan.Planner``, whose ``__init__`` sets the state."""

  # ------------------------------------------------------------- helpers
  def span(self, node) -> tuple:
    start = self._offsets[node.lineno - 1] + node.col_offset
    end = self._offsets[node.end_lineno - 1] + node.end_col_offset
    return start, end

  def text(self, node) -> str:
    start, end = self.span(node)
    return self.source[start:end].decode('utf-8')

  def _free_name(self, preferred: str, fallback: str) -> str:
    return preferred if preferred not in self._taken else fallback

  def edit(self, node, template, construct, **parts):
    start, end = self.span(node)
    spans = tuple((k, self.span(v) if isinstance(v, ast.AST) else v)
                  for k, v in parts.items())
    self.edits.append(_plan_records.Edit(start, end, template, spans,
                                         node.lineno, construct))

  def _line(self, line: int) -> str:
    return _plan_records.source_line(self.source, line)

  def leave(self, node, construct, reason):
    self.leftovers.append(self._leftover(node, construct, reason))

  def _covered(self, finding) -> bool:
    return any(e.line == finding.line for e in self.edits)

  def _leftover(self, node, construct, reason):
    return _plan_records.Leftover(node.lineno, construct,
                                  self._line(node.lineno), reason)

  def _require_tx_imports(self):
    self.imports.append(('optax', None, None))

  def _train_state_name(self):
    name = self._free_name('train_state', 'flax_train_state')
    self.imports.append(('flax.training', 'train_state',
                         None if name == 'train_state' else name))
    return name

  def _rules_train_state_name(self):
    """The name of ``flax_optim_rules.train_state`` (a TrainState over any
    pytree, a bare array included), imported."""
    name = self._free_name(f'rules_{_plan_records.RULES_TRAIN_STATE}',
                           f'{_plan_records.RULES_MODULE}_'
                           f'{_plan_records.RULES_TRAIN_STATE}')
    self.imports.append((_plan_records.RULES_MODULE,
                         _plan_records.RULES_TRAIN_STATE, name))
    return name

  def _jax_utils_name(self):
    if self.names.resolve(ast.Name(id='jax_utils')) == 'flax.jax_utils':
      return 'jax_utils'
    name = self._free_name('jax_utils', 'flax_jax_utils')
    self.imports.append(('flax', 'jax_utils',
                         None if name == 'jax_utils' else name))
    return name

  def delete_statement(self, node, construct, line=None):
    """Deletes ``node``'s lines, or writes ``pass`` where the statement
    shares its lines or is its block's only statement. ``line``: the
    finding's line the deletion answers (default the statement's first)."""
    before = len(self.edits)
    self._delete_statement(node, construct)
    if line is not None:
      self.edits[before:] = [e._replace(line=line)
                             for e in self.edits[before:]]

  def _delete_statement(self, node, construct):
    """Deletes ``node``'s lines, or writes ``pass`` where the statement
    shares its lines or is its block's only statement."""
    parent = self.parents.get(node)
    block = next((getattr(parent, field) for field in ('body', 'orelse',
                                                       'finalbody')
                  if node in getattr(parent, field, ())), [node])
    start, end = self.span(node)
    line_start = self._offsets[node.lineno - 1]
    line_end = self._offsets[node.end_lineno]
    rest = self.source[end:line_end].strip()
    if (len(block) == 1 or self.source[line_start:start].strip() or
        (rest and not rest.startswith(b'#'))):
      self.edit(node, 'pass', construct)
      return
    self.edits.append(_plan_records.Edit(line_start, line_end, '', (),
                                         node.lineno, construct))
