"""One module's facts that its rewrite plan and the analyses of its plan
share, each computed once: the tree's parents, the optimizer flow (plain and
replicated), the lines where scan found a checkpoint, the values stored in
fields annotated ``optim.Optimizer``. An analysis reads these, never the
planner. Stdlib only."""

import ast
import copy
import functools

from compat.codemod import _flow
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _project
from compat.codemod import _walk


class ModuleModel:
  """The facts of one module a ``Planner`` and ``_escape_analysis`` read."""

  def __init__(self, tree: ast.Module, names, checkpoint_lines: frozenset,
               flow=None):
    """``flow``: the module's ``OptimizerFlow`` where one was built."""
    self.tree, self.names = tree, names
    self.flow = flow or _flow.OptimizerFlow(tree, names)
    # Lines where scan found a checkpoint write or read (not a pickle:
    # ``_plan_records.checkpoint_lines``).
    self.checkpoint_lines = checkpoint_lines
    self.parents = _walk.parents(tree)  # each node -> the node holding it
    # What analyses of these facts found, by the analysis and what it read
    # (``_escape_analysis``): shared with the copies for other checkpoint
    # lines (``with_checkpoint_lines``), so scan's check and the plan's
    # ask once where they read alike.
    self.analyses: dict = {}

  def with_checkpoint_lines(self, checkpoint_lines: frozenset):
    """This module's facts with other checkpoint lines (a plan's, from
    scan's model of the same tree and names): what was computed so far,
    the flows first, is shared, not built again."""
    shared = copy.copy(self)
    shared.checkpoint_lines = checkpoint_lines
    return shared

  @functools.cached_property
  def replicated(self) -> _flow.OptimizerFlow:
    """Which optimizers are ReplicatedOptimizers (made by .replicate()):
    asked only in a module that replicates one (most do not, and a flow
    costs about a walk of the module)."""
    return _flow.OptimizerFlow(self.tree, self.names, replicated_of=self.flow)

  @functools.cached_property
  def replicated_beside(self):
    """What the escape check asks after the plain flow said no (``flow.X
    or replicated_beside.X``): the replicated flow where it can prove a
    value, else ``_flow.NO_OPTIMIZERS``. It proves one only from a root:
    a ``.replicate()`` read in this module, or a parameter of one of its
    functions that other modules' calls prove (``_param_holds``'
    elsewhere); what it proves without one (a parameter passed only to
    itself), its plain flow, more permissive rule by rule, proves too."""
    if self._replicates_here() or self._proven_elsewhere():
      return self.replicated
    return _flow.NO_OPTIMIZERS

  def _replicates_here(self) -> bool:
    """A ``.replicate`` read of a value the plain flow proves an optimizer:
    the replicated flow's rule for ``x.replicate()`` proves nothing where
    the plain flow does not prove ``x`` (``jax_utils.replicate(state)``,
    the common one, is no root)."""
    return any(node.attr == _members.REPLICATE and
               self.flow.is_optimizer(node.value)
               for node in _walk.nodes_of(self.tree, (ast.Attribute,)))

  def _proven_elsewhere(self) -> bool:
    model = self.names.model
    return model is not None and any(
        model.param_verdict(self.names, name, parameter)
        for name, function in self.flow.functions.items()
        for parameter in _names.parameter_names(function))

  @functools.cached_property
  def field_stores(self) -> list:
    """``[(holder, value)]`` of every value this module stores in a field
    annotated ``optim.Optimizer`` (the class called, ``.replace``, an
    attribute assigned); read once, asked per value by the escape check."""
    model = self.names.model
    holders = model.holders if model is not None else (
        _project.holders_in(None, self.tree, self.names))
    return [store for node in _walk.nodes_of(self.tree, (ast.Call,))
            for store in _project.field_stores(node, holders)] + (
                _project.attribute_stores(self.tree, holders))

  def unproven_field_stores(self) -> list:
    """``[(holder, value)]`` of the values stored in an optimizer field
    that this module cannot prove read alike once migrated
    (``stores_alike``): the field's readers elsewhere stay with them."""
    stored = {id(value) for _, value in self.field_stores}
    return [(holder, value) for holder, value in self.field_stores
            if not self.stores_alike(value, stored)]

  def only_stored(self, name) -> bool:
    """The name ``name`` binds optimizers or dict stand-ins and is read
    only to be stored in an optimizer field (``stores_alike``)."""
    stored = {id(value) for _, value in self.field_stores}
    return self.stores_alike(name, stored)

  def stores_alike(self, value, stored) -> bool:
    """What ``value`` puts in an optimizer field is read alike once the
    flow is migrated: an optimizer (rewritten with its readers), or a dict
    stand-in (``{'target': restored}``: read as a dict, before and after).
    A name bound to either must be read only to be stored (``stored``: the
    ids of every value this module stores in such a field): any other
    read stays as it was, and would meet a TrainState. ``None`` (a field
    ``Optional[optim.Optimizer]`` emptied: ``.replace(optimizer=None)``)
    is read alike too: code reading the field meets None before and after."""
    if self.flow.is_optimizer(value) or _is_none(value):
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


def _is_none(value) -> bool:
  return isinstance(value, ast.Constant) and value.value is None
