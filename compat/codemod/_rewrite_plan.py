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

``Planner`` is built from its parts, one module each: ``_plan_edits`` (what
a plan records), ``_plan_rules`` (the definitions), ``_plan_uses`` (the
optimizer's uses), ``_plan_imports`` (imports, class references,
removals); ``_plan_records`` holds the records and the report's texts, and
``_module_model`` the facts of the module it and the analyses share.
"""

import ast
import copy

from compat.codemod import _codes
from compat.codemod import _escape_analysis
from compat.codemod import _flow
from compat.codemod import _links
from compat.codemod import _members
from compat.codemod import _module_model
from compat.codemod import _multi
from compat.codemod import _names
from compat.codemod import _own_methods
from compat.codemod import _params
from compat.codemod import _plan_imports
from compat.codemod import _plan_records
from compat.codemod import _project
from compat.codemod import _restores
from compat.codemod import _state_layout
from compat.codemod import _user_rules
from compat.codemod import _walk

# The records and texts of a plan, named here for the modules that read them.
ESCAPE = _plan_records.ESCAPE
UNSAFE_FIX = _plan_records.UNSAFE_FIX
HIDDEN_UNSAFE_FIX = _plan_records.HIDDEN_UNSAFE_FIX
unsafe_fixes_applied = _plan_records.unsafe_fixes_applied
unsafe_fixes_hidden = _plan_records.unsafe_fixes_hidden
unsafe_fixes_held = _plan_records.unsafe_fixes_held
planned_from_tree = _plan_records.planned_from_tree
makes_array_states = _plan_records.makes_array_states
FLOW_CONSTRUCTS = _plan_records.FLOW_CONSTRUCTS
NOTE_CONSTRUCTS = _plan_records.NOTE_CONSTRUCTS
HELD_NOTE = _plan_records.HELD_NOTE
CHECKPOINT_NOTE = _plan_records.CHECKPOINT_NOTE
PICKLE_NOTE = _plan_records.PICKLE_NOTE
HELD_BY_ANOTHER_LINK = _plan_records.HELD_BY_ANOTHER_LINK
CALLED_NOWHERE_NOTE = _plan_records.CALLED_NOWHERE_NOTE
LAYOUT_KEYS = _plan_records.LAYOUT_KEYS
LAYOUT_KEY_NOTE = _plan_records.LAYOUT_KEY_NOTE
layout_key_reads = _plan_records.layout_key_reads
flow_migrated = _plan_records.flow_migrated
Edit = _plan_records.Edit
Leftover = _plan_records.Leftover
Plan = _plan_records.Plan
RULES_MODULE = _plan_records.RULES_MODULE
_CATALOGUE = _plan_records.CATALOGUE
_STOCK_EXACT = _plan_records.STOCK_EXACT
_line_offsets = _plan_records.line_offsets


def _module_of(tree, names, checkpoint_lines, scanned):
  """The plan's ``ModuleModel``: scan's (``scanned``) where it built one,
  with the plan's checkpoint lines; else one around scan's flow, if any."""
  if isinstance(scanned, _module_model.ModuleModel):
    return scanned.with_checkpoint_lines(checkpoint_lines)
  return _module_model.ModuleModel(tree, names, checkpoint_lines, scanned)


def _own_step_lines(module, names) -> frozenset:
  """``_own_methods.own_step_lines(names)``: found once per module model
  and names, so a plan and its twin (``Planner.plan_and_kept``) walk the
  module for it once."""
  key = ('own step lines', names)
  if key not in module.analyses:
    module.analyses[key] = _own_methods.own_step_lines(names)
  return module.analyses[key]


# The kinds of node ``Planner._plan_flow_node`` plans (a name is planned
# only as a dict's entry: ``PlanUses._tree_entry_reads``).
_FLOW_NODE_KINDS = (ast.ClassDef, ast.Call, ast.Attribute)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class Planner(_plan_imports.PlanImports):
  """Builds the ``Plan`` of one module from its scan findings."""

  def __init__(self, source: bytes, tree: ast.Module, names, findings,
               tier: str = 'exact', exported=(), rate_set_elsewhere=False,
               held=frozenset(), blocked=(), unsafe_fixes=False,
               scanned=None, array_states=False):
    """``scanned``: what scan built for this tree and ``names``
    (``scan.ScannedModule.facts``), shared rather than built again.
    ``array_states``: this module's creates make the TrainState that steps
    a bare array, as those of another module whose optimizers may meet
    these do (``_plan_uses``)."""
    self.array_states = array_states
    self.source, self.tree, self.names = source, tree, names
    # Whether fixes resting on an assumption are applied (``--unsafe-fixes``);
    # each is recorded in ``self.unsafe``, enabled or not.
    self.unsafe_fixes = unsafe_fixes
    self.unsafe: list = []
    # Scan's findings on what the plan's own rules find in the tree
    # (restores into templates holding an optimizer, constructions of the
    # user's rule classes, optimizers escaping): planned, noted or left
    # there, never as findings left over.
    findings = [f for f in findings
                if not _plan_records.planned_from_tree(f)]
    # (line, code) of scan's findings kept as they are (noqa, --ignore),
    # those of its walk and of this plan alike (``_plan_findings``): the
    # flow is rewritten whole or not at all, so one held flax.optim finding
    # holds the file's flow; a held removal holds only itself.
    self.held = frozenset(held)
    self.flow_held = any(code.startswith(_codes.FLAX_OPTIM)
                         for _, code in self.held)
    # (line, construct, reason): links of this module's optimizer flow to
    # other modules that stay as they are; the flow here stays with them.
    self.blocked = blocked
    self.findings = findings
    self.tier = tier
    # Another module overrides hyper-parameters per step on optimizers it
    # did not create: definitions that leave this module get injected.
    self.rate_set_elsewhere = rate_set_elsewhere
    self.exported = frozenset(exported)  # names other modules import
    self.module = _module_of(
        tree, names, _plan_records.checkpoint_lines(self.findings), scanned)
    self.flow = self.module.flow
    self.replica_axis, self.replicate_problem = self._replica_axis()
    self._offsets = _line_offsets(source)
    self.edits, self.leftovers, self.notes = [], [], []
    # The flow's elements whose planning made edits (``Plan.migrated``).
    self.elements: list = []
    # ids of nodes a user rule's rewrite edits (its base, OptimizerState).
    self.claimed: set[int] = set()
    self.kept_rules: list = []  # the user's classes moved onto RuleDef
    # Lines whose checkpoint call keeps or reads flax.optim's layout
    # (``_state_layout``, ``_restores``): no checkpoint note there.
    self.legacy_layout_lines: set[int] = set()
    # The notes of the safe fixes planned (``_plan_uses``): kept where the
    # flow migrates.
    self.proven_fixes: list = []
    # (call, why) of each restore of the flow left as it is (``_restores``):
    # noted where the flow migrates.
    self.restores_left: list = []
    self.restores_later: list = []  # (maybe restores: ``_restores``)
    self.imports, self.removed = [], []
    # (each kind filtered once per tree: ``_walk.nodes_of``)
    bound = {n.id for n in _walk.nodes_of(tree, (ast.Name,))}
    bound |= {n.name for n in _walk.nodes_of(tree, _DEFINITIONS)}
    bound |= {a.arg for a in _walk.nodes_of(tree, (ast.arg,))}
    self._taken = bound

  @property
  def replicated(self) -> _flow.OptimizerFlow:
    """Which optimizers are ReplicatedOptimizers (``ModuleModel``)."""
    return self.module.replicated

  @property
  def checkpoint_lines(self) -> frozenset:
    """Lines where scan found a checkpoint write or read an optimizer may
    go into as a TrainState (``_plan_records.checkpoint_lines``: not a
    pickle): what goes there is reported (``CHECKPOINT_NOTE``)."""
    return self.module.checkpoint_lines

  @property
  def parents(self) -> dict:
    """Each node of the module's tree -> the node holding it."""
    return self.module.parents

  # ---------------------------------------------------------------- plan
  def plan(self) -> Plan:
    return self._finish(*self._plan_flow_part(), self.blocked)

  def plan_and_kept(self) -> tuple:
    """``(plan(), kept)``: ``kept()`` gives the plan of the module with its
    optimizer flow kept as it is, as a roll-back (``blocked``) plans it,
    less the leftovers of ``blocked`` itself (``with_blocked``), without
    planning the flow again."""
    flow_edits, flow_leftovers = self._plan_flow_part()
    twin = self._twin()
    return (self._finish(flow_edits, flow_leftovers, self.blocked),
            lambda: twin._finish(flow_edits, flow_leftovers, (), kept=True))

  def _twin(self):
    """A copy of this planner whose records (lists, sets and dicts) are its
    own: what one finishes leaves the other's as they are."""
    twin = copy.copy(self)
    for name, value in vars(self).items():
      if isinstance(value, (list, set, dict)):
        setattr(twin, name, copy.copy(value))
    return twin

  def _plan_flow_part(self) -> tuple:
    """``(edits, leftovers)`` of the optimizer flow (none where it is held
    by a ``# noqa`` or the selected codes: noted so)."""
    if not self.flow_held:
      return self._plan_flow()
    self.notes += [Leftover(f.line, f.construct, f.code, HELD_NOTE)
                   for f in self.findings
                   if f.rule.startswith(_codes.FLAX_OPTIM)]
    return [], []

  def _finish(self, flow_edits, flow_leftovers, blocked,
              kept: bool = False) -> Plan:
    """The plan, the flow planned: kept as it is where something of it is
    left (``flow_leftovers``, ``blocked``) or ``kept`` says so, else
    migrated with its notes; then what is not the flow's."""
    flow_leftovers = flow_leftovers + _plan_records.blocked_leftovers(
        self.source, blocked)
    if flow_leftovers or kept:
      self.leftovers += flow_leftovers
      self.elements = []
      self.edits = [e for e in self.edits if e not in flow_edits]
      for edit in flow_edits:
        self.leftovers.append(Leftover(
            edit.line, edit.construct, self._line(edit.line),
            HELD_BY_ANOTHER_LINK))
      self.imports = [i for i in self.imports if i[0] not in (
          'optax', RULES_MODULE) and i[1] != 'train_state']
    elif not self.flow_held:
      self._plan_migrated_notes(flow_edits)
    self._plan_class_references(flow_kept=kept)
    self._plan_removals()
    self.unsafe += self._assumed_links()
    return Plan(sorted(self.edits), sorted(set(self.leftovers)),
                sorted(set(self.notes)), sorted(set(self.imports),
                                                key=str),
                self.removed, tuple(sorted(set(self.unsafe))),
                _own_step_lines(self.module, self.names),
                frozenset(self.elements))

  def _assumed_links(self) -> list:
    """The unsafe fixes of the project's links that end here (a decorated
    factory of this module, ``_project_links``): applied where unsafe
    fixes are enabled (``migrate`` then drops the links), else listed."""
    model = self.names.model
    construct = UNSAFE_FIX if self.unsafe_fixes else HIDDEN_UNSAFE_FIX
    return [Leftover(link.call_line, construct, self._line(link.call_line),
                     link.assumption)
            for link in (model.links if model is not None else ())
            if link.assumption is not None and (
                link.consumer_path == self.names.path)]

  def _plan_migrated_notes(self, flow_edits):
    """The notes and import removals of a flow that migrates."""
    self.notes += self.proven_fixes
    self.notes += [Leftover(
        node.lineno, 'optimizer_def_subclass', self._line(node.lineno),
        _codes.filled_note(_user_rules.PORT_NOTE, module=RULES_MODULE,
                           base=_user_rules.RULE_BASE))
                   for node in self.kept_rules]
    if flow_edits:
      self.notes += self._called_nowhere_notes()
    if flow_edits:
      _restores.note_later_ones(self, self.restores_later, RULES_MODULE)
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
        now = _codes.note(_codes.CALLED_NOWHERE_FACTORY)
      elif node in self.kept_rules and _user_rules.called_nowhere(
          self.names, node):
        now = _codes.filled_note(
            _codes.CALLED_NOWHERE_RULE,
            rule_base=f'{RULES_MODULE}.{_user_rules.RULE_BASE}')
      else:
        continue
      notes.append(Leftover(node.lineno, 'called_nowhere',
                            self._line(node.lineno),
                            CALLED_NOWHERE_NOTE.format(name=node.name,
                                                       now=now)))
    return notes

  def _plan_flow(self):
    before = len(self.edits)
    leftovers = self._reexport_leftovers()
    self.inject = self._injects_rates()
    for node in _walk.nodes_of(self.tree, _FLOW_NODE_KINDS):
      made = len(self.edits)
      leftovers += self._plan_flow_node(node)
      if len(self.edits) > made:
        self.elements.append(_links.Element.of(node))
    for node in self._tree_entry_reads():
      made = len(self.edits)
      self._plan_tree_entry(node)
      if len(self.edits) > made:
        self.elements.append(_links.Element.of(node))
    leftovers += self._unproven_field_stores()
    for escape in _escape_analysis.escapes(self.module):
      leftovers += self._escape_leftovers(escape)
    self._plan_findings_left(leftovers)
    return self.edits[before:], leftovers

  def _escape_leftovers(self, escape) -> list:
    """The leftover an escape is; one with an assumption is an unsafe fix,
    recorded, and a leftover only where unsafe fixes are not enabled."""
    if escape.assumption is None:
      return [self._leftover(escape.node, ESCAPE, escape.why)]
    enabled = self.unsafe_fixes
    self.unsafe.append(self._leftover(
        escape.node, UNSAFE_FIX if enabled else HIDDEN_UNSAFE_FIX,
        escape.assumption))
    return [] if enabled else [self._leftover(
        escape.node, ESCAPE, _plan_records.HIDDEN_FIX_REASON.format(
            why=escape.why, assumption=escape.assumption))]

  def _injects_rates(self) -> bool:
    """Whether the definitions are wrapped to take the learning rate as an
    injected hyper-parameter: some step overrides it (here, through another
    module's step, or in another module on optimizers made here)."""
    overrides = [f for f in self.findings
                 if f.construct == 'apply_gradient_overrides']
    model = self.names.model
    return bool(overrides) or (self.rate_set_elsewhere and not any(
        f.construct == _members.APPLY_GRADIENT for f in self.findings)) or any(
            step.overrides for step in self.flow.foreign_steps.values()) or (
                model is not None and model.names_rate_setter(
                    self.tree, self.names, self.names.path))

  def _plan_flow_node(self, node) -> list:
    """Plans ``node`` where it is part of the optimizer flow; its
    leftovers."""
    leftovers = []
    if isinstance(node, ast.ClassDef) and (
        node.name in self.names.user_defs):
      reason = _user_rules.plan_class(self, node, RULES_MODULE)
      if reason:
        leftovers.append(self._leftover(node, 'optimizer_def_subclass',
                                        reason))
      else:
        self.kept_rules.append(node)
    if isinstance(node, ast.Call):  # (what it calls read once for all)
      leftovers += self._plan_flow_call(node, _names.called(self.names,
                                                            node.func))
    if isinstance(node, ast.Attribute):
      leftovers += self._plan_member_use(node)
    return leftovers

  def _plan_flow_call(self, node, callee: _names.Callee) -> list:
    """Plans a call that makes or restores part of the flow (a rule, a
    ``.create``, a serialization, a restore, an Optimizer built by hand);
    its leftovers. ``callee``: what it calls (``_names.called``)."""
    if _names.user_rule_at(self.names, node.func, callee.path):
      return self._left_if(node, 'multi_optimizer',
                           _user_rules.plan_construction(
                               self, node, RULES_MODULE, self.inject))
    name = callee.name
    if name in _CATALOGUE.BY_NAME or name == _names.RULE_BY_NAME:
      return self._left_if(node, 'algorithm', self._plan_algorithm(node, name))
    if name == _multi.MULTI_OPTIMIZER:
      return self._left_if(node, 'multi_optimizer',
                           _multi.plan_multi(self, node, RULES_MODULE))
    if name == _multi.PARAM_TRAVERSAL or (
        _multi.names_traversal(callee) and
        _multi.traversal_problem(self, node) is None):
      # (flax.traverse_util's, only where it goes into a MultiOptimizer)
      return self._left_if(node, 'traversal',
                           _multi.plan_traversal(self, node, RULES_MODULE))
    if self._def_create(node):
      return self._left_if(node, _members.CREATE, self._plan_create(node))
    if self._jitted_def_create(node) is not None:
      return self._left_if(node, _members.CREATE,
                           self._plan_jitted_create(node))
    helped = [p for p in self.flow.helper_passes(
        node, self.flow.scope_of(node)) if self.flow.is_optimizer(p.argument)]
    if helped:
      return self._left_if(node, 'checkpoint',
                           self._plan_helper_call(node, helped))
    # (asked only of the calls whose callee each may match: most none)
    if callee.path in _state_layout.SERIALIZATIONS and (
        _state_layout.plan_serialization(self, node, RULES_MODULE,
                                         callee.path)):
      self.legacy_layout_lines.add(node.lineno)
    elif _restores.planned(self, node, callee, RULES_MODULE):
      pass  # (a restore into a template: rewritten or noted)
    elif callee.path in _flow.OPTIMIZER_CLASSES:
      return self._plan_hand_built(node)
    return []

  def _left_if(self, node, construct, reason) -> list:
    """``[the leftover]`` where planning ``node`` gave a reason, else []."""
    return [self._leftover(node, construct, reason)] if reason else []

  def _plan_hand_built(self, node) -> list:
    """Built from a definition, a state and a target: a TrainState of the
    definition's transform holding that state; its leftovers."""
    why = _state_layout.plan_hand_built(
        self, node, self._train_state_name, RULES_MODULE)
    parts = _state_layout.hand_built_parts(node)
    if why is None and parts is not None:
      return []
    # One the flow proves an optimizer holds the flow with it.
    proven = parts is not None and self.flow.is_def(
        parts[_members.OPTIMIZER_DEF])
    return [self._leftover(node, _members.CREATE if proven else 'reference',
                           'not rewritten: ' + (why or _names.HAND_BUILT))]

  def _plan_member_use(self, node) -> list:
    """Plans a read of an optimizer's member (``.target``...) or of a
    definition's; its leftovers."""
    use = self.flow.member_use(node, False)
    if use == _members.OPTIMIZER_USE:
      return self._left_if(node, 'optimizer_use', self._plan_use(node))
    if use == _members.OPTIMIZER_DEF:
      # The transform written for the definition has no such attribute.
      return [self._leftover(node, _members.OPTIMIZER_DEF, _codes.filled_note(
          _codes.DEFINITION_MEMBER, attr=node.attr))]
    return []

  def _plan_findings_left(self, leftovers):
    """Notes each checkpoint finding; adds to ``leftovers`` each finding of
    the flow that no edit covers and no leftover names yet."""
    # A pickle write the flow is held by says why there, with no note.
    held_by_pickle = {left.line for left in leftovers
                      if left.construct == ESCAPE}
    for finding in self.findings:
      pickled = _plan_records.is_pickle(finding)
      if pickled and finding.line in held_by_pickle:
        continue
      if finding.construct in NOTE_CONSTRUCTS and (
          finding.line not in self.legacy_layout_lines):
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
            _codes.filled_note(
                _codes.NOT_PROVABLY_OPTIMIZER,
                callers=f': {callers}' if callers else '',
                replacement=finding.replacement)))

  def _unproven_field_stores(self) -> list:
    """A value stored in a field annotated ``optim.Optimizer`` (the class
    called, ``.replace(optimizer=...)``) that this module cannot prove is
    an optimizer: its uses elsewhere would be rewritten while it stays."""
    return [self._leftover(value, _project.HELD_IN_FIELD,
                           _plan_records.unproven_store_why(
                               holder, self.text(value),
                               _plan_records.created_from_parameter(
                                   self.flow, value)))
            for holder, value in self.module.unproven_field_stores()]


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
