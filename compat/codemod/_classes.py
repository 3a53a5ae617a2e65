"""The project's classes: their bases and subclasses, what their annotated
attributes hold, and which classes hold an optimizer in a field.

What ``x.attr.method()`` may run where every class of the project
declaring ``attr`` annotates it with a class of the project (that class's
method, own or inherited, and every override below it), and the optimizer
fields of the holder class a value is typed as. A part of
``_project.Model``, filled as the index (``_project_index``) reads each
module. Stdlib only.
"""

import ast
import re
from typing import Optional

from compat.codemod import _names
from compat.codemod import _project_index
from compat.codemod import _walk

_Function = _project_index._Function  # a function or method indexed
_STRUCT_DATACLASS = 'flax.struct.dataclass'


class ClassHierarchy:
  """The project's classes (a part of ``_project.Model``)."""

  def _init_classes(self):
    # The project's classes by every dotted name, their bases' dotted
    # names, and per attribute the classes its annotations name (None in
    # the set: one declaration names no class of the project, or a class
    # assigns ``self.<attr>`` without annotating it).
    self.classes: dict[str, ast.ClassDef] = {}
    self._bases: dict[ast.ClassDef, tuple] = {}
    self._attribute_classes: dict[str, set] = {}
    self._unread_declarations: dict[str, bool] = {}  # attr -> may be
    self._subclasses_memo: dict = {}
    # ClassDef -> {attribute: the dotted class its annotation names}
    self._field_classes: dict = {}
    # Dotted names of the classes ``flax.struct.dataclass`` makes.
    self._struct_classes: set = set()
    # (how many holders it was made of, {dotted class: its optimizer
    # fields}): ``class_fields`` of every holder, made again only once the
    # index has added holders (it only ever adds them).
    self._holder_fields: tuple = (0, {})

  def _index_class(self, path, node, names):
    """The class by its dotted names, its bases, its annotated attributes
    (what ``self.factory.method()`` may run, see ``_hierarchy_methods``)."""
    struct = any(names.resolve(d) == _STRUCT_DATACLASS
                 for d in node.decorator_list)
    for module in self.module_names_of.get(path, ()):
      self.classes[f'{module}.{node.name}'] = node
      if struct:
        self._struct_classes.add(f'{module}.{node.name}')
    self._bases[node] = tuple(_project_index.dotted_name(base, names)
                              for base in node.bases)
    annotated = set()
    for item in node.body:
      if isinstance(item, ast.AnnAssign) and isinstance(item.target,
                                                        ast.Name):
        annotated.add(item.target.id)
        self._field_classes.setdefault(node, {})[item.target.id] = (
            _project_index.dotted_name(_names.annotated_class(
                names, item.annotation), names))
        self._attribute_classes.setdefault(item.target.id, set()).add(
            _project_index.dotted_name(item.annotation, names))
    for item in _walk.under(node, names.tree):  # (the walk's, shared)
      if isinstance(item, ast.Attribute) and isinstance(
          item.ctx, ast.Store) and isinstance(item.value, ast.Name) and (
              item.value.id == 'self') and item.attr not in annotated:
        self._attribute_classes.setdefault(item.attr, set()).add(None)

  def class_fields(self, dotted: Optional[str]) -> frozenset:
    """The optimizer fields of the project's holder class ``dotted``."""
    # (each flow asks per call and annotation it types: a look-up by the
    # class's dotted name, not a pass over every holder per question)
    made, fields = self._holder_fields
    if made != len(self.holders):
      fields = {}
      for holder in self.holders:
        for module in self.module_names_of.get(holder.path, ()):
          dotted_holder = f'{module}.{holder.name}'
          fields[dotted_holder] = fields.get(dotted_holder, frozenset()) | {
              holder.field}
      self._holder_fields = (len(self.holders), fields)
    return fields.get(dotted, frozenset())

  def annotation_fields(self, annotation, names) -> frozenset:
    """The optimizer fields of the holder class an annotation in the module
    of ``names`` names (itself or by a module-level alias of it,
    ``_class_alias``)."""
    node = _names.annotated_class(names, annotation)
    return frozenset() if node is None else self.class_fields(
        _project_index.dotted_name(_class_alias(names, node), names))

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

  def field_class(self, dotted, attr) -> Optional[str]:
    """The dotted class the project's class ``dotted`` (or a base of it
    of the project) annotates its attribute ``attr`` with; None where
    none does, or a subclass declares ``attr`` again."""
    node = self.classes.get(dotted)
    if node is None or any(attr in self._field_classes.get(sub, ())
                           for sub in self._subclasses(node)):
      return None
    seen: set = set()
    while node is not None and node not in seen:
      seen.add(node)
      if attr in self._field_classes.get(node, ()):
        return self._field_classes[node][attr]
      bases = [self.classes.get(b) for b in self._bases[node]]
      node = bases[0] if len(bases) == 1 else None
    return None

  def replaces_alike(self, dotted) -> bool:
    """``x.replace(...)`` of an instance of the project's class ``dotted``
    gives an instance of it: a ``flax.struct`` dataclass that defines no
    ``replace`` of its own (nor a subclass does)."""
    node = self.classes.get(dotted)
    return node is not None and dotted in self._struct_classes and all(
        self._own_method(c, 'replace') is None
        for c in [node] + self._subclasses(node))

  def instance_method(self, dotted, name) -> Optional[_Function]:
    """The method ``name`` instances of the project's class ``dotted``
    run, where it and every override below it is a method of a class all
    of whose bases are the project's (``project_method``); else None."""
    node = self.classes.get(dotted)
    found = None if node is None else self._inherited_method(node, name,
                                                             set())
    if found is None or not self.project_method(found.node):
      return None
    overrides = [self._own_method(sub, name) for sub in self._subclasses(
        node)]
    return found if all(m is None or self.project_method(m.node)
                        for m in overrides) else None

  def project_method(self, method) -> bool:
    """``method`` is defined by a class of the project whose bases, and
    theirs, are all the project's: no library's class (flax.optim's
    Optimizer among them) has a say in what it is."""
    owner = next((c for c in self._bases if method in c.body), None)
    return owner is not None and self._project_only(owner, set())

  def _project_only(self, node, seen) -> bool:
    if node in seen:
      return True
    seen.add(node)
    return all(self.classes.get(dotted) is not None and self._project_only(
        self.classes[dotted], seen) for dotted in self._bases[node])

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


def _class_alias(names, node) -> ast.AST:
  """What the name ``node`` stands for where the module of ``names`` binds
  it once, at its top level, to another class reference (``TrainState =
  training_task.TrainState``, a program's shorter name for the class of
  another module), followed through aliases of aliases; else ``node``."""
  if not (isinstance(node, ast.Name) and node.id in _walk.derived(
      names.tree, _top_level_assignments)):
    return node  # (no alias: the module's bindings need not be counted)
  aliases = _walk.derived(names.tree, _module_aliases)
  seen = set()
  while isinstance(node, ast.Name) and node.id in aliases and (
      node.id not in seen):
    seen.add(node.id)
    node = aliases[node.id]
  return node


def _module_aliases(tree) -> dict:
  """``{name: value}`` of the module's top-level ``name = value``
  assignments of a name or an attribute chain whose name nothing else in
  the module binds (no other assignment, import, definition or
  parameter): what the name means wherever it is read."""
  assigned = _walk.derived(tree, _top_level_assignments)
  bound: dict = {}
  for node in _walk.nodes(tree) if assigned else ():
    name = _names.binds(node)
    if name is not None:
      bound[name] = bound.get(name, 0) + 1
  return {name: value for name, value in assigned.items()
          if bound[name] == 1}


def _top_level_assignments(tree) -> dict:
  """``{name: value}`` of the module's top-level ``name = value``
  assignments of a name or an attribute chain (the last of a name's): the
  candidates of ``_module_aliases``."""
  return {statement.targets[0].id: statement.value
          for statement in tree.body
          if isinstance(statement, ast.Assign) and len(statement.targets) == 1
          and isinstance(statement.targets[0], ast.Name) and isinstance(
              statement.value, (ast.Name, ast.Attribute))}
