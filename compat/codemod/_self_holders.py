"""Optimizers kept on an instance: ``self.opt = optim.Adam().create(p)``.

An attribute ``self.<attr>`` of a class is followed like a name when every
store and every read of it is visible in the class's own methods: stores
are plain assignments (``self.opt = value``, or an element of a tuple
unpacked, ``self.opt, loss = step(...)``) through the methods' instance
parameter, and nothing else in the project names the attribute, but
classes sharing its instances in other modules (a subclass, a base,
resolved by their headers' names) through theirs: those form one holder
with it where each module's own flow proves the attribute an optimizer
there, and their modules are linked (``link_self_attribute``: migrated
together or not at all). ``super(<class>, self)`` runs a base's method,
read as the family's own. The flow
then proves it an optimizer where every value stored there is one (part of
its fixpoint: a store may be the step of the attribute itself), and every
``self.<attr>`` read in the class is one. A property whose every return is
proven the same way is followed alike (its reads are ``self.<property>``).

Anything migrate could not see keeps the attribute out, with the reason
(``why_not``): the attribute named elsewhere (in a class sharing instances
with this one in the same module, or in another module not proving it
one there; outside a class's own methods; in another module, except as
``self.<attr>`` of a class sharing none or one of the holder; a
string, as ``getattr`` takes it), the instance itself handed on
(``f(self)``, ``vars(self)``), the instance parameter rebound, an attribute
protocol (``__dict__``, ``__getattr__``...), a class body declaring the
attribute, a base (or a base's base) outside the project other than
``abc.ABC``, a class decorator other than gin's, a store other than an
assignment, a store not provably an optimizer. Not seen: code outside
the project handed an instance from outside the class (``pickle.dump(
agent)`` in a script), as for any object migrate changes. (A module that
calls ``.replicate()`` keeps every optimizer the replicated flow does not
prove one: the planner's rule.)

Stdlib only.
"""

import ast
import copy
import functools
import re
from typing import Iterator, NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _names
from compat.codemod import _walk

# What reads or writes an instance's attributes by name, generically: a
# class defining one, or a method reaching one through ``self``, keeps all
# its attributes out.
_ATTRIBUTE_PROTOCOL = ('__dict__', '__getattr__', '__getattribute__',
                       '__setattr__', '__delattr__', '__getstate__',
                       '__setstate__', '__reduce__', '__reduce_ex__',
                       '__slots__')
# Bases (by last name) and class decorators of libraries that read no
# attribute of an instance: an abstract base's checks, gin's wrapper of the
# constructor that fills its arguments.
_BLANKS = b' \t\n\r\x0c\x0b'  # what \s matches in a bytes pattern
_QUIET_BASES = ('object', 'ABC', 'Generic')
_QUIET_DECORATORS = ('gin.configurable',)


class Key(NamedTuple):
  """An attribute of the instances of one class."""
  owner: ast.ClassDef
  attr: str


class SelfAttributes:
  """One module's attributes held through ``self`` and the values stored
  in them (``stores``), each read or store of them by node (``key_of``),
  and why the others are not followed (``why_not``)."""

  def __init__(self, tree: ast.Module, names):
    self._names = names
    self._keys: dict[int, Key] = {}  # id(self.<attr> node) -> its key
    self._reads: dict[Key, list] = {}  # key -> its self.<attr> reads
    self._properties: set = set()  # the keys of read-only properties
    self.stores: dict[Key, list] = {}  # key -> [value or ('item', v, i)]
    self.why_not: dict[Key, str] = {}
    self._declared: set = set()  # keys the class body declares
    self._owner_why: dict[ast.ClassDef, str] = {}
    self._tree = tree
    self._class_names: Optional[_ClassNames] = None
    for owner in _walk.statements(tree):  # (a class is a statement)
      if isinstance(owner, ast.ClassDef):
        self._read_class(owner)
    self._elsewhere_in_module(tree)
    self._outside: dict[Key, Optional[str]] = {}  # outside_why, once asked
    # key -> (path, why) of the module of its family where the attribute
    # is not followed for a reason of its own (``_family_why``)
    self.family_roots: dict[Key, tuple] = {}
    # key -> the links to other modules of its family its ``outside_why``
    # found, made once the flow's fixpoint keeps the attribute
    # (``deferring``: while it runs, an attribute is asked about before
    # the values it takes are disproven), or at once after it.
    self._family_links: dict[Key, list] = {}
    self.deferring = False
    for key in list(self.stores):
      why = self._owner_why.get(key.owner) or self.why_not.get(key)
      if key in self._declared:
        del self.stores[key]  # a field or method: not an attribute kept
      elif why is not None:
        self.why_not[key] = why
        del self.stores[key]

  @classmethod
  def of(cls, tree: ast.Module, names) -> 'SelfAttributes':
    """``SelfAttributes(tree, names)``, the module read once per tree and
    names (``_walk.derived``: the project's phases build a flow of a
    module again and again), each flow given its own copy of what its
    questions add to (``why_not``, what ``outside_why`` found)."""
    read = _walk.derived(tree, cls, names)
    own = copy.copy(read)
    own.why_not = dict(read.why_not)
    own._outside, own.family_roots, own._family_links = {}, {}, {}
    return own

  def keys(self) -> set:
    """Every attribute read or stored through ``self`` in this module."""
    return set(self._keys.values())

  def key_of(self, node) -> Optional[Key]:
    """The attribute ``node`` (a ``self.<attr>`` of some class's method)
    reads or stores."""
    return self._keys.get(id(node))

  # -------------------------------------------------------- one class
  def _read_class(self, owner):
    protocol = [name for item in owner.body for name in (
        [item.name] if isinstance(item, (ast.FunctionDef,
                                         ast.AsyncFunctionDef))
        else _declared_names(item)) if name in _ATTRIBUTE_PROTOCOL]
    self._owner_why[owner] = None if not protocol else _codes.filled_note(
        _codes.SELF_PROTOCOL, owner=owner.name, name=protocol[0])
    for item in owner.body:
      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if _is_property(item, owner):
          self._read_property(owner, item)
        else:
          self._declared.add(Key(owner, item.name))
        self._read_method(owner, item)
      else:
        for name in _declared_names(item):
          self._declared.add(Key(owner, name))

  def _read_property(self, owner, method):
    key = Key(owner, method.name)
    self._properties.add(key)
    returns = _names.own_returns(method)
    self.stores[key] = [r for r in returns if r is not None]
    if not returns or None in returns:
      self.why_not[key] = _codes.filled_note(
          _codes.SELF_PROPERTY_PATHS, owner=owner.name, method=method.name)

  def _read_method(self, owner, method):
    receiver = _names.instance_parameter(method)
    if receiver is None:
      return
    parents = _walk.parents(self._tree)  # (the module's, walked once)
    own = method.args.posonlyargs + method.args.args
    # (contexts and operators left out: neither binds nor reads a name)
    for node in _walk.below(method, _walk.children(self._tree)):
      if node is not method and node is not own[0] and _rebinds(node,
                                                                receiver):
        self._keep_out(owner, _codes.filled_note(
            _codes.SELF_REBOUND, receiver=receiver, method=method.name,
            line=node.lineno))
      if not (isinstance(node, ast.Name) and node.id == receiver and
              isinstance(node.ctx, ast.Load)):
        continue
      parent = parents.get(node)
      if isinstance(parent, ast.Attribute) and (
          parent.attr in _ATTRIBUTE_PROTOCOL):
        self._keep_out(owner, _codes.filled_note(
            _codes.SELF_PROTOCOL_REACHED, method=method.name,
            code=ast.unparse(parent), line=node.lineno))
      elif _names_own_super(parent, owner, node):
        continue  # (a base's method on this instance: read there too)
      elif isinstance(parent, ast.Attribute):
        key = Key(owner, parent.attr)
        self._keys[id(parent)] = key
        self.stores.setdefault(key, [])
        if not isinstance(parent.ctx, ast.Load):
          self._read_store(key, parent, parents)
        else:
          self._reads.setdefault(key, []).append(parent)
      else:
        self._keep_out(owner, _codes.filled_note(
            _codes.SELF_INSTANCE_GOES_INTO, receiver=receiver,
            code=ast.unparse(parent)[:50], method=method.name,
            line=node.lineno))

  def _keep_out(self, owner, why):
    """Every attribute of ``owner`` stays out, for ``why`` (the first
    reason found)."""
    if self._owner_why.get(owner) is None:
      self._owner_why[owner] = why

  def _read_store(self, key, target, parents):
    """A store into ``self.<attr>``: the value it takes, or why not."""
    statement, element = parents.get(target), None
    if isinstance(statement, (ast.Tuple, ast.List)):
      element, statement = statement, parents.get(statement)
    if not isinstance(statement, ast.Assign) or isinstance(
        statement.value, ast.Starred):
      self.why_not.setdefault(key, _codes.filled_note(
          _codes.SELF_STORE_NOT_ASSIGNED, statement=ast.unparse(statement)[:50],
          line=target.lineno, target=ast.unparse(target)))
      return
    if element is None:
      self.stores[key].append(statement.value)
    elif element in statement.targets and not any(
        isinstance(e, ast.Starred) for e in element.elts):
      self.stores[key].append(('item', statement.value,
                               element.elts.index(target)))
    else:
      self.why_not.setdefault(key, _codes.filled_note(
          _codes.SELF_TAKES_PART, target=ast.unparse(target),
          value=ast.unparse(statement.value)[:40], line=target.lineno))
      return

  # ---------------------------------------------- named elsewhere
  def _elsewhere_in_module(self, tree):
    """Every ``.<attr>`` of this module not through a method's instance
    parameter of the attribute's class, and every string spelling it
    (``getattr(agent, 'opt')``)."""
    if not self.stores:
      return  # no attribute to keep out (most modules store none)
    spelled: dict[str, list] = {}
    by_any_name = None  # the first ``setattr(x, name, v)``, ``x.__dict__``
    for node in _walk.nodes(tree):
      kind = type(node)  # (a parsed tree's nodes are of ast's own classes)
      if kind is ast.Attribute:
        if id(node) not in self._keys:
          spelled.setdefault(node.attr, []).append(node)
          if node.attr in _ATTRIBUTE_PROTOCOL:
            by_any_name = by_any_name or node
      elif kind is ast.Constant:
        if isinstance(node.value, str):
          spelled.setdefault(node.value, []).append(node)
      elif kind is ast.Call and _by_computed_name(node):
        by_any_name = by_any_name or node
    if by_any_name is not None:
      for key in self.stores:
        self.why_not.setdefault(key, _codes.filled_note(
            _codes.SELF_ANY_NAME, code=ast.unparse(by_any_name)[:40],
            line=by_any_name.lineno))
    owners: dict[str, set] = {}
    for key in self.stores:
      owners.setdefault(key.attr, set()).add(key.owner)
    for key in self.stores:
      other = next((o for o in owners[key.attr] if o is not key.owner and (
          self._classes().related(o.name, key.owner.name))), None)
      if other is not None:
        self.why_not.setdefault(key, _codes.filled_note(
            _codes.SELF_SHARED_WITH, attr=key.attr, other=other.name,
            owner=key.owner.name))
      for node in spelled.get(key.attr, ()):
        self.why_not.setdefault(key, _codes.filled_note(
            _codes.SELF_NAMED_OUTSIDE, attr=key.attr, line=node.lineno,
            code=ast.unparse(node)[:40], owner=key.owner.name))

  def spread_display(self, node) -> Optional[ast.AST]:
    """The tuple display a read-only property returns, where ``node``
    reads it as ``self.<property>``, the property returns nothing else and
    nothing outside its class's methods names it (``step(*self.args)``
    takes its elements); else None."""
    key = self.key_of(node)
    if key not in self._properties or key not in self.stores:
      return None
    values = self.stores[key]
    if len(values) != 1 or not isinstance(values[0], (
        ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred)
                                     for e in values[0].elts):
      return None
    return values[0] if self.outside_why(key) is None else None

  def spread_reads(self, display) -> list:
    """Every ``self.<property>`` read of the property returning
    ``display`` where it is followed (``spread_display``), else none."""
    key = next((k for k in self._properties
                if self.stores.get(k) == [display]), None)
    reads = self._reads.get(key, [])
    return reads if reads and self.spread_display(reads[0]) is display else []

  def unproven(self, key, value, because=None):
    """Notes that ``key``'s attribute also takes ``value``, not provably
    an optimizer (``because``: why, where the flow says)."""
    node = value[1] if isinstance(value, tuple) else value
    self.why_not.setdefault(key, _codes.filled_note(
        _codes.SELF_ATTRIBUTE_ALSO_TAKES, attr=key.attr,
        value=ast.unparse(node)[:60], line=node.lineno,
        because=f': {because}' if because else ''))

  def outside_why(self, key) -> Optional[str]:
    """Why code migrate does not look at may reach ``key``'s attribute: a
    base class outside the project (``_base_why``), or another module of
    the project spelling ``.<attr>`` or the name as a string, other than
    as ``self.<attr>`` in a method of a class sharing no instance with the
    attribute's class. Asked only of attributes the flow proves (most
    modules keep none on ``self``), once each."""
    if key not in self._outside:
      self._outside[key] = self._find_outside(key)
      if self._outside[key] is not None:
        self.why_not[key] = self._outside[key]
    if not self.deferring:
      self.link_family(key)
    return self._outside[key]

  def link_family(self, key):
    """Makes the links ``outside_why`` found for ``key`` (once)."""
    model = getattr(self._names, 'model', None)
    for link in self._family_links.pop(key, ()):
      model.link_self_attribute(*link)

  def _find_outside(self, key) -> Optional[str]:
    model = getattr(self._names, 'model', None)
    here = getattr(self._names, 'path', None)
    based = _base_why(key.owner, self._classes, self._names)
    if based is not None or model is None:
      return based
    for path, start in _spellings(model.sources, key.attr):
      if path == here:
        continue
      source = model.sources[path]
      tree = model.trees.get(path)
      named = _Named(source.count(b'\n', 0, start) + 1, None, None, None) if (
          tree is None) else self._named_in(key, path, tree)
      why, root = named.why(model, here, key, path,
                            self._family_links.setdefault(key, []))
      if root is not None:
        self.family_roots[key] = root
      if why is not None:
        return why
    return None

  def _named_in(self, key, path, tree) -> '_Named':
    """Where the parsed module ``tree`` names ``key``'s attribute: through
    the instance parameter of classes sharing instances with the
    attribute's class (a subclass's ``self.<attr>``), and otherwise than
    through that of a class sharing none."""
    # (a function of the tree: read once per run, not once per flow)
    receivers = _walk.derived(tree, _instance_reads)
    first = other = related = None
    family: set = set()
    for node in _walk.derived(tree, _namings).get(key.attr, ()):
      if isinstance(node, ast.Attribute):
        owner = receivers.get(id(node))
        if owner is not None and not self._classes().related(
            owner, key.owner.name):
          continue
        if owner is not None:
          family.add(owner)
        elif other is None:
          other = node.lineno
      else:  # (a string spelling it)
        owner = None
        other = node.lineno if other is None else other
      if first is None:
        first, related = node.lineno, owner
    return _Named(first, related, frozenset(family), other)

  def _classes(self) -> '_ClassNames':
    if self._class_names is None:
      model = getattr(self._names, 'model', None)
      self._class_names = _ClassNames(
          {} if model is None else model.sources, self._tree)
    return self._class_names


class _Named(NamedTuple):
  """Where another module names an attribute kept through ``self``:
  ``line``, ``related`` (its first naming, and the class there sharing
  instances whose ``self.<attr>`` it is, None where it is no such), every
  such class (``family``) and the first other naming (``other``)."""
  line: Optional[int]
  related: Optional[str]
  family: Optional[frozenset]
  other: Optional[int]

  def why(self, model, here, key, path, links) -> tuple:
    """``(why, root)``: why the naming keeps ``key``'s attribute out (None
    where it does not: the classes sharing instances in ``path`` keep the
    attribute there proven an optimizer by that module's own flow, and
    nothing else there names it; the two modules are then linked,
    migrated together or not at all), and where that rests on a module
    of the family not following it for a reason of its own, ``(path,
    reason)`` of that one. The link to make is added to ``links``."""
    if self.line is None:
      return None, None
    root = None
    if self.family and self.other is None:
      root = _family_root(model, here, key, path, self.line, self.family,
                          links)
      if root is None:
        return None, None
    if self.related is not None:
      return _codes.filled_note(
          _codes.SELF_SHARED_ELSEWHERE, attr=key.attr, other=self.related,
          owner=key.owner.name, where=f'{path}:{self.line}',
          why=_codes.note(_codes.SELF_ACROSS_MODULES) if root is None else
          _codes.filled_note(_codes.SELF_NOT_FOLLOWED_IN, path=root[0],
                             why=root[1])), root
    return _codes.filled_note(
        _codes.SELF_NAMED_ELSEWHERE, attr=key.attr,
        where=f'{path}:{self.other or self.line}',
        owner=key.owner.name), None


def _family_root(model, here, key, path, line, family,
                 links) -> Optional[tuple]:
  """``(path, why)`` of a module where the classes sharing instances
  with ``key``'s class (``family`` in the module ``path`` of the project
  ``model``, and theirs elsewhere) do not keep the attribute proven an
  optimizer, for a reason of its own; None where they do: then the two
  modules are linked (the link added to ``links``)."""
  why_there = getattr(model, 'self_attribute_why', None)
  if why_there is None or here is None:  # (no project: one module read)
    return path, _codes.note(_codes.SELF_ONE_MODULE)
  root = why_there(path, key.attr, family)
  if root is not None:
    return root
  links.append((here, key.owner.lineno, path, line, _codes.filled_note(
      _codes.SELF_ONE_HOLDER, attr=key.attr, owner=key.owner.name,
      where=f'{here}:{key.owner.lineno}', family=', '.join(sorted(family)))))
  return None


# The sources _spellings last read, their number, their items in the paths'
# order and, by attribute, what it found so far: the spellings and how many
# items it read.
_SPELLINGS: list = [None, 0, (), {}]


def _spellings(sources: dict, attr: str) -> Iterator[tuple]:
  """``(path, start)`` of each source of the project's ``sources``
  spelling ``attr`` (``_first_spelling``: ``start``), in the paths'
  order. The modules keeping an attribute of the same name on ``self``
  each look for it in every other source, most often stopping at the
  first: each source is read once per project and attribute, as far as
  one of them asked, and the spellings found are kept (not looked up per
  source and module)."""
  if _SPELLINGS[0] is not sources or _SPELLINGS[1] != len(sources):
    _SPELLINGS[:] = [sources, len(sources), sorted(sources.items()), {}]
  items = _SPELLINGS[2]
  found, read = _SPELLINGS[3].setdefault(attr, ([], [0]))
  spelled, word = attr.encode(), _word(attr)
  index = 0
  while True:
    # (one asking again while another is under way reads on from it)
    while index == len(found) and read[0] < len(items):
      path, source = items[read[0]]
      read[0] += 1
      # (told without sre where the source does not spell it at all)
      start = _first_spelling(source, word) if source is not None and (
          spelled in source) else None
      if start is not None:
        found.append((path, start))
    if index == len(found):
      return
    yield found[index]
    index += 1


@functools.lru_cache(maxsize=1024)
def _word(attr: str):
  """The pattern of ``attr`` as a word (compiled once per attribute, not
  once per source it is looked for in)."""
  return re.compile(re.escape(attr.encode()) + rb'\b')


def _first_spelling(source: bytes, word) -> Optional[int]:
  """Where ``source`` first spells the attribute ``word`` matches as
  ``.<attr>`` (blanks allowed after the dot) or in quotes: the offset of
  the dot or quote, as ``re.search(rb'(?:\\.\\s*|[\'"])<attr>\\b')`` would
  give it. The word is searched first (a literal the regex engine finds
  quickly; the pattern starting with the dot tried every offset of every
  module, most of scan's time on a large project), then what precedes it
  is read backwards."""
  for match in word.finditer(source):
    before = match.start()
    if before and source[before - 1] in b'\'"':
      return before - 1
    while before and source[before - 1] in _BLANKS:
      before -= 1
    if before and source[before - 1] == ord('.'):
      return before - 1
  return None


_CLASS_HEADER = re.compile(rb'^\s*class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:',
                           re.MULTILINE)


@functools.lru_cache(maxsize=16384)
def _class_headers(source: bytes) -> tuple:
  """``((name, bases text), ...)`` of each class header ``source`` spells:
  read once per source, not once per module's flow that asks
  (``_ClassNames`` reads every source of the project)."""
  return tuple((m.group(1).decode(), (m.group(2) or b'').decode())
               for m in _CLASS_HEADER.finditer(source))


def _add_bases(bases: dict, name: str, text: str) -> None:
  """Adds to ``bases`` the last names of the bases ``text`` (a class
  header's, between its parentheses) lists for the class ``name``."""
  bases[name] = bases.get(name, frozenset()).union(
      part.strip().rpartition('.')[2] for part in text.split(',')
      if part.strip() and '=' not in part)


# The sources _project_bases last read, their number and their classes'
# bases: each module's flow asks, and a run reads one project.
_PROJECT_BASES: list = [None, 0, {}]


def _project_bases(sources: dict) -> dict:
  """Class name -> the last names of its bases, from every class header
  the project's ``sources`` spell (parsed or not)."""
  if _PROJECT_BASES[0] is not sources or _PROJECT_BASES[1] != len(sources):
    bases: dict = {}
    for source in sources.values():
      for name, text in _class_headers(source) if source is not None else ():
        _add_bases(bases, name, text)
    _PROJECT_BASES[:] = [sources, len(sources), bases]
  return _PROJECT_BASES[2]


class _ClassNames:
  """The project's classes by their last name and their bases' last
  names (read from every source, parsed or not): two classes share
  instances where one derives from the other, or a third from both.
  Names alike are taken for one class (a name two classes share may only
  make more classes related)."""

  def __init__(self, sources: dict, tree):
    """``sources``: the project's (path -> bytes, or None)."""
    # (a copy: the project's classes are read once per run, then this
    # module's parsed ones added)
    self._bases: dict[str, frozenset] = dict(_project_bases(sources))
    self._children: Optional[dict] = None
    self._descendants: dict[str, set] = {}
    for node in _walk.statements(tree):  # (this module's, also with no
      if isinstance(node, ast.ClassDef):  # model; a class is a statement)
        _add_bases(self._bases, node.name,
                   ','.join(ast.unparse(b) for b in node.bases))

  def outside_ancestor(self, name) -> Optional[str]:
    """The first class ``name`` is or derives from that the project does
    not define (by last name), other than ``_QUIET_BASES``; None where
    there is none."""
    seen, todo = set(), [name]
    while todo:
      current = todo.pop(0)
      if current in seen or current in _QUIET_BASES:
        continue
      seen.add(current)
      if current not in self._bases:
        return current
      todo.extend(sorted(self._bases[current]))
    return None

  def _below(self, name) -> set:
    """``name`` and every class deriving from it, by last name."""
    if self._children is None:
      self._children = {}
      for child, bases in self._bases.items():
        for base in bases:
          self._children.setdefault(base, set()).add(child)
    if name not in self._descendants:
      found, todo = set(), [name]
      while todo:
        current = todo.pop()
        if current not in found:
          found.add(current)
          todo.extend(self._children.get(current, ()))
      self._descendants[name] = found
    return self._descendants[name]

  def related(self, one, other) -> bool:
    """One of the two classes derives from the other, or a third from
    both."""
    return not self._below(one).isdisjoint(self._below(other))


def _namings(tree) -> dict:
  """Name -> each ``.<name>`` and each string constant ``name`` of
  ``tree``, in ``ast.walk``'s order (what ``_named_in`` looks through, for
  one attribute after another)."""
  found: dict = {}
  for node in _walk.nodes(tree):
    if isinstance(node, ast.Attribute):
      found.setdefault(node.attr, []).append(node)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
      found.setdefault(node.value, []).append(node)
  return found


def _instance_reads(tree) -> dict:
  """id(node) -> the class name, for each ``self.<attr>`` of ``tree``
  through the instance parameter of a method of its class."""
  found = {}
  for owner in _walk.nodes(tree):
    if not isinstance(owner, ast.ClassDef):
      continue
    for method in owner.body:
      receiver = isinstance(method, (
          ast.FunctionDef, ast.AsyncFunctionDef)) and (
              _names.instance_parameter(method))
      if receiver:
        found.update((id(n), owner.name) for n in ast.walk(method)
                     if isinstance(n, ast.Attribute) and isinstance(
                         n.value, ast.Name) and n.value.id == receiver)
  return found


def _names_own_super(call, owner, receiver) -> bool:
  """``call`` is ``super(<owner>, <receiver>)``: a method of a base class
  run on the instance (the project's bases: their methods are read as
  the attribute's class's own family)."""
  return isinstance(call, ast.Call) and isinstance(
      call.func, ast.Name) and call.func.id == 'super' and not (
          call.keywords) and len(call.args) == 2 and isinstance(
              call.args[0], ast.Name) and call.args[0].id == owner.name and (
                  call.args[1] is receiver)


def _by_computed_name(node) -> bool:
  """``node`` calls ``getattr``/``setattr``/``delattr``/``hasattr`` with a
  name that is no constant, or ``vars``."""
  if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
    return False
  if node.func.id == 'vars':
    return True
  return node.func.id in ('getattr', 'setattr', 'delattr', 'hasattr') and (
      len(node.args) < 2 or not isinstance(node.args[1], ast.Constant))


def _is_property(method, owner) -> bool:
  """``method`` is a read-only property (``@property``, no setter)."""
  if [ast.unparse(d) for d in method.decorator_list] != ['property']:
    return False
  return not any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and item is not method and item.name == method.name
                 for item in owner.body)


def _declared_names(item) -> list:
  """The names a class body's statement ``item`` binds."""
  if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
    return [item.target.id]
  if isinstance(item, ast.ClassDef):
    return [item.name]
  return [n.id for n in ast.walk(item)
          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _base_why(owner, classes, names) -> Optional[str]:
  """Why a class ``owner`` derives from may read its instances' attributes
  where migrate does not look: a base, or a base of a base, that is not a
  class of the project (the project's classes: ``classes()``) nor one of
  the Python's own that read none (``_QUIET_BASES``), a class decorator
  other than ``_QUIET_DECORATORS``, a metaclass."""
  for base in owner.bases:
    name = base.attr if isinstance(base, ast.Attribute) else getattr(
        base, 'id', None)
    outside = None if name is None else classes().outside_ancestor(name)
    if name is None or outside is not None:
      return _codes.filled_note(
          _codes.SELF_FOREIGN_BASE, owner=owner.name,
          base=ast.unparse(base)[:40],
          origin='' if outside in (None, name) else f' (from {outside})')
  decorators = [names.resolve(d.func if isinstance(d, ast.Call) else d)
                for d in owner.decorator_list]
  if owner.keywords or any(d not in _QUIET_DECORATORS for d in decorators):
    return _codes.filled_note(_codes.SELF_MADE_BY_DECORATOR,
                              owner=owner.name)
  return None


def _rebinds(node, name) -> bool:
  """``node`` binds ``name`` (an assignment, a parameter of a def or lambda
  nested, a loop or ``with`` target, an import)."""
  if isinstance(node, ast.Name):
    return node.id == name and not isinstance(node.ctx, ast.Load)
  if isinstance(node, ast.arg):
    return node.arg == name
  if isinstance(node, (ast.Import, ast.ImportFrom)):
    return any((a.asname or a.name).partition('.')[0] == name
               for a in node.names)
  return isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names




class SelfHolding:
  """The fixpoint's part for attributes kept on ``self``. Part of
  ``_flow.OptimizerFlow``: ``_solve`` prunes, ``is_optimizer`` asks."""

  def _init_self_attributes(self, tree):
    # (the replicated flow proves none: where a module replicates an
    # optimizer, the planner keeps every one it does not prove replicated)
    self.self_attributes = SelfAttributes(
        ast.Module(body=[], type_ignores=[]), self.names) if (
            self.base is not None) else SelfAttributes.of(tree, self.names)
    self.alive_attributes: set = set()

  def _start_self_attributes(self):
    """Every followed attribute starts alive."""
    self.alive_attributes = set(self.self_attributes.stores)
    self.self_attributes.deferring = True

  def _end_self_attributes(self):
    """Links the modules of the families of the attributes kept (not
    those the fixpoint dropped after asking about them)."""
    self.self_attributes.deferring = False
    for key in self.alive_attributes:
      self.self_attributes.link_family(key)

  def _prune_self_attributes(self) -> bool:
    """Drops each attribute one of whose stored values is not provably an
    optimizer, or that another module may reach (asked only of those whose
    values are); True where one was dropped."""
    changed = False
    for key, values in self.self_attributes.stores.items():
      if key not in self.alive_attributes:
        continue
      unproven = next((v for v in values if not self._value_holds(
          v, self.scope_of(v[1] if isinstance(v, tuple) else v))), None)
      if unproven is not None:
        self.self_attributes.unproven(key, unproven,
                                      self.dict_read_why(unproven))
      if not values or unproven is not None or (
          self.self_attributes.outside_why(key) is not None):
        self.alive_attributes.discard(key)
        changed = True
    return changed

  def self_attribute_holds(self, node) -> bool:
    """``node`` is ``self.<attr>`` of an attribute proven an optimizer."""
    return self.self_attributes.key_of(node) in self.alive_attributes

  def self_attribute_why(self, node) -> Optional[str]:
    """Why the attribute ``node`` stores into is not followed (None where
    it is no ``self.<attr>``, or no reason stands against it)."""
    key = self.self_attributes.key_of(node)
    return None if key is None else self.self_attributes.why_not.get(key)

  def self_attribute_family_why(self, attr, classes) -> Optional[tuple]:
    """``(path, why)``: where and why ``self.<attr>`` is not proven an
    optimizer in every class of ``classes`` naming it in this module (in
    this module, or in another module of their family); None where it
    is."""
    here = getattr(self.names, 'path', None)
    keys = sorted((key for key in self.self_attributes.keys()
                   if key.attr == attr and key.owner.name in classes),
                  key=lambda key: key.owner.lineno)
    if not keys:
      return here, _codes.filled_note(_codes.SELF_NO_METHOD_KEEPS, attr=attr)
    for key in keys:
      if key not in self.alive_attributes:
        return self.self_attributes.family_roots.get(key) or (here, (
            self.self_attributes.why_not.get(key) or _codes.filled_note(
                _codes.SELF_ATTRIBUTE_UNPROVEN, attr=attr,
                owner=key.owner.name)))
    return None

  def is_holding_property(self, function) -> bool:
    """``function`` is a property of its class proven to return an
    optimizer, read only as ``self.<property>`` in its class."""
    return any(key.attr == function.name and function in key.owner.body
               for key in self.alive_attributes)
