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

``Model`` is made of parts, each in its own module, in the order it builds
them: the index of what the read modules define (``_project_index``) and
of their classes (``_classes``), the definition factories and the user's
rule classes (``_factories``), the flow across modules (``_cross_flow``),
the links found (``_project_links``, the ``Link`` data and the all-or-none
check in ``_links``) and the places naming a function (``_mentions``).

Why not LibCST's ``FullRepoManager`` with ``FullyQualifiedNameProvider``:
it names what an import binds (relative imports included), which
``ModuleNames`` already does, but follows neither re-exports through the
user's modules nor values (returns, fields, methods by receiver), and it needs
every file parsed by LibCST, several times slower than ``ast`` for ``scan``;
its type inference needs pyre (a server, not here). Stdlib only.
"""

from compat.codemod import _classes
from compat.codemod import _cross_flow
from compat.codemod import _def_params
from compat.codemod import _factories
from compat.codemod import _links
from compat.codemod import _mentions
from compat.codemod import _names
from compat.codemod import _params
from compat.codemod import _project_index
from compat.codemod import _project_links
from compat.codemod import _serialization_helpers
from compat.codemod import _step_calls
from compat.codemod import _step_values

# The model's parts keep their public names here, where callers have
# always found them.
Holder = _project_index.Holder
holders_in = _project_index.holders_in
field_stores = _project_index.field_stores
attribute_stores = _project_index.attribute_stores
is_notebook = _project_index.is_notebook
Link = _links.Link
WHOLE_FLOW = _links.WHOLE_FLOW
WHOLE_FLOW_KINDS = _links.WHOLE_FLOW_KINDS
HELD = _links.HELD
KEPT_WITH_FLOW = _links.KEPT_WITH_FLOW
HELD_IN_FIELD = _links.HELD_IN_FIELD
HIDDEN_FIX_REASON = _links.HIDDEN_FIX_REASON
assumed_away = _links.assumed_away
_CREATED_HERE = _links.CREATED_HERE
flow_violations = _links.flow_violations
roll_back = _links.roll_back
sharing_optimizers = _links.sharing_optimizers


class Model(_project_index.ProjectIndex, _classes.ClassHierarchy,
            _factories.Factories, _cross_flow.CrossModuleFlow,
            _project_links.Linker, _mentions.Mentions):
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
    sources = {path: (source, tree) for path, source, tree in parsed}
    # Whether the flows across modules are followed (``scan`` plans the
    # modules of such a model as ``migrate`` does: ``scan.scan_file``).
    self.linked = links
    self._init_index(parsed, module_names_of, reexports, parse)
    self._init_factories()
    self._init_mentions(other_files)
    self._init_links()
    unparsed = self._read_flax_optim_modules(sources, parse)
    self._init_cross_flow()
    if links:
      self._link_project(sources, parse, unparsed)
    else:
      self._read_serialization_helpers(sources, parse, unparsed)
    # The modules at either end of a link the model found: not those the
    # flows of modules walked later add (``link_self_attribute``), which
    # would make it depend on the order they are walked in.
    self.link_ends = frozenset(
        path for link in self.links
        for path in (link.producer_path, link.consumer_path))

  def _read_flax_optim_modules(self, sources, parse) -> set:
    """Reads the modules that can see flax.optim, or name a factory or a
    rule class found so far, until a round finds none; returns the paths
    that do not parse."""
    # Only modules that can see flax.optim, or name a factory found so far,
    # can hold or call one: the rest of a large tree is never analysed.
    tokens = {'optim', 'flax.optim', 'legacy_optim'} | {
        k.rpartition('.')[2] for k in self.reexports} | {
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
    return unparsed

  def _read_serialization_helpers(self, sources, parse, unparsed):
    """Reads the modules the modules read call that use flax.serialization
    (``scan``, whose model follows no other call across modules): a helper
    of the user's there that only saves or restores what it is given
    (``_serialization_helpers``) passes an optimizer on as ``migrate``'s
    model, which reads every callee's module, sees it."""
    spells = _project_index.spells_any_of(
        (_serialization_helpers.MODULE_WORD,))
    self._read_paths(sorted(
        p for p in _params.callee_modules(self)
        if p not in unparsed and p in sources and spells(sources[p][0])),
                     sources, parse, unparsed)

  def _solve_steps(self, *givers_from):
    """The followed step factories (``_step_values``); with
    ``givers_from`` (sources, parse, unparsed) the step factories first."""
    if givers_from:
      self._solve_optimizer_givers(*givers_from)
    self.step_params, self.followed_factories = _step_values.solve(self)

  def _link_project(self, sources, parse, unparsed):
    """Follows optimizers across modules and links the modules of each
    flow (what ``migrate`` checks)."""
    self._read_calls(sources, parse, unparsed)
    given_defs = _def_params.solve(
        self, lambda words: self._trees_spelling(words, sources, parse))
    passing = _params.solve(
        self, lambda: self._solve_optimizer_givers(sources, parse, unparsed))
    self._solve_factories()  # over the modules the givers' callers added
    self._solve_steps()
    _step_calls.solve(self, lambda: self._solve_steps(sources, parse,
                                                      unparsed))
    # (solved: what the solves kept for the next refers back to the model)
    self.givers_memo, self._rate_setters_of = None, (None, frozenset())
    for path in self.names:
      self._link_calls(path, self.trees[path])
      self._link_rule_uses(path, self.trees[path])
      self._link_optimizer_calls(path, self.trees[path])
      self._link_disagreeing_overrides(path, self.trees[path])
    self._link_unseen_callers()
    self._link_holders(sources, parse)
    for path, call, function in given_defs:
      self.links.append(_links.call_link(
          path, call, function,
          f'passes a flax.optim definition to {function.node.name}() '
          f'({function.path}:{function.node.lineno}), which makes its '
          'optimizer'))
    for path, call, function in passing:
      self.links.append(_links.call_link(
          path, call, function,
          f'passes an optimizer to {function.node.name}() '
          f'({function.path}:{function.node.lineno}), which uses it'))
