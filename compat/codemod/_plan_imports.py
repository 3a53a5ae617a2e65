"""What a module's rewrite plan does with names: flax.optim's imports
removed (or kept for modules that import them from here), its classes
named, the removed jax spellings. Stdlib only."""

import ast

from compat.codemod import _codes
from compat.codemod import _flow
from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _plan_records
from compat.codemod import _plan_uses
from compat.codemod import _removals
from compat.codemod import _state_layout
from compat.codemod import _walk

_RULES = _plan_records.RULES_MODULE  # the module migrated code imports
# The node classes each pass reads (``_walk.nodes_of``: filtered once per
# tree, not each pass walking all of the module's nodes).
_IMPORTS = (ast.Import, ast.ImportFrom)
_REFERENCES = (ast.Name, ast.Attribute)


class PlanImports(_plan_uses.PlanUses):
  """Plans the imports, class references and removals. Part of
  ``_rewrite_plan.Planner``, whose ``__init__`` sets the state."""

  def _plan_import_removals(self):
    for node in _walk.nodes_of(self.tree, _IMPORTS):
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
        self.leave(node, 'import', _codes.note(_codes.REEXPORT_KEPT))

  def _reexport_leftovers(self) -> list:
    """Imports that reach flax.optim through another module's re-export."""
    leftovers = []
    for node in _walk.nodes_of(self.tree, _IMPORTS):
      for alias in node.names:
        local = alias.asname or alias.name.partition('.')[0]
        raw = self.names.binding(ast.Name(id=local), at=node) or ''
        path = self.names.resolve(ast.Name(id=local), at=node)
        if path and path.startswith('flax.optim') and not (
            _names.canonical(raw).startswith('flax.optim')):
          leftovers.append(self._leftover(node, 'reexport', (
              _codes.filled_note(_codes.REEXPORTED, local=local, raw=raw))))
    return leftovers

  def _plan_class_references(self, flow_kept: bool = False):
    """``optim.Optimizer`` / ``optim.DynamicScale`` anywhere (annotations);
    ``flow_kept``: the flow stays as it is, whatever the leftovers say."""
    if self.flow_held:
      return  # the file keeps flax.optim: its classes stay named
    flow_ok = not flow_kept and not any(
        l.construct in _plan_records.FLOW_CONSTRUCTS for l in self.leftovers)
    for node, path in self._whole_references():
      if id(node) in self.claimed:
        continue  # only whole references, not a user rule's
      if path in _members.DYNAMIC_SCALE_PATHS:
        package, module, cls = _members.counterpart_path(
            _members.DYNAMIC_SCALE_CLASS).rsplit('.', 2)
        name = self._free_name('dynamic_scale_lib', 'flax_dynamic_scale')
        self.imports.append((package, module, name))
        self.edit(node, f'{name}.{cls}', 'dynamic_scale')
      elif path in _plan_records.DEF_CLASSES and flow_ok and not (
          isinstance(self.parents.get(node), ast.Call) and
          self.parents[node].func is node):  # a MultiOptimizer(...) call
        # A factory's return annotation: what the rewritten definition is.
        transform = _members.counterpart_path(_members.DEF_CLASS)
        self.imports.append((transform.split('.', 1)[0], None, None))
        self.edit(node, transform, 'annotation')
      elif flow_ok and (
          _state_layout.plan_reference(self, node, path, _RULES)):
        continue  # flax.optim's layout, built by hand or annotated
      elif path in _flow.OPTIMIZER_CLASSES:
        if flow_ok:
          name = self._train_state_name()
          self.edit(node, f'{name}.TrainState', 'annotation')
        else:
          self.leave(node, 'annotation', _codes.note(_codes.ANNOTATION_KEPT))

  def _whole_references(self) -> list:
    """``[(node, its path)]`` of each name or attribute chain read whole
    (not an attribute's value; an alias's own name is a store): found once
    per module model and names, so a plan and its twin (``plan_and_kept``)
    resolve them once."""
    key = ('whole references', self.names)
    if key not in self.module.analyses:
      # Only a chain from a name that can lead into flax.optim resolves to
      # one of its classes (``reference_roots``; under a star import of
      # flax.optim, any name may): the others are not resolved at all.
      roots = None if self.names.star_flax_optim else (
          self.names.reference_roots())
      self.module.analyses[key] = [
          (node, self.names.resolve(node))
          for node in _walk.nodes_of(self.tree, _REFERENCES)
          if isinstance(node.ctx, ast.Load) and not isinstance(
              self.parents.get(node), ast.Attribute) and (
                  roots is None or _names.chain_root(node) in roots)]
    return self.module.analyses[key]

  def _removal_matches(self) -> list:
    """``[(node, _removals.Removal)]`` of the nodes using a removed API, in
    the walk's order: found once per module model and names, so a plan and
    its twin (``plan_and_kept``) match them once."""
    key = ('removals', self.names)
    if key not in self.module.analyses:
      self.module.analyses[key] = [
          (node, removal)
          for node in _walk.nodes_of(self.tree, _removals.MATCHED_KINDS)
          for removal in [self.names.answer(_removals.match, node)]
          if removal is not None]
    return self.module.analyses[key]

  def _plan_removals(self):
    """Neighbouring removals (``jax.tree_map``...): the mechanical ones."""
    for node, removal in self._removal_matches():
      if (node.lineno, _codes.code_of(removal.construct,
                                      removal.old)) in self.held:
        self.notes.append(_plan_records.Leftover(node.lineno, removal.construct,
                                   removal.old, _plan_records.HELD_NOTE))
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
