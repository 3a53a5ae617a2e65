"""``flax-optim-compat scan PATH...``: find flax.optim usages, running nothing.

Parses every ``*.py`` file under the given paths with Python's own parser
(``ast``) and reports each legacy construct with its replacement and the
section of ``migration_guide.md`` that explains it:

* imports in every spelling (``from flax import optim``, ``import flax.optim
  as optim``, ``from flax.optim.adam import ...``, ``flax.optim.X`` after
  ``import flax``, ``legacy_optim``), and uses of the ``compat`` bridges;
* optimizer definitions (``optim.Adam(...)`` with the stock Optax expression
  filled in from the call's own arguments), ``OptimizerDef`` subclasses,
  ``MultiOptimizer`` and legacy traversals, ``WeightNorm``, ``DynamicScale``;
* ``.create(...)``, ``.apply_gradient(...)`` (flagged separately when it
  passes hyper-parameter overrides), ``.compute_gradient``, ``.optimize``,
  ``.replicate()`` / ``ReplicatedOptimizer``;
* optimizers passed to ``flax.training.checkpoints`` or
  ``flax.serialization``;
* every flax.optim name in an annotation (parameters, returns, fields,
  inside ``Optional[...]``/``Tuple[...]``, strings), and every other
  reference that resolves to one (``optim.OptimizerState(step, states)``,
  an Optimizer built by hand, ``isinstance(x, optim.Optimizer)``, a
  module-level alias ``Optimizer = optim.Optimizer`` and its uses).

Names are resolved through the module's imports and assignments (flow-
insensitively), through what other scanned modules re-export from flax.optim
or alias from it (``from mylib import optimizers``, ``from .models import
Optimizer``, see ``parse_project``) and through module
functions that return an OptimizerDef (``make_def(lr).create(params)``);
where only a name suggests an optimizer (``optimizer``, ``opt``), the
finding's confidence is ``likely`` instead of ``certain``.

A tree is one project, analysed as ``migrate`` analyses it: the modules
that can reach flax.optim are planned with ``migrate``'s planner (no edit
is written; flows whose links across modules do not hold are kept, as
``migrate`` keeps them), and each statement the plan changes or leaves
that no finding above names is a finding with the code of the plan's
construct (``_plan_findings``): every statement ``migrate`` changes or
leaves carries a finding.

Each kind of finding has a stable code (``FOC108``; ``--list-codes``,
``_codes``): ``--select``/``--ignore`` take codes and prefixes, a line
ending in ``# noqa: FOC108`` (or a bare ``# noqa``) is not reported
(``_noqa``), ``--add-noqa`` marks every current finding, and
``[tool.flax-optim-compat]`` in ``pyproject.toml`` holds the defaults
(``_config``).

Output (stable order: path, line, column, construct): a table
(``--format text``), ``github`` workflow commands or SARIF 2.1.0
(``_formats``), or with ``--format json`` one object::

  {"version": 1,
   "files_scanned": int,
   "findings": [{"path": str, "line": int, "column": int,
                 "construct": str, "code": str (the source line),
                 "replacement": str, "guide_section": str,
                 "confidence": "certain" | "likely",
                 "rule": str (the stable code, FOC108)}],
   "errors": [{"path": str, "line": int | null, "message": str}],
   "summary": {construct: count}}

Jupyter notebooks (``.ipynb``) are scanned as ``migrate`` reads them: their
code cells as one module (IPython magics skipped); a finding's line is the
notebook file's line holding that source line.

Exit status: 0 no usage found (after selection and ``# noqa``), 1 usages
remain, 2 bad arguments or configuration, 3 no usage found but some files
could not be read, parsed or analysed (each is listed with the reason; one
file never stops the scan of the others).
"""

import argparse
import ast
import bisect
import collections
import collections.abc
import contextlib
import copy
import fnmatch
import functools
import gc
import json
import os
import sys
from typing import Iterable, NamedTuple, Optional, Union, cast

from compat import _atomic
from compat import _lazy
from compat.codemod import _clu_restores
from compat.codemod import _codes
from compat.codemod import _config
from compat.codemod import _cross_flow
from compat.codemod import _escape_analysis
from compat.codemod import _flow
from compat.codemod import _formats
from compat.codemod import _members
from compat.codemod import _module_model
from compat.codemod import _names
from compat.codemod import _noqa
from compat.codemod import _notebook
from compat.codemod import _own_methods
from compat.codemod import _parallel
from compat.codemod import _plan_findings
from compat.codemod import _plan_records
from compat.codemod import _prefilter
from compat.codemod import _project
from compat.codemod import _removals
from compat.codemod import _restores
from compat.codemod import _serialization_helpers
from compat.codemod import _source
from compat.codemod import _state_layout
from compat.codemod import _tree
from compat.codemod import _user_rules
from compat.codemod import _walk

rep = _lazy.module_without_package('legacy_optim', 'catalogue')

BRIDGES = ('to_optax', 'from_optax', 'traversal_labels', 'to_train_state',
           'to_nnx_optimizer', 'load_legacy_checkpoint', 'convert_checkpoint',
           'state_shardings')
SKIP_DIRS = ('__pycache__', 'site-packages', 'node_modules')
_TREE = _members.CHECKPOINT_TARGET
_CHECKPOINT_FUNCS = {
    'flax.training.checkpoints.save_checkpoint': (_TREE, 1),
    'flax.training.checkpoints.save_checkpoint_multiprocess': (_TREE, 1),
    'flax.training.checkpoints.restore_checkpoint': (_TREE, 1),
    'flax.serialization.to_state_dict': (_TREE, 0),
    'flax.serialization.from_state_dict': (_TREE, 0),
    'flax.serialization.to_bytes': (_TREE, 0),
    'flax.serialization.from_bytes': (_TREE, 0),
    # A pickled optimizer is a checkpoint too (research scripts wrote them).
    'pickle.dump': ('obj', 0),
    'pickle.dumps': ('obj', 0),
}
_TRIGGERS = _prefilter.triggers(_CHECKPOINT_FUNCS)
EXIT_CLEAN, EXIT_FOUND, EXIT_USAGE, EXIT_UNPARSEABLE = 0, 1, 2, 3
FORMATS = ('text', 'table', 'json', 'github', 'sarif')


class Finding(NamedTuple):
  path: str
  line: int
  column: int
  construct: str
  code: str
  replacement: str
  guide_section: str
  confidence: str = 'certain'
  rule: str = ''  # the stable code (FOC108: _codes.CODES)


class ScanError(NamedTuple):
  path: str
  line: Optional[int]
  message: str


class ScanResult(NamedTuple):
  files_scanned: int
  findings: list
  errors: list


# ---------------------------------------------------------------------------
# Findings.


def _algorithm_replacement(name: str, call: ast.Call) -> str:
  """What ``migrate`` writes for the definition (the catalogue's
  ``migrate_call``), then the nearest stock alias ``--tier stock`` writes."""
  signature = _names.legacy_signatures()[name]
  given = {p: ast.unparse(a) for (p, _), a in zip(signature, call.args)
           if not isinstance(a, ast.Starred)}
  given.update({k.arg: ast.unparse(k.value) for k in call.keywords if k.arg})
  exact = rep.migrate_call(name, {p: given[p] for p, _ in signature
                                  if p in given}, dict(signature))
  text = _codes.TIER_REPLACEMENTS[_codes.TIER_EXACT].format(expression=exact)
  values = _names.bind_arguments(name, call)
  stock = rep.stock_optax(name, values, render=lambda v: 'None' if v is None
                          else v)
  if not stock.expression:
    return text
  text += '; ' + _codes.TIER_REPLACEMENTS[_codes.TIER_STOCK].format(
      expression=stock.expression,
      deviation=rep.deviation_phrase(stock.variant))
  return text + (f'; note: {stock.note}' if stock.note else '')


_FIXED = rep.REPLACEMENTS

# ``getattr(flax.optim, name)(**hyper_params)``: which rule is known only when
# the program runs, so no stock alias can be named.
_BY_NAME_REPLACEMENT = _codes.BY_NAME_REPLACEMENT


# What a flax.optim class named in an annotation or elsewhere becomes.
# The classes whose call is a finding of its own (``_check_call``).
_CALLED_CLASSES = frozenset(_names.ALGORITHMS) | frozenset(
    _names.TRAVERSALS) | {
        _members.MULTI_OPTIMIZER_CLASS, _members.WEIGHT_NORM_CLASS,
        _members.REPLICATED_OPTIMIZER_CLASS, _members.DYNAMIC_SCALE_CLASS}


def _counterpart(path: str) -> str:
  """The replacement of a reference to ``path`` (in flax.optim)."""
  name = path.rsplit('.', 1)[1] if path != 'flax.optim' else 'flax.optim'
  param_state = _state_layout.param_state_classes().get(path)
  if param_state:  # flax.optim.adam._AdamParamState
    return f'{rep.RULES_MODULE}.{param_state} (the same fields)'
  return _members.CLASS_COUNTERPARTS.get(
      name, f'the Optax counterpart of {name}')


# Nodes without children (other than leaves) that no visit_ method handles
# (``_walked``).
_LEAVES = (ast.expr_context, ast.operator, ast.boolop, ast.cmpop,
           ast.unaryop, ast.Constant, ast.Name)
_DISPATCH: dict = {}  # node class -> the _Visitor method that visits it


# Findings that the module's optimizer flow proves an optimizer made or
# used here (``check_escapes`` follows such optimizers).
_FLOW_PROVEN = frozenset((
    _members.CREATE, _members.APPLY_GRADIENT, 'apply_gradient_overrides',
    _members.COMPUTE_GRADIENT, _members.OPTIMIZE, _members.REPLICATE,
    _members.OPTIMIZER_USE, 'checkpoint', 'annotation'))


class _Visitor(ast.NodeVisitor):
  """Reports legacy constructs of one parsed file."""

  def __init__(self, path: str, module: _names.ModuleNames, lines: list):
    self.path, self.module, self.lines = path, module, lines
    self.findings: list[Finding] = []
    # ids of references that are the .value of a longer chain, and of those
    # another finding already names (a call, a subclass's base).
    self._inner: set[int] = set()
    self._explained: set[int] = set()
    self._called: set[int] = set()  # ids of the calls' callees
    # Restores no finding names yet, asked about once the walk has found
    # the module's other findings (``check_restores``).
    self._restores: list[ast.Call] = []
    # The escape check's facts of the module, where it ran.
    self.escapes_model: Optional[_module_model.ModuleModel] = None
    # Whether its removal matches are kept with its names for the plan
    # (``ModuleNames.answer``): only a module that can name flax.optim is
    # planned, and keeping costs about what matching again would.
    self.keeps_matches = True

  # NodeVisitor's own visit/generic_visit look the method up by name on
  # every node and descend into contexts and operators too; scanning is
  # bounded by parsing, so these dispatch through a per-class table and skip
  # the nodes that have no children and no visit_ method (same order).
  def visit(self, node):
    (_DISPATCH.get(type(node)) or _method(type(node)))(self, node)

  def generic_visit(self, node):
    walked = _walked()
    for field in node._fields:
      value = getattr(node, field, None)
      if type(value) is list:
        for item in value:
          kind = type(item)
          if kind in walked:  # (not None, a name's str or a leaf)
            (_DISPATCH.get(kind) or _method(kind))(self, item)
      elif type(value) in walked:
        (_DISPATCH.get(type(value)) or _method(type(value)))(self, value)

  @functools.cached_property
  def flow(self) -> _flow.OptimizerFlow:
    """The module's proven optimizer flow: built on the first method call
    that needs it (most modules have none, and it is the costly part); the
    project's model's own where it read this very tree and names (its links
    may have built it already)."""
    model = self.module.model
    if model is not None and model.names.get(self.module.path) is self.module:
      return model.module_flow(self.module.path)
    return _flow.OptimizerFlow(self.module.tree, self.module)

  def add(self, node, construct, replacement=None, section=None,
          confidence='certain', removed=None):
    fixed_text, fixed_section = _FIXED.get(construct, ('', ''))
    self.findings.append(Finding(
        self.path, node.lineno, node.col_offset + 1, construct,
        _shown_line(self.lines, node.lineno),
        replacement or fixed_text, section or fixed_section, confidence,
        _codes.code_of(construct, removed)))

  # -- imports
  def visit_Import(self, node):
    self._check_removal(node)
    for alias in node.names:
      self._check_import(node, alias.name)

  def _check_removal(self, node):
    removal = self.module.answer(_removals.match, node) if (
        self.keeps_matches) else _removals.match(node, self.module)
    if removal is not None:
      self.add(node, removal.construct, removal.replacement,
               rep.SECTION_FIND, removed=removal.old)

  def visit_Assign(self, node):
    self._check_removal(node)
    self.generic_visit(node)

  def visit_Expr(self, node):
    self._check_removal(node)
    self.generic_visit(node)

  def visit_ImportFrom(self, node):
    self._check_removal(node)
    if node.module and not node.level:
      if node.module == 'flax':
        for alias in node.names:
          self._check_import(node, f'flax.{alias.name}', from_flax=True)
      elif node.module in ('flax.traverse_util',):
        if any(a.name in _names.TRAVERSALS for a in node.names):
          self.add(node, 'traversal')
      elif node.module == 'compat':
        if any(a.name in BRIDGES for a in node.names):
          self.add(node, 'shim')
      else:
        self._check_import(node, node.module)
        self._check_reexport(node, node.module)
    elif node.level:  # from .optimizers import optimizers (in a package)
      module = self.module.absolute(node)
      if module is not None:
        self._check_reexport(node, module)

  def _check_reexport(self, node, module):
    """``from mylib import optimizers``: a name another scanned module
    binds to flax.optim (one finding for the statement)."""
    if any(f'{module}.{alias.name}' in self.module.reexports
           for alias in node.names):
      self.add(node, 'import')

  def _check_import(self, node, name, from_flax=False):
    canonical = _names.canonical(name)
    if name == 'legacy_optim' or name.startswith('legacy_optim.'):
      self.add(node, 'shim')
    elif canonical == 'flax.optim' or canonical.startswith('flax.optim.'):
      self.add(node, 'import')
    elif from_flax:
      pass  # other flax submodules are fine

  # -- attribute chains: flax.optim.X after `import flax`, traversals
  def visit_Attribute(self, node):
    self._check_removal(node)
    if (node.attr == 'optim' and isinstance(node.value, ast.Name) and
        self.module.binding(node.value) == 'flax'):
      self.add(node, 'import')
      self._explain(node)
    elif node.attr in _names.TRAVERSALS and self.module.resolve(
        node) == f'flax.traverse_util.{node.attr}':
      self.add(node, 'traversal')
    elif (node.attr in BRIDGES and isinstance(node.value, ast.Name) and
          self.module.binding(node.value) == 'compat'):
      self.add(node, 'shim')
    if id(node) not in self._inner:  # only whole chains
      self._check_reference(node)
    self._inner.add(id(node.value))
    self._check_member_use(node)
    self.generic_visit(node)

  def _check_member_use(self, node):
    """A member of a legacy object the optimizer flow proves, read where
    no other finding names it: what migrate rewrites or leaves there."""
    called = id(node) in self._called
    if node.attr not in _members.READS or (
        called and node.attr in _members.STEP_METHODS):
      return  # (a step method's call is a finding of its own)
    construct = self.flow.member_use(node, called)
    if construct is not None:
      self.add(node, construct, _members.replacement(node.attr),
               _codes.BY_CODE[_codes.code_of(construct)].section)

  def visit_Name(self, node):
    if node.id in self._roots and id(node) not in self._inner:
      self._check_reference(node)

  # -- any other reference to a flax.optim name: ``optim.OptimizerState(step,
  # states)``, ``isinstance(x, optim.Optimizer)``, an alias ``Optimizer =
  # optim.Optimizer`` and its uses (each a NameError once the import goes)
  @functools.cached_property
  def _roots(self) -> frozenset:
    roots = self.module.reference_roots()
    if self.module.star_flax_optim:
      roots |= frozenset(_names.legacy_signatures())
    return roots

  def _check_reference(self, node):
    """``node``: a whole chain (no longer one holds it)."""
    if not self._rooted(node) or id(node) in self._explained or not (
        isinstance(node.ctx, ast.Load)):
      return
    path = self.module.resolve(node)
    if not _names.is_flax_optim(path):
      return
    if id(node) in self._called and path in _names.OPTIMIZER_CLASSES:
      self.add(node, 'reference', _names.HAND_BUILT, rep.SECTION_LOOP)
    else:
      self.add(node, 'reference', _counterpart(path), rep.SECTION_LOOP)

  def _rooted(self, node) -> bool:
    """The chain starts at a name that can lead into flax.optim."""
    return _names.chain_root(node) in self._roots

  def _explain(self, node):
    """``node`` (a reference) is part of a finding already made."""
    self._explained.add(id(node))

  # -- annotations: `optimizer: optim.Optimizer` (a NameError once the import
  # goes, though nothing is called)
  def visit_AnnAssign(self, node):
    self._check_annotation(node.annotation)
    self.generic_visit(node)

  def visit_arg(self, node):
    if node.annotation is not None:
      self._check_annotation(node.annotation)
    self.generic_visit(node)

  def visit_FunctionDef(self, node):
    if node.returns is not None:  # -> optim.OptimizerDef
      self._check_annotation(node.returns)
    self.generic_visit(node)

  visit_AsyncFunctionDef = visit_FunctionDef

  def _check_annotation(self, annotation):
    """Every flax.optim name in ``annotation``, wherever it sits in it
    (``Optional[optim.Optimizer]``, ``Tuple[Any, optim.OptimizerState]``,
    ``'optim.Optimizer'``): one finding each."""
    if not self._roots:
      return  # nothing here can name flax.optim
    for node, path in self._annotation_references(annotation):
      self._explain(node)
      self.add(node, 'annotation', _counterpart(path), rep.SECTION_LOOP)

  def _annotation_references(self, annotation):
    inner = set()
    for node in ast.walk(annotation):
      if isinstance(node, ast.Attribute):
        inner.add(id(node.value))
      if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:  # a string annotation: its names, found at the string
          parsed = ast.parse(node.value.strip(), mode='eval').body
        except (SyntaxError, ValueError):
          continue
        for _, path in self._annotation_references(parsed):
          yield node, path
      elif isinstance(node, (ast.Name, ast.Attribute)) and (
          id(node) not in inner):
        path = self.module.resolve(node) if self._rooted(node) else None
        if _names.is_flax_optim(path):
          yield node, path

  # -- class definitions
  def visit_ClassDef(self, node):
    if node.name in self.module.user_defs:
      self.add(node, 'optimizer_def_subclass')
      for base in node.bases:  # what makes it one
        self._explain(base)
    self.generic_visit(node)

  # -- calls
  def visit_Call(self, node):
    self._check_removal(node)
    self._check_call(node)
    self.generic_visit(node)

  def _check_call(self, node):
    module = self.module
    callee = _names.called(module, node.func)  # (resolved once, for all)
    name = callee.name
    self._called.add(id(node.func))
    if name in _CALLED_CLASSES:
      self._explain(node.func)  # the finding names the call
    if isinstance(node.func, ast.Call) and name is not None:
      self._explain(node.func.args[0])  # getattr(flax.optim, name)
    if name == _names.RULE_BY_NAME:
      self.add(node, _members.OPTIMIZER_DEF, _BY_NAME_REPLACEMENT,
               rep.SECTION_ALGORITHMS)
      return
    if self._rule_classes and _names.user_rule_at(module, node.func,
                                                  callee.path):
      self.add(node, _members.OPTIMIZER_DEF, _user_rules.CONSTRUCTION,
               rep.SECTION_ALGORITHMS)
      return
    if name in _names.ALGORITHMS:
      self.add(node, _members.OPTIMIZER_DEF, _algorithm_replacement(name, node),
               rep.SECTION_ALGORITHMS)
      return
    if name in (_members.MULTI_OPTIMIZER_CLASS, _members.WEIGHT_NORM_CLASS):
      self.add(node, 'multi_optimizer' if name == (
          _members.MULTI_OPTIMIZER_CLASS) else
               'weight_norm')
      return
    if name == _members.REPLICATED_OPTIMIZER_CLASS:
      self.add(node, _members.REPLICATE)
      return
    if name in _names.TRAVERSALS:  # flax.optim.ModelParamTraversal
      self.add(node, 'traversal')
      return
    if name == _members.DYNAMIC_SCALE_CLASS:
      args = ', '.join(ast.unparse(a) for a in node.args) or ', '.join(
          f'{k.arg}={ast.unparse(k.value)}' for k in node.keywords if k.arg)
      self.add(node, 'dynamic_scale',
               _FIXED['dynamic_scale'].text.format(args=args))
      return
    path = callee.path
    if path and path.startswith('flax.traverse_util.') and (
        path.rsplit('.', 1)[1] in _names.TRAVERSALS):
      self.add(node, 'traversal')
      return
    if path in _CHECKPOINT_FUNCS:
      self._check_checkpoint(node, path)
      return
    if isinstance(node.func, ast.Attribute):
      if node.func.attr == _clu_restores.METHOD:
        self._restores.append(node)
      self._check_method(node, node.func.attr, node.func.value)

  @functools.cached_property
  def _rule_classes(self) -> bool:
    """Whether this module or the project has an OptimizerDef subclass of
    the user's, whose constructions are definitions."""
    model = self.module.model
    return bool(self.module.user_defs or (model and model.user_rules))

  def _check_method(self, node, method, receiver):
    module = self.module
    if method == _members.CREATE and module.is_def(receiver):
      self.add(node, _members.CREATE)
      if any(k.arg == 'focus' for k in node.keywords) or len(node.args) > 1:
        self.add(node, 'traversal')
      return
    if method not in _members.STEP_METHODS:
      return
    if method == _members.REPLICATE and module.resolve(receiver) is not None:
      return  # jax_utils.replicate(...) and other module functions
    if _own_methods.runs_own_method(module.model, module, node):
      return  # the user's class wraps its optimizer behind this method
    confidence = ('certain' if self.flow.is_optimizer(receiver) else
                  module.optimizer_confidence(receiver))
    if method == _members.APPLY_GRADIENT and confidence is None:
      confidence = 'likely'  # the method name is flax.optim's alone
    if confidence is None:
      return
    if method == _members.APPLY_GRADIENT and node.keywords:
      names = ', '.join(k.arg or '**' for k in node.keywords)
      text, section = _FIXED['apply_gradient_overrides']
      self.add(node, 'apply_gradient_overrides', f'({names}) -> {text}',
               section, confidence)
    else:
      self.add(node, _members.construct_of(method), confidence=confidence)

  def _check_checkpoint(self, node, path):
    keyword, position = _CHECKPOINT_FUNCS[path]
    target = next((k.value for k in node.keywords if k.arg == keyword), None)
    if target is None and len(node.args) > position:
      target = node.args[position]
    if target is None:
      return
    candidates = [target]
    if isinstance(target, (ast.Tuple, ast.List, ast.Set)):
      candidates = list(target.elts)  # save_checkpoint(d, (optimizer, ema))
    elif isinstance(target, ast.Dict):
      candidates = list(target.values)
    # e.g. jax_utils.unreplicate(optimizer), also as a tuple's element
    candidates += [a for c in candidates if isinstance(c, ast.Call)
                   for a in c.args]
    found = ['certain' if self.flow.is_optimizer(c) else
             self.module.optimizer_confidence(c) for c in candidates]
    confidence = ('certain' if 'certain' in found else
                  'likely' if 'likely' in found else None)
    if confidence is not None:
      pickled = path.startswith('pickle.')
      self.add(node, 'checkpoint', _FIXED['pickle'].text if pickled else None,
               confidence=confidence)
    elif path in _restores.ROUTES:
      self._restores.append(node)

  def check_escapes(self):
    """After the walk, in a module of flax.optim: each optimizer its flow
    proves going on to code migrate cannot follow (``_escape_analysis``),
    and each value stored in an optimizer field it cannot prove one: what
    keeps migrate's whole flow as it is, one finding per place."""
    if not any(f.construct in _FLOW_PROVEN and f.confidence == 'certain'
               for f in self.findings):
      return  # no optimizer the flow proves here: none goes anywhere
    module = self.escapes_model = _module_model.ModuleModel(
        self.module.tree, self.module,
        _plan_records.checkpoint_lines(self.findings), self.flow)
    section = _codes.BY_CODE[_codes.code_of(_plan_records.ESCAPE)].section
    for escape in _escape_analysis.escapes(module):
      self.add(escape.node, _plan_records.ESCAPE, escape.why, section)
    for holder, value in module.unproven_field_stores():
      self.add(value, _plan_records.ESCAPE, _plan_records.unproven_store_why(
          holder, ast.unparse(value)), section)
    flow = module.flow
    for call in _walk.nodes_of(self.module.tree, (ast.Call,)):
      if any(flow.is_optimizer(p.argument)
             for p in flow.helper_passes(call, flow.scope_of(call))):
        self.add(call, 'checkpoint', _serialization_helpers.THROUGH_HELPER)

  def check_restores(self):
    """After the walk: each restore into a template that holds an
    optimizer (``_restores.fills_flow``: ``state`` with an optimizer in a
    field), which migrate rewrites to read both layouts or keeps with its
    reason, where no optimizer among its arguments made it a finding."""
    if not self._restores:
      return
    view = _RestoreView(self.module, self.flow, tuple(self.findings))
    for call in self._restores:
      restore = _restores.restore_of(view, call)
      if restore is not None and _restores.fills_flow(view, restore):
        self.add(call, 'checkpoint', _restores.TEMPLATE_RESTORE)


class _FlatVisitor(_Visitor):
  """A ``_Visitor`` of a tree whose shared walk is made (``_walk``: the
  project's model walked every module it read), or of the nodes chosen in
  a module that cannot name flax.optim (``visit_each``: ``_quiet_nodes``):
  each node's ``visit_`` method called in the walk's order, none
  descending. The recursion cost
  a fifth of the visit there (504 modules of the speed tree: 0.77 s ->
  0.61 s), and a long expression (1,500 terms) ran out of stack.
  Breadth first, not depth first: what a node notes for others (the
  references a finding explains, the callees, a chain's inner values) is
  under it, so visited after it either way; the findings are sorted."""

  def visit(self, node):
    self.visit_each(_walk.nodes(node))

  def generic_visit(self, node):
    pass  # (its children come in the walk's order)

  def visit_each(self, nodes):
    """Each of ``nodes``' checks (none descending)."""
    for each in nodes:
      method = _FLAT.get(type(each))
      if method is not None:
        method(self, each)


# Node class -> the _Visitor method for its nodes, where one has its own.
_FLAT = {getattr(ast, name[len('visit_'):]): method
         for name, method in vars(_Visitor).items()
         if name.startswith('visit_')}


class _RestoreView(NamedTuple):
  """What ``_restores`` asks of a module: its names, its optimizer flow and
  its other findings (as it asks a planner)."""
  names: _names.ModuleNames
  flow: _flow.OptimizerFlow
  findings: tuple


def _method(kind: type):
  """The _Visitor method that visits nodes of class ``kind``."""
  _DISPATCH[kind] = getattr(_Visitor, 'visit_' + kind.__name__,
                            _Visitor.generic_visit)
  return _DISPATCH[kind]


@functools.lru_cache(maxsize=None)
def _walked() -> frozenset:
  """The node classes a walk enters: every class of ``ast`` but the
  ``_LEAVES`` that no visit_ method handles."""
  return frozenset(
      kind for kind in vars(ast).values() if isinstance(kind, type) and
      issubclass(kind, ast.AST) and not (issubclass(kind, _LEAVES) and (
          'visit_' + kind.__name__ not in vars(_Visitor))))


def module_names(tree, path, reexports=None, model=None, kernel=None):
  """``tree``'s ``ModuleNames``, as part of the project ``model`` if given
  (its relative imports, the factories of its other modules); ``kernel``:
  without a model, a notebook's kernel (``_names.kernel_bindings``)."""
  if model is None:
    return _names.ModuleNames(tree, reexports, kernel=(
        _names.Kernel(kernel, tree) if kernel else None))
  return model.module_names(path, tree)


# A module can name flax.optim only through an import of ``flax.optim``,
# ``legacy_optim`` or ``from flax import optim`` (the word ``optim``), or
# through a name another scanned module re-exports (its own word).
def _mentions_optim(text: str) -> bool:
  return 'optim' in text and (_prefilter.spells(text, 'optim') or
                              'legacy_optim' in text)


def _may_name_flax_optim(text: str, reexports) -> bool:
  """False only when nothing in ``text`` can resolve to flax.optim: then
  ``ModuleNames``' classes and assignments (all rooted in a legacy class)
  are provably empty and are not collected."""
  return _mentions_optim(text) or any(
      word in text for word in _reexported_words(reexports or {}))


# (``migrate`` skips the references walk of an output so.)
may_name_flax_optim = _may_name_flax_optim


# The table _reexported_words last read, its size and its words: a scan
# reads one table for every module.
_WORDS_OF: list = [None, 0, frozenset()]


def _reexported_words(reexports: dict) -> frozenset:
  """The local names of re-export keys (``optimizers`` of
  ``mylib.optimizers``): what a module that uses one must spell."""
  if _WORDS_OF[0] is not reexports or _WORDS_OF[1] != len(reexports):
    _WORDS_OF[:] = [reexports, len(reexports),
                    frozenset(key.rpartition('.')[2] for key in reexports)]
  return _WORDS_OF[2]


def scan_source(source, path: str = '<string>', reexports=None,
                tree: Optional[ast.Module] = None, model=None,
                kernel: Optional[dict] = None) -> list:
  """Findings of one file's source (str or bytes). Raises SyntaxError.

  ``reexports``: names other scanned modules bound to flax.optim
  (``_names.project_reexports``); ``tree``: the source already parsed;
  ``model``: the project's ``_project.Model`` (``parse_project``);
  ``kernel``: without a model, what a notebook's free names mean
  (``_names.kernel_bindings``: ``migrate`` re-scans its output so).
  """
  return walk_module(source, path, reexports, tree, model, kernel)[0]


def walk_module(source, path: str = '<string>', reexports=None,
                tree: Optional[ast.Module] = None, model=None,
                kernel: Optional[dict] = None) -> tuple:
  """``(findings, facts)``: ``scan_source``'s findings and what the walk
  built (``ScannedModule.facts``), which its plan reads too
  (``_plan_findings.plan``)."""
  if tree is None:
    tree = ast.parse(source, filename=path)
  return tuple(scan_module(source, path, reexports, tree, model, kernel))


class ScannedModule(NamedTuple):
  """``scan_module``'s result: the findings and what the walk built on the
  way that ``migrate``'s plan of the same tree reads too."""
  findings: list
  # The ``ModuleModel`` of the escape check (its flow, parents, replicated
  # flow as far as computed), else the flow alone, else None (none built).
  facts: Optional[Union[_module_model.ModuleModel, _flow.OptimizerFlow]]


def scan_module(source, path: str, reexports, tree: ast.Module, model=None,
                kernel: Optional[dict] = None,
                names=None) -> ScannedModule:
  """``scan_source`` of a parsed module, with the facts it built
  (``ScannedModule``); ``names``: ``module_names(tree, path, reexports,
  model, kernel)`` where the caller has it (a flow it built is proven for
  these very names, which ``migrate``'s plan then shares)."""
  text = source.decode('utf-8', 'replace') if isinstance(source,
                                                         bytes) else source
  # A module the project's model read names a factory of another module
  # (``cfg.create_optimizer_def().create(p)``): analysed in full.
  read_by_model = model is not None and path in model.names
  if not (read_by_model or kernel or _may_name_flax_optim(text, reexports)):
    words = _prefilter.found_words(text, _TRIGGERS)
    # (none of them: none of the words any finding needs)
    return ScannedModule(_quiet_findings(text, path, reexports, tree, words)
                         if words else [], None)
  if names is None:
    names = module_names(tree, path, reexports, model, kernel)
  visitor = (_FlatVisitor if _walk.is_walked(tree) else _Visitor)(
      path, names, text.splitlines())
  visitor.visit(tree)
  visitor.check_escapes()  # (before the restores: not checkpoint lines)
  visitor.check_restores()
  return ScannedModule(sorted(set(visitor.findings)), visitor.escapes_model or
                       visitor.__dict__.get('flow'))


def _quiet_findings(text: str, path: str, reexports, tree: ast.Module,
                    words: frozenset) -> list:
  """The findings of a module in which no name can resolve to flax.optim
  and that the project's model did not read, whose text spells ``words``
  (``_prefilter.found_words``): removed APIs, traversals, bridges, and
  steps and checkpoints of values only a name says may be optimizers.
  Each is at a node that spells one of ``words`` or a name an import binds
  to a path ending in one, and each is found by the checks of that node
  alone, so only the nodes whose lines hold such a spelling are visited
  (``_quiet_nodes``), none descending: the module's other nodes cost
  nothing (most of them)."""
  names = _names.ModuleNames(tree, reexports, collect=False)
  lines = _lines_spelling(text, names, words)
  visitor = (_FlatVisitor if lines is not None or _walk.is_walked(tree) else
             _Visitor)(path, names, text.splitlines())
  # Their cached values, never computed: no value here is an optimizer (the
  # stand-in flow answers what the checks ask), and no name leads into
  # flax.optim (no reference or annotation to check). Nothing is checked
  # after the walk either: none escapes, and no restore's template holds
  # an optimizer.
  visitor.flow = cast(_flow.OptimizerFlow, _flow.NO_OPTIMIZERS)
  visitor._roots = frozenset()
  visitor.keeps_matches = False
  if lines is None:
    visitor.visit(tree)
  else:
    cast(_FlatVisitor, visitor).visit_each(_quiet_nodes(tree, lines))
  return sorted(set(visitor.findings))


def _lines_spelling(text: str, names: _names.ModuleNames,
                    words: frozenset) -> Optional[list]:
  """The lines where ``text`` spells one of ``words`` or a name an import
  binds (``names``) to a path ending in one; None where a line may spell
  one otherwise: the parser reads an identifier of other letters as the
  ASCII one they stand for (NFKC: ``jax`` in full-width letters is
  ``jax``)."""
  if not text.isascii():
    return None
  spelled = set(words)
  for local, bound in [*names.bindings.items(), *names.inner.imports()]:
    if bound.rpartition('.')[2] in words:
      spelled.add(local)
  return _prefilter.lines_spelling(text, spelled)


# Nodes with no child a check reads (a name's context is none).
_CHILDLESS = frozenset((ast.Name, ast.Constant))


def _quiet_nodes(tree: ast.Module, lines: list) -> list:
  """The nodes of ``tree`` whose lines (a def's from its decorators on)
  hold one of ``lines`` (sorted), and the nodes without a position that
  hold them (a def's arguments, a ``with``'s items), found from the
  statements down along those lines only."""
  found: list = []
  todo = [tree]
  while todo:
    for child in _walk.child_nodes(todo.pop()):
      first = getattr(child, 'lineno', None)
      if first is not None:
        decorators = getattr(child, 'decorator_list', None)
        if decorators:
          first = min(first, decorators[0].lineno)
        at = bisect.bisect_left(lines, first)
        if at == len(lines) or lines[at] > child.end_lineno:
          continue  # none of its lines spells a word
      elif isinstance(child, _walk.SHARED_LEAVES):
        continue  # (a context or an operator: no check, no children)
      found.append(child)
      if type(child) not in _CHILDLESS:
        todo.append(child)
  return found


def _excluded(path: str, patterns) -> bool:
  """True when a glob matches ``path``, or its tail, or its last name.

  As with flake8's and ruff's ``--exclude``: ``build`` skips every file or
  directory named build at any depth, ``*_pb2.py`` every such file, and
  ``src/gen`` or ``*/gen/*`` the paths they match.
  """
  shown = path.replace(os.sep, '/')
  name = shown.rstrip('/').rsplit('/', 1)[-1]
  for pattern in patterns:
    pattern = pattern.replace(os.sep, '/').rstrip('/')
    if (fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(shown, pattern) or
        fnmatch.fnmatch(shown, '*/' + pattern)):
      return True
  return False


def source_walk(exclude=()) -> _tree.Walk:
  """The walk of the scanned trees: hidden, cache and excluded directories
  (see ``_excluded``) are not entered."""
  return _tree.Walk(lambda path, name: not name.startswith('.') and
                    name not in SKIP_DIRS and not _excluded(path, exclude))


def iter_python_files(paths: Iterable[str], exclude=(),
                      suffixes=('.py',),
                      walk: Optional[_tree.Walk] = None) -> Iterable[str]:
  """Every file ending in ``suffixes`` under ``paths``, sorted, skipping
  hidden/cache dirs and whatever ``exclude`` matches (see ``_excluded``);
  files named in ``paths`` are always read. ``walk``: a ``source_walk``
  that collects the directories that could not be listed."""
  walk = walk or source_walk(exclude)
  for root_path in paths:
    yield from walk.files(root_path, lambda p: p.endswith(suffixes) and
                          not _excluded(p, exclude))


class Project(NamedTuple):
  """Every .py file and notebook under the scanned paths, read once."""
  # [(shown path, source bytes, ast.Module)]; a notebook's source is its
  # code cells as one module (``_notebook.Notebook.module``).
  parsed: list
  errors: list  # [ScanError]
  # 'mylib.optimizers' -> 'flax.optim': names scanned modules bind to
  # flax.optim, by every dotted name they may be imported by (a name two
  # files could both be imported by counts for neither).
  reexports: dict
  # absolute path -> its local names that other scanned modules reach
  # through ``reexports`` (``optimizers`` for mylib/__init__.py).
  exported: dict
  # shown path -> its ``_notebook.Notebook``, for each notebook in ``parsed``.
  notebooks: dict = {}
  # The definition factories, fields and links across modules (None: the
  # analysis across modules failed; each file is scanned on its own).
  model: Optional[_project.Model] = None
  # [ScanError] of the directories under the paths that could not be
  # listed (also in ``errors``).
  unreadable: list = []


SOURCE_SUFFIXES = ('.py', '.ipynb')
# Text files besides code that may name a function of the project (gin and
# other configs, scripts, docs): migrate looks there before it treats a
# definition factory called nowhere as dead code (``_project.Model.mention``).
OTHER_TEXT_SUFFIXES = ('.gin', '.yaml', '.yml', '.json', '.toml', '.cfg',
                       '.ini', '.sh', '.md', '.rst', '.txt')
# What is read of each (a config is small; a large file is data).
_OTHER_TEXT_BYTES = 1 << 22
# The path of an error in the analysis across modules (no one file's).
ACROSS_MODULES = '<names re-exported across modules>'


def failure(path: str, error: BaseException) -> ScanError:
  """A file that could not be read, parsed or analysed, and why."""
  if isinstance(error, SyntaxError):
    return ScanError(path, error.lineno, f'syntax error: {error.msg}')
  if isinstance(error, (OSError, ValueError)):  # NUL bytes, bad coding, JSON
    return ScanError(path, getattr(error, 'lineno', None),
                     f'unreadable: {type(error).__name__}: {error}')
  # The analysis itself failed (e.g. RecursionError on code it cannot
  # follow): the file is skipped, the rest is still scanned.
  message = str(error).splitlines()[0] if str(error) else ''
  return ScanError(path, None, f'analysis failed, file skipped: '
                   f'{type(error).__name__}: {message}')


def unreadable_error(unreadable: _tree.Unreadable) -> ScanError:
  """A directory the walk could not list: nothing under it was read."""
  return ScanError(unreadable.path.replace(os.sep, '/'), None,
                   f'directory not read, nothing under it scanned: '
                   f'{unreadable.reason}')


def _without_frames(error: Exception) -> Exception:
  """``error`` without its traceback nor the exception it was raised in
  (a notebook's ``JSONDecodeError`` keeps the ``StopIteration`` of the
  decoder, and its traceback the frames reading the file): kept by the
  object whose frames those are, either makes a cycle that keeps every
  file and tree of the run for the collector to walk. What ``failure``
  reports reads neither."""
  error.__context__ = error.__cause__ = None
  return error.with_traceback(None)


class _Files:
  """The files under the scanned paths, each read once (a notebook as its
  code cells' module), parsed on demand; a tree is kept where asked (the
  modules the tables across modules read), so no file is parsed twice."""

  def __init__(self, paths: Iterable[str], exclude=()):
    self.scanned = list(paths)
    self.paths: list[str] = []
    self.roots: list[str] = []
    self.shown: list[str] = []
    self.sources: list = []  # bytes, or the exception reading raised
    self.notebooks: dict = {}  # index -> its _notebook.Notebook
    self.kept: dict = {}  # index -> its tree, or the exception parsing raised
    self._texts: dict = {}  # index -> its source decoded
    self._other_paths: list[str] = []  # (``other_texts``)
    walk = source_walk(exclude)  # once over each tree, for both lists
    for root in self.scanned:
      for path in iter_python_files(
          [root], exclude, SOURCE_SUFFIXES + OTHER_TEXT_SUFFIXES, walk):
        if path != root and not path.endswith(SOURCE_SUFFIXES):
          self._other_paths.append(path)
          continue
        index = len(self.paths)
        self.paths.append(path)
        self.roots.append(root)
        self.shown.append(path.replace(os.sep, '/'))
        try:
          with open(path, 'rb') as f:
            source = f.read()
          if path.endswith('.ipynb'):
            self.notebooks[index] = _notebook.Notebook(source)
            source = self.notebooks[index].module.encode('utf-8')
          else:  # what Python would refuse, migrate refuses too
            self._texts[index] = _source.read(source).text
        except Exception as e:  # pylint: disable=broad-except
          self.sources.append(_without_frames(e))  # (see ``_parse``)
        else:
          self.sources.append(source)
    self.index_of = {shown: i for i, shown in enumerate(self.shown)}
    # The directories that could not be listed (``unreadable_errors``).
    self.unreadable: list[_tree.Unreadable] = walk.unreadable

  def unreadable_errors(self) -> list:
    return [unreadable_error(u) for u in self.unreadable]

  def other_texts(self) -> list:
    """``[(shown path, bytes)]`` of the other text files under the scanned
    paths (``OTHER_TEXT_SUFFIXES``, the start of each); one that cannot be
    read names nothing."""
    found = []
    for path in self._other_paths:
      try:
        with open(path, 'rb') as f:
          found.append((path.replace(os.sep, '/'), f.read(_OTHER_TEXT_BYTES)))
      except OSError:
        continue
    return found

  def tree(self, index: int, keep: bool = True) -> ast.Module:
    """The file's tree (kept for every later call where ``keep``). Raises
    what reading or parsing it raised (see ``failure``)."""
    found = self.kept.get(index)
    if found is None:
      found = self._parse(index)
      if keep:
        self.kept[index] = found
        if isinstance(found, ast.AST):
          _walk.keep(found)  # walked again in each phase that reads it
    if isinstance(found, Exception):
      # A copy: the one raised holds the frames it goes through, and this
      # one holds the exception kept (a cycle, which keeps every file
      # until the collector walks them all).
      raise copy.copy(found)
    return found

  def _parse(self, index: int):
    """The file's tree, or what reading or parsing it raised (without its
    traceback: its frames hold this object)."""
    source = self.sources[index]
    if isinstance(source, Exception):
      return source
    try:
      return ast.parse(source, filename=self.shown[index])
    except Exception as e:  # pylint: disable=broad-except
      return _without_frames(e)

  def parsed_tree(self, index: int) -> Optional[ast.Module]:
    """``tree(index)``, None where the file does not read or parse."""
    try:
      return self.tree(index)
    except Exception:  # pylint: disable=broad-except
      return None

  def text(self, index: int) -> str:
    if index not in self._texts:
      source = self.sources[index]
      self._texts[index] = '' if isinstance(source, Exception) else (
          source.decode('utf-8', 'replace'))
    return self._texts[index]


class _ModuleTable:
  """Which file each dotted name (``_names.module_names``) may import: the
  one file it names; of several, the one that parses if only one does,
  else none. Settled on first use, so only the files sharing a name that
  is looked up are parsed. Notebooks and unreadable files name nothing."""

  def __init__(self, files: _Files):
    self._files = files
    self.names_of: dict = {}  # file index -> its dotted names
    self.indices_of: dict = {}  # dotted name -> [file index]
    self._settled: dict = {}  # dotted name -> file index or None
    common = _common_root(files.roots)
    for index, (path, root) in enumerate(zip(files.paths, files.roots)):
      if index in files.notebooks or isinstance(files.sources[index],
                                                Exception):
        continue
      self.names_of[index] = _names.module_names(path, root)
      if common is not None:
        # Its name under the directory holding every scanned one, last:
        # what tells apart ``checkpoint_utils`` of two scanned script
        # directories, as one scan of that directory would.
        self.names_of[index] += [
            name for name in _names.module_names(path, common)[:1]
            if name not in self.names_of[index]]
      for name in self.names_of[index]:
        self.indices_of.setdefault(name, []).append(index)

  def index_of(self, name: str) -> Optional[int]:
    if name not in self._settled:
      indices = self.indices_of[name]
      if len(indices) > 1:
        indices = [i for i in indices
                   if self._files.parsed_tree(i) is not None]
      self._settled[name] = indices[0] if len(indices) == 1 else None
    return self._settled[name]


def _common_root(roots) -> Optional[str]:
  """The directory holding every scanned directory, where more than one
  was given (else None)."""
  directories = sorted({os.path.abspath(r) for r in roots
                        if os.path.isdir(r)})
  if len(directories) < 2:
    return None
  try:
    return os.path.commonpath(directories)
  except ValueError:  # on two drives
    return None


class _UniqueNames(collections.abc.Mapping):
  """Shown path -> the dotted names by which only that file may be
  imported (``_project.Model``'s ``module_names_of``), settled lazily."""

  def __init__(self, files: _Files, table: _ModuleTable):
    self._files, self._table = files, table

  def __getitem__(self, shown: str) -> list:
    index = self._files.index_of[shown]
    if index not in self._table.names_of:
      raise KeyError(shown)
    return [name for name in self._table.names_of[index]
            if self._table.index_of(name) == index]

  def __iter__(self):
    return (self._files.shown[i] for i in self._table.names_of)

  def sharing(self, name: str) -> list:
    """The shown paths of the files that may each be imported by
    ``name``, where more than one may (none of them is parsed for it)."""
    indices = self._table.indices_of.get(name, ())
    return [self._files.shown[i] for i in indices] if len(
        indices) > 1 else []

  def __len__(self) -> int:
    return len(self._table.names_of)


class _AcrossModules(NamedTuple):
  table: _ModuleTable
  reexports: dict  # as Project.reexports
  model: Optional[_project.Model]  # as Project.model
  errors: list  # [ScanError] of the analysis across modules


def _across_modules(files: _Files, links: bool = True) -> _AcrossModules:
  """The re-export table and the project's model of ``files``, parsing
  (and keeping) only the modules they read; a failure of either is an
  error under ``ACROSS_MODULES`` and each file is scanned on its own.
  ``links``: the model links the modules of each flow (``migrate``)."""
  table = _ModuleTable(files)
  errors = []
  try:
    reexports = _reexports(table, files.text, files.parsed_tree)
  except Exception as e:  # pylint: disable=broad-except
    errors.append(failure(ACROSS_MODULES, e))
    reexports = {}
  readable = [(shown, source, None) for shown, source in zip(
      files.shown, files.sources) if not isinstance(source, Exception)]
  try:
    model = _project.Model(
        readable, _UniqueNames(files, table), reexports,
        lambda shown: files.parsed_tree(files.index_of[shown]), links,
        files.other_texts if all(os.path.isdir(p) for p in files.scanned)
        else None)
  except Exception as e:  # pylint: disable=broad-except
    errors.append(failure(ACROSS_MODULES, e))
    model = None
  return _AcrossModules(table, reexports, model, errors)


def parse_project(paths: Iterable[str], exclude=()) -> Project:
  """Reads and parses every .py file and notebook under ``paths`` (see
  ``Project``); a file that fails is an error, never the run's end."""
  files = _Files(paths, exclude)
  across = _across_modules(files)
  parsed: list[tuple[str, bytes, ast.Module]] = []
  errors: list[ScanError] = []
  for index, shown in enumerate(files.shown):
    try:
      parsed.append((shown, files.sources[index], files.tree(index)))
    except Exception as e:  # pylint: disable=broad-except
      errors.append(failure(shown, e))
  errors += across.errors + files.unreadable_errors()
  reexports = across.reexports
  exported: dict[str, set[str]] = {}
  for shown, source, tree in parsed:
    if not _may_name_flax_optim(source.decode('utf-8', 'replace'),
                                reexports):
      continue  # resolves nothing to flax.optim, so no re-export either
    try:
      used = _names.used_reexports(tree, reexports)
    except Exception as e:  # pylint: disable=broad-except
      errors.append(failure(shown, e))
      continue
    for dotted in used:
      module, _, local = dotted.rpartition('.')
      named = across.table.index_of(module)  # a module the table read
      if named is not None:
        exported.setdefault(os.path.abspath(files.paths[named]),
                            set()).add(local)
  notebooks = {files.shown[i]: notebook
               for i, notebook in files.notebooks.items()}
  return Project(parsed, errors, reexports, exported, notebooks,
                 across.model, files.unreadable_errors())


def in_file_lines(findings: list, notebook) -> list:
  """A notebook's findings at the notebook file's lines (``file_line``)."""
  if notebook is None:
    return findings
  return [f._replace(line=notebook.file_line(f.line)) for f in findings]


def unused_noqa(path: str, lines: list):
  """``_noqa.apply``'s finding for a ``# noqa`` code that keeps nothing."""
  def finding(mark, code):
    known = '' if code in _codes.BY_CODE else ' (no such code)'
    return Finding(path, mark.line, mark.column, 'unused_noqa',
                   _shown_line(lines, mark.line),
                   f'remove {code}{known} from the # noqa comment: nothing '
                   'on this line has that code', rep.SECTION_FIND, 'certain',
                   _codes.UNUSED_NOQA)
  return finding


def scan_file(source: bytes, shown: str, tree, reexports,
              chosen=None, model=None, kernel=None) -> tuple:
  """``(reported, suppressed)`` findings of one parsed file: only codes in
  ``chosen`` (default all), ``# noqa`` lines kept out of ``reported``;
  ``model``: the project's (``parse_project``; a ``-j`` worker's too);
  ``kernel``: as for ``scan_source``. The findings of the walk alone: a
  project's plans add theirs (``scan_paths``)."""
  return reported(source, shown, scan_source(source, shown, reexports, tree,
                                             model, kernel), chosen)


def reported(source: bytes, shown: str, findings: list, chosen) -> tuple:
  """``scan_file``'s ``(reported, suppressed)`` of a file's ``findings``."""
  marks = _noqa.suppressions(source)
  lines = source.decode('utf-8', 'replace').splitlines() if marks else []
  return _noqa.apply(findings, marks, set(_codes.BY_CODE) if chosen is None
                     else chosen, unused_noqa(shown, lines))


def planned(model, shown: str, walked) -> bool:
  """Whether ``scan_paths`` plans the module at ``shown`` (a notebook: its
  code cells) as ``migrate`` does: one the project's ``model`` read (it
  can reach flax.optim), where the model follows flows across modules,
  and where a flax.optim finding of the walk (``walked``) or a link to
  another module's flow gives its plan something to do besides the
  walk's removals."""
  return model is not None and model.linked and shown in model.names and (
      shown in model.link_ends or
      any(f.rule.startswith(_codes.FLAX_OPTIM) for f in walked))


def plan_findings(source: bytes, shown: str, tree, walked, plan) -> list:
  """The findings of a module's ``plan`` (of ``tree``) on statements the
  walk's (``walked``) do not name (``_plan_findings``), as ``Finding``s."""
  lines = source.decode('utf-8', 'replace').splitlines()
  return [Finding(shown, f.line, f.column, f.construct,
                  _shown_line(lines, f.line), f.replacement,
                  _codes.BY_CODE[f.rule].section, 'certain', f.rule)
          for f in _plan_findings.findings(plan, walked, source, tree)]


def _shown_line(lines: list, line: int) -> str:
  """A finding's ``code``: its source line, stripped, at most 100 long."""
  text = lines[line - 1].strip() if line <= len(lines) else ''
  return text if len(text) <= 100 else text[:97] + '...'


def _reexports(table: _ModuleTable, text_of, tree_of) -> dict:
  """``_names.project_reexports`` of the project's modules (``table``;
  ``text_of(index)``: a file's source; ``tree_of(index)``: its
  ``ast.Module``, None if it does not parse), computed over the modules
  that can bind a name to flax.optim: those whose source has the word
  ``optim`` or the name of a re-export found so far (a chain ``from mylib
  import optimizers as o`` names it), repeated until no new name appears.
  The others cannot add an entry, so the table is the same, without
  parsing them or walking every module once per round."""
  words: set[str] = set()
  rooted = {i for i in table.names_of if _mentions_optim(text_of(i))}
  while True:
    able = rooted | {i for i in table.names_of
                     if any(w in text_of(i) for w in words)}
    candidates = {}
    for name, indices in table.indices_of.items():
      if any(i in able for i in indices):  # else its file cannot be
        index = table.index_of(name)
        tree = tree_of(index) if index in able else None
        if tree is not None:
          candidates[name] = tree
    found_table = _names.project_reexports(candidates)
    found = {key.rpartition('.')[2] for key in found_table}
    if found <= words:
      return found_table
    words |= found


# Files per worker process below which ``-j`` scans in this process (a pool
# costs more to start than a few files take to scan).
_FILES_PER_JOB = 32


@contextlib.contextmanager
def without_cycle_collection():
  """Pauses the cyclic garbage collector. Parsing a tree allocates a node
  per token and the tables across modules keep some trees: each
  collection then walks all of them again, which doubled a scan's time.
  Syntax trees hold no cycles (freed by reference counting as usual);
  whatever else has one is collected once the scan is over."""
  enabled = gc.isenabled()
  gc.disable()
  _walk.start_run()  # the trees kept keep their walks until it is over
  try:
    yield
  finally:
    # The trees kept for the run go before the collector comes back (its
    # first collections would walk them all).
    _walk.forget()
    if enabled:
      gc.enable()


class _ShareInputs(NamedTuple):
  files: _Files
  reexports: dict
  model: Optional[_project.Model]
  chosen: Optional[set]
  # Whether a module asking another module's flow what it holds is handed
  # back (``_cross_flow.HoldingDeferred``), for ``_scan_shares`` to walk
  # here: where the work is split.
  defers: bool = False


class _Planned(NamedTuple):
  """A module ``scan_paths`` planned (``planned``): its file's index, the
  walk's findings and the module's plan; at a link's end, its plan with
  the flow kept as it is, if made (``_plan_findings.plan_and_kept``)."""
  file_index: int
  walked: list
  plan: object  # _plan_records.Plan
  kept: object = None  # _plan_records.Plan


def _scan_share(inputs: _ShareInputs, share) -> tuple:
  """``(findings, errors, [_Planned], deferred)`` of the files ``share``
  indexes: each parsed (unless the tables across modules kept its tree),
  scanned, its tree dropped; a module ``planned`` is planned too, its
  findings left for ``_plans_reported``. In this process or a forked
  worker (``_parallel``). ``deferred``: the indices of the modules handed
  back (``_ShareInputs.defers``): only those add links to the project's
  model (an attribute kept through ``self`` by classes of two modules:
  ``_self_holders``), here, where the roll-back reads them."""
  files, model = inputs.files, inputs.model
  findings: list = []
  errors: list = []
  plans: list = []
  deferred: list = []
  if model is not None:
    model.defers_holding = inputs.defers
  try:
    for index in share:
      try:
        found = _scan_one(inputs, index, plans)
      except _cross_flow.HoldingDeferred:
        deferred.append(index)
        continue
      except Exception as e:  # pylint: disable=broad-except
        errors.append(failure(files.shown[index], e))
        continue
      findings += in_file_lines(found, files.notebooks.get(index))
  finally:
    if model is not None:
      model.defers_holding = False
  return findings, errors, plans, deferred


def _scan_one(inputs: _ShareInputs, index: int, plans: list) -> list:
  """The walk's reported findings of the file at ``index``; none where its
  module is planned (appended to ``plans``, reported later)."""
  files, model = inputs.files, inputs.model
  shown = files.shown[index]
  tree = files.tree(index, keep=False)
  source = files.sources[index]
  walked, facts = walk_module(source, shown, inputs.reexports, tree, model)
  plan, kept = _plan_of(source, shown, tree, walked, model, facts)
  if plan is not None:
    plans.append(_Planned(index, walked, plan, kept))
    return []
  return reported(source, shown, walked, inputs.chosen)[0]


def _scan_shares(inputs: _ShareInputs, count: int, jobs: int) -> list:
  """``_scan_share``'s results over every file, ``jobs`` processes at a
  time, then those of the modules the workers handed back: a module asking
  another module's flow what it holds (``self.<attr>`` of classes sharing
  instances, an optimizer passed between modules) gets the answer the
  flows asked before give, and adds links, so those are walked here, in
  their files' order, after the rest: as in one process, whatever the
  split (the others neither read nor change what they share)."""
  if jobs <= 1:
    return [_scan_share(inputs, range(count))]
  results = list(_parallel.map_shares(
      _scan_share, inputs._replace(defers=True), count, jobs))
  deferred = sorted(i for result in results for i in result[-1])
  if deferred:
    results.append(_scan_share(inputs, deferred))
  return results


def _plan_of(source: bytes, shown: str, tree, walked, model, facts) -> tuple:
  """``(plan, kept)``: the module's plan where it is ``planned``
  (``facts``: what its walk built, ``ScannedModule.facts``), else None;
  None too where planning fails: ``migrate`` names that failure for the
  file, and the walk's findings are still reported. ``kept``: at a link's
  end (where a roll-back may keep the flow), the plan with the flow kept
  (``_plan_findings.plan_and_kept``), else None."""
  if not planned(model, shown, walked):
    return None, None
  names = model.module_names(shown, tree)
  try:
    if shown in model.link_ends:
      return _plan_findings.plan_and_kept(source, tree, names, walked,
                                          scanned=facts)
    return _plan_findings.plan(source, tree, names, walked,
                               scanned=facts), None
  except Exception:  # pylint: disable=broad-except
    return None, None


def _plans_reported(files: _Files, model, plans: list, chosen) -> tuple:
  """``(findings, errors)`` of the modules planned (``_Planned``), each
  with its plan's findings (``plan_findings``). As in ``migrate``, a flow
  whose link to another module does not hold is planned again, kept as it
  is with the link's lines (``_project.roll_back``)."""
  by_path = {files.shown[p.file_index]: p for p in plans}
  errors = []
  notebooks = {files.shown[i]: n for i, n in files.notebooks.items()}
  for path, blocked in _project.roll_back(
      model.links, lambda key: by_path[key].plan if key in by_path else None,
      _plan_records.flow_migrated, lambda key, line: notebooks[key].file_line(
          line) if key in notebooks else line):
    if path in by_path:
      try:
        by_path[path] = _rolled_back(files, model, by_path[path], path,
                                     blocked)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(failure(path, e))
  findings = []
  for path, (index, walked, plan, _) in by_path.items():
    source = files.sources[index]
    try:
      found = walked + plan_findings(source, path, files.tree(index),
                                     walked, plan)
      findings += in_file_lines(reported(source, path, found, chosen)[0],
                                files.notebooks.get(index))
    except Exception as e:  # pylint: disable=broad-except
      errors.append(failure(path, e))
  return findings, errors


def _rolled_back(files: _Files, model, planned_module: _Planned, path: str,
                 blocked) -> _Planned:
  """``planned_module`` with its flow kept as it is with ``blocked``: from
  its plan with the flow kept where it has one, else planned again."""
  index, walked, _, kept = planned_module
  source = files.sources[index]
  plan = None if kept is None else _plan_records.with_blocked(
      kept, source, blocked)
  if plan is None:
    tree = files.tree(index)
    plan = _plan_findings.plan(source, tree, model.module_names(path, tree),
                               walked, blocked)
  return _Planned(index, walked, plan)


def default_jobs() -> int:
  """Every core this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 1


def scan_paths(paths: Iterable[str], exclude=(), chosen=None,
               jobs: int = 1) -> ScanResult:
  """Scans files and directories (``.py`` and notebooks); a file that
  cannot be read, parsed or analysed becomes an ``errors`` entry naming
  why, and the rest is scanned.

  One project: a name a scanned module re-exports from flax.optim
  (``from flax import optim as optimizers`` in mylib) is followed into the
  modules that import it (``from mylib import optimizers``), and the
  project's model (``_project``) into every module. ``chosen``: the codes
  to report (``_codes.selected``; default all); findings on a line marked
  ``# noqa`` are not reported. ``jobs``: processes to spread the per-file
  work over (``_parallel``; the result is the same; small trees, and a
  process whose threads forbid a fork, are scanned here).

  Every file is read once and parsed once: the tables across modules
  parse only the modules they read (and keep those trees); every other
  tree is dropped as soon as its file is scanned.
  """
  with without_cycle_collection():
    files = _Files(paths, exclude)
    across = _across_modules(files)
    count = len(files.shown)
    results = _scan_shares(
        _ShareInputs(files, across.reexports, across.model, chosen), count,
        min(jobs, count // _FILES_PER_JOB))
    findings, plans = [], []
    errors = list(across.errors) + files.unreadable_errors()
    for share_findings, share_errors, share_plans, _ in results:
      findings += share_findings
      errors += share_errors
      plans += share_plans
    if plans:
      plans_found, plans_errors = _plans_reported(files, across.model, plans,
                                                  chosen)
      findings += plans_found
      errors += plans_errors
    # The trees go before the collector comes back: not in cycles, which
    # would keep every file and tree for its first collection to walk (a
    # tenth of a second on scenic; on the speed tree 2.5M objects, a
    # second). The model's names refer back to it.
    if across.model is not None:
      across.model.names.clear()
      across.model.module_flows.clear()  # (their names refer to it too)
      across.model.forget_holding_flows()  # (their names refer to it)
    del files, across
  return ScanResult(count, sorted(findings),
                    sorted(errors, key=lambda e: (e.path, e.line or 0)))


# ---------------------------------------------------------------------------
# Command line.


def to_json(result: ScanResult) -> dict:
  summary: dict[str, int] = {}
  for f in result.findings:
    summary[f.construct] = summary.get(f.construct, 0) + 1
  return {
      'version': 1,
      'files_scanned': result.files_scanned,
      'findings': [f._asdict() for f in result.findings],
      'errors': [e._asdict() for e in result.errors],
      'summary': dict(sorted(summary.items())),
  }


def format_table(result: ScanResult) -> str:
  rows = [('location', 'code', 'construct', 'replacement', 'guide section')]
  rows += [(f'{f.path}:{f.line}', f.rule,
            f.construct + ('?' if f.confidence == 'likely' else ''),
            f.replacement, f.guide_section) for f in result.findings]
  w0 = max(len(r[0]) for r in rows)
  w2 = max(len(r[2]) for r in rows)
  lines = [f'{r[0]:<{w0}}  {r[1]:<6}  {r[2]:<{w2}}  {r[3]}  [{r[4]}]'
           for r in rows] if result.findings else []
  likely = sum(f.confidence == 'likely' for f in result.findings)
  lines.append(
      f'{len(result.findings)} flax.optim usage(s) in {result.files_scanned} '
      f'file(s) scanned' + (f' ({likely} marked ? are likely, judged by '
                            'names)' if likely else '') +
      (f'; {len(result.errors)} file(s) or directories could not be read, '
       'parsed or analysed (named on stderr)'
       if result.errors else '') + f'. See {rep.GUIDE}.')
  return '\n'.join(lines)


def format_statistics(result: ScanResult) -> str:
  """Findings counted per code, most first (as ``ruff --statistics``),
  with each code's title, then the table's closing line."""
  counts = collections.Counter(f.rule for f in result.findings)
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
  width = len(str(ranked[0][1])) if ranked else 1
  lines = [f'{n:>{width}}  {code:<6}  {_codes.BY_CODE[code].title}'
           for code, n in ranked]
  return '\n'.join(lines + format_table(result).splitlines()[-1:])


def parse_command_line(parser: argparse.ArgumentParser, argv):
  """``(args, None)``; ``(None, exit code)`` after ``--help``, bad arguments
  or ``paths`` that do not exist (``scan`` and ``migrate`` share this)."""
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:
    return None, EXIT_USAGE if e.code else EXIT_CLEAN
  missing = [p for p in args.paths if not os.path.exists(p)]
  if missing:
    print(f'no such file or directory: {", ".join(missing)}', file=sys.stderr)
    return None, EXIT_USAGE
  return args, None


def _codes_list(text: str) -> list:
  return [c for c in text.split(',') if c.strip()]


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
  """``--select``, ``--ignore`` and ``--exclude`` (scan and migrate)."""
  parser.add_argument('--select', type=_codes_list, metavar='CODE[,CODE]',
                      help='only these codes or prefixes (FOC1, FOC108, '
                      'ALL); replaces the configured select')
  parser.add_argument('--ignore', type=_codes_list, metavar='CODE[,CODE]',
                      help='leave out these codes or prefixes; replaces the '
                      'configured ignore')
  parser.add_argument('--exclude', action='append', default=[],
                      metavar='NAME_OR_GLOB',
                      help='skip files and directories whose name or path '
                      'matches (e.g. build, "*_pb2.py", "src/gen"; '
                      'repeatable; added to the configured exclude)')


def configure(args):
  """``(config, chosen codes, exclude)`` for the parsed ``args``, flags
  over ``[tool.flax-optim-compat]``. Raises _config.ConfigError (and
  _codes.SelectionError, a ValueError) naming the bad value."""
  config = _config.load(args.paths)
  select = args.select if args.select is not None else config.select
  ignore = args.ignore if args.ignore is not None else config.ignore
  source = ('command line' if args.select is not None or args.ignore is not
            None else f'{config.path}: [tool.{_config.SECTION}]')
  chosen = _codes.selected(select, ignore or (), source)
  return config, chosen, tuple(config.exclude) + tuple(args.exclude)


EPILOG = """\
codes (--list-codes prints each with its title and guide section):
  FOC1xx flax.optim constructs, FOC2xx removed jax/flax APIs next to it,
  FOC901 a # noqa code that keeps nothing.
  A line ending in "# noqa: FOC108" (or a bare "# noqa") is neither reported
  nor rewritten.

configuration (pyproject.toml, found upwards from the paths):
  [tool.flax-optim-compat]
  exclude = ["build"]
  select = ["FOC1"]
  ignore = ["FOC201"]
  tier = "exact"          # migrate only

pre-commit (.pre-commit-config.yaml):
  - repo: <this repository's URL>
    rev: <a tag>
    hooks:
      - id: flax-optim-compat-scan
"""


SCAN_EXIT = """
exit status: 0 nothing found (after selection and # noqa), 1 findings,
2 bad arguments or configuration, 3 nothing found but some files could not
be read or parsed, or some directories listed (named)."""


def _add_noqa(result: ScanResult) -> int:
  """Marks every finding's line with its code; prints what it did."""
  by_file: dict[str, dict[int, set]] = {}
  for f in result.findings:
    if f.rule != _codes.UNUSED_NOQA:
      by_file.setdefault(f.path, {}).setdefault(f.line, set()).add(f.rule)
  marked = 0
  for path, codes_by_line in sorted(by_file.items()):
    with open(path, 'rb') as f:
      source = f.read()
    new, unmarked = _noqa.add(source, codes_by_line)
    if new != source:
      _atomic.rewrite_in_place(path, new)
    marked += len(codes_by_line) - len(unmarked)
    for line in unmarked:
      print(f'{path}:{line}: not marked: the line ends inside a string or '
            'continues with a backslash', file=sys.stderr)
  print(f'added # noqa to {marked} line(s) in {len(by_file)} file(s)')
  return EXIT_CLEAN


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat scan',
      description='Find flax.optim usages in Python sources (no code runs).',
      epilog=EPILOG + SCAN_EXIT,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('paths', nargs='*', metavar='PATH',
                      help='files or directories to scan')
  parser.add_argument('--format', choices=FORMATS, default='text',
                      help='text (a table; "table" is the same), json, '
                      'github (workflow commands: annotations on the pull '
                      'request), sarif (SARIF 2.1.0)')
  add_selection_arguments(parser)
  parser.add_argument('--add-noqa', action='store_true',
                      help='append "# noqa: CODE" to every line with a '
                      'finding (a clean baseline); edits the files')
  parser.add_argument('--list-codes', action='store_true',
                      help='print every code, its title and guide section')
  parser.add_argument('--statistics', action='store_true',
                      help='count the findings per code instead of listing '
                      'them (text format)')
  parser.add_argument('-j', '--jobs', type=int, default=default_jobs(),
                      metavar='N', help='processes to scan with (default: '
                      'every core; the output is the same)')
  args, exit_code = parse_command_line(parser, argv)
  if args is None:
    return exit_code
  if args.list_codes:
    print(_codes.listing())
    return EXIT_CLEAN
  if not args.paths:
    print('scan: give at least one PATH (or --list-codes)', file=sys.stderr)
    return EXIT_USAGE
  try:
    _, chosen, exclude = configure(args)
  except ValueError as e:
    print(f'scan: {e}', file=sys.stderr)
    return EXIT_USAGE
  if args.jobs < 1:
    print(f'scan: --jobs {args.jobs}: expected 1 or more', file=sys.stderr)
    return EXIT_USAGE
  if args.statistics and args.format not in ('text', 'table'):
    print(f'scan: --statistics counts in the text format, not --format '
          f'{args.format}', file=sys.stderr)
    return EXIT_USAGE
  result = scan_paths(args.paths, exclude, chosen, args.jobs)
  if args.add_noqa:
    return _add_noqa(result)
  if args.format == 'json':
    print(json.dumps(to_json(result), indent=1))
  elif args.format == 'github':
    text = _formats.github(result)
    if text:
      print(text)
  elif args.format == 'sarif':
    print(json.dumps(_formats.sarif(result, chosen), indent=1))
  elif args.statistics:
    print(format_statistics(result))
  else:
    print(format_table(result))
  for error in result.errors:  # in every format, as migrate does
    print(f'{error.path}:{error.line or "?"}  not scanned: {error.message}',
          file=sys.stderr)
  if result.findings:
    return EXIT_FOUND
  return EXIT_UNPARSEABLE if result.errors else EXIT_CLEAN
