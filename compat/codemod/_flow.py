"""Which expressions of a module hold a legacy ``Optimizer``, with certainty.

``ModuleNames`` guesses from names (``optimizer``, ``opt``) and tracks plain
assignments; that is enough to report a usage but not to rewrite one. This
module proves it instead, for the flows a training script has: a name, a
function parameter, a function's return value (also one element of a returned
tuple), and a dataclass field annotated ``optim.Optimizer``.

It is a greatest fixpoint over the module's bindings (flow-insensitive, per
scope): every name starts as "maybe an optimizer"; a binding whose value is
not provably an optimizer removes its name; a parameter needs an annotation
or call sites in this module that all pass an optimizer (a function that
escapes, e.g. into a list or another module's call, has unknown callers).
What survives is an optimizer on every path. Stdlib only.

A name bound once to ``jax.pmap(functools.partial(step, a, k=v), ...)`` (or
``jax.jit``, ``jax.pmap(step)``, nested partials) is an alias of ``step``:
its calls are ``step``'s calls with the bound arguments put first, its
results are ``step``'s results (these wrappers keep a pytree's classes).

``OptimizerFlow`` is built from its phases, one module each:
``_flow_scopes`` (collect the bindings), ``_flow_solve`` (the fixpoint),
``_flow_queries`` (single expressions, dicts saved as trees, other modules'
steps), ``_flow_holding`` (what holds an optimizer); ``_flow_values`` holds
the calls and records they share.
"""

import ast

from compat.codemod import _dict_returns
from compat.codemod import _flow_calls
from compat.codemod import _flow_holding
from compat.codemod import _flow_values
from compat.codemod import _names
from compat.codemod import _self_holders
from compat.codemod import _walk

OPTIMIZER_CLASSES = _names.OPTIMIZER_CLASSES
# What other modules ask of a flow's values (``_flow_values``).
jitted_create = _flow_values.jitted_create
create_arguments = _flow_values.create_arguments
is_none = _flow_values.is_none
creates_whole = _flow_values.creates_whole
parameter_of = _flow_values.parameter_of
sets_hyper_params = _flow_values.sets_hyper_params
StepSignature = _flow_values.StepSignature
merged_step = _flow_values.merged_step
runs = _flow_values.runs
required = _flow_values.required


class _NoOptimizers:
  """The flow of a module in which no name can resolve to flax.optim and
  that the project's model did not read (``scan``'s prefilter says so): no
  value there has a root an optimizer could come from (a definition, an
  annotation, another module's factory or step), so none is one, and
  building the flow (about a walk of the module and a fixpoint over its
  bindings) would only prove that."""

  def is_optimizer(self, node, scope=None) -> bool:
    del node, scope
    return False

  def member_use(self, node, called):
    del node, called

  def argument_proven(self, call, argument) -> bool:
    del call, argument
    return False


NO_OPTIMIZERS = _NoOptimizers()


class OptimizerFlow(_flow_holding.FlowHolding, _self_holders.SelfHolding,
                    _flow_calls.FlowCallForms, _dict_returns.DictReturns):
  """Proves which expressions evaluate to a legacy ``Optimizer``."""

  def __init__(self, tree: ast.Module, names, replicated_of=None):
    """``replicated_of``: this module's plain flow; given, this flow proves
    instead which expressions hold an optimizer made by ``.replicate()`` (a
    ReplicatedOptimizer: annotations and fields do not say so)."""
    self.names = names  # a _names.ModuleNames
    self.base = replicated_of
    self.scopes: dict[ast.AST, _flow_values.Scope] = {}
    self.functions: dict[str, ast.AST] = {}  # module-level defs by name
    # Every def of the module's top level by name, in order (a script
    # redefining ``train_step`` section by section has several).
    self._module_defs: dict[str, list] = {}
    # A def nested in a function, bound once there and the module's only
    # def of its name (``def update_fn`` in ``main``): called like a module
    # function where a read sees that binding. Name -> that scope.
    self._local_homes: dict[str, _flow_values.Scope] = {}
    # {factory name: (step name, reference)}: the steps module factories
    # return (``_add_returned_steps``).
    self.returned_steps: dict = {}
    # (scope, name) -> the StepSignature of another module's step factory
    # whose call the name is bound to once (``update = train.make_update(
    # ...)``): its calls give what that step gives.
    self.foreign_steps: dict = {}
    self.escaped: set[str] = set()  # functions used other than by a call
    self.calls: dict[str, list] = {}  # function name -> [(call, scope)]
    # (scope, name) -> the function
    self.aliases: dict[tuple, _flow_values.Bound] = {}
    self._alias_candidates: list = []  # (scope, name, value) to check
    self.fields: dict[str, bool] = {}  # dataclass field -> is an optimizer
    # This module's classes with a field annotated optim.Optimizer (holders)
    # -> those fields; each method -> its class (``self`` in a holder's
    # methods is one).
    self.holder_classes: dict[str, set] = {}
    self._method_class: dict[int, ast.ClassDef] = {}
    self._receivers_open: set = set()  # (scope, name, field) being typed
    self._holding_open: set = set()  # names, parameters, functions asked
    # The module's walk, shared with every other reader of the tree
    # (``_walk``): each node -> the node holding it, and -> its children.
    self._parents: dict = _walk.parents(tree)
    self._children: dict = _walk.children(tree)
    self._scope_of: dict[ast.AST, _flow_values.Scope] = {}
    self._loads: list[ast.Name] = []  # every name read: escape candidates
    self._factories_open: set = set()  # factories being checked (recursion)
    self._defs_open: set = set()  # (scope, name) being checked (recursion)
    self._returns_open: set = set()  # functions whose returns are asked
    # Answers of _returned once the fixpoint is solved (they no longer
    # change), asked outside any other question.
    self._returned_memo: dict = {}
    self._own_nodes_of: dict = {}  # function -> its scope's nodes (a list)
    # Dicts holding an optimizer saved or loaded as trees (_legacy_trees):
    # (dict node, key) -> the verdict, asked for lazily (``tree_verdict``:
    # found once for every flow of the module's tree and names).
    self._tree = tree
    self._tree_verdicts: dict = {}
    self._tree_entries_of: dict = {}  # function -> _tree_entries
    self._solved = False
    self._init_call_forms()
    self._init_dict_returns()
    self._init_self_attributes(tree)
    self._collect_module(tree)
    self._solve()
    # The names some binding of which holds an optimizer, once solved (the
    # fixpoint alone changes ``alive``): a read of any other name is none,
    # told without walking its scopes (``is_optimizer``; the escape check
    # and the plan ask about every name of the module).
    self.alive_names = frozenset(name for _, name in self.alive)
    self._solved = True

