"""The whole scanned tree as one program: where OptimizerDefs come from.

A definition made in one module and used in another (a config class's
``create_optimizer_def()``, a ``get_optimizer(config)`` factory) must be
rewritten together with its uses or not at all. This module builds, once
per project, what a single module cannot see:

* the project's functions and methods, by every dotted name their module
  may be imported by (``import a.b as c``, ``from .config import f`` and
  re-exports resolve through ``_names.ModuleNames``);
* which of them return an OptimizerDef on every path (a least fixpoint:
  recursion proves nothing), so ``make_def().create(p)`` in another module
  is known to create an optimizer; a method call runs one of several
  overrides, which must all agree (an abstract one that only raises
  agrees): those of the class an attribute is annotated with
  (``factory: configs.OptimizerConfig``) and its subclasses, else every
  method of that name;
* every call of such a factory in the project and what its result meets
  there: ``.create(...)`` (directly or through a name only ``.create`` reads,
  or a return of another factory) is a use migrate can follow; anything else
  (an argument, an attribute, a container) is not, and keeps the flow whole;
* dataclass and NamedTuple fields annotated ``optim.Optimizer`` (also
  ``Optional[...]``) in any module, so ``tstate.optimizer.target`` is known
  where ``tstate``'s class is defined elsewhere; what the class's
  constructor, ``.replace`` or ``._replace`` stores there (``Holder``,
  ``field_stores``) must be provably an optimizer in the module storing it.
  Where another class declares the field's name otherwise (a trainer's
  ``optimizer`` property), ``x.<field>`` is the holder's only on a receiver
  typed as one (``_flow.OptimizerFlow.holds_field``); one use on a receiver
  it cannot type keeps the holder's flows (``_untyped_uses``);
* the steps factories return that other modules pass as values to a
  module function calling them (``_step_values``);
* what the names a notebook binds nowhere mean: it runs in a kernel
  another notebook prepared, so a name every notebook of the project that
  binds it at top level imports alike means that import
  (``_names.kernel_bindings``, once per project; each notebook's
  ``_names.Kernel``); a module's free name is never read so;
* the links between the modules of one flow (``Link``), which ``migrate``
  checks after planning (``flow_violations``): a definition rewritten in one
  module whose ``.create`` stays in another (or the other way round), or a
  module that makes, stores or reads a holder's optimizer migrated while
  another is not, rolls every module of that flow back.

Why not LibCST's ``FullRepoManager`` with ``FullyQualifiedNameProvider``:
it names what an import binds (relative imports included), which
``ModuleNames`` already does, but follows neither re-exports through the
user's modules nor values (returns, fields, methods by receiver), and it needs
every file parsed by LibCST, several times slower than ``ast`` for ``scan``;
its type inference needs pyre (a server, not here). Stdlib only.
"""

import ast
import functools
import os
import re
from typing import Callable, NamedTuple, Optional

from compat.codemod import _flow
from compat.codemod import _members
from compat.codemod import _multi
from compat.codemod import _names
from compat.codemod import _params
from compat.codemod import _step_values
from compat.codemod import _walk

# What a factory's result meets at a call site that migrate can follow.
_CREATE = _members.CREATE
_CREATED_HERE = 'its `.create(...)` is here'
# A user rule class's call or subclass in another module: it moves onto
# flax_optim_rules.RuleDef only together with the class.
_RULE_USED_HERE = 'the rule class is called or subclassed here'
# What ``flow_violations`` asks of a field link's modules: whether each
# migrates its optimizer flow whole.
WHOLE_FLOW = 'flow'
# Links whose two modules' whole flows must agree: a class's optimizer
# field, and a module function that gives or takes an optimizer called
# from another module.
WHOLE_FLOW_KINDS = ('field', 'call')
# A link whose module's whole flow stays as it is, with every module linked
# to it (an optimizer field whose name another class declares otherwise).
HELD = 'held'
# How the reason of each link that keeps a module's flow starts.
KEPT_WITH_FLOW = ('kept as it was with its whole flow across modules (a '
                  'definition, its optimizer and every use are rewritten '
                  'together or not at all): ')
# The construct of a field link's line kept as it was, and of a value
# stored in such a field that is not provably an optimizer (a flow one:
# the module's flow stays with it).
HELD_IN_FIELD = 'optimizer_field'
# A module function can return an optimizer only where its module spells
# one of these: what makes one, steps one, or types one.
_GIVES_OPTIMIZER_WORDS = tuple(word.encode() for word in (
    _members.CREATE, _members.APPLY_GRADIENT, 'Optimizer', _members.REPLICATE,
    'restore_checkpoint'))
# What only a flax.optim Optimizer has, not the TrainState that replaces it:
# a name used so (``opt.target``, ``opt.state.step``) takes an optimizer.
_OPTIMIZER_ONLY = (_members.TARGET, _members.APPLY_GRADIENT,
                   _members.OPTIMIZER_DEF, _members.COMPUTE_GRADIENT,
                   _members.OPTIMIZE, _members.RESTORE_STATE,
                   _members.REPLICATE, _members.UNREPLICATE)
_OPTIMIZER_STATE_ONLY = ('step', _members.PARAM_STATES)  # of ``opt.state``
# Decorators that leave who calls a method as it was.
_PLAIN_DECORATORS = ('staticmethod', 'classmethod')


class Link(NamedTuple):
  """A definition made in one module and consumed in another.

  ``consumer_line`` is the ``.create(...)`` that must be rewritten with the
  producer, or None where the value goes somewhere migrate cannot follow
  (``reason`` says where); ``call_line``: the factory's call.
  """
  producer_path: str
  producer_line: int
  consumer_path: str
  consumer_line: Optional[int]
  call_line: int
  reason: str
  # 'definition': producer_line makes a definition, consumer_line is its
  # `.create`; 'field': producer_line declares a field annotated
  # `optim.Optimizer`, the consumer module makes, stores or uses what the
  # field holds (the two modules' whole flows must agree).
  kind: str = 'definition'

  def describe(self, file_line=None) -> str:
    """``file_line(path, line)``: the line a user sees for a line of the
    module read (a notebook's file line for a line of its joined cells)."""
    shown = file_line or (lambda path, line: line)
    where = self.consumer_line or self.call_line
    if self.kind in WHOLE_FLOW_KINDS + (HELD,):
      return (f'{self.consumer_path}:{shown(self.consumer_path, where)} '
              f'{self.reason}')
    return (f'{self.producer_path}:'
            f'{shown(self.producer_path, self.producer_line)} makes the '
            f'definition, {self.consumer_path}:'
            f'{shown(self.consumer_path, where)}: {self.reason}')


class Holder(NamedTuple):
  """A class of the user's (dataclass, NamedTuple) with a field annotated
  ``optim.Optimizer``: what its constructor's arguments are stored in."""
  path: str
  line: int  # the optimizer field's annotation
  name: str  # the class's name
  fields: tuple  # its annotated fields in order: constructor positions
  field: str  # the optimizer field
  # A NamedTuple: also read by position (``opt, mstate = tstate``,
  # ``tstate[0]``), which no field name shows.
  positional: bool = False


def holders_in(path, tree, names) -> list:
  """The ``Holder`` classes ``tree`` defines (top-level and nested)."""
  found = []
  for node in _walk.statements(tree):  # classes are statements
    if not isinstance(node, ast.ClassDef):
      continue
    fields = [item for item in node.body if isinstance(
        item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    order = tuple(item.target.id for item in fields)
    positional = any(ast.unparse(base).rpartition('.')[2] == 'NamedTuple'
                     for base in node.bases)
    for item in fields:
      if _names.is_optimizer_annotation(names, item.annotation):
        found.append(Holder(path, item.lineno, node.name, order,
                            item.target.id, positional))
  return found


def field_stores(call, holders) -> list:
  """``[(holder, value)]``: what ``call`` stores in an optimizer field of
  one of ``holders``: the class called by its name (positionally or by
  keyword, also through a module or an alias of the same name), or
  ``.replace``/``._replace`` with the field's keyword."""
  func = call.func
  called = func.id if isinstance(func, ast.Name) else (
      func.attr if isinstance(func, ast.Attribute) else None)
  stores = []
  for holder in holders:
    if called in ('replace', '_replace') or called == holder.name:
      stores += [(holder, k.value) for k in call.keywords
                 if k.arg == holder.field]
    if called == holder.name:
      position = holder.fields.index(holder.field)
      if position < len(call.args) and not any(
          isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        stores.append((holder, call.args[position]))
  return stores


def attribute_stores(tree, holders) -> list:
  """``[(holder, value)]``: what ``tree`` assigns to an attribute named
  like a holder's optimizer field (``state.optimizer = value``; the
  receiver's class cannot be told, so every such field's). A literal is
  no optimizer, before or after (``config.optimizer = 'adam'``)."""
  stores = []
  for node in _walk.statements(tree):
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and (
        node.value is not None and not _is_literal(node.value)):
      targets = node.targets if isinstance(node, ast.Assign) else [
          node.target]
      stores += [(holder, node.value) for target in targets
                 if isinstance(target, ast.Attribute)
                 for holder in holders if holder.field == target.attr]
  return stores


class _ReturnsOf(NamedTuple):
  name: str  # the function's name
  values: list  # its own returns' values (None: a bare return)


class _Function(NamedTuple):
  path: str  # shown path of its module
  node: ast.AST  # the FunctionDef
  is_method: bool


class Model:
  """The project's factories of OptimizerDefs, their call sites, fields."""

  def __init__(self, parsed, module_names_of, reexports, parse=None,
               links=True, other_files=None):
    """``parsed``: [(shown path, source, tree)]; ``module_names_of``: shown
    path -> the dotted names its module may be imported by. A tree may be
    None where ``parse(path)`` gives it (None: it does not parse): only the
    modules the model reads are parsed (``scan``). ``links``: also follow
    optimizers across modules and link the modules of each flow (what
    ``migrate`` checks; ``scan`` reports without them). ``other_files``:
    a callable giving ``[(shown path, bytes)]`` of the project's other text
    files (configs, scripts, docs), read only where a definition called
    nowhere must be looked for (``mention``); None where files were passed
    one by one, not a tree: a definition called nowhere in them may be
    called in another."""
    self.reexports = reexports
    self._other_files = other_files
    self._other_texts: Optional[list] = None
    self._mentions: dict = {}  # (path, line, name) -> what mention gave
    # (path, line, name) of the factories and rule classes called and named
    # nowhere else in the project, rewritten with their flows: their
    # contract changes for callers outside it (the report says so).
    self.unseen: set[tuple] = set()
    self.module_names_of = module_names_of
    # A dotted name -> the files that may each be imported by it, where
    # more than one may (``checkpoint_utils`` of two script directories):
    # scan's table knows; a plain mapping names each file's own names only.
    self._sharing = getattr(module_names_of, 'sharing', lambda dotted: [])
    self.functions: dict[str, _Function] = {}  # dotted name -> function
    self.methods: dict[str, list] = {}  # function name -> [_Function]
    self.names: dict[str, _names.ModuleNames] = {}  # path -> its names
    self.trees: dict[str, ast.Module] = {}  # path -> its parsed module
    self.def_functions: set = set()  # FunctionDef nodes returning defs
    # Field name -> annotated flax.optim.Optimizer in every class of the
    # project that declares it.
    self.fields: dict[str, bool] = {}
    # Field name -> (path, line, class) of its first declaration in the
    # project that is not an ``optim.Optimizer`` field (a field of another
    # type, a method or property, a class-level assignment).
    self._declared_otherwise: dict[str, tuple] = {}
    self.links: list[Link] = []
    # Dotted name -> (path, ClassDef) of the user's OptimizerDef subclasses
    # defined at a module's top level: their calls in any module make
    # definitions (a rule kept on flax_optim_rules.RuleDef once migrated).
    self.user_rules: dict[str, tuple] = {}
    # Dotted names of the user rule classes that another module calls.
    self.called_rules: set[str] = set()
    self.holders: list[Holder] = []  # classes with an optimizer field
    # The project's classes by every dotted name, their bases' dotted
    # names, and per attribute the classes its annotations name (None in
    # the set: one declaration names no class of the project, or a class
    # assigns ``self.<attr>`` without annotating it).
    self.classes: dict[str, ast.ClassDef] = {}
    self._bases: dict[ast.ClassDef, tuple] = {}
    self._attribute_classes: dict[str, set] = {}
    self._unread_declarations: dict[str, bool] = {}  # attr -> may be
    self._function_of: dict[int, _Function] = {}  # id(method node) -> it
    self._subclasses_memo: dict = {}
    self._taken: set[str] = set()  # dotted names two functions share
    # FunctionDef -> its own returns, read once.
    self._returns: dict = {}
    sources = {path: (source, tree) for path, source, tree in parsed}
    self.sources = {path: source for path, source, _ in parsed}
    # What the names a notebook binds nowhere mean: what the project's
    # notebooks bind at their top level (``kernel_of``: notebooks only).
    top_levels = []
    for path in sources:
      if is_notebook(path):
        tree = sources[path][1] or (parse(path) if parse else None)
        if tree is not None:
          top_levels.append(_names.top_level_bindings(tree,
                                                      self.sources[path]))
    self.kernel = _names.kernel_bindings(top_levels)
    self._kernels: dict[str, _names.Kernel] = {}  # path -> its, once read
    # Only modules that can see flax.optim, or name a factory found so far,
    # can hold or call one: the rest of a large tree is never analysed.
    tokens = {'optim', 'flax.optim', 'legacy_optim'} | {
        k.rpartition('.')[2] for k in reexports} | {
            name for name in self.kernel
            if _names.is_flax_optim(_names.kernel_path(self.kernel, name))}
    unparsed: set[str] = set()
    while tokens:
      fresh = self._read_modules_naming(tokens, sources, parse, unparsed)
      for dotted in self._taken:
        self.functions.pop(dotted, None)
      known = {self._returns[f].name for f in self.def_functions}
      rules = self._collect_user_rules()
      self._solve_factories()
      tokens = ({self._returns[f].name for f in self.def_functions} - known
                ) | rules
      if not fresh and not tokens:
        break
      tokens = tokens or set()
    # Module functions that return an optimizer or take one by an
    # annotated parameter (proven in their own module), and the modules
    # that call them by name.
    self.optimizer_givers: set = set()
    self.optimizer_takers: set = set()
    # FunctionDef -> _flow.StepSignature: module functions returning a step
    # that takes or gives an optimizer (``make_update_fn(...)``), proven by
    # their module's flow; a module calling one steps what it gives.
    self.step_factories: dict = {}
    # FunctionDef of the module functions that set hyper-parameters per
    # step (``apply_gradient(g, learning_rate=lr)``), themselves or through
    # another such function they name: a module handing them its optimizer
    # must build its definitions with the rate injected.
    self.rate_setters: set = set()
    # FunctionDef -> the element kinds of the tuple every return of a
    # module function gives, holding an optimizer (``return opt, loss``):
    # its callers in other modules unpack it (linked like givers).
    self.tuple_givers: dict = {}
    self._called: set = set()  # factories with a call in the project
    # (FunctionDef, parameter) -> whether every call of the module function
    # from another module passes an optimizer there (``_params``).
    self.param_verdicts: dict = {}
    # id(FunctionDef) of the module functions with parameters whose
    # references from other modules ``_params`` finds, and those references
    # (``called_elsewhere``, ``used_otherwise_elsewhere``).
    self.reference_candidates: set = set()
    self.referenced_elsewhere: dict = {}  # id(FunctionDef) -> [_Reference]
    # The flows asked what holds an optimizer across modules (built once
    # each), and the questions open (a value flowing back: True).
    self._holding_flows: dict = {}
    self._holding_open: set = set()
    self.param_why: dict = {}  # the same keys -> why a verdict is False
    # (FunctionDef, parameter) -> the StepSignature of the factory's step
    # every call passes there; the step factories whose calls elsewhere
    # are all followed (``_step_values``).
    self.step_params: dict = {}
    self.followed_factories: set = set()
    if not links:
      return
    self._read_calls(sources, parse, unparsed)
    passing = _params.solve(
        self, lambda: self._solve_optimizer_givers(sources, parse, unparsed))
    self._solve_factories()  # over the modules the givers' callers added
    self.step_params, self.followed_factories = _step_values.solve(self)
    for path in self.names:
      self._link_calls(path, self.trees[path])
      self._link_rule_uses(path, self.trees[path])
      self._link_optimizer_calls(path, self.trees[path])
      self._link_disagreeing_overrides(path, self.trees[path])
    self._link_unseen_callers()
    self._link_holders(sources, parse)
    for path, line, function in passing:
      self.links.append(Link(
          function.path, function.node.lineno, path, line, line,
          f'passes an optimizer to {function.node.name}() '
          f'({function.path}:{function.node.lineno}), which uses it', 'call'))

  def _solve_optimizer_givers(self, sources, parse, unparsed):
    """``optimizer_givers``: the module functions whose every return is an
    optimizer, proven by their module's own flow; ``optimizer_takers``:
    those with a parameter annotated ``optim.Optimizer``. Then the modules
    that name one of them are read too (a test or script that only calls
    ``create_optimizer``)."""
    self.optimizer_givers, self.optimizer_takers = set(), set()
    self.step_factories, self.tuple_givers = {}, {}
    flows: dict[str, _flow.OptimizerFlow] = {}
    for function in list(self.functions.values()):
      node = function.node
      if function.is_method:
        continue
      names = self.names[function.path]
      arguments = node.args.posonlyargs + node.args.args + (
          node.args.kwonlyargs)
      if any(a.annotation is not None and _names.is_optimizer_annotation(
          names, a.annotation) for a in arguments):
        self.optimizer_takers.add(node)
      if not any(word in self.sources[function.path]
                 for word in _GIVES_OPTIMIZER_WORDS):
        continue  # nothing there makes or passes on an optimizer
      flow = flows.get(function.path)
      if flow is None:
        flow = flows[function.path] = _flow.OptimizerFlow(
            self.trees[function.path], names)
      kind = flow.returned_kind(node) if flow.functions.get(
          node.name) is node else None
      if kind is True:
        self.optimizer_givers.add(node)
      elif kind is not None:
        self.tuple_givers[node] = kind
      step = flow.step_signature(node.name) if flow.functions.get(
          node.name) is node else None
      if step is not None:
        self.step_factories[node] = step
    self._solve_rate_setters()
    words = {n.name for n in self.optimizer_givers | self.optimizer_takers |
             set(self.step_factories) | set(self.tuple_givers)}
    if words:
      self._read_modules_naming(words, sources, parse, unparsed)

  def _read_calls(self, sources, parse, unparsed):
    """Reads the modules whose functions the modules read so far call (an
    optimizer made in one is stepped in the other), then every module that
    names one of the functions (``_params`` proves their parameters from
    all their calls); the factories are solved again over them."""
    while self._read_paths(sorted(
        p for p in _params.callee_modules(self)
        if p not in unparsed), sources, parse, unparsed):
      pass
    self._read_modules_naming(_params.function_names(self), sources, parse,
                              unparsed)
    for dotted in self._taken:
      self.functions.pop(dotted, None)
    self._solve_factories()

  def _read_modules_naming(self, words, sources, parse, unparsed) -> list:
    """Reads every module not read yet whose source spells one of
    ``words`` (a parse that fails goes to ``unparsed``); returns them."""
    spells = _spells_any_of(words)
    return self._read_paths([
        p for p, (source, _) in sources.items()
        if p not in self.names and p not in unparsed and spells(source)],
        sources, parse, unparsed)

  def _read_paths(self, paths, sources, parse, unparsed) -> list:
    """Reads the modules ``paths`` (a parse that fails goes to
    ``unparsed``); returns them."""
    for path in paths:
      tree = sources[path][1]
      tree = parse(path) if tree is None and parse else tree
      if tree is None:
        unparsed.add(path)
      else:
        self._read(path, tree)
    return paths

  def param_verdict(self, names, function, parameter) -> Optional[bool]:
    """Whether every call from another module of the module function
    named ``function`` in the module of ``names`` passes an optimizer as
    ``parameter`` (None: no other module names it)."""
    return self._of_parameter(self.param_verdicts, names, function,
                              parameter)

  def step_param(self, names, function, parameter):
    """The step every call of the module function named ``function`` (in
    the module of ``names``) passes as ``parameter``, or None."""
    return self._of_parameter(self.step_params, names, function, parameter)

  def factory_followed(self, names, factory) -> bool:
    """Every call of the step factory named ``factory`` (in the module of
    ``names``) from another module is followed (``_step_values``)."""
    found = self._module_function(names, factory)
    return found is not None and found.node in self.followed_factories

  def function_of(self, node) -> Optional[_Function]:
    """The project's module function whose FunctionDef is ``node``."""
    return next((f for f in self.functions.values() if f.node is node),
                None)

  def param_why_of(self, names, function, parameter) -> Optional[str]:
    """Why ``param_verdict`` is False (None where it is not)."""
    return self._of_parameter(self.param_why, names, function, parameter)

  def _of_parameter(self, table, names, function, parameter):
    found = self._module_function(names, function)
    return None if found is None else table.get((found.node, parameter))

  def _module_function(self, names, name) -> Optional[_Function]:
    """The function ``name`` of the module of ``names``, by its dotted name
    (None where the module has none of its own)."""
    module = names.package_module
    return self.functions.get(f'{module}.{name}') if module else None

  def _solve_rate_setters(self):
    """``rate_setters``: a least fixpoint over the module functions of the
    modules read."""
    functions = {id(f.node): f for f in self.functions.values()
                 if not f.is_method}
    named: dict = {}  # id(FunctionDef) -> ids of the functions it names
    setters = set()
    for key, function in functions.items():
      names = self.names[function.path]
      named[key] = set()
      for node in ast.walk(function.node):
        if _flow.sets_hyper_params(node):
          setters.add(key)
        elif isinstance(node, (ast.Name, ast.Attribute)):
          other = self.functions.get(_dotted(node, names) or '')
          if other is not None and id(other.node) in functions:
            named[key].add(id(other.node))
    changed = True
    while changed:
      changed = False
      for key, others in named.items():
        if key not in setters and others & setters:
          setters.add(key)
          changed = True
    self.rate_setters = {functions[key].node for key in setters}

  def names_rate_setter(self, tree, names, path) -> bool:
    """The module ``tree`` of ``path`` names another module's function
    that sets hyper-parameters per step (``rate_setters``)."""
    if not self.rate_setters:
      return False
    for _, _, dotted in _names.references(tree, names):
      function = self.functions.get(dotted)
      if function is not None and function.path != path and (
          function.node in self.rate_setters):
        return True
    return False

  def foreign_step(self, call, names) -> Optional[_flow.StepSignature]:
    """The step ``call`` (of another module's step factory) returns."""
    function = self.callee(call, names)
    if function is None or function.is_method:
      return None
    return self.step_factories.get(function.node)

  def returned_kind(self, call, names):
    """What a call of another module's function returns: True (an
    optimizer), a tuple of element kinds holding one, or None."""
    function = self.callee(call, names)
    if function is None:
      return None
    if function.node in self.optimizer_givers:
      return True
    return self.tuple_givers.get(function.node)

  def gives_tuple(self, node, path) -> bool:
    """The module function ``node`` of ``path`` (another parse of it)
    returns a tuple holding an optimizer that its callers in other modules
    are linked to and unpack (``tuple_givers``)."""
    return bool(self._model_ids(node, path) & {
        id(giver) for giver in self.tuple_givers})

  def _link_optimizer_calls(self, path, tree):
    """A whole-flow link per call of another module's function that gives
    or takes an optimizer: what one module makes, the other uses."""
    functions = self.optimizer_givers | self.optimizer_takers | set(
        self.step_factories) | set(self.tuple_givers)
    if not functions:
      return
    names = self.names[path]
    for node in _walk.nodes(tree):
      if not isinstance(node, ast.Call):
        continue
      function = self.callee(node, names)
      if function is None or function.path == path or (
          function.node not in functions):
        continue
      self.links.append(Link(
          function.path, function.node.lineno, path, node.lineno,
          node.lineno, f'calls {function.node.name}() '
          f'({function.path}:{function.node.lineno}), which gives or '
          'takes a flax.optim Optimizer (or a step that does)', 'call'))

  def _read(self, path, tree):
    dotted = self.module_names_of.get(path) or [None]
    self.names[path] = _names.ModuleNames(
        tree, self.reexports, collect=False, package=self.package_of(path),
        model=self, module=dotted[0], path=path,
        kernel=self.kernel_of(path, tree),
        sibling=functools.partial(self.sibling_module, path))
    self.trees[path] = tree
    self._index(path, tree)
    self.names[path].collect()

  def _collect_user_rules(self) -> set:
    """Adds the user rule classes found so far; returns the new ones' names
    (modules that mention them may construct or subclass them: those read
    already are read again, the others when a round finds them)."""
    found = set()
    while True:
      fresh = {}
      for path, names in self.names.items():
        for node in self.trees[path].body:
          if isinstance(node, ast.ClassDef) and node.name in names.user_defs:
            for module in self.module_names_of.get(path, ()):
              dotted = f'{module}.{node.name}'
              if dotted not in self.user_rules:
                fresh[dotted] = (path, node)
      if not fresh:
        return found
      self.user_rules.update(fresh)
      words = {dotted.rpartition('.')[2] for dotted in fresh}
      found |= words
      for path, names in self.names.items():
        text = self.sources[path].decode('utf-8', 'replace')
        if any(word in text for word in words):
          names.collect()

  def sibling_module(self, importer: str, top: str) -> Optional[str]:
    """The dotted name of the module ``import <top>`` in ``importer`` runs,
    where files of several directories may be imported as ``top``: the one
    beside ``importer`` (a script's own directory comes first on
    ``sys.path``; research code ran its scripts so). None where ``top``
    names one file of the project, or none beside ``importer``."""
    paths = self._sharing(top)
    if not paths:
      return None
    here = os.path.dirname(importer)
    beside = [p for p in paths if os.path.dirname(p) == here or (
        os.path.basename(p) == '__init__.py' and
        os.path.dirname(os.path.dirname(p)) == here)]
    if len(beside) != 1 or not self.module_names_of.get(beside[0]):
      return None
    return self.module_names_of[beside[0]][0]

  def module_names(self, path, tree) -> _names.ModuleNames:
    """The names of the module at ``path`` (the model's own where it read
    this very tree; else a fresh reading that still sees the project)."""
    if self.trees.get(path) is tree:
      return self.names[path]
    dotted = self.module_names_of.get(path) or [None]
    return _names.ModuleNames(tree, self.reexports,
                              package=self.package_of(path), model=self,
                              module=dotted[0], path=path,
                              kernel=self.kernel_of(path, tree),
                              sibling=functools.partial(self.sibling_module,
                                                        path))

  def kernel_of(self, path, tree) -> Optional[_names.Kernel]:
    """What the names the file at ``path`` (its ``tree``) binds nowhere
    mean: a notebook's in the project's notebooks' kernel, nothing for a
    module. Computed once per notebook (a tree of the same source binds
    the same)."""
    if not is_notebook(path) or path not in self.sources:
      return None
    if path not in self._kernels:
      self._kernels[path] = _names.Kernel(self.kernel, tree,
                                          self.sources[path])
    return self._kernels[path]

  # ------------------------------------------------------------- indexing
  def package_of(self, path) -> Optional[str]:
    """The package a module's relative imports start from."""
    dotted = self.module_names_of.get(path)
    if not dotted:
      return None
    longest = dotted[0]
    if path.endswith('/__init__.py') or path == '__init__.py':
      return longest
    return longest.rpartition('.')[0]

  def _index(self, path, tree):
    names = self.names[path]
    for node in tree.body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        self._add(path, node.name, _Function(path, node, False))
      elif isinstance(node, ast.ClassDef):
        self._index_class(path, node, names)
        for item in node.body:
          if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = _Function(path, item, True)
            self.methods.setdefault(item.name, []).append(function)
            self._function_of[id(item)] = function
            self._add(path, f'{node.name}.{item.name}', function)
          elif isinstance(item, ast.AnnAssign) and isinstance(
              item.target, ast.Name):
            field = item.target.id
            if _names.is_optimizer_annotation(names, item.annotation):
              self.fields.setdefault(field, True)
            else:
              self._declare_otherwise(field, path, item, node)
          for name in _names.other_attribute_declarations(item):
            self._declare_otherwise(name, path, item, node)
    self.holders += holders_in(path, tree, names)
    # Every other function (top-level or nested) shares the name space of
    # methods called on an unknown receiver: such a name is no method's
    # alone (see ``_method_candidates``).
    indexed = {id(f.node) for group in self.methods.values() for f in group}
    for node in _walk.statements(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
          id(node) not in indexed):
        self.methods.setdefault(node.name, []).append(
            _Function(path, node, False))

  def _index_class(self, path, node, names):
    """The class by its dotted names, its bases, its annotated attributes
    (what ``self.factory.method()`` may run, see ``_hierarchy_methods``)."""
    for module in self.module_names_of.get(path, ()):
      self.classes[f'{module}.{node.name}'] = node
    self._bases[node] = tuple(_dotted(base, names) for base in node.bases)
    annotated = set()
    for item in node.body:
      if isinstance(item, ast.AnnAssign) and isinstance(item.target,
                                                        ast.Name):
        annotated.add(item.target.id)
        self._attribute_classes.setdefault(item.target.id, set()).add(
            _dotted(item.annotation, names))
    for item in ast.walk(node):
      if isinstance(item, ast.Attribute) and isinstance(
          item.ctx, ast.Store) and isinstance(item.value, ast.Name) and (
              item.value.id == 'self') and item.attr not in annotated:
        self._attribute_classes.setdefault(item.attr, set()).add(None)

  def class_fields(self, dotted: Optional[str]) -> frozenset:
    """The optimizer fields of the project's holder class ``dotted``."""
    return frozenset(
        holder.field for holder in self.holders
        if any(f'{module}.{holder.name}' == dotted
               for module in self.module_names_of.get(holder.path, ())))

  def annotation_fields(self, annotation, names) -> frozenset:
    """The optimizer fields of the holder class an annotation in the module
    of ``names`` names."""
    node = _names.annotated_class(names, annotation)
    return frozenset() if node is None else self.class_fields(
        _dotted(node, names))

  def returned_fields(self, call, names) -> frozenset:
    """The optimizer fields of the holder class the project function
    ``call`` runs is annotated to return."""
    function = self.callee(call, names)
    if function is None or function.node.returns is None or (
        function.path not in self.names):
      return frozenset()
    return self.annotation_fields(function.node.returns,
                                  self.names[function.path])

  def attribute_fields(self, attr) -> frozenset:
    """The optimizer fields of the holder classes every class of the
    project declaring attribute ``attr`` annotates it with (a field
    holding a holder: ``TrainStepOutput.train_state``)."""
    annotated = self._attribute_classes.get(attr)
    if not annotated or None in annotated or self._declared_unread(attr):
      return frozenset()
    return frozenset.intersection(*(self.class_fields(dotted)
                                    for dotted in annotated))

  def _declared_unread(self, attr) -> bool:
    """A module the model did not read (it names nothing of flax.optim,
    so its classes are not indexed) may declare attribute ``attr``: it
    spells ``attr:``, ``attr =`` or ``def attr``."""
    if attr not in self._unread_declarations:
      pattern = re.compile(
          rf'(\b{re.escape(attr)}\s*(:|=[^=])|\bdef\s+{re.escape(attr)}\b)'
          .encode())
      self._unread_declarations[attr] = any(
          pattern.search(source) for path, source in self.sources.items()
          if path not in self.names and source is not None)
    return self._unread_declarations[attr]

  def _hierarchy_methods(self, call) -> Optional[list]:
    """What ``x.attr.method(...)`` may run where every class of the project
    declaring ``attr`` annotates it with a class of the project: that
    class's method (its own or inherited) and every override in its
    subclasses; None where that is not known (then the method's name
    decides, ``_method_candidates``)."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not isinstance(
        func.value, ast.Attribute):
      return None
    annotated = self._attribute_classes.get(func.value.attr)
    if not annotated or None in annotated:
      return None
    roots = [self.classes.get(dotted) for dotted in annotated]
    if None in roots:
      return None
    found: list = []
    for root in roots:
      inherited = self._inherited_method(root, func.attr, set())
      if inherited is None:
        return None
      found.append(inherited)
      found += [m for sub in self._subclasses(root)
                for m in [self._own_method(sub, func.attr)] if m is not None]
    return list({id(f.node): f for f in found}.values())

  def _own_method(self, node, name) -> Optional[_Function]:
    return next((self._function_of.get(id(item)) for item in node.body
                 if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and item.name == name), None)

  def _inherited_method(self, node, name, seen) -> Optional[_Function]:
    """The method ``name`` instances of class ``node`` run (its own, else
    its bases' in order); None where a base is not a class of the project
    (or the method is found nowhere)."""
    if node in seen:
      return None
    seen.add(node)
    own = self._own_method(node, name)
    if own is not None:
      return own
    for dotted in self._bases[node]:
      base = self.classes.get(dotted)
      if base is None:
        return None
      found = self._inherited_method(base, name, seen)
      if found is not None:
        return found
    return None

  def _subclasses(self, root) -> list:
    """Every class of the project below ``root``, transitively (kept until
    the model reads more classes)."""
    key = (root, len(self._bases))
    if key not in self._subclasses_memo:
      self._subclasses_memo[key] = self._find_subclasses(root)
    return self._subclasses_memo[key]

  def _find_subclasses(self, root) -> list:
    found, frontier = [], [root]
    while frontier:
      parent = frontier.pop()
      for node, bases in self._bases.items():
        if node not in found and any(self.classes.get(b) is parent
                                     for b in bases):
          found.append(node)
          frontier.append(node)
    return found

  def _add(self, path, local, function):
    for module in self.module_names_of.get(path, ()):
      dotted = f'{module}.{local}'
      if dotted in self.functions and self.functions[dotted] is not function:
        self._taken.add(dotted)
      self.functions[dotted] = function

  # ------------------------------------------------------------ factories
  def callee(self, call, names) -> Optional[_Function]:
    """The project function or method a call runs, where it is certain.

    A module function by its import path; a method by its name when every
    function of the project with that name is a method (the receiver's
    class is not known, so all of them must agree: see ``returns_def``).
    """
    if not isinstance(call, ast.Call):
      return None
    func = call.func
    path = names.resolve(func)
    if path is None and isinstance(func, ast.Name) and names.package_module:
      path = f'{names.package_module}.{func.id}'
    if path is not None:
      return self.functions.get(path)
    return None

  def _method_candidates(self, call) -> list:
    func = call.func
    if not isinstance(func, ast.Attribute):
      return []
    precise = self._hierarchy_methods(call)
    if precise is not None:
      return precise
    candidates = self.methods.get(func.attr, [])
    if not candidates or not all(c.is_method for c in candidates):
      return []
    return candidates

  def returns_def(self, call, names) -> bool:
    """A call of a project factory whose every return is an OptimizerDef."""
    function = self.callee(call, names)
    if function is not None:
      return function.node in self.def_functions
    if names.resolve(call.func) is not None:
      return False
    return self._methods_agree(self._method_candidates(call))

  def _methods_agree(self, candidates) -> bool:
    """Every override a call may run returns a definition, or gives its
    caller nothing (an abstract base method), and one of them returns."""
    makers = [c for c in candidates if c.node in self.def_functions]
    return bool(makers) and all(
        c.node in self.def_functions or _gives_nothing(c.node)
        for c in candidates)

  def _solve_factories(self):
    """Least fixpoint: a factory returns defs (or other factories' ones)."""
    everything = {id(f.node): f for f in self.functions.values()}
    for group in self.methods.values():
      everything.update({id(f.node): f for f in group})
    for function in everything.values():
      if function.node not in self._returns:
        self._returns[function.node] = _ReturnsOf(
            function.node.name, _names.own_returns(function.node))
    changed = True
    while changed:
      changed = False
      for function in everything.values():
        if function.node in self.def_functions:
          continue
        names = self.names[function.path]
        returns = self._returns[function.node].values
        if returns and all(r is not None and names.is_def(r)
                           for r in returns):
          self.def_functions.add(function.node)
          changed = True
      if changed:  # names bound to the new factories' definitions
        found = {self._returns[f].name for f in self.def_functions}
        for path, names in self.names.items():
          if any(name in self.sources[path].decode('utf-8', 'replace')
                 for name in found):
            names.collect()

  # ---------------------------------------------------------------- links
  def _producers(self, function, seen=None) -> list:
    """(path, line) of each flax.optim definition a factory returns."""
    seen = set() if seen is None else seen
    if function.node in seen:
      return []
    seen.add(function.node)
    names = self.names[function.path]
    found = []
    for value in self._returns[function.node].values:
      found += self._definitions_of(value, names, function, seen)
    return found

  def _definitions_of(self, value, names, function, seen) -> list:
    if isinstance(value, ast.Name):  # opt_def = optim.Adam(...); return it
      found = []
      for node in ast.walk(function.node):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == value.id
            for t in node.targets):
          found += self._definitions_of(node.value, names, function, seen)
      return found
    if not isinstance(value, ast.Call):
      return []
    inner = self.callee(value, names)
    if inner is not None:
      return self._producers(inner, seen)
    if names.resolve(value.func) is None and self._method_candidates(value):
      found = []
      for candidate in self._method_candidates(value):
        found += self._producers(candidate, seen)
      return found
    if names.legacy_class(value.func) is not None or names.user_rule(
        value.func):  # also a rule class of another module
      return [(function.path, value.lineno)]
    return []

  def _link_calls(self, path, tree):
    """A link per call of a project factory whose definitions are made in
    another module; what the call's result meets decides the consumer."""
    names = self.names[path]
    calls = [node for node in _walk.nodes(tree) if isinstance(
        node, ast.Call) and self.returns_def(node, names)]
    if not calls:
      return
    parents = _walk.parents(tree)
    for node in calls:
      function = self.callee(node, names)
      self._called.update(
          [function.node] if function is not None else
          [c.node for c in self._method_candidates(node)])
      producers = [p for p in self._factory_producers(node, names)
                   if p[0] != path]
      if not producers:
        continue
      consumers = self._consumers(node, parents, names)
      for producer_path, producer_line in producers:
        for line, reason in consumers:
          self.links.append(Link(producer_path, producer_line, path, line,
                                 node.lineno, reason))

  def _link_rule_uses(self, path, tree):
    """A link from a user rule class to each use of it in another module:
    a call (a definition there), a subclass, or any other reference (the
    class goes where migrate cannot follow)."""
    if not self.user_rules:
      return
    for node, parent, dotted in _names.references(tree, self.names[path]):
      rule = self.user_rules.get(dotted)
      if rule is None or rule[0] == path:
        continue
      if isinstance(parent, ast.Call) and parent.func is node:
        line, reason = parent.lineno, _RULE_USED_HERE
        self.called_rules.update(
            f'{module}.{rule[1].name}'
            for module in self.module_names_of.get(rule[0], ()))
      elif isinstance(parent, ast.ClassDef) and node in parent.bases:
        line, reason = parent.lineno, _RULE_USED_HERE
      elif isinstance(parent, (ast.Import, ast.ImportFrom, ast.alias)):
        continue
      else:
        line, reason = None, (f'the rule class goes into '
                              f'`{ast.unparse(parent)[:80]}`, which migrate '
                              'cannot follow')
      self.links.append(Link(rule[0], rule[1].lineno, path, line,
                             node.lineno, reason))

  def _link_disagreeing_overrides(self, path, tree):
    """A method call some of whose overrides return a definition and some
    something else (``return self.given``): what the call gives is not
    known, so the definitions stay (a link with no consumer)."""
    names = self.names[path]
    for node in _walk.nodes(tree):
      if not isinstance(node, ast.Call) or names.resolve(node.func):
        continue
      candidates = self._method_candidates(node)
      others = [c for c in candidates if c.node not in self.def_functions
                and not _gives_nothing(c.node)]
      if not others or len(others) == len(candidates):
        continue
      self._called.update(c.node for c in candidates)
      other = others[0]
      reason = (f'{node.func.attr}() may run the override at '
                f'{other.path}:{other.node.lineno}, which does not return a '
                'flax.optim definition: what the call gives is not known')
      for producer_path, producer_line in self._factory_producers(
          node, names):
        self.links.append(Link(producer_path, producer_line, path, None,
                               node.lineno, reason))

  def _link_unseen_callers(self):
    """A factory no code of the project calls hands its definition to code
    migrate does not see where something names it without calling it (a
    registry, a callback, a config file such as gin's) or a decorator (gin
    and its kind) calls it: its definitions stay (a link with no
    consumer), as do a method's (a hook a base class outside the project
    may call). A function named nowhere else is dead code in the project,
    which ``migrate`` treats as one program: it goes with its flow, and the
    report says its contract changed (``unseen``)."""
    functions = {id(f.node): f for f in self.functions.values()}
    for group in self.methods.values():
      functions.update({id(f.node): f for f in group})
    for node in self.def_functions:
      decorated = [d for d in node.decorator_list if not (
          isinstance(d, ast.Name) and d.id in _PLAIN_DECORATORS)]
      if node in self._called and not decorated:
        continue
      function = functions[id(node)]
      if decorated:
        reason = (f'{node.name}() is decorated with '
                  f'`{ast.unparse(decorated[0])}`: its callers are not in '
                  'the scanned code')
      elif function.is_method:
        reason = (f'{node.name}() is a method called nowhere in the scanned '
                  'code: a base class outside it may call it (a hook), or '
                  'code holding an instance: they cannot be rewritten with '
                  'it')
      else:
        where = self.mention(node, function.path)
        if where is None:
          self.unseen.add((function.path, node.lineno, node.name))
          continue
        reason = (f'{node.name}() is called nowhere in the scanned code but '
                  f'{where}: its callers (a registry, another package, a '
                  'config system) cannot be rewritten with it')
      for path, line in self._producers(function):
        self.links.append(Link(path, line, function.path, None, node.lineno,
                               reason))

  def mention(self, node, path: str) -> Optional[str]:
    """Why code outside its definition may call the function or class
    ``node`` of the module at ``path``: ``named at path:line``, the first
    place the project spells its name (a whole word, comments and strings
    too; a notebook's path alone) in its Python modules, notebooks and
    other text files (``other_files``), or that files were passed one by
    one; None: nothing may."""
    if self._other_files is None:
      return 'passed as single files, not their directory'
    key = (path, node.lineno, node.name)
    if key not in self._mentions:  # asked again by the plan and its notes
      self._mentions[key] = self._first_mention(node, path)
    return self._mentions[key]

  def called_elsewhere(self, node, path: str) -> Optional[str]:
    """Where a module other than ``path`` may call its module function
    ``node``: a reference the project resolves to it (``_params``), or for
    a function without parameters, a place spelling its name
    (``mention_elsewhere``); None: none may."""
    mine = self._model_ids(node, path)
    if mine and mine <= self.reference_candidates:
      where = [self.referenced_elsewhere[key] for key in mine
               if key in self.referenced_elsewhere]
      return 'called from another module' if where else None
    return self.mention_elsewhere(node, path)

  def used_otherwise_elsewhere(self, node, path: str) -> Optional[str]:
    """``path:line`` where another module refers to the module function
    ``node`` of ``path`` other than by calling it (``jax.jit(m.step)``, a
    callback): what it returns goes where migrate does not see."""
    for key in self._model_ids(node, path):
      for reference in self.referenced_elsewhere.get(key, ()):
        if reference.call is None:
          return f'{reference.path}:{reference.node.lineno}'
    return None

  def _model_ids(self, node, path) -> set:
    """id() of the model's own parse of the module function ``node`` of
    ``path`` (the planner parses the module again: the same def by its
    name and line)."""
    registered = [self.functions.get(f'{module}.{node.name}')
                  for module in self.module_names_of.get(path, ())]
    return {id(f.node) for f in registered
            if f is not None and f.path == path and
            f.node.lineno == node.lineno}

  def mention_elsewhere(self, node, path: str) -> Optional[str]:
    """``named at path:line`` for the first place outside the module at
    ``path`` that spells the name of its function ``node`` (as
    ``mention``): for a notebook's function, only another notebook that
    does not define that name (one that may continue its kernel) counts;
    None where none does."""
    key = (path, node.lineno, node.name, 'elsewhere')
    if key not in self._mentions:
      self._mentions[key] = self._first_mention(
          node, path, elsewhere=True, notebooks=is_notebook(path))
    return self._mentions[key]

  def _holding_flow(self, path) -> _flow.OptimizerFlow:
    if path not in self._holding_flows:
      self._holding_flows[path] = _flow.OptimizerFlow(self.trees[path],
                                                      self.names[path])
    return self._holding_flows[path]

  def passes_holding(self, node, path, parameter) -> Optional[bool]:
    """Whether every call of the module function ``node`` of ``path`` from
    another module passes a value holding an optimizer as ``parameter``
    (``OptimizerFlow.holds_optimizer`` in the caller's module); None where
    no other module refers to it, False where one does otherwise than by
    a call, or its callers are not known."""
    mine = self._model_ids(node, path)
    if not mine or not mine <= self.reference_candidates:
      return None if self.called_elsewhere(node, path) is None else False
    references = [reference for key in mine
                  for reference in self.referenced_elsewhere.get(key, ())]
    if not references:
      return None
    key = (path, node.lineno, parameter)
    if key in self._holding_open:
      return True  # its other callers decide
    self._holding_open.add(key)
    try:
      for reference in references:
        argument = None if reference.call is None else _names.argument_for(
            node, parameter, reference.call)
        if argument is None or reference.path not in self.trees or not (
            self._holding_flow(reference.path).holds_optimizer(argument)):
          return False
      return True
    finally:
      self._holding_open.discard(key)

  def returns_holding(self, call, names, index=None) -> bool:
    """Every return of the project's module function ``call`` runs (in
    another module) holds an optimizer (``index``: its element of the
    tuple returned)."""
    function = self.callee(call, names)
    if function is None or function.is_method or (
        function.path not in self.trees):
      return False
    flow = self._holding_flow(function.path)
    if flow.functions.get(function.node.name) is not function.node:
      return False
    return flow.function_returns_holding(function.node, index)

  def passes_linked(self, call, argument, names) -> bool:
    """``call`` passes ``argument`` to another module's function whose flow
    proves that parameter an optimizer (the two modules are linked)."""
    function = self.callee(call, names)
    if function is None:
      return False
    parameter = _flow.parameter_of(function.node, call, argument)
    return parameter is not None and bool(
        self.param_verdicts.get((function.node, parameter))) and any(
            link.kind in WHOLE_FLOW_KINDS and link.consumer_line ==
            call.lineno and link.producer_path == function.path and
            link.producer_line == function.node.lineno
            for link in self.links)

  def _first_mention(self, node, path: str, elsewhere=False,
                     notebooks=False) -> Optional[str]:
    word, lines = node.name, range(node.lineno, node.end_lineno + 1)
    escaped = re.escape(word.encode())
    # A notebook defining (or assigning) that name calls its own; one
    # naming it as an attribute (``training.train_step``) calls a module's.
    defining = re.compile(rb'\bdef\s+%s\s*\(|(?<![.\w])%s\s*=(?!=)' % (
        escaped, escaped))
    pattern = re.compile((rb'(?<![.\w])' if notebooks else rb'\b') + escaped +
                         rb'\b')
    if self._other_texts is None and self._other_files is not None:
      self._other_texts = list(self._other_files())
    for shown, text in [*sorted(self.sources.items()),
                        *(self._other_texts or ())]:
      if word.encode() not in text or (elsewhere and shown == path) or (
          notebooks and not (is_notebook(shown) and defining.search(
              text) is None)):
        continue
      for found in pattern.finditer(text):
        at = text.count(b'\n', 0, found.start()) + 1
        if shown != path or at not in lines:
          return 'named at ' + (shown if is_notebook(shown) else
                                f'{shown}:{at}')
    return None

  def _link_holders(self, sources, parse):
    """A field link from each class holding an optimizer to every module
    that makes the class, replaces the field or reads it (``x.optimizer``
    is an optimizer wherever every class declaring ``optimizer`` says so):
    what one of them stores is what the others use, so their flows are
    rewritten together or not at all. Where another class of the project
    declares the field's name otherwise, a read ``x.optimizer`` cannot be
    told to be this field's: nothing of that flow is rewritten (a link of
    kind ``HELD``)."""
    holders = self.holders
    if not holders:
      return
    fields = {h.field for h in holders}
    touching = []
    for path, tree in self._trees_spelling(
        fields | {h.name for h in holders}, sources, parse):
      touching.append((path, tree))
      if path not in self.names:  # names no flax.optim: declares otherwise
        self._declare_fields_otherwise(path, tree, fields)
    contested = {h.field for h in holders if not self.fields.get(h.field)}
    untyped: dict = {}  # field -> (path, line, code) of its first such use
    for path, tree in touching if contested else ():
      for field, where in self._untyped_uses(path, tree, contested).items():
        untyped.setdefault(field, where)
    for holder in holders:
      if holder.field not in untyped:
        continue
      path, line, name = self._declared_otherwise[holder.field]
      used_at, used_line, code = untyped[holder.field]
      self._hold_field(
          holder, f'{path}:{line} declares `{name}.{holder.field}` '
          f'otherwise: `{code}` at {used_at}:{used_line} uses '
          f'`.{holder.field}` of a value not typed as {holder.name} '
          '(annotated, or made as one), which cannot be told to be the '
          'optimizer')
    for path, tree in touching:
      for holder, line in _holder_touches(tree, holders):
        self.links.append(Link(
            holder.path, holder.line, path, line, line,
            f'makes, stores or reads the optimizer that '
            f'`{holder.name}.{holder.field}` holds (declared at '
            f'{holder.path}:{holder.line})', 'field'))
    self._link_positional_reads(sources, parse)

  def _trees_spelling(self, words, sources, parse):
    """``(path, tree)`` of each project module whose source spells one of
    ``words``; a module the model did not read is parsed here (scan hands
    the model a parse callback instead of every tree), one that does not
    parse is left out."""
    spells = _spells_any_of(words)
    for path, (source, tree) in sources.items():
      if not spells(source):
        continue
      tree = self.trees.get(path, tree)
      tree = parse(path) if tree is None and parse else tree
      if tree is not None:
        yield path, tree

  def _link_positional_reads(self, sources, parse):
    """A NamedTuple holder is a tuple: ``opt, mstate = tstate`` takes its
    optimizer without naming the field, anywhere in the project (also in a
    module that names nothing of flax). Where a module takes an element
    at the field's position (for the class's number of fields) and uses it
    as only a flax.optim Optimizer is used, what the field holds stays as
    it is (a link of kind ``HELD``): which class the tuple is, is not
    known there."""
    holders = [h for h in self.holders if h.positional]
    if not holders:
      return
    for path, tree in self._trees_spelling(
        _OPTIMIZER_ONLY + _OPTIMIZER_STATE_ONLY, sources, parse):
      for holder, line, code in _positional_reads(tree, holders):
        self._hold_field(
            holder, f'{path}:{line} takes element '
            f'{holder.fields.index(holder.field)} of a tuple of '
            f'{len(holder.fields)} and uses it as one (`{code}`): a '
            f'{holder.name} read by position cannot be told from another '
            'tuple there')

  def _hold_field(self, holder, why):
    """A ``HELD`` link keeping what ``holder``'s optimizer field holds as
    it is, ``why`` naming the place that cannot be told apart."""
    self.links.append(Link(
        holder.path, holder.line, holder.path, None, holder.line,
        f'declares `{holder.name}.{holder.field}` a flax.optim Optimizer, '
        f'and {why}, so what the field holds stays as it is', HELD))

  def _untyped_uses(self, path, tree, fields) -> dict:
    """``{field: (path, line, code)}``: the first read, store or
    ``.replace(<field>=...)`` in ``tree`` of each of ``fields`` (contested
    by a class declaring it otherwise) on a receiver that is not typed as
    a holder of it (``_flow.OptimizerFlow.holds_field``); ``self.<field>``
    in the methods of a class declaring it otherwise is that class's own."""
    names = self.names.get(path)
    flow = None if names is None else _flow.OptimizerFlow(tree, names)
    own = _own_members(tree, fields)
    parents = _walk.parents(tree)
    found: dict = {}
    for node in parents:
      used = []
      if isinstance(node, ast.Attribute) and node.attr in fields and (
          id(node) not in own and not _names_a_literal(
              node, parents.get(node))):
        used = [(node.attr, node.value)]
      elif isinstance(node, ast.Call) and isinstance(
          node.func, ast.Attribute) and node.func.attr in ('replace',
                                                           '_replace'):
        used = [(k.arg, node.func.value) for k in node.keywords
                if k.arg in fields]
      for field, receiver in used:
        if field not in found and not (flow is not None and flow.holds_field(
            receiver, field)):
          found[field] = (path, node.lineno, ast.unparse(node)[:60])
    return found

  def _declare_fields_otherwise(self, path, tree, fields):
    """Records the classes of a module the model did not read that declare
    one of ``fields`` (annotated, a method or property, assigned): nothing
    there names flax.optim, so none is an optimizer field."""
    for node in _walk.statements(tree):
      if not isinstance(node, ast.ClassDef):
        continue
      for item in node.body:
        declared = _names.other_attribute_declarations(item) + (
            [item.target.id] if isinstance(item, ast.AnnAssign) and
            isinstance(item.target, ast.Name) else [])
        for name in set(declared) & fields:
          self._declare_otherwise(name, path, item, node)

  def _declare_otherwise(self, name, path, item, node):
    """Class ``node``'s body item ``item`` declares attribute ``name`` as
    something other than a flax.optim Optimizer: ``x.<name>`` is not one
    wherever the project's fields of that name are (the first such
    declaration is the one a report names)."""
    self.fields[name] = False
    self._declared_otherwise.setdefault(name, (path, _first_line(item),
                                               node.name))

  def _factory_producers(self, call, names) -> list:
    function = self.callee(call, names)
    candidates = [function] if function is not None else (
        self._method_candidates(call))
    found = []
    for candidate in candidates:
      found += self._producers(candidate)
    return sorted(set(found))

  def _consumers(self, call, parents, names) -> list:
    """[(line of the .create, reason)], or [(None, why not)]."""
    parent = parents.get(call)
    code = ast.unparse(parent if parent is not None else call)[:80]
    if isinstance(parent, ast.Attribute) and parent.attr == _CREATE:
      return [(parent.lineno, _CREATED_HERE)]
    if isinstance(parent, ast.Return):
      return [(call.lineno, 'returned by another definition factory')]
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and (
        isinstance(parent.targets[0], ast.Name)):
      return self._name_consumers(parent, parents, names, set())
    return [(None, f'the definition goes into `{code}`, which migrate '
             'cannot follow')]

  def _name_consumers(self, assign, parents, names, seen) -> list:
    """What the reads of the name ``assign`` binds meet (its function's
    reads; a plain ``other = name`` is followed to ``other``'s reads)."""
    name = assign.targets[0].id
    seen.add(name)
    scope = parents.get(assign)
    while scope is not None and not isinstance(
        scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
      scope = parents.get(scope)
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and
             n.id == name and isinstance(n.ctx, ast.Load)]
    found = []
    for read in reads:
      holder = parents.get(read)
      multi = _multi.definition_consumer(read, parents, names)
      if isinstance(holder, ast.Attribute) and holder.attr == _CREATE:
        found.append((holder.lineno, _CREATED_HERE))
      elif isinstance(holder, ast.Return):
        found.append((read.lineno, 'returned by another definition '
                       'factory'))
      elif multi is not None:
        found.append((multi.lineno, _multi.IN_MULTI_OPTIMIZER))
      elif isinstance(holder, ast.Assign) and len(holder.targets) == 1 and (
          isinstance(holder.targets[0], ast.Name)) and (
              holder.targets[0].id not in seen):
        found += self._name_consumers(holder, parents, names, seen)
      else:
        found.append((None, f'`{name}` goes on into '
                      f'`{ast.unparse(holder)[:80]}`, which migrate '
                      'cannot follow'))
    return found or [(None, f'`{name}` is never created')]


def is_notebook(path: str) -> bool:
  """A Jupyter notebook (its code cells read as one module)."""
  return path.endswith('.ipynb')


def _spells_any_of(words) -> Callable[[bytes], bool]:
  """The test whether a module's bytes spell any of ``words`` as a whole
  word. Its pattern runs only where one is a substring: starting with
  ``\\b``, it is tried at every position (most modules spell none)."""
  encoded = [w.encode() for w in sorted(words)]
  pattern = re.compile(rb'\b(' + b'|'.join(map(re.escape, encoded)) + rb')\b')
  return lambda source: any(w in source for w in encoded) and (
      pattern.search(source) is not None)


def _dotted(node, names) -> Optional[str]:
  """The dotted name a class reference resolves to: an import, else a name
  of the module itself."""
  path = names.resolve(node)
  if path is None and isinstance(node, ast.Name) and names.package_module:
    path = f'{names.package_module}.{node.id}'
  return path


def _holder_touches(tree, holders) -> list:
  """``[(holder, first line)]`` for each holder ``tree`` makes (a call of
  its class's name), stores into (a keyword of its field) or reads (an
  attribute named like its field, also of a call's result).

  An attribute of the field's name that is given a literal, or read only
  to be compared with one, is no optimizer's (``config.optimizer =
  'adam'`` in a config module; ``if config.optimizer == 'adam':``)."""
  first = {}
  parents = _walk.parents(tree)
  for node in parents:
    touched = []
    if isinstance(node, ast.Call):
      touched = [h for h, _ in field_stores(node, holders)]
      func = node.func
      called = func.id if isinstance(func, ast.Name) else getattr(
          func, 'attr', None)
      touched += [h for h in holders if h.name == called]
    elif isinstance(node, ast.Attribute) and not _names_a_literal(
        node, parents.get(node)):
      touched = [h for h in holders if h.field == node.attr]
    for holder in touched:
      if holder not in first or node.lineno < first[holder]:
        first[holder] = node.lineno
  return sorted(first.items(), key=lambda item: (item[0].path,
                                                 item[0].line))


def _positions(target, arity) -> dict:
  """``{name: position}`` of the names a tuple target unpacks from a tuple
  of ``arity`` elements (a starred target takes none; one that cannot
  unpack that many, nothing)."""
  elements = target.elts
  starred = [i for i, e in enumerate(elements) if isinstance(e, ast.Starred)]
  if (not starred and len(elements) != arity) or len(elements) - len(
      starred) > arity:
    return {}
  found = {}
  for index, element in enumerate(elements):
    if not isinstance(element, ast.Name):
      continue
    if not starred or index < starred[0]:
      found[element.id] = index
    elif index > starred[0]:
      found[element.id] = arity - (len(elements) - index)
  return found


def _used_as_optimizer(node, parents) -> Optional[ast.AST]:
  """The expression using ``node`` as only a flax.optim Optimizer is used
  (``node.target``, ``node.state.step``), else None."""
  attribute = parents.get(node)
  if not (isinstance(attribute, ast.Attribute) and attribute.value is node):
    return None
  if attribute.attr in _OPTIMIZER_ONLY:
    return attribute
  outer = parents.get(attribute)
  if attribute.attr == 'state' and isinstance(outer, ast.Attribute) and (
      outer.attr in _OPTIMIZER_STATE_ONLY):
    return outer
  return None


def _positional_reads(tree, holders) -> list:
  """``[(holder, line, code)]``: where ``tree`` takes the element of a
  tuple at a holder's optimizer field position (a name unpacked by an
  assignment or a loop in one function, or ``t[k]``) and uses it as a
  flax.optim Optimizer."""
  parents = _walk.parents(tree)
  scopes = [tree] + [n for n in _walk.nodes(tree) if isinstance(
      n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
  found = []
  for scope in scopes:
    nodes = list(_walk.scope_nodes(scope))
    targets = [n.target if isinstance(n, (ast.For, ast.AsyncFor,
                                          ast.comprehension)) else t
               for n in nodes if isinstance(n, (
                   ast.Assign, ast.For, ast.AsyncFor, ast.comprehension))
               for t in (n.targets if isinstance(n, ast.Assign) else [n])]
    targets = [t for t in targets if isinstance(t, (ast.Tuple, ast.List))]
    for holder in holders:
      arity = len(holder.fields)
      position = holder.fields.index(holder.field)
      unpacked = {name for target in targets
                  for name, at in _positions(target, arity).items()
                  if at == position}
      for node in nodes:
        taken = isinstance(node, ast.Name) and isinstance(
            node.ctx, ast.Load) and node.id in unpacked
        if isinstance(node, ast.Subscript) and isinstance(
            node.slice, ast.Constant) and type(node.slice.value) is int:
          taken = node.slice.value in (position, position - arity)
        use = _used_as_optimizer(node, parents) if taken else None
        if use is not None:
          found.append((holder, node.lineno, ast.unparse(use)[:60]))
  return found


def _is_literal(node) -> bool:
  """A constant, an f-string, or a display of them (``-1.0``, ``('a',)``)."""
  if isinstance(node, (ast.Constant, ast.JoinedStr)):
    return True
  if isinstance(node, ast.UnaryOp):
    return _is_literal(node.operand)
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return all(_is_literal(e) for e in node.elts)
  if isinstance(node, ast.Dict):
    return all(k is not None and _is_literal(k) for k in node.keys) and all(
        _is_literal(v) for v in node.values)
  return False


def _own_members(tree, fields) -> set:
  """id() of each ``self.<field>`` (of ``fields``) in the methods of a
  class of ``tree`` that declares that field itself (a method, property,
  assignment or annotated field): the class's own member, whatever
  classes of the project declare a field of that name."""
  own = set()
  for node in _walk.statements(tree):
    if not isinstance(node, ast.ClassDef):
      continue
    declared = set()
    for item in node.body:
      declared.update(_names.other_attribute_declarations(item))
      if isinstance(item, ast.AnnAssign) and isinstance(item.target,
                                                        ast.Name):
        declared.add(item.target.id)
    for method in node.body:
      instance = _names.instance_parameter(method) if isinstance(
          method, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
      if instance is None:
        continue
      own.update(id(attribute) for attribute in ast.walk(method)
                 if isinstance(attribute, ast.Attribute) and (
                     attribute.attr in fields & declared) and isinstance(
                         attribute.value, ast.Name) and (
                             attribute.value.id == instance))
  return own


def _names_a_literal(attribute, parent) -> bool:
  """``attribute`` is assigned a literal (``x.optimizer = 'adam'``) or read
  only for a comparison with literals (``x.optimizer == 'adam'``)."""
  if isinstance(parent, ast.Assign) and attribute in parent.targets:
    return _is_literal(parent.value)
  if isinstance(parent, ast.Compare):
    return all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
               for op in parent.ops) and all(
                   _is_literal(side) for side in [parent.left] +
                   parent.comparators if side is not attribute)
  return False


def _first_line(item) -> int:
  """The first line of a class body's item (a property's decorator)."""
  return min([item.lineno] + [d.lineno for d in getattr(
      item, 'decorator_list', ())])


def _gives_nothing(function) -> bool:
  """An abstract base method, which hands its caller no value: every path
  raises (no return of its own, and the body ends in a ``raise``, so
  whatever runs before it ends there), or an ``@abc.abstractmethod`` whose
  body is only a docstring, ``pass`` or ``...`` (run only through
  ``super()``, whose None makes no override that returns it a factory)."""
  if _names.own_returns(function):
    return False
  if isinstance(function.body[-1], ast.Raise):
    return True
  abstract = any(ast.unparse(d).rpartition('.')[2] == 'abstractmethod'
                 for d in function.decorator_list)
  return abstract and all(
      isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(
          s.value, ast.Constant)) for s in function.body)


def flow_violations(links, rewritten) -> list:
  """Links whose two ends were not rewritten alike: a definition rewritten
  into an Optax transform meets a ``.create`` left as it was (or a
  ``TrainState.create`` meets a flax.optim definition).

  ``rewritten(path, line, construct)``: whether the planned result of
  ``path`` rewrites ``construct`` at ``line`` (``WHOLE_FLOW``, line None:
  whether the module's optimizer flow is migrated, for field links). A
  link with no consumer line is violated as soon as its producer is
  rewritten. ``migrate`` calls this before anything is written and rolls
  back every module of a violated flow; any other writer of migrated code
  can call it the same way.
  """
  violations = []
  for link in links:
    if link.kind == HELD:
      if rewritten(link.producer_path, None, WHOLE_FLOW):
        violations.append(link)
      continue
    if link.kind in WHOLE_FLOW_KINDS:
      if rewritten(link.producer_path, None, WHOLE_FLOW) != rewritten(
          link.consumer_path, None, WHOLE_FLOW):
        violations.append(link)
      continue
    made = rewritten(link.producer_path, link.producer_line, 'algorithm')
    if link.consumer_line is None:
      used = False
    elif link.reason == _CREATED_HERE:
      used = rewritten(link.consumer_path, link.consumer_line, _members.CREATE)
    elif link.reason in (_RULE_USED_HERE, _multi.IN_MULTI_OPTIMIZER):
      # A rule's use, a definition in a MultiOptimizer: rewritten with it.
      used = rewritten(link.consumer_path, link.consumer_line, 'algorithm')
    else:  # a return of another factory: linked through its own calls
      continue
    if made != used:
      violations.append(link)
  return violations


def _rewrites(plan, line, construct, flow_migrated) -> bool:
  if construct == WHOLE_FLOW:
    return plan is not None and flow_migrated(plan)
  return plan is not None and any(
      e.line == line and e.construct.startswith(construct)
      for e in plan.edits)


def roll_back(links, plan_of, flow_migrated=lambda plan: True,
              file_line=None):
  """Yields ``(path, blocked)`` for each module whose optimizer flow must
  stay as it was, until ``flow_violations`` finds none.

  ``plan_of(path)``: the module's current plan (None: not migrated);
  ``flow_migrated(plan)``: whether that plan migrates the module's
  optimizer flow (nothing of it left as it was). The
  caller plans each yielded module again with ``blocked`` (``(line,
  construct, code, reason)`` of every link of the flow there) before the
  next one is asked for: a rolled-back module may break another link, so
  the check runs again on the new plans. Whole components of linked
  modules roll back together; each module at most once. ``file_line``:
  see ``Link.describe``.
  """
  done: set[str] = set()
  while True:
    violated = flow_violations(
        links, lambda path, line, construct: _rewrites(
            plan_of(path), line, construct, flow_migrated))
    component = _linked(links, {p for link in violated for p in (
        link.producer_path, link.consumer_path)}) - done
    if not component:
      return
    for path in sorted(component):
      yield path, _blocked_here(links, component, path, file_line)
    done |= component


def _linked(links, start) -> set:
  """The modules linked to ``start``, transitively."""
  found, frontier = set(start), list(start)
  while frontier:
    path = frontier.pop()
    for link in links:
      ends = (link.producer_path, link.consumer_path)
      if path in ends:
        for other in ends:
          if other not in found:
            found.add(other)
            frontier.append(other)
  return found


def _blocked_here(links, component, path, file_line=None) -> list:
  blocked = []
  for link in links:
    if link.producer_path not in component:
      continue
    reason = KEPT_WITH_FLOW + link.describe(file_line)
    if link.kind in WHOLE_FLOW_KINDS + (HELD,):
      if path in (link.producer_path, link.consumer_path):
        line = (link.producer_line if link.producer_path == path else
                link.consumer_line)
        blocked.append((line, HELD_IN_FIELD, reason))
      continue
    if link.producer_path == path:
      blocked.append((link.producer_line, 'algorithm', reason))
    if link.consumer_path == path:
      blocked.append((link.consumer_line or link.call_line,
                      'multi_optimizer' if link.reason == (
                          _multi.IN_MULTI_OPTIMIZER) else _members.CREATE,
                      reason))
  return blocked
