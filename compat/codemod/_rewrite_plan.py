"""What ``compat migrate`` changes in one module, decided from scan's findings.

Stdlib only: ``scan`` finds the usages, this module turns each finding
(and each use of an object the scanner proved to be an ``Optimizer``) into a
source edit or a leftover with its reason. ``migrate`` applies the
edits (LibCST) and writes the report.

Each built-in rule gets its exact spelling: stock Optax where the catalogue
measured the stock alias bit-identical (``_STOCK_EXACT``: GradientDescent,
Momentum), else the keyword function of ``flax_optim_rules`` named after the
catalogue's module (``optim.Adam(...)`` -> ``flax_optim_rules.adam(...)``),
which builds the transform ``Adam(...).to_optax()`` builds and needs only jax
and optax. ``--tier stock`` spells every rule with its nearest stock Optax
alias (the catalogue's templates), annotated with the measured deviation.

The exact tier carries the optimizer as a
``flax.training.train_state.TrainState`` under the user's own names, so every
flow the old object took (arguments, return values, tuples, dataclass fields,
checkpoints, ``jax.tree_util`` maps) keeps working; only the places that ask
the object something change:

  opt_def = optim.Momentum(lr, beta)    -> opt_def = optax.sgd(...)
  opt_def = optim.Adam(lr, beta2=b)     -> opt_def = flax_optim_rules.adam(
                                             learning_rate=lr, beta2=b)
  opt_def.create(params)                -> TrainState.create(apply_fn=None,
                                             params=params, tx=opt_def)
  optimizer.target                      -> optimizer.params
  optimizer.state.step                  -> optimizer.step
  optimizer.apply_gradient(g)           -> optimizer.apply_gradients(grads=g)
  optimizer.apply_gradient(g, learning_rate=lr)
      -> optimizer.replace(opt_state=optax.tree_utils.tree_set(
             optimizer.opt_state, learning_rate=lr)).apply_gradients(grads=g)
         (the definitions are then ``optax.inject_hyperparams``-wrapped,
         ``flax_optim_rules.inject_learning_rate`` for the exact rules)
  optim.Optimizer / optim.DynamicScale  -> TrainState / flax's DynamicScale

A module is rewritten only as a whole: if one optimizer usage in it cannot be
rewritten with certainty, none of its optimizer usages is (a half-migrated
file would mix the two kinds of object) and all are listed.
"""

import ast
import functools
from typing import NamedTuple, Optional

from compat import _lazy
from compat.codemod import _codes
from compat.codemod import _escape_analysis
from compat.codemod import _flow
from compat.codemod import _legacy_trees
from compat.codemod import _members
from compat.codemod import _multi
from compat.codemod import _names
from compat.codemod import _params
from compat.codemod import _project
from compat.codemod import _removals
from compat.codemod import _restores
from compat.codemod import _state_layout
from compat.codemod import _user_rules
from compat.codemod import _walk

# An optimizer going on to code the rewrite cannot follow
# (``_escape_analysis``).
ESCAPE = 'optimizer_escape'
# Constructs that are part of an optimizer's flow: all or none get rewritten.
FLOW_CONSTRUCTS = frozenset((
    'algorithm', _members.CREATE, _members.APPLY_GRADIENT,
    'apply_gradient_overrides', _members.COMPUTE_GRADIENT, _members.OPTIMIZE,
    _members.REPLICATE, 'multi_optimizer',
    'traversal', 'weight_norm', 'optimizer_def_subclass', 'optimizer_use',
    _members.OPTIMIZER_DEF, 'reexport', _project.HELD_IN_FIELD, ESCAPE))
# Findings that need no code change once the optimizer is a TrainState.
NOTE_CONSTRUCTS = frozenset(('checkpoint',))
HELD_NOTE = ('kept as it is: a # noqa on the line or the selected codes '
             '(--select/--ignore) hold it')

CHECKPOINT_NOTE = (
    'the checkpoint now holds a TrainState (step, params, opt_state); '
    'convert files written by the old code with `flax-optim-compat convert '
    'SRC DST --to train_state`')

PICKLE_NOTE = (
    'the pickle now holds a TrainState (step, params, opt_state); one written '
    'by the old code holds a flax.optim Optimizer: load it with '
    'flax-optim-compat installed and continue it with '
    '`compat.to_train_state(optimizer, apply_fn)`')

# A rewrite of a flow that another of its links keeps as it was.
HELD_BY_ANOTHER_LINK = (
    'not rewritten: another link of this optimizer flow could not be (see '
    'above); a flow is migrated as a whole or not at all')

# A definition nothing in the project calls, migrated with its flow.
CALLED_NOWHERE_NOTE = (
    '`{name}` is called and named nowhere in the scanned code, so it was '
    'migrated with its flow as dead code of this program: {now}, not a '
    'flax.optim OptimizerDef. Code outside the scanned tree '
    'that calls it must be migrated with it (scan them together)')
# flax.optim's checkpoint keys (``Optimizer.state_dict()``'s layout).
LAYOUT_KEYS = (_members.TARGET, _members.PARAM_STATES)
LAYOUT_KEY_NOTE = (
    "reads flax.optim's checkpoint layout by key ({key!r}): checkpoints "
    'written before migrating hold it, ones the migrated code writes hold a '
    "TrainState's (step, params, opt_state); convert the old ones with "
    '`flax-optim-compat convert SRC DST --to train_state` and read '
    "'params', or keep writing flax.optim's layout with "
    '`{rules}.state_dict(state)`')


def layout_key_reads(tree: ast.Module) -> list:
  """``(node, key)`` of each read of a nested dict by one of flax.optim's
  checkpoint keys (``state['optimizer']['target']``): one level below
  another subscript, so that ``batch['target']`` is not one."""
  return [(node, node.slice.value) for node in _walk.nodes(tree)
          if isinstance(node, ast.Subscript) and
          isinstance(node.value, ast.Subscript) and
          isinstance(node.slice, ast.Constant) and
          node.slice.value in LAYOUT_KEYS]


def flow_migrated(plan) -> bool:
  """Whether ``plan`` migrates its module's optimizer flow: no part of it
  is left as it was (the flow is rewritten whole or not at all)."""
  return not any(l.construct in FLOW_CONSTRUCTS for l in plan.leftovers)


class Edit(NamedTuple):
  """Replace bytes ``[start, end)`` by ``template`` filled with ``parts``.

  A part is a ``(start, end)`` span of the original source (rendered with the
  edits inside it applied) or a literal string.
  """
  start: int
  end: int
  template: str
  parts: tuple  # ((name, (start, end) | str), ...)
  line: int
  construct: str


class Leftover(NamedTuple):
  line: int
  construct: str
  code: str
  reason: str


class Plan(NamedTuple):
  edits: list
  leftovers: list
  notes: list  # Leftover-shaped: line, construct, code, note
  imports: list  # (module, name or None, asname or None) to add
  removed_imports: list  # (module, name or None, asname) to drop if unused


_CATALOGUE = _lazy.module_without_package('legacy_optim', 'catalogue')
RULES_MODULE = _CATALOGUE.RULES_MODULE
# The classes an ``-> optim.OptimizerDef`` (or ``MultiOptimizer``) names.
_DEF_CLASSES = ('flax.optim.OptimizerDef', 'flax.optim.base.OptimizerDef',
                'flax.optim.MultiOptimizer')

# The rules migrate spells with their stock alias (the catalogue's
# ``EXACT_STOCK``; tests/test_migrate.py checks the two agree and trains
# both for several steps).
_STOCK_EXACT = _CATALOGUE.stock_exact()
_RULE_NAMES = frozenset(a.name for a in _CATALOGUE.RULES)


def _line_offsets(source: bytes) -> list:
  offsets, total = [0], 0
  for line in source.splitlines(keepends=True):
    total += len(line)
    offsets.append(total)
  return offsets


class Planner:
  """Builds the ``Plan`` of one module from its scan findings."""

  def __init__(self, source: bytes, tree: ast.Module, names, findings,
               tier: str = 'exact', exported=(), rate_set_elsewhere=False,
               held=frozenset(), blocked=()):
    self.source, self.tree, self.names = source, tree, names
    # (line, code) of findings kept as they are (noqa, --ignore): the
    # flow is rewritten whole or not at all, so one held flax.optim finding
    # holds the file's flow; a held removal holds only itself.
    self.held = frozenset(held)
    self.flow_held = any((f.line, f.rule) in self.held and
                         f.rule.startswith(_codes.FLAX_OPTIM)
                         for f in findings)
    # (line, construct, reason): links of this module's optimizer flow to
    # other modules that stay as they are; the flow here stays with them.
    self.blocked = blocked
    self.findings, self.tier = findings, tier
    # Another module overrides hyper-parameters per step on optimizers it
    # did not create: definitions that leave this module get injected.
    self.rate_set_elsewhere = rate_set_elsewhere
    self.exported = frozenset(exported)  # names other modules import
    self.flow = _flow.OptimizerFlow(tree, names)
    self.replica_axis, self.replicate_problem = self._replica_axis()
    self._offsets = _line_offsets(source)
    self.edits, self.leftovers, self.notes = [], [], []
    # ids of nodes a user rule's rewrite edits (its base, OptimizerState).
    self.claimed: set[int] = set()
    self.kept_rules: list = []  # the user's classes moved onto RuleDef
    # Lines whose checkpoint call keeps or reads flax.optim's layout
    # (``_state_layout``, ``_restores``): no checkpoint note there.
    self.legacy_layout_lines: set[int] = set()
    # (call, why) of each restore of the flow left as it is (``_restores``):
    # noted where the flow migrates.
    self.restores_left: list = []
    self.imports, self.removed = [], []
    self._parents = _walk.parents(tree)
    bound = {n.id for n in _walk.nodes(tree) if isinstance(n, ast.Name)}
    bound |= {n.name for n in _walk.nodes(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    bound |= {a.arg for a in _walk.nodes(tree) if isinstance(a, ast.arg)}
    self._taken = bound

  # ------------------------------------------------------------- helpers
  def span(self, node) -> tuple:
    start = self._offsets[node.lineno - 1] + node.col_offset
    end = self._offsets[node.end_lineno - 1] + node.end_col_offset
    return start, end

  @functools.cached_property
  def replicated(self) -> _flow.OptimizerFlow:
    """Which optimizers are ReplicatedOptimizers (made by .replicate()):
    asked only in a module that replicates one (most do not, and a flow
    costs about a walk of the module)."""
    return _flow.OptimizerFlow(self.tree, self.names, replicated_of=self.flow)

  @functools.cached_property
  def checkpoint_lines(self) -> frozenset:
    """Lines where scan found a checkpoint or pickle write or read: what
    goes there is reported (``CHECKPOINT_NOTE``, ``PICKLE_NOTE``)."""
    return frozenset(f.line for f in self.findings
                     if f.construct in NOTE_CONSTRUCTS)

  @property
  def parents(self) -> dict:
    """Each node of the module's tree -> the node holding it."""
    return self._parents

  def text(self, node) -> str:
    start, end = self.span(node)
    return self.source[start:end].decode('utf-8')

  def _free_name(self, preferred: str, fallback: str) -> str:
    return preferred if preferred not in self._taken else fallback

  def edit(self, node, template, construct, **parts):
    start, end = self.span(node)
    spans = tuple((k, self.span(v) if isinstance(v, ast.AST) else v)
                  for k, v in parts.items())
    self.edits.append(Edit(start, end, template, spans, node.lineno,
                           construct))

  def _line(self, line: int) -> str:
    return self.source.splitlines()[line - 1].decode('utf-8',
                                                     'replace').strip()

  def leave(self, node, construct, reason):
    self.leftovers.append(Leftover(node.lineno, construct,
                                   self._line(node.lineno), reason))

  # ---------------------------------------------------------------- plan
  def plan(self) -> Plan:
    if self.flow_held:
      flow_edits, flow_leftovers = [], []
      self.notes += [Leftover(f.line, f.construct, f.code, HELD_NOTE)
                     for f in self.findings
                     if f.rule.startswith(_codes.FLAX_OPTIM)]
    else:
      flow_edits, flow_leftovers = self._plan_flow()
    for line, construct, reason in self.blocked:
      flow_leftovers.append(Leftover(line, construct, self._line(line),
                                     reason))
    if flow_leftovers:
      self.leftovers += flow_leftovers
      self.edits = [e for e in self.edits if e not in flow_edits]
      for edit in flow_edits:
        self.leftovers.append(Leftover(
            edit.line, edit.construct, self._line(edit.line),
            HELD_BY_ANOTHER_LINK))
      self.imports = [i for i in self.imports if i[0] not in (
          'optax', RULES_MODULE) and i[1] != 'train_state']
    elif not self.flow_held:
      self.notes += [Leftover(
          node.lineno, 'optimizer_def_subclass', self._line(node.lineno),
          _user_rules.PORT_NOTE.format(module=RULES_MODULE,
                                       base=_user_rules.RULE_BASE))
                     for node in self.kept_rules]
      if flow_edits:
        self.notes += self._called_nowhere_notes()
      if flow_edits:
        self.notes += [Leftover(
            node.lineno, 'checkpoint', self._line(node.lineno),
            _restores.note(self, why))
                       for node, why in self.restores_left
                       if node.lineno not in self.checkpoint_lines or
                       isinstance(why, _restores.Refuses)]
      if flow_edits:  # old checkpoints read by key meet new ones
        self.notes += [Leftover(node.lineno, 'checkpoint',
                                self._line(node.lineno),
                                LAYOUT_KEY_NOTE.format(
                                    key=key, rules=RULES_MODULE))
                       for node, key in layout_key_reads(self.tree)]
      for module in ('flax', 'legacy_optim'):
        self.removed.append((module, 'optim', None))
      self._plan_import_removals()
    self._plan_class_references()
    self._plan_removals()
    return Plan(sorted(self.edits), sorted(set(self.leftovers)),
                sorted(set(self.notes)), sorted(set(self.imports),
                                                key=str),
                self.removed)

  def _called_nowhere_notes(self) -> list:
    """A factory or rule class of this module that nothing in the project
    calls or names went with its flow: code outside the project that
    calls it meets the new contract."""
    model = self.names.model
    unseen = model.unseen if model is not None else set()
    notes = []
    for node in _walk.statements(self.tree):
      if isinstance(node, ast.FunctionDef) and (
          self.names.path, node.lineno, node.name) in unseen:
        now = 'it now returns an Optax transform'
      elif node in self.kept_rules and _user_rules.called_nowhere(
          self.names, node):
        now = f'it is now a {RULES_MODULE}.{_user_rules.RULE_BASE}'
      else:
        continue
      notes.append(Leftover(node.lineno, 'called_nowhere',
                            self._line(node.lineno),
                            CALLED_NOWHERE_NOTE.format(name=node.name,
                                                       now=now)))
    return notes

  def _plan_import_removals(self):
    for node in _walk.nodes(self.tree):
      if isinstance(node, ast.Import):
        for alias in node.names:
          if alias.name in ('flax.optim', 'legacy_optim'):
            self.removed.append((alias.name, None, alias.asname))
      elif isinstance(node, ast.ImportFrom) and node.module and (
          node.module.startswith(('flax.optim', 'legacy_optim'))):
        for alias in node.names:
          self.removed.append((node.module, alias.name, alias.asname))
      elif isinstance(node, ast.ImportFrom) and node.module == 'flax':
        # ``from flax import optim as optimizers`` (scenic): the alias.
        for alias in node.names:
          if alias.name == 'optim' and alias.asname:
            self.removed.append(('flax', 'optim', alias.asname))
    if not self.exported:
      return
    # Other scanned modules import these names from here: keep them.
    kept = [r for r in self.removed if (r[2] or r[1] or r[0]).partition(
        '.')[0] in self.exported]
    self.removed = [r for r in self.removed if r not in kept]
    for node in self.tree.body:
      if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
          (a.asname or a.name.partition('.')[0]) in self.exported
          for a in node.names):
        self.leave(node, 'import', 'other scanned modules import flax.optim '
                   'through this name: kept until they import it directly '
                   '(then delete it here)')

  def _reexport_leftovers(self) -> list:
    """Imports that reach flax.optim through another module's re-export."""
    leftovers = []
    for node in _walk.nodes(self.tree):
      if not isinstance(node, (ast.Import, ast.ImportFrom)):
        continue
      for alias in node.names:
        local = alias.asname or alias.name.partition('.')[0]
        raw = self.names.bindings.get(local, '')
        path = self.names.resolve(ast.Name(id=local))
        if path and path.startswith('flax.optim') and not (
            _names.canonical(raw).startswith('flax.optim')):
          leftovers.append(self._leftover(
              node, 'reexport', f'{local} is flax.optim re-exported by '
              f'{raw}: import it from flax directly (`from flax import '
              f'optim as {local}`) and run migrate again; this file is '
              'not rewritten until then'))
    return leftovers

  def _plan_flow(self):
    before = len(self.edits)
    leftovers = self._reexport_leftovers()
    overrides = [f for f in self.findings
                 if f.construct == 'apply_gradient_overrides']
    model = self.names.model
    self.inject = bool(overrides) or (self.rate_set_elsewhere and not any(
        f.construct == _members.APPLY_GRADIENT for f in self.findings)) or any(
            step.overrides for step in self.flow.foreign_steps.values()) or (
                model is not None and model.names_rate_setter(
                    self.tree, self.names, self.names.path))
    handled = set()
    for node in _walk.nodes(self.tree):
      if isinstance(node, ast.ClassDef) and (
          node.name in self.names.user_defs):
        reason = _user_rules.plan_class(self, node, RULES_MODULE)
        if reason:
          leftovers.append(self._leftover(node, 'optimizer_def_subclass',
                                          reason))
        else:
          self.kept_rules.append(node)
      if isinstance(node, ast.Call) and self.names.user_rule(node.func):
        handled.add(node.lineno)
        reason = _user_rules.plan_construction(self, node, RULES_MODULE,
                                               self.inject)
        if reason:
          leftovers.append(self._leftover(node, 'multi_optimizer', reason))
      elif isinstance(node, ast.Call):
        name = self.names.legacy_class(node.func)
        if name in _CATALOGUE.BY_NAME or name == _names.RULE_BY_NAME:
          handled.add(node.lineno)
          reason = self._plan_algorithm(node, name)
          if reason:
            leftovers.append(self._leftover(node, 'algorithm', reason))
        elif name == _multi.MULTI_OPTIMIZER:
          handled.add(node.lineno)
          reason = _multi.plan_multi(self, node, RULES_MODULE)
          if reason:
            leftovers.append(self._leftover(node, 'multi_optimizer', reason))
        elif name == _multi.PARAM_TRAVERSAL or (
            _multi.is_param_traversal(self.names, node.func) and
            _multi.traversal_problem(self, node) is None):
          # (flax.traverse_util's, only where it goes into a MultiOptimizer)
          handled.add(node.lineno)
          reason = _multi.plan_traversal(self, node, RULES_MODULE)
          if reason:
            leftovers.append(self._leftover(node, 'traversal', reason))
        elif isinstance(node.func, ast.Attribute) and (
            node.func.attr == _members.CREATE and
            self.flow.is_def(node.func.value)):
          handled.add(node.lineno)
          reason = self._plan_create(node)
          if reason:
            leftovers.append(self._leftover(node, _members.CREATE, reason))
        elif self._jitted_def_create(node) is not None:
          handled.add(node.lineno)
          reason = self._plan_jitted_create(node)
          if reason:
            leftovers.append(self._leftover(node, _members.CREATE, reason))
        elif _state_layout.plan_serialization(self, node, RULES_MODULE):
          self.legacy_layout_lines.add(node.lineno)
        elif self._planned_restore(node):
          pass  # (a restore into a template: rewritten or noted)
        elif self.names.resolve(node.func) in _flow.OPTIMIZER_CLASSES:
          # Built from a definition, a state and a target: a TrainState of
          # the definition's transform holding that state.
          handled.add(node.lineno)
          why = _state_layout.plan_hand_built(
              self, node, self._train_state_name, RULES_MODULE)
          parts = _state_layout.hand_built_parts(node)
          if why is not None or parts is None:
            # One the flow proves an optimizer holds the flow with it.
            proven = parts is not None and self.flow.is_def(
                parts[_members.OPTIMIZER_DEF])
            leftovers.append(self._leftover(
                node, _members.CREATE if proven else 'reference',
                'not rewritten: ' + (why or _names.HAND_BUILT)))
      if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(
          node.ctx, ast.Load):
        self._plan_tree_entry(node)
      use = self.flow.member_use(node, False) if isinstance(
          node, ast.Attribute) else None
      if use == _members.OPTIMIZER_USE:
        handled.add(node.lineno)
        reason = self._plan_use(node)
        if reason:
          leftovers.append(self._leftover(node, 'optimizer_use', reason))
      elif use == _members.OPTIMIZER_DEF:
        # The transform written for the definition has no such attribute.
        handled.add(node.lineno)
        leftovers.append(self._leftover(node, _members.OPTIMIZER_DEF, (
            f'.{node.attr} of a flax.optim definition has no counterpart on '
            'the Optax transform migrate writes for it (its hyper-parameters '
            'live in the transform\'s state once injected: '
            'optax.tree_utils.tree_get(state.opt_state, name))')))
    leftovers += self._unproven_field_stores()
    leftovers += [self._leftover(node, ESCAPE, why)
                  for node, why in _escape_analysis.escapes(self)]
    for finding in self.findings:
      if finding.construct in NOTE_CONSTRUCTS and (
          finding.line not in self.legacy_layout_lines):
        pickled = finding.replacement == _CATALOGUE.REPLACEMENTS[
            'pickle'].text
        self.notes.append(Leftover(finding.line, finding.construct,
                                   finding.code, PICKLE_NOTE if pickled
                                   else CHECKPOINT_NOTE))
      elif finding.construct in FLOW_CONSTRUCTS and not self._covered(
          finding) and (finding.line, finding.construct) not in {
              (left.line, left.construct) for left in leftovers}:
        callers = _params.why_unproven(self.names.model, self.names,
                                       self.tree, finding.line, finding.code)
        leftovers.append(Leftover(
            finding.line, finding.construct, finding.code,
            'not rewritten: the object is not provably a flax.optim '
            'Optimizer/OptimizerDef here (its flow leaves what this file '
            'shows' + (f': {callers}' if callers else '') + '); ' +
            finding.replacement))
    return self.edits[before:], leftovers

  def _planned_restore(self, call) -> bool:
    """Whether ``call`` is a restore into a template (``_restores``):
    rewritten to read both layouts where the template holds an optimizer
    of the flow, else kept with the reason (noted where the flow
    migrates)."""
    restore = _restores.restore_of(self, call)
    if restore is None:
      return False
    why = _restores.plan_restore(self, restore, RULES_MODULE)
    if why:
      self.restores_left.append((call, why))
    else:
      self.legacy_layout_lines.add(call.lineno)
    return True

  @functools.cached_property
  def field_stores(self) -> list:
    """``[(holder, value)]`` of every value this module stores in a field
    annotated ``optim.Optimizer`` (the class called, ``.replace``, an
    attribute assigned); read once, asked per value by the escape check."""
    model = self.names.model
    holders = model.holders if model is not None else (
        _project.holders_in(None, self.tree, self.names))
    return [store for node in _walk.nodes(self.tree)
            if isinstance(node, ast.Call)
            for store in _project.field_stores(node, holders)] + (
                _project.attribute_stores(self.tree, holders))

  def only_stored(self, name) -> bool:
    """The name ``name`` binds optimizers or dict stand-ins and is read
    only to be stored in an optimizer field (``_stores_alike``)."""
    stored = {id(value) for _, value in self.field_stores}
    return self._stores_alike(name, stored)

  def _unproven_field_stores(self) -> list:
    """A value stored in a field annotated ``optim.Optimizer`` (the class
    called, ``.replace(optimizer=...)``) that this module cannot prove is
    an optimizer: its uses elsewhere would be rewritten while it stays."""
    stores = self.field_stores
    stored = {id(value) for _, value in stores}
    leftovers = []
    for holder, value in stores:
      if not self._stores_alike(value, stored):
        leftovers.append(self._leftover(
            value, _project.HELD_IN_FIELD,
            f'`{self.text(value)[:60]}` goes into the field '
            f'`{holder.field}` of {holder.name}, annotated '
            'flax.optim.Optimizer, and is not provably a flax.optim '
            'Optimizer here: the modules that read the field stay with '
            'it'))
    return leftovers

  def _stores_alike(self, value, stored) -> bool:
    """What ``value`` puts in an optimizer field is read alike once the
    flow is migrated: an optimizer (rewritten with its readers), or a dict
    stand-in (``{'target': restored}``: read as a dict, before and after).
    A name bound to either must be read only to be stored (``stored``: the
    ids of every value this module stores in such a field): any other
    read stays as it was, and would meet a TrainState."""
    if self.flow.is_optimizer(value):
      return True
    if not self.flow.optimizer_or_dict(value):
      return False
    if not isinstance(value, ast.Name):
      return True  # a dict display
    scope = self.flow.binding_scope_of(value, value.id)
    return all(id(read) in stored for read in ast.walk(scope.node)
               if isinstance(read, ast.Name) and read.id == value.id and
               isinstance(read.ctx, ast.Load) and
               self.flow.binding_scope_of(read, read.id) is scope)

  def _replicate_calls(self):
    return [n for n in _walk.nodes(self.tree) if isinstance(n, ast.Call) and
            isinstance(n.func, ast.Attribute) and
            n.func.attr == _members.REPLICATE and
            self.flow.is_optimizer(n.func.value)]

  def _replica_axis(self):
    """(axis name of this module's ``.replicate()`` calls, or None; why not).

    ``.replicate()`` is rewritten only when every call names the same
    literal axis and no checkpoint sees the optimizer (a
    ReplicatedOptimizer's checkpoint keeps one replica's copy).
    """
    calls = self._replicate_calls()
    if not calls:
      return None, None
    axes = set()
    for call in calls:
      if any(isinstance(a, ast.Starred) for a in call.args) or any(
          k.arg not in ('devices', 'axis_name') for k in call.keywords):
        return None, 'replicate() arguments cannot be mapped with certainty'
      given = dict(zip(('devices', 'axis_name'), call.args))
      given.update({k.arg: k.value for k in call.keywords})
      axis = given.get('axis_name')
      if axis is None:
        axes.add('batch')  # the legacy default
      elif isinstance(axis, ast.Constant) and isinstance(axis.value, str):
        axes.add(axis.value)
      else:
        return None, 'the axis_name is not a literal string'
    if len(axes) != 1:
      return None, 'replicate() calls with different axis names'
    if any(f.construct in NOTE_CONSTRUCTS for f in self.findings):
      return None, ("a ReplicatedOptimizer's checkpoint keeps one replica's "
                    "copy; the replicated TrainState's would keep them all")
    return axes.pop(), None

  def _jax_utils_name(self):
    if self.names.resolve(ast.Name(id='jax_utils')) == 'flax.jax_utils':
      return 'jax_utils'
    name = self._free_name('jax_utils', 'flax_jax_utils')
    self.imports.append(('flax', 'jax_utils',
                         None if name == 'jax_utils' else name))
    return name

  def _plan_replicate(self, node, call, receiver) -> Optional[str]:
    """``opt.replicate(...)`` -> ``jax_utils.replicate(state[, devices])``."""
    if self.replica_axis is None:
      return (f'.replicate(): {self.replicate_problem}; a ReplicatedOptimizer '
              'averages the gradients over the pmap axis inside '
              'apply_gradient (psum(g) / psum(1)), by hand: '
              f'{_CATALOGUE.REPLACEMENTS[_members.REPLICATE].text}')
    given = dict(zip(('devices', 'axis_name'), call.args))
    given.update({k.arg: k.value for k in call.keywords})
    name = self._jax_utils_name()
    if given.get('devices') is not None:
      self.edit(call, f'{name}.replicate({{receiver}}, devices={{devices}})',
                _members.REPLICATE, receiver=receiver, devices=given['devices'])
    else:
      self.edit(call, f'{name}.replicate({{receiver}})', _members.REPLICATE,
                receiver=receiver)
    return None

  def _covered(self, finding) -> bool:
    return any(e.line == finding.line for e in self.edits)

  def _leftover(self, node, construct, reason):
    line = self.source.splitlines()[node.lineno - 1].decode(
        'utf-8', 'replace').strip()
    return Leftover(node.lineno, construct, line, reason)

  def _require_tx_imports(self):
    self.imports.append(('optax', None, None))

  def _train_state_name(self):
    name = self._free_name('train_state', 'flax_train_state')
    self.imports.append(('flax.training', 'train_state',
                         None if name == 'train_state' else name))
    return name

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
    if name not in _RULE_NAMES:
      return (f'{name}: {_CATALOGUE.REPLACEMENTS["weight_norm"].text}'
              if name == _CATALOGUE.WEIGHT_NORM.name else
              f'{name} is not a built-in rule')
    given = self._given_arguments(node, name)
    if given is None:
      return self._plan_spread_rule(node, name)
    if self.tier == 'stock':
      return self._plan_stock(node, name, given)
    if name not in _STOCK_EXACT:
      return self._plan_exact_rule(node, name, given)
    params = [p for p, _ in _names.legacy_signatures()[name]]
    defaults = dict(_names.legacy_signatures()[name])
    values = {p: given.get(p, defaults[p]) for p in params}
    decay = values.get('weight_decay')
    decay_literal = None
    if decay is not None:
      if isinstance(decay, ast.AST):
        try:
          decay_literal = ast.literal_eval(decay)
        except ValueError:
          # The stock spelling must know whether the decay is zero (flax.optim
          # skipped a zero decay term); the rules' function decides that on
          # the value itself when the definition is built, as flax.optim did.
          return self._plan_exact_rule(node, name, given, stock=False)
      else:
        decay_literal = ast.literal_eval(decay)
    missing_rate = _flow.is_none(values['learning_rate'])
    if missing_rate and not self.inject:
      return ('no learning rate in the definition and none passed to '
              'apply_gradient in this file')
    # Source spans stay placeholders (edits inside them still apply); the
    # decay is written as the literal it is (zero: no decay term).
    parts = {p: v for p, v in values.items() if isinstance(v, ast.AST)}
    texts = {p: 'None' if _flow.is_none(v) else '{%s}' % p if p in parts else
             _escape(str(v)) for p, v in values.items()}
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
      return 'arguments passed with * or ** cannot be mapped with certainty'
    wrapped = given.get('wrapped_optimizer')
    if wrapped is None or not self.flow.is_def(wrapped):
      return (f'{name}: the wrapped optimizer is not provably a flax.optim '
              'definition migrate rewrites here')
    keywords = ''.join(f', {p}={{{p}}}' for p in ('wn_decay', 'wn_eps')
                       if p in given)
    self.imports.append((RULES_MODULE, None, None))
    self.edit(node, f'{RULES_MODULE}.{_CATALOGUE.WEIGHT_NORM.module}('
              f'{{wrapped_optimizer}}{keywords})', 'algorithm', **given)
    return None

  def _missing_rate(self, given) -> Optional[str]:
    if not _flow.is_none(given.get('learning_rate')) or self.inject:
      return None
    return ('no learning rate in the definition and none passed to '
            'apply_gradient in this file')

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
        _literal_dict_keys(spread, self.tree) or {'learning_rate'})]
    if len(setting) > 1:
      return None, (
          f'`**{self.text(setting[0])}` and `**{self.text(setting[1])}` may '
          'each set learning_rate, which a rate set per step starts at 0.0 '
          'where none does: it cannot be mapped with certainty')
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
    self.imports.append((RULES_MODULE, None, None))
    if self.inject:
      self._require_tx_imports()  # optax.tree_utils.tree_set per step
    self.edit(node, call, 'algorithm', **given, **parts)
    return None

  def _plan_rule_by_name(self, node) -> Optional[str]:
    """``getattr(flax.optim, name)(**kw)`` -> ``flax_optim_rules.rule_named(
    name)(**kw)``: the rules' functions take the classes' keywords, and each
    takes the rate first (the only position every rule shares)."""
    if self.tier == 'stock':
      return ('the rule is chosen by name when the program runs, so no '
              'stock alias can be named for it (the exact tier writes '
              f'{RULES_MODULE}.rule_named(name)(...))')
    if len(node.args) > 1 or any(isinstance(a, ast.Starred)
                                 for a in node.args):
      return ('hyper-parameters of a rule chosen by name are mapped only by '
              'keyword (after the rate, each rule orders them its own way)')
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
    factory = f'{RULES_MODULE}.rule_named({{rule_name}})'
    if self.inject:
      factory = f'{RULES_MODULE}.inject_learning_rate({factory})'
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
      return 'arguments passed with * cannot be mapped with certainty'
    if self.tier == 'stock':
      return ('arguments passed with ** cannot be mapped to a stock alias\'s '
              'keywords (the exact tier passes them on)')
    spreads = [k.value for k in node.keywords if k.arg is None]
    return self._plan_exact_rule(node, name, self._bound_arguments(
        node, name), stock=False, spreads=spreads)

  def _plan_stock(self, node, name, given) -> Optional[str]:
    """The nearest stock Optax alias, its deviation in a comment."""
    reason = self._missing_rate(given)
    if reason:
      return reason
    if self.inject:
      return ('--tier stock does not inject a per-step learning rate; give '
              'the alias a schedule instead, or use the exact tier')
    defaults = dict(_names.legacy_signatures()[name])
    texts = {p: self.text(given[p]) if p in given else (default or 'None')
             for p, default in defaults.items()}
    # Literal values are written out (they select the variant: a zero
    # weight decay is no decay); expressions stay spans of the source, so
    # edits inside them still apply.
    values = {p: ('{%s}' % p if p in given and not isinstance(
        given[p], ast.Constant) else _escape(text))
              for p, text in texts.items()}
    stock = _CATALOGUE.stock_optax(name, texts, render=str)
    expression = _CATALOGUE.stock_optax(name, values, render=str).expression
    statement = node
    while not isinstance(statement, ast.stmt):
      statement = self._parents[statement]
    line = self.source.splitlines()[statement.lineno - 1].decode('utf-8')
    indent = line[:len(line) - len(line.lstrip())]
    note = f' ({stock.note})' if stock.note else ''
    comment = (f'{indent}# stock Optax for flax.optim {name}: '
               f'{_CATALOGUE.deviation_phrase(stock.variant)}{note}\n')
    self._require_tx_imports()
    self.edit(node, expression, 'algorithm_stock', **{
        p: v for p, v in given.items() if not isinstance(v, ast.Constant)})
    line_start = self._offsets[statement.lineno - 1]
    self.edits.append(Edit(line_start, line_start, _escape(comment), (),
                           node.lineno, 'algorithm_stock'))
    return None

  def _plan_create(self, node) -> Optional[str]:
    given = _flow.create_arguments(node)
    if given is None:
      return ('create() arguments passed with * or **, or not as '
              'create(target, focus=None), cannot be mapped with certainty')
    if not _flow.is_none(given.get('focus')):
      return ('create(..., focus=...) selects parameters: use optax.partition '
              'with compat.traversal_labels (not rewritten automatically)')
    held = self._unproven_holder(node)
    if held:
      return held
    name = self._train_state_name()
    self.edit(node, f'{name}.TrainState.create(apply_fn=None, '
              'params={params}, tx={tx})', _members.CREATE,
              params=given[_members.TARGET], tx=node.func.value)
    return None

  def _jitted_def_create(self, node) -> Optional[ast.Attribute]:
    """``d.create`` of ``jax.jit(d.create, backend=...)(params)`` where
    ``d`` is certainly a definition."""
    create = _flow.jitted_create(node, self.names)
    if create is None or not self.flow.is_def(create.value):
      return None
    return create

  def _plan_jitted_create(self, node) -> Optional[str]:
    """``jax.jit(d.create, ...)(params)``: jit is given a function of the
    parameters alone (``TrainState.create`` takes keywords only); the
    definition stays a default argument, so it is evaluated where it was,
    once, before jit traces."""
    held = self._unproven_holder(node)
    if held:
      return held
    create = self._jitted_def_create(node)
    name = self._train_state_name()
    self.edit(create, 'lambda params, tx={tx}: '
              f'{name}.TrainState.create(apply_fn=None, params=params, '
              'tx=tx)', _members.CREATE, tx=create.value)
    return None

  def _unproven_holder(self, create) -> Optional[str]:
    """Why the TrainState ``create`` would make could reach code left as it
    is: a name it is assigned to that also holds other values (``opt =
    opt.restore_state(d)``), so its reads are not provably this optimizer
    and are not rewritten with it."""
    parent = self._parents.get(create)
    if not isinstance(parent, ast.Assign) or parent.value is not create:
      return None
    for target in parent.targets:
      if isinstance(target, ast.Name) and not self.flow.is_optimizer(target):
        return (f'`{target.id}` also holds values not provably a flax.optim '
                'Optimizer (another assignment), so its uses stay as they '
                'are; the optimizer this makes would reach them')
    return None

  def _plan_use(self, node) -> Optional[str]:
    """``optimizer.<attr>`` where ``optimizer`` is certainly an Optimizer."""
    parent = self._parents.get(node)
    receiver = node.value
    if node.attr == _members.TARGET:
      self.edit(node, '{receiver}.params', 'optimizer_use',
                receiver=receiver)
      return None
    if node.attr == 'state' and isinstance(parent, ast.Attribute) and (
        parent.attr == 'step'):
      self.edit(parent, '{receiver}.step', 'optimizer_use', receiver=receiver)
      return None
    if node.attr == _members.APPLY_GRADIENT and isinstance(
        parent, ast.Call) and parent.func is node:
      return self._plan_apply_gradient(parent, receiver)
    if node.attr == 'replace' and isinstance(parent, ast.Call) and all(
        k.arg == _members.TARGET for k in parent.keywords) and not parent.args:
      self.edit(parent, '{receiver}.replace(params={value})', 'optimizer_use',
                receiver=receiver, value=parent.keywords[0].value)
      return None
    if node.attr == _members.REPLICATE and isinstance(parent, ast.Call) and (
        parent.func is node):
      return self._plan_replicate(node, parent, receiver)
    if node.attr == _members.UNREPLICATE and isinstance(parent, ast.Call) and (
        parent.func is node) and not parent.args and not parent.keywords and (
            self.replica_axis is not None) and self.replicated.is_optimizer(
                receiver):
      self.edit(parent, f'{self._jax_utils_name()}.unreplicate({{receiver}})',
                _members.REPLICATE, receiver=receiver)
      return None
    if node.attr == _members.OPTIMIZER_DEF:
      unpacking = _multi.hyper_params_unpacking(self, node)
      if unpacking is not None:  # (hp0, hp1) = opt.optimizer_def.hyper_params
        self.delete_statement(unpacking, 'optimizer_use', node.lineno)
        return None
    if node.attr in _state_layout.LINKS:
      return _state_layout.plan_use(self, node, parent, receiver,
                                    RULES_MODULE)
    if node.attr in (_members.REPLICATE, _members.UNREPLICATE):
      return (f'.{node.attr}(): a ReplicatedOptimizer averages the gradients '
              'over the pmap axis inside apply_gradient (psum(g) / psum(1)), '
              'so the step that receives it needs a pmean the rewrite would '
              'have to insert; which steps do is not proven here (by hand: '
              f'{_CATALOGUE.REPLACEMENTS[_members.REPLICATE].text})')
    why = _members.no_counterpart(node.attr)
    return (f'.{node.attr} of a flax.optim Optimizer has no mechanical '
            'TrainState counterpart here' + (f': {why}' if why else ''))

  def _plan_tree_entry(self, node):
    """An optimizer in a dict saved or loaded as a tree (``_legacy_trees``):
    flax.optim's layout at both ends. Where the dict is otherwise used, the
    escape analysis keeps the flow with the reason."""
    parent = self.parents.get(node)
    entry = _legacy_trees.entry_of(node, parent, self.parents.get(parent))
    if entry is None or not self.flow.is_optimizer(node):
      return  # (the entry is asked first: it is the cheaper question)
    verdict = self.flow.tree_verdict(node)
    if verdict.display is None:
      return
    self.imports.append((RULES_MODULE, None, None))
    self.edit(node, f'{RULES_MODULE}.legacy_tree({{value}})', 'checkpoint',
              value=node)
    # A checkpoint call given the dict keeps flax.optim's layout: no note.
    around = self.parents.get(entry[0])
    while isinstance(around, (ast.expr, ast.keyword)):
      if isinstance(around, ast.Call):
        self.legacy_layout_lines.add(around.lineno)
      around = self.parents.get(around)
    template = _escape(ast.unparse(verdict.display.value))
    for read in verdict.display.loaded_back:
      self.edit(read, f'{RULES_MODULE}.from_legacy_tree({template}, '
                '{read})', 'checkpoint', read=read)

  def _plan_apply_gradient(self, call, receiver) -> Optional[str]:
    if len(call.args) != 1 or any(isinstance(a, ast.Starred)
                                  for a in call.args):
      return 'apply_gradient takes the gradients as its one positional argument'
    grads = '{grads}'
    if self._replicate_calls():
      if self.replica_axis is None:
        return f'this module replicates its optimizer: {self.replicate_problem}'
      if not self.replicated.is_optimizer(receiver):
        return ('this module replicates its optimizer, and this one is not '
                'provably the replicated one (which averages its gradients) '
                'nor provably another')
      # What ReplicatedOptimizer did inside apply_gradient (pmean is the
      # same psum / psum(1)).
      grads = f'jax.lax.pmean({{grads}}, axis_name={self.replica_axis!r})'
      self.imports.append(('jax', None, None))
    extra = [k.arg for k in call.keywords]
    if not extra and self.inject:
      return ('other steps of this flow set the learning rate '
              '(apply_gradient(g, learning_rate=...)): in the injected state '
              'a rate set so stays, while flax.optim took the definition\'s '
              'own rate for this step')
    if not extra:
      self.edit(call, '{receiver}.apply_gradients(grads=%s)' % grads,
                _members.APPLY_GRADIENT, receiver=receiver, grads=call.args[0])
      return None
    if extra not in (['learning_rate'], [_members.HYPER_PARAMS]):
      return (f'overrides {", ".join(str(e) for e in extra)}: only '
              'learning_rate is injected mechanically')
    if not _is_pure(receiver):
      return ('the optimizer expression is evaluated twice by the rewrite; '
              'bind it to a name first')
    if extra == [_members.HYPER_PARAMS]:  # a rate per MultiOptimizer part
      return _multi.plan_hyper_params(self, call, receiver, grads,
                                      RULES_MODULE)
    self._require_tx_imports()
    self.edit(call, '{receiver}.replace(opt_state=optax.tree_utils.tree_set('
              '{receiver}.opt_state, learning_rate={rate})).apply_gradients('
              'grads=%s)' % grads, 'apply_gradient_overrides',
              receiver=receiver, rate=call.keywords[0].value,
              grads=call.args[0])
    return None

  def _plan_class_references(self):
    """``optim.Optimizer`` / ``optim.DynamicScale`` anywhere (annotations)."""
    flow_ok = not any(l.construct in FLOW_CONSTRUCTS for l in self.leftovers)
    for node in _walk.nodes(self.tree):
      if not isinstance(node, (ast.Name, ast.Attribute)) or not (
          isinstance(node.ctx, ast.Load)):
        continue  # an alias's own name (``Optimizer = ...``) stays
      if isinstance(self._parents.get(node), ast.Attribute) or (
          id(node) in self.claimed):
        continue  # only whole references, not a user rule's
      path = self.names.resolve(node)
      if self.flow_held:
        continue  # the file keeps flax.optim: its classes stay named
      if path in _members.DYNAMIC_SCALE_PATHS:
        package, module, cls = _members.counterpart_path(
            'DynamicScale').rsplit('.', 2)
        name = self._free_name('dynamic_scale_lib', 'flax_dynamic_scale')
        self.imports.append((package, module, name))
        self.edit(node, f'{name}.{cls}', 'dynamic_scale')
      elif path in _DEF_CLASSES and flow_ok and not (
          isinstance(self._parents.get(node), ast.Call) and
          self._parents[node].func is node):  # a MultiOptimizer(...) call
        # A factory's return annotation: what the rewritten definition is.
        transform = _members.counterpart_path('OptimizerDef')
        self.imports.append((transform.split('.', 1)[0], None, None))
        self.edit(node, transform, 'annotation')
      elif flow_ok and (
          _state_layout.plan_reference(self, node, path, RULES_MODULE)):
        continue  # flax.optim's layout, built by hand or annotated
      elif path in _flow.OPTIMIZER_CLASSES:
        if flow_ok:
          name = self._train_state_name()
          self.edit(node, f'{name}.TrainState', 'annotation')
        else:
          self.leave(node, 'annotation', 'flax.optim.Optimizer stays while '
                     'the file keeps legacy optimizers')

  def _plan_removals(self):
    """Neighbouring removals (``jax.tree_map``...): the mechanical ones."""
    for node in _walk.nodes(self.tree):
      removal = _removals.match(node, self.names)
      if removal is None:
        continue
      if (node.lineno, _codes.code_of(removal.construct,
                                      removal.old)) in self.held:
        self.notes.append(Leftover(node.lineno, removal.construct,
                                   removal.old, HELD_NOTE))
        continue
      if removal.rewrite is None:
        self.leave(node, removal.construct, removal.replacement)
        continue
      if removal.rewrite == '':
        self._delete_statement(node, removal.construct)
        continue
      target = removal.target or (node.value if isinstance(node, ast.Assign)
                                  else node)
      self.edit(target, removal.rewrite, removal.construct, source=target,
                **dict(removal.parts))
      module = _removals.needed_import(removal.rewrite)
      if module and not isinstance(node, ast.ImportFrom):
        self.imports.append((module, None, None))


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
    parent = self._parents.get(node)
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
    self.edits.append(Edit(line_start, line_end, '', (), node.lineno,
                           construct))


def _literal_dict_keys(node, tree) -> Optional[set]:
  """The keys of the dict ``node`` names, where it is a name the module
  binds once, at its top level, to a dict literal of string keys, and only
  reads as ``**name`` or ``name[key]`` (so nothing changes it); else None:
  it may hold anything."""
  if not isinstance(node, ast.Name):
    return None
  read_whole = set()  # ids of the names read as ``**name`` or ``name[k]``
  for parent in ast.walk(tree):
    if isinstance(parent, ast.keyword) and parent.arg is None:
      read_whole.add(id(parent.value))
    elif isinstance(parent, ast.Subscript) and isinstance(parent.ctx,
                                                          ast.Load):
      read_whole.add(id(parent.value))
  bindings = _names.bindings_of(tree)
  if bindings.star or node.id in bindings.imported:
    return None
  stores = 0  # assignments, augmented ones, del, def, parameters...
  for child in ast.walk(tree):
    if _names.bound_by(child) == node.id:
      stores += 1
    elif isinstance(child, ast.Name) and child.id == node.id and (
        id(child) not in read_whole):
      return None  # a method call, an argument: it may change it
    elif isinstance(child, (ast.Global, ast.Nonlocal)) and (
        node.id in child.names):
      return None
  values = [statement.value for statement in tree.body
            if isinstance(statement, ast.Assign) and [
                getattr(t, 'id', None) for t in statement.targets] == [
                    node.id]]
  if stores != 1 or len(values) != 1 or not isinstance(values[0], ast.Dict):
    return None
  if not all(isinstance(k, ast.Constant) and isinstance(k.value, str)
             for k in values[0].keys):
    return None  # a ``**`` inside, or a key known only at run time
  return {k.value for k in values[0].keys}


def _escape(text: str) -> str:
  """``text`` as a literal part of an ``Edit`` template."""
  return text.replace('{', '{{').replace('}', '}}')


def _is_pure(node) -> bool:
  """A name or attribute chain: evaluating it twice is harmless."""
  while isinstance(node, ast.Attribute):
    node = node.value
  return isinstance(node, ast.Name)


def _render_order(edit):
  """Sort key: by start, the longer edit first, and of two with the same
  span the one that carries that span as a part (it wraps the other)."""
  wraps = any(value == (edit.start, edit.end) for _, value in edit.parts)
  return (edit.start, -edit.end, not wraps)


def render(source: bytes, edits) -> tuple[bytes, list]:
  """``source`` with ``edits`` applied; nested edits compose inside out.

  An edit is applied inside another where it lies in one of the other's
  parts (a span the template keeps); one inside an applied edit but outside
  its parts is replaced with the source around it (e.g. a statement
  removed whole). Every other edit that could not be applied (it overlaps
  another without nesting, or shares its span with a different edit that
  does not wrap it) is returned in the second value, never dropped
  silently.
  """
  ordered = sorted(set(edits), key=_render_order)
  applied = set()

  def fill(start, end, enclosing=()):
    """Source bytes [start, end) with the edits inside them applied
    (``enclosing``: the edits being applied around them)."""
    out, position, covered = [], start, start
    for e in ordered:
      if e in enclosing or e.start < start or e.end > end:
        continue
      if e.start < covered:
        continue  # inside (or across) an edit of this level: see ``applied``
      out.append(source[position:e.start])
      out.append(apply(e, enclosing))
      position = covered = e.end
    out.append(source[position:end])
    return b''.join(out)

  def apply(edit, enclosing):
    applied.add(edit)
    values = {}
    for name, value in edit.parts:
      if isinstance(value, tuple):
        values[name] = fill(value[0], value[1],
                            enclosing + (edit,)).decode('utf-8')
      else:
        values[name] = value
    return edit.template.format(**values).encode('utf-8')

  rendered = fill(0, len(source))

  def replaced_whole(edit):
    return any(a.start <= edit.start and edit.end <= a.end and
               (a.start, a.end) != (edit.start, edit.end) for a in applied)

  return rendered, [e for e in ordered
                    if e not in applied and not replaced_whole(e)]
