"""Finding the links (``_links.Link``) between the modules of one
optimizer flow: a factory's call and the ``.create`` its definition meets,
a user rule class's uses, a call of a function that gives or takes an
optimizer, a class holding an optimizer and every module touching the
field, an override or a caller migrate cannot see. A part of
``_project.Model``. Stdlib only.
"""

import ast
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _factories
from compat.codemod import _flow
from compat.codemod import _links
from compat.codemod import _members
from compat.codemod import _multi
from compat.codemod import _names
from compat.codemod import _project_index
from compat.codemod import _walk

# What only a flax.optim Optimizer has, not the TrainState that replaces it:
# a name used so (``opt.target``, ``opt.state.step``) takes an optimizer.
_OPTIMIZER_ONLY = (_members.TARGET, _members.APPLY_GRADIENT,
                   _members.OPTIMIZER_DEF, _members.COMPUTE_GRADIENT,
                   _members.OPTIMIZE, _members.RESTORE_STATE,
                   _members.REPLICATE, _members.UNREPLICATE)

# Of ``opt.state``.
_OPTIMIZER_STATE_ONLY = (_members.STEP, _members.PARAM_STATES)

# Decorators that leave who calls a method as it was.
_PLAIN_DECORATORS = ('staticmethod', 'classmethod')
_CREATE = _members.CREATE
# The node classes the links' passes over a module look at (``nodes_of``).
_CALLS = (ast.Call,)
_CALLS_AND_ATTRIBUTES = (ast.Attribute, ast.Call)


def decorated_factory_assumption(function, decorators) -> str:
  """What migrating a factory the project calls assumes where decorators
  (gin's ``configurable`` and its kind) wrap it: the body proves what it
  returns, the decorators' code (a library's) and their registry (a config
  file may call it) are not read."""
  spelled = ', '.join(f'`@{ast.unparse(d)}`' for d in decorators)
  return _codes.unsafe_assumption(_codes.DECORATED_FACTORY,
                                  decorators=spelled, name=function.name)


class Linker:
  """Finds the links of the project's flows (a part of
  ``_project.Model``)."""

  def _init_links(self):
    self.links: list[_links.Link] = []
    # (path, line, name) of the factories and rule classes called and named
    # nowhere else in the project, rewritten with their flows: their
    # contract changes for callers outside it (the report says so).
    self.unseen: set[tuple] = set()
    # path -> the optimizer flow of a module the model read (its own tree
    # and names), built once for every reader (``module_flow``).
    self.module_flows: dict = {}
    # method -> whether it gives nothing (``_factories.gives_nothing``):
    # asked at each call that may run it, in every module read.
    self._gives_nothing: dict = {}

  def module_flow(self, path) -> _flow.OptimizerFlow:
    """The optimizer flow of the module ``path`` the model read, on its
    tree and names: built at the first question (``_untyped_uses``), then
    shared with scan's walk of the same tree (``scan._Visitor.flow``)."""
    if path not in self.module_flows:
      self.module_flows[path] = _flow.OptimizerFlow(self.trees[path],
                                                    self.names[path])
    return self.module_flows[path]

  def _link_calls(self, path, tree):
    """A link per call of a project factory whose definitions are made in
    another module; what the call's result meets decides the consumer."""
    names = self.names[path]
    calls = [node for node in _walk.nodes_of(tree, _CALLS)
             if self.returns_def(node, names)]
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
      for producer_path, made in producers:
        for line, used, reason in consumers:
          self.links.append(_links.Link(
              producer_path, made.line, path, line, node.lineno, reason,
              producer_element=made, consumer_element=used))

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
        used, reason = _links.Element.of(parent), _links.RULE_USED_HERE
        self.called_rules.update(
            f'{module}.{rule[1].name}'
            for module in self.module_names_of.get(rule[0], ()))
      elif isinstance(parent, ast.ClassDef) and node in parent.bases:
        used, reason = _links.Element.of(parent), _links.RULE_USED_HERE
      elif isinstance(parent, (ast.Import, ast.ImportFrom, ast.alias)):
        continue
      else:
        used, reason = None, (f'the rule class goes into '
                              f'`{ast.unparse(parent)[:80]}`, which migrate '
                              'cannot follow')
      self.links.append(_links.Link(
          rule[0], rule[1].lineno, path, None if used is None else used.line,
          node.lineno, reason, producer_element=_links.Element.of(rule[1]),
          consumer_element=used))

  def _link_optimizer_calls(self, path, tree):
    """A whole-flow link per call of another module's function that gives
    or takes an optimizer: what one module makes, the other uses."""
    functions = self.optimizer_givers | self.optimizer_takers | set(
        self.step_factories) | set(self.tuple_givers)
    if not functions:
      return
    names = self.names[path]
    for node in _walk.nodes_of(tree, _CALLS):
      for function in self.callees(node, names):
        if function.path == path or function.node not in functions:
          continue
        self.links.append(_links.call_link(
            path, node, function, f'calls {function.node.name}() '
            f'({function.path}:{function.node.lineno}), which gives or '
            'takes a flax.optim Optimizer (or a step that does)'))

  def _link_disagreeing_overrides(self, path, tree):
    """A method call some of whose overrides return a definition and some
    something else (``return self.given``): what the call gives is not
    known, so the definitions stay (a link with no consumer)."""
    names = self.names[path]
    for node in _walk.nodes_of(tree, _CALLS):
      if names.resolve(node.func):
        continue
      candidates = self._method_candidates(node)
      others = [c for c in candidates if c.node not in self.def_functions
                and not self._gives_nothing_once(c.node)]
      if not others or len(others) == len(candidates):
        continue
      self._called.update(c.node for c in candidates)
      other = others[0]
      reason = (f'{node.func.attr}() may run the override at '
                f'{other.path}:{other.node.lineno}, which does not return a '
                'flax.optim definition: what the call gives is not known')
      for producer_path, made in self._factory_producers(node, names):
        self.links.append(_links.Link(producer_path, made.line, path, None,
                                      node.lineno, reason,
                                      producer_element=made))

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
      assumption = None
      if decorated:
        reason = _codes.fix_why(_codes.DECORATED_FACTORY, name=node.name,
                                decorator=ast.unparse(decorated[0]))
        if node in self._called:
          assumption = decorated_factory_assumption(node, decorated)
          reason = _links.HIDDEN_FIX_REASON.format(why=reason,
                                                   assumption=assumption)
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
      for path, made in self._producers(function):
        self.links.append(_links.Link(path, made.line, function.path, None,
                                      node.lineno, reason,
                                      producer_element=made,
                                      assumption=assumption))

  def _gives_nothing_once(self, method) -> bool:
    if method not in self._gives_nothing:
      self._gives_nothing[method] = _factories.gives_nothing(method)
    return self._gives_nothing[method]

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
        self.links.append(_links.Link(
            holder.path, holder.line, path, line, line,
            f'makes, stores or reads the optimizer that '
            f'`{holder.name}.{holder.field}` holds (declared at '
            f'{holder.path}:{holder.line})', 'field'))
    self._link_positional_reads(sources, parse)

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
    self.links.append(_links.Link(
        holder.path, holder.line, holder.path, None, holder.line,
        f'declares `{holder.name}.{holder.field}` a flax.optim Optimizer, '
        f'and {why}, so what the field holds stays as it is', _links.HELD))

  def _untyped_uses(self, path, tree, fields) -> dict:
    """``{field: (path, line, code)}``: the first read, store or
    ``.replace(<field>=...)`` in ``tree`` of each of ``fields`` (contested
    by a class declaring it otherwise) on a receiver that is not typed as
    a holder of it (``_flow.OptimizerFlow.holds_field``); ``self.<field>``
    in the methods of a class declaring it otherwise is that class's own."""
    names = self.names.get(path)
    flows: list = []  # the module's flow, built at the first use met (most
    # modules read have none: a flow costs about what parsing them does)
    own = []  # (_own_members, found at the first read of a field)
    parents = _walk.parents(tree)
    found: dict = {}
    for node in _walk.nodes_of(tree, _CALLS_AND_ATTRIBUTES):
      if len(found) == len(fields):
        break  # (only each field's first use counts)
      used = []
      if isinstance(node, ast.Attribute) and node.attr in fields:
        if not own:
          own.append(_own_members(tree, fields))
        if id(node) not in own[0] and not _names_a_literal(
            node, parents.get(node)):
          used = [(node.attr, node.value)]
      elif isinstance(node, ast.Call) and isinstance(
          node.func, ast.Attribute) and node.func.attr in _members.COPY_METHODS:
        used = [(k.arg, node.func.value) for k in node.keywords
                if k.arg in fields]
      for field, receiver in used:
        if field in found:
          continue
        if names is not None and not flows:
          flows.append(self.module_flow(path))
        if not (flows and flows[0].holds_field(receiver, field)):
          found[field] = (path, node.lineno, ast.unparse(node)[:60])
    return found

  def _consumers(self, call, parents, names) -> list:
    """[(line of the .create, its ``_links.Element``, reason)], or
    [(None, None, why not)]; a return of another factory: its line, no
    element (its own calls are linked)."""
    parent = parents.get(call)
    code = ast.unparse(parent if parent is not None else call)[:80]
    if isinstance(parent, ast.Attribute) and parent.attr == _CREATE:
      return [(parent.lineno, _created_by(parent, parents, names),
               _links.CREATED_HERE)]
    if isinstance(parent, ast.Return):
      return [(call.lineno, None, 'returned by another definition factory')]
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and (
        isinstance(parent.targets[0], ast.Name)):
      return self._name_consumers(parent, parents, names, set())
    return [(None, None, f'the definition goes into `{code}`, which migrate '
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
        found.append((holder.lineno, _created_by(holder, parents, names),
                      _links.CREATED_HERE))
      elif isinstance(holder, ast.Return):
        found.append((read.lineno, None, 'returned by another definition '
                      'factory'))
      elif multi is not None:
        found.append((multi.lineno, _links.Element.of(multi),
                      _multi.IN_MULTI_OPTIMIZER))
      elif isinstance(holder, ast.Assign) and len(holder.targets) == 1 and (
          isinstance(holder.targets[0], ast.Name)) and (
              holder.targets[0].id not in seen):
        found += self._name_consumers(holder, parents, names, seen)
      else:
        found.append((None, None, f'`{name}` goes on into '
                      f'`{ast.unparse(holder)[:80]}`, which migrate '
                      'cannot follow'))
    return found or [(None, None, f'`{name}` is never created')]


def _created_by(create, parents, names) -> _links.Element:
  """The element the plan rewrites for ``<definition>.create`` (the
  attribute ``create``): the call ``d.create(p)``, or the outer call of
  ``jax.jit(d.create, ...)(p)``; else the attribute itself, which no plan
  rewrites (what it makes goes where migrate does not follow)."""
  call = parents.get(create)
  if isinstance(call, ast.Call) and call.func is create:
    return _links.Element.of(call)
  outer = parents.get(call)
  if isinstance(outer, ast.Call) and _flow.jitted_create(outer,
                                                          names) is create:
    return _links.Element.of(outer)
  return _links.Element.of(create)


def _holder_touches(tree, holders) -> list:
  """``[(holder, first line)]`` for each holder ``tree`` makes (a call of
  its class's name), stores into (a keyword of its field) or reads (an
  attribute named like its field, also of a call's result).

  An attribute of the field's name that is given a literal, or read only
  to be compared with one, is no optimizer's (``config.optimizer =
  'adam'`` in a config module; ``if config.optimizer == 'adam':``)."""
  first = {}
  parents = _walk.parents(tree)
  # The holders by field and by class name (in their order): most calls
  # and attributes of a module name none, told by one look-up each.
  by_field: dict = {}
  by_name: dict = {}
  for holder in holders:
    by_field.setdefault(holder.field, []).append(holder)
    by_name.setdefault(holder.name, []).append(holder)
  storing = _project_index.storing_names(holders)
  for node in _walk.nodes_of(tree, _CALLS_AND_ATTRIBUTES):
    touched = []
    if isinstance(node, ast.Call):
      called = _project_index.called_name(node)
      if called not in storing:
        continue  # (neither makes nor copies a holder)
      touched = [h for h, _ in _project_index.field_stores(node, holders)]
      touched += by_name.get(called, [])
    elif isinstance(node, ast.Attribute) and node.attr in by_field and (
        not _names_a_literal(node, parents.get(node))):
      touched = by_field[node.attr]
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
  if attribute.attr == _members.STATE and isinstance(outer, ast.Attribute) and (
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
      own.update(id(attribute) for attribute in _walk.under(method, tree)
                 if isinstance(attribute, ast.Attribute) and (
                     attribute.attr in fields & declared) and isinstance(
                         attribute.value, ast.Name) and (
                             attribute.value.id == instance))
  return own


def _names_a_literal(attribute, parent) -> bool:
  """``attribute`` is assigned a literal (``x.optimizer = 'adam'``) or read
  only for a comparison with literals (``x.optimizer == 'adam'``)."""
  if isinstance(parent, ast.Assign) and attribute in parent.targets:
    return _project_index.is_literal(parent.value)
  if isinstance(parent, ast.Compare):
    return all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
               for op in parent.ops) and all(
                   _project_index.is_literal(side) for side in [parent.left] +
                   parent.comparators if side is not attribute)
  return False
