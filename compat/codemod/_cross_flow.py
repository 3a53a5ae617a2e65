"""The optimizer flow across modules: the module functions that give,
take or step an optimizer, proven in their own module's flow
(``_flow.OptimizerFlow``), and what every call from another module passes
them (``_params``, ``_step_values``). A part of ``_project.Model``.
Stdlib only.
"""

import ast
import contextlib
import itertools
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _flow
from compat.codemod import _givers
from compat.codemod import _links
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _project_index
from compat.codemod import _serialization_helpers
from compat.codemod import _walk

# A module function can return an optimizer only where its module spells
# one of these: what makes one, steps one, or types one.
_GIVES_OPTIMIZER_WORDS = tuple(word.encode() for word in (
    _members.CREATE, _members.APPLY_GRADIENT, _members.OPTIMIZER_CLASS,
    _members.REPLICATE,
    'restore_checkpoint'))


def _verdict_read(function, parameter) -> tuple:
  """What a flow asking ``param_verdict`` of the module function
  ``function`` (the model's parse) and ``parameter`` notes it read."""
  return 'verdict', id(function), parameter


class HoldingDeferred(BaseException):
  """Raised where another module's flow is asked what it holds while the
  model ``defers_holding``: the answer, and the links it adds, depend on
  what the flows asked before (a flow asked while another is open gets
  that question answered by the others), so a module asking is walked
  where every module asking is, in order (``scan``'s workers hand it
  back). Not an ``Exception``: no handler of a failure may take it."""


class CrossModuleFlow:
  """What flows between modules (a part of ``_project.Model``)."""

  def _init_cross_flow(self):
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
    # What each flow asked what it holds read of what may change while
    # the model is solved: id(FunctionDef) of the module functions whose
    # giving it asked (``_givers``), the verdicts it asked
    # (``_verdict_read``); by path; and a set per flow being built or
    # asked, innermost last (``reading``).
    self._holding_reads: dict = {}
    self._reads_open: list = []
    # The traces open (``tracing``: ``_givers`` keeps a module's flow
    # across its solves while every read a trace noted stands), and what
    # ``_givers`` kept of its last first pass.
    self._traces: list = []
    self.givers_memo: Optional[tuple] = None
    # (what ``_solve_rate_setters`` read, what it found) of its last solve.
    self._rate_setters_of: tuple = (None, frozenset())
    # Whether asking raises HoldingDeferred (in ``scan``'s workers).
    self.defers_holding = False
    self.param_why: dict = {}  # the same keys -> why a verdict is False
    # (path, line of a method's def, parameter) -> whether every call of
    # the method in the project passes a definition there (``_def_params``).
    self.def_param_verdicts: dict = {}
    # (FunctionDef, parameter) -> the StepSignature of the factory's step
    # every call passes there; the step factories whose calls elsewhere
    # are all followed (``_step_values``).
    self.step_params: dict = {}
    self.followed_factories: set = set()
    # (factory FunctionDef, parameter of its step) -> whether every call of
    # the step from other modules passes an optimizer there
    # (``_step_calls``).
    self.step_call_verdicts: dict = {}

  def _solve_optimizer_givers(self, sources, parse, unparsed):
    """``optimizer_givers``: the module functions whose every return is an
    optimizer, proven by their module's own flow; ``optimizer_takers``:
    those with a parameter annotated ``optim.Optimizer``. Then the modules
    that name one of them are read too (a test or script that only calls
    ``create_optimizer``)."""
    self.optimizer_takers = set()
    candidates = []
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
      if any(word in self.sources[function.path]
             for word in _GIVES_OPTIMIZER_WORDS):
        candidates.append(function)
    _givers.solve(self, candidates)
    self._solve_rate_setters()
    words = {n.name for n in self.optimizer_givers | self.optimizer_takers |
             set(self.step_factories) | set(self.tuple_givers)}
    if words:
      self._read_modules_naming(words, sources, parse, unparsed)

  def param_verdict(self, names, function, parameter) -> Optional[bool]:
    """Whether every call from another module of the module function
    named ``function`` in the module of ``names`` passes an optimizer as
    ``parameter`` (None: no other module names it)."""
    found = self._module_function(names, function)
    if found is None:
      return None
    self._note_reads((_verdict_read(found.node, parameter),))
    return self._traced(('verdict', found.node, parameter))

  def def_param_verdict(self, names, function, parameter) -> bool:
    """Every call of the method ``function`` (a def of the module of
    ``names``) in the project passes a definition as ``parameter``."""
    return bool(self.def_param_verdicts.get(
        (names.path, function.lineno, parameter)))

  def step_param(self, names, function, parameter):
    """The step every call of the module function named ``function`` (in
    the module of ``names``) passes as ``parameter``, or None."""
    found = self._module_function(names, function)
    return None if found is None else self._traced(
        ('step_param', found.node, parameter))

  def factory_followed(self, names, factory) -> bool:
    """Every call of the step factory named ``factory`` (in the module of
    ``names``) from another module is followed (``_step_values``), or taken
    for followed while a verdict on its step's calls holds
    (``_step_calls``, which checks it)."""
    found = self._module_function(names, factory)
    return found is not None and self._traced(('followed', found.node))

  def step_call_verdict(self, names, factory, parameter) -> bool:
    """Every call from other modules of the step that the factory named
    ``factory`` (in the module of ``names``) returns passes an optimizer
    as ``parameter`` (``_step_calls``)."""
    found = self._module_function(names, factory)
    return found is not None and bool(self._traced(
        ('step_call', found.node, parameter)))

  def param_why_of(self, names, function, parameter) -> Optional[str]:
    """Why ``param_verdict`` is False (None where it is not)."""
    return self._of_parameter(self.param_why, names, function, parameter)

  def _of_parameter(self, table, names, function, parameter):
    found = self._module_function(names, function)
    return None if found is None else table.get((found.node, parameter))

  def _solve_rate_setters(self):
    """``rate_setters``: a least fixpoint over the module functions of the
    modules read (solved again only where the functions by their names, a
    module's names or the re-exports they resolve through changed: every
    round of the givers asks it)."""
    read = tuple(self.functions.items()), tuple(self.reexports.items()), [
        (path, self.names[path], self.trees[path]) for path in self.names]
    if read == self._rate_setters_of[0]:
      self.rate_setters = set(self._rate_setters_of[1])
      return
    functions = {id(f.node): f for f in self.functions.values()
                 if not f.is_method}
    named: dict = {}  # id(FunctionDef) -> ids of the functions it names
    setters = set()
    for key, function in functions.items():
      names = self.names[function.path]
      named[key] = set()
      # (the module's shared walk: this runs once per round of the givers)
      for node in _walk.under(function.node, self.trees[function.path]):
        if _flow.sets_hyper_params(node):
          setters.add(key)
        elif isinstance(node, (ast.Name, ast.Attribute)):
          other = self.functions.get(
              _project_index.dotted_name(node, names) or '')
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
    self._rate_setters_of = read, frozenset(self.rate_setters)

  def names_rate_setter(self, tree, names, path) -> bool:
    """The module ``tree`` of ``path`` names another module's function
    that sets hyper-parameters per step (``rate_setters``)."""
    if not self.rate_setters:
      return False
    for _, _, dotted in itertools.chain(
        _names.references(tree, names), self.alias_references(tree, names)):
      function = self.functions.get(dotted)
      if function is not None and function.path != path and (
          function.node in self.rate_setters):
        return True
    return False

  def foreign_step(self, call, names) -> Optional[_flow.StepSignature]:
    """The step ``call`` (of another module's step factory, or of one of
    several through a module alias) returns."""
    functions = self.callees(call, names)
    givings = self._givings(functions)
    steps = [step if not f.is_method else None
             for f, (_, _, step) in zip(functions, givings)]
    if not steps or None in steps:
      return None
    return steps[0] if len(steps) == 1 else _flow.merged_step(steps)

  def returned_kind(self, call, names):
    """What a call of another module's function returns: True (an
    optimizer), a tuple of element kinds holding one, or None (through a
    module alias: what every function it may run returns alike)."""
    kinds = [True if optimizer else pair for optimizer, pair, _ in
             self._givings(self.callees(call, names))]
    return kinds[0] if kinds and all(k == kinds[0] for k in kinds) else None

  def gives_tuple(self, node, path) -> bool:
    """The module function ``node`` of ``path`` (another parse of it)
    returns a tuple holding an optimizer that its callers in other modules
    are linked to and unpack (``tuple_givers``)."""
    mine = self._model_ids(node, path)
    self._note_reads(mine)
    return self._traced(('tuples', frozenset(mine)))

  def _givings(self, functions) -> list:
    """``(gives an optimizer, tuple kinds, step)`` of each of the module
    functions ``functions`` (noted read)."""
    self._note_reads(id(f.node) for f in functions)
    return [self._traced(('giver', f.node)) for f in functions]

  def _traced(self, key):
    """The value of ``key`` now (``_givers.value_of``), noted in every
    trace open."""
    value = _givers.value_of(self, key)
    for trace in self._traces:
      trace.saw(key, value)
    return value

  def _untraceable(self):
    """The flows traced now asked what the model's holding flows answer,
    or added a link: no trace of theirs notes all they depend on."""
    for trace in self._traces:
      trace.reusable = False

  @contextlib.contextmanager
  def tracing(self, trace):
    """Notes in ``trace`` (``saw(key, value)``; ``reusable``) every read
    inside of what changes between the solves of ``_givers``
    (``_givers.value_of``)."""
    self._traces.append(trace)
    try:
      yield trace
    finally:
      self._traces.pop()

  def forget_holding_flows(self, changed=None):
    """Drops the flows asked what they hold that read something of
    ``changed`` (function ids or verdicts, as ``reading`` notes them;
    None: any): the model changed there (``_givers``' rounds,
    ``_params``' verdicts)."""
    for path in list(self._holding_flows):
      if changed is None or self._holding_reads[path] & changed:
        del self._holding_flows[path]

  def holding_reads(self) -> set:
    """What the flows asked what they hold (those standing) asked."""
    return set().union(*(self._holding_reads[path]
                         for path in self._holding_flows))

  def forget_refuted(self, refuted):
    """Drops the flows asked what they hold that asked a verdict of
    ``refuted`` ((FunctionDef, parameter) that ``_params`` turned False)."""
    self.forget_holding_flows({_verdict_read(*key) for key in refuted})

  @contextlib.contextmanager
  def reading(self):
    """The ids of the module functions whose giving is asked inside (and
    the verdicts), also through the flows asked what they hold (each
    built or asked inside, or before: what it read then)."""
    reads: set = set()
    self._reads_open.append(reads)
    try:
      yield reads
    finally:
      self._reads_open.pop()
      self._note_reads(reads)

  def note_reads(self, ids):
    """Notes ``ids`` read in the innermost ``reading`` open."""
    self._note_reads(ids)

  def _note_reads(self, ids):
    if self._reads_open:
      self._reads_open[-1].update(ids)

  def _holding_flow(self, path) -> _flow.OptimizerFlow:
    if self.defers_holding:
      raise HoldingDeferred(path)
    if path not in self._holding_flows:
      with self.reading() as reads:
        self._holding_flows[path] = _flow.OptimizerFlow(self.trees[path],
                                                        self.names[path])
      self._holding_reads[path] = reads
    self._note_reads(self._holding_reads[path])
    return self._holding_flows[path]

  def self_attribute_why(self, path, attr, classes) -> Optional[tuple]:
    """``(path, why)``: where and why the module ``path``'s own flow does
    not prove ``self.<attr>`` an optimizer in every class of ``classes``
    naming it there (``SelfHolding``); None where it does. A question
    asked again while open is answered by the others."""
    self._untraceable()
    if path not in self.trees or path not in self.names:
      return path, _codes.note(_codes.NO_FLOW_THERE)
    key = ('self', path, attr)
    if key in self._holding_open:
      return None
    self._holding_open.add(key)
    try:
      return self._holding_flow(path).self_attribute_family_why(attr,
                                                                classes)
    finally:
      self._holding_open.discard(key)

  def link_self_attribute(self, path, line, other, other_line, reason):
    """Links the module ``path`` keeping an attribute through ``self``
    (its class at ``line``) with ``other``, whose classes sharing its
    instances keep it too: their whole flows agree."""
    self._untraceable()
    link = _links.Link(path, line, other, other_line, other_line, reason,
                       'field')
    if link not in self.links:
      self.links.append(link)

  def passes_holding(self, node, path, parameter) -> Optional[bool]:
    """Whether every call of the module function ``node`` of ``path`` from
    another module passes a value holding an optimizer as ``parameter``
    (``OptimizerFlow.holds_optimizer`` in the caller's module); None where
    no other module refers to it, False where one does otherwise than by
    a call, or its callers are not known."""
    self._untraceable()
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
    # (what a helper of flax.serialization is given an optimizer itself as
    # is flax.optim's tree of it: _serialization_helpers)
    helper = path in self.names and _serialization_helpers.role_of(
        node, parameter, self.names[path]) is not None
    self._holding_open.add(key)
    try:
      for reference in references:
        argument = None if reference.call is None else _names.argument_for(
            node, parameter, reference.call)
        if argument is None or reference.path not in self.trees:
          return False
        flow = self._holding_flow(reference.path)
        if not (flow.holds_in_a_holder(argument) if helper else
                flow.holds_optimizer(argument)):
          return False
      return True
    finally:
      self._holding_open.discard(key)

  def returns_holding(self, call, names, index=None) -> bool:
    """Every return of the project's module function ``call`` runs (in
    another module) holds an optimizer (``index``: its element of the
    tuple returned)."""
    self._untraceable()
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
    proves that parameter an optimizer (the two modules are linked); through
    a module alias, to each function it may run."""
    functions = self.callees(call, names)
    return bool(functions) and all(
        self._passes_linked_to(function, call, argument)
        for function in functions)

  def _passes_linked_to(self, function, call, argument) -> bool:
    parameter = _flow.parameter_of(function.node, call, argument)
    ends = (function.path, _links.Element.of(function.node),
            _links.Element.of(call))
    return parameter is not None and bool(
        self.param_verdicts.get((function.node, parameter))) and any(
            (link.producer_path, link.producer_element,
             link.consumer_element) == ends for link in self.links)
