"""Optimizers returned in a dict display under constant keys.

An agent's update may return its optimizers and its metrics in one dict
(dopamine's SAC ``train``)::

  returns = {'network_optim': optim, 'alpha_optim': alpha_optim,
             'Losses/Critic': loss, ...}
  for i, a in enumerate(mean_actions):
    returns.update({f'Values/MeanActions{i}': a})
  return returns

and its caller reads them back by the same keys, the metrics in a loop
whose test leaves the optimizers' keys out::

  train_returns = train(...)
  self.network_optimizer = train_returns['network_optim']
  for k in train_returns:
    if k.startswith('Losses') or k.startswith('Values'):
      writer.scalar(k, train_returns[k])

What a module function stores under a constant key of the dict it returns
(one dict display: the return itself, or a name bound once to it and
returned) is what its call gives back by that key, as an element of a
returned tuple is (``_flow_solve``): the optimizer read back is the one
stored, where no other key can be an optimizer's and nothing else reaches
the optimizers' entries:

* in the function, the dict's name is only returned, given entries
  (``update`` with a dict display, or a store by key) and read by keys
  that differ from each optimizer's (a constant, or an f-string whose
  leading text no optimizer's key starts with);
* the function is called only here, by its name (nothing outside the
  module names it, nothing here uses it otherwise), each call bound to a
  name once or read by a constant key at once; that name is read by
  constant keys, tested with ``in``, or iterated (``for k in d``,
  ``d.keys()``, ``d.items()``), where each read of an entry by the loop's
  key, and each read of the loop's value, is inside an ``if`` whose test
  leaves out every optimizer's key (``k.startswith(prefix)`` with a
  prefix none of them starts with, ``k == other``, ``k in (others...)``,
  joined by ``or``, or by ``and`` with at least one such) and the loop
  does not rebind the key.

Anything else (the dict passed whole, stored, returned, spread with
``**``, read by a key that is neither constant nor so tested, its values
read untested) keeps the flow, with the reason (``giver_why``). What an
optimizer's key reads back is checked where it goes like any optimizer
(``_escape_analysis``). Stdlib only.
"""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _names


class _Shape(NamedTuple):
  """The dict a module function returns, as written there."""
  entries: dict  # constant key -> its value in the display
  display: ast.Dict
  others: tuple  # key nodes it adds or reads besides the display's
  why: Optional[str]  # a use of the dict the rule does not follow


class _Callers(NamedTuple):
  """What the function's calls do with the dict, as written."""
  why: Optional[str]
  tested: tuple  # (read, key name, loop): reads a key test must guard


class _Giver(NamedTuple):
  keys: frozenset  # the keys of the optimizers in the dict
  why: Optional[str]  # None where its callers are followed


def _leading_text(key) -> Optional[str]:
  """The text every value of the key expression ``key`` starts with (all
  of it for a string constant), or None (not a string)."""
  if isinstance(key, ast.Constant):
    return key.value if isinstance(key.value, str) else None
  if isinstance(key, ast.JoinedStr):
    first = key.values[0] if key.values else None
    return first.value if isinstance(first, ast.Constant) else ''
  return ''


def _differs(key, optimizer_keys) -> bool:
  """No value of the key expression ``key`` is one of ``optimizer_keys``."""
  if isinstance(key, ast.Constant):
    return key.value not in optimizer_keys
  text = _leading_text(key)
  return isinstance(key, ast.JoinedStr) and not any(
      k.startswith(text) for k in optimizer_keys)


def _constants(node) -> Optional[list]:
  """The strings of a string constant or a display of them, else None."""
  items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [
      node]
  if all(isinstance(i, ast.Constant) and isinstance(i.value, str)
         for i in items):
    return [i.value for i in items]
  return None


def _leaves_out(test, key, optimizer_keys) -> bool:
  """The test ``test`` is true only where the name ``key`` holds none of
  ``optimizer_keys``."""
  if isinstance(test, ast.BoolOp):
    found = [_leaves_out(v, key, optimizer_keys) for v in test.values]
    return all(found) if isinstance(test.op, ast.Or) else any(found)
  if isinstance(test, ast.Call):
    func = test.func
    prefixes = _constants(test.args[0]) if len(test.args) == 1 and (
        not test.keywords) else None
    return isinstance(func, ast.Attribute) and func.attr == 'startswith' and (
        isinstance(func.value, ast.Name)) and func.value.id == key and (
            prefixes is not None) and not any(
                k.startswith(p) for k in optimizer_keys for p in prefixes)
  if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
      test.left, ast.Name) and test.left.id == key and isinstance(
          test.ops[0], (ast.Eq, ast.In)):
    comparator = test.comparators[0]
    if isinstance(test.ops[0], ast.In) and isinstance(comparator, ast.Constant):
      # (``k in 'text'`` tests a substring)
      return isinstance(comparator.value, str) and not any(
          k in comparator.value for k in optimizer_keys)
    others = _constants(comparator)
    return others is not None and not set(others) & set(optimizer_keys)
  return False


def _bound_in(loop, name) -> bool:
  """The body of ``loop`` binds ``name`` again."""
  return any(isinstance(n, ast.Name) and n.id == name and not isinstance(
      n.ctx, ast.Load) for statement in loop.body for n in ast.walk(statement))


class DictReturns:
  """The flow's part for optimizers returned in a dict (a part of
  ``_flow.OptimizerFlow``, which sets the state it reads)."""

  def _init_dict_returns(self):
    self._dict_shapes: dict = {}  # function -> _Shape or None
    self._dict_callers: dict = {}  # function -> _Callers
    self._dict_givers: dict = {}  # function -> _Giver or None, once solved
    self._dict_open: set = set()  # functions whose dict is being asked
    # function -> why its dict's keys are not followed, found once solved
    # (``refute_dict_givers``).
    self._dict_refuted: dict = {}

  # ------------------------------------------------------------ queries
  def dict_entry_holds(self, subscript, scope) -> bool:
    """``subscript`` reads back an optimizer by its constant key from the
    dict a module function returns, its callers followed."""
    read = self._dict_read(subscript, scope)
    giver = None if read is None else self._giver(read[0])
    return giver is not None and giver.why is None and read[1] in giver.keys

  def dict_read_why(self, subscript) -> Optional[str]:
    """Why ``subscript`` (a read by a constant key of what a module
    function's call returns) is not followed back to the optimizer stored
    there (None where it is, or where it is no such read)."""
    if not isinstance(subscript, ast.Subscript):
      return None
    read = self._dict_read(subscript, self.scope_of(subscript))
    giver = None if read is None else self._giver(read[0])
    return None if giver is None else giver.why

  def returned_dict_giver(self, value) -> Optional[_Giver]:
    """The verdict on the dict its module function returns, where ``value``
    is an entry of that dict's display; else None."""
    display = self._parents.get(value)
    function = self.scope_of(value).node
    if not isinstance(display, ast.Dict) or not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)):
      return None
    shape = self._dict_shape(function)
    if shape is None or shape.display is not display:
      return None
    return self._giver(function)

  # --------------------------------------------------------- the giver
  def _dict_read(self, subscript, scope) -> Optional[tuple]:
    """``(function, key)``: ``subscript`` reads ``key`` of what a call of
    the module function ``function`` returns (the call itself, or a name
    bound once to it), where that function returns a dict display."""
    key = subscript.slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and
            isinstance(subscript.ctx, ast.Load)):
      return None
    call = subscript.value
    if isinstance(call, ast.Name):
      binding = self._binding_scope(scope, call.id)
      bound = [] if binding is None else binding.bindings[call.id]
      call = bound[0] if len(bound) == 1 else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
      return None
    function = self.functions.get(call.func.id)
    if function is None or not self._sees_function(self.scope_of(call),
                                                   call.func.id):
      return None
    return (function, key.value) if self._dict_shape(function) else None

  def _giver(self, function) -> Optional[_Giver]:
    """The keys of the optimizers in the dict ``function`` returns and why
    its callers are not followed into it (None: it holds none)."""
    if function in self._dict_givers:
      return self._dict_givers[function]
    shape = self._dict_shape(function)
    if shape is None or function in self._dict_open:
      return None  # (a dict read back inside itself proves nothing)
    self._dict_open.add(function)
    try:
      keys = self._optimizer_keys(function, shape)
      why = self._written_why(function, shape) or self._dict_refuted.get(
          function)
      if why is None and self._solved:
        why = self._key_why(function, shape, keys)
      giver = _Giver(keys, None if why is None else _codes.filled_note(
          _codes.DICT_RETURNED_UNFOLLOWED, function=function.name,
          why=why)) if keys else None
    finally:
      self._dict_open.discard(function)
    if self._solved:
      self._dict_givers[function] = giver
    return giver

  def refute_dict_givers(self) -> bool:
    """Once the fixpoint is solved: notes each dict giver whose keys, as
    proven now, another key or an untested read may reach (``_key_why``);
    True where one was noted, and the fixpoint must be solved again.

    While solving, those checks are left out: they hold for fewer
    optimizer keys, and the keys proven shrink as the fixpoint goes, so
    asked then they could refute what the solution proves (the fixpoint
    drops a binding for good). Solved again without a giver refuted, the
    others' keys can only be fewer: what held of them holds still."""
    refuted = False
    for function, shape in list(self._dict_shapes.items()):
      if shape is None or function in self._dict_refuted or (
          self._written_why(function, shape)):
        continue
      keys = self._optimizer_keys(function, shape)
      why = self._key_why(function, shape, keys) if keys else None
      if why is not None:
        self._dict_refuted[function] = why
        refuted = True
    return refuted

  def _written_why(self, function, shape) -> Optional[str]:
    """Why the dict is not followed, as its function and callers are
    written (whatever its keys)."""
    return shape.why or self._called_why(function) or self._callers(
        function).why

  def _optimizer_keys(self, function, shape) -> frozenset:
    inner = self.scopes[function]
    return frozenset(key for key, value in shape.entries.items()
                     if self.is_optimizer(value, inner))

  def _key_why(self, function, shape, keys) -> Optional[str]:
    """Why another key, or a read of the dict's entries the rule takes
    for the metrics', may be an optimizer's key of ``keys`` (asked with
    the keys proven once solved: they are named)."""
    why = self._key_clash(shape, keys) or self._untested(function, keys)
    shown = ', '.join(f"'{key}'" for key in sorted(keys))
    return None if why is None else f'{why} ({shown})'

  @staticmethod
  def _key_clash(shape, keys) -> Optional[str]:
    clash = next((key for key in shape.others if not _differs(key, keys)),
                 None)
    return None if clash is None else _codes.filled_note(
        _codes.DICT_KEY_CLASH, key=ast.unparse(clash)[:40])

  def _called_why(self, function) -> Optional[str]:
    """Why the calls of ``function`` here may not be all its calls."""
    if function.name in self.escaped or self.defs_named(function.name) != [
        function] or function.name in self._local_homes:
      return _codes.filled_note(_codes.DICT_GIVER_USED_OTHERWISE,
                                function=function.name)
    alias = next((name for (_, name), bound in self.aliases.items()
                  if bound.name == function.name), None)
    if alias is not None:
      return _codes.filled_note(_codes.DICT_GIVER_ALIASED,
                                function=function.name, alias=alias)
    model, path = self.names.model, getattr(self.names, 'path', None)
    if model is None or path is None:
      return _codes.filled_note(_codes.DICT_GIVER_MODULE_ALONE,
                                function=function.name)
    where = model.used_otherwise_elsewhere(function, path) or (
        model.called_elsewhere(function, path))
    return None if where is None else _codes.filled_note(
        _codes.DICT_GIVER_ELSEWHERE, function=function.name, where=where)

  def _untested(self, function, keys) -> Optional[str]:
    for read, key, loop in self._callers(function).tested:
      if not self._tested(read, key, loop, keys):
        return _codes.filled_note(_codes.DICT_READ_UNTESTED,
                                  read=ast.unparse(read)[:40],
                                  line=read.lineno)
    return None

  def _tested(self, read, key, loop, keys) -> bool:
    """An ``if`` between ``loop`` and ``read`` runs ``read`` only where
    its test leaves ``keys`` out of the loop's key ``key``."""
    node = read
    while node is not loop:
      parent = self._parents.get(node)
      if parent is None or isinstance(parent, (
          ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return False  # (a closure reads the loop's last key, untested)
      if isinstance(parent, ast.If) and node in parent.body and _leaves_out(
          parent.test, key, keys):
        return True
      node = parent
    return False

  # ------------------------------------------------- as written (once)
  def _dict_shape(self, function) -> Optional[_Shape]:
    if function not in self._dict_shapes:
      self._dict_shapes[function] = self._find_shape(function)
    return self._dict_shapes[function]

  def _find_shape(self, function) -> Optional[_Shape]:
    """The dict display every return of ``function`` gives (itself, or a
    name bound once to it), with what else the function does with it."""
    returns = _names.own_returns(function)
    scope = self.scopes.get(function)
    if not returns or scope is None or not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)):
      return None
    if len(returns) == 1 and isinstance(returns[0], ast.Dict):
      return self._shape_of(returns[0], ())
    names = {r.id for r in returns if isinstance(r, ast.Name)}
    if len(names) != 1 or len(returns) != sum(
        isinstance(r, ast.Name) for r in returns):
      return None
    name = names.pop()
    bound = scope.bindings.get(name, [])
    if len(bound) != 1 or not isinstance(bound[0], ast.Dict):
      return None
    others, why = [], None
    for read in self.loads_of(scope, name):
      if read in returns:
        continue
      added = self._added_keys(read)
      if added is None:
        why = why or _codes.filled_note(
            _codes.DICT_NAME_USED, name=name, function=function.name,
            use=ast.unparse(self._parents.get(read))[:50])
      else:
        others += added
    return self._shape_of(bound[0], tuple(others), why)

  def _shape_of(self, display, others, why=None) -> _Shape:
    entries = {}
    for key, value in zip(display.keys, display.values):
      if key is None:
        why = why or _codes.note(_codes.DICT_SPREAD)
      elif isinstance(key, ast.Constant) and isinstance(key.value, str):
        entries[key.value] = value
      else:
        others += (key,)
    return _Shape(entries, display, others, why)

  def _added_keys(self, read) -> Optional[list]:
    """The keys a use of the returned dict's name in its function adds or
    reads (``d.update({...})``, ``d[key] = v``, ``d[key]``), or None for
    another use."""
    parent = self._parents.get(read)
    if isinstance(parent, ast.Subscript) and parent.value is read:
      return [parent.slice]
    call = self._parents.get(parent)
    if isinstance(parent, ast.Attribute) and parent.attr == 'update' and (
        isinstance(call, ast.Call)) and call.func is parent and len(
            call.args) == 1 and not call.keywords and isinstance(
                call.args[0], ast.Dict) and None not in call.args[0].keys:
      return list(call.args[0].keys)
    return None

  def _callers(self, function) -> _Callers:
    if function not in self._dict_callers:
      self._dict_callers[function] = self._find_callers(function)
    return self._dict_callers[function]

  def _find_callers(self, function) -> _Callers:
    tested, calls = [], [
        (call, scope) for call, scope in self.calls.get(function.name, [])
        if self._sees_function(scope, function.name)]
    if not calls:
      return _Callers(_codes.filled_note(_codes.DICT_GIVER_NOT_CALLED,
                                         function=function.name), ())
    for call, scope in calls:
      parent = self._parents.get(call)
      if isinstance(parent, ast.Subscript) and parent.value is call and (
          self._dict_read(parent, scope) is not None):
        continue
      if not (isinstance(parent, ast.Assign) and parent.value is call and len(
          parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return _Callers(_codes.filled_note(
            _codes.DICT_CALL_UNBOUND, call=ast.unparse(call)[:40],
            line=call.lineno), ())
      name = parent.targets[0].id
      if scope.bindings.get(name) != [call]:
        return _Callers(_codes.filled_note(
            _codes.DICT_NAME_REBOUND, name=name, line=call.lineno), ())
      for read in self.loads_of(scope, name):
        why = self._read_of_dict(read, tested)
        if why is not None:
          return _Callers(f'`{name}` {why}', ())
    return _Callers(None, tuple(tested))

  def _read_of_dict(self, read, tested) -> Optional[str]:
    """Why a read of a name bound to the dict is not followed (None where
    it is; an entry read by the loop's key goes to ``tested``)."""
    parent = self._parents.get(read)
    where = _codes.filled_note(_codes.DICT_NAME_GOES_INTO, line=read.lineno,
                               parent=ast.unparse(parent)[:50])
    if isinstance(parent, ast.Subscript) and parent.value is read:
      key = parent.slice
      if not isinstance(parent.ctx, ast.Load):
        return where  # (an entry stored or deleted)
      if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return None
      loop = self._key_loop(parent, key, read)
      if loop is None:
        return _codes.filled_note(_codes.DICT_READ_BY_UNKNOWN_KEY,
                                  read=ast.unparse(parent)[:40],
                                  line=read.lineno)
      tested.append((parent, key.id, loop))
      return None
    if isinstance(parent, ast.Compare) and read in parent.comparators and (
        all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops)):
      return None  # a key tested
    if isinstance(parent, ast.For) and parent.iter is read:
      return None  # its keys (strings)
    call = self._parents.get(parent)
    method = parent.attr if isinstance(parent, ast.Attribute) and isinstance(
        call, ast.Call) and call.func is parent and not call.args else None
    loop = self._parents.get(call)
    if method not in ('keys', 'items') or not isinstance(loop, ast.For) or (
        loop.iter is not call):
      return where
    if method == 'keys':
      return None
    return None if self._items_followed(loop, tested) else where

  def _items_followed(self, loop, tested) -> bool:
    """``for k, v in d.items()`` (two names, not rebound in the loop):
    each read of ``v`` goes to ``tested``."""
    target = loop.target
    if not (isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(
        isinstance(e, ast.Name) for e in target.elts)) or any(
            _bound_in(loop, e.id) for e in target.elts):
      return False
    key, value = (e.id for e in target.elts)
    binding = self.binding_scope_of(loop, value)
    tested += [(read, key, loop) for read in self.loads_of(binding, value)]
    return True

  def _key_loop(self, subscript, key, read) -> Optional[ast.For]:
    """The loop over the dict ``read`` names whose key ``key`` is, around
    ``subscript`` and not rebound in it, or None."""
    if not isinstance(key, ast.Name) or not isinstance(subscript.ctx,
                                                       ast.Load):
      return None
    node = self._parents.get(subscript)
    while node is not None and not isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      if isinstance(node, ast.For) and self._iterates(node, read, key.id):
        return None if _bound_in(node, key.id) else node
      node = self._parents.get(node)
    return None

  def _iterates(self, loop, read, key) -> bool:
    """``loop`` runs over the keys (or items) of the dict named by ``read``
    with ``key`` its key."""
    source, target = loop.iter, loop.target
    method = source.func.attr if isinstance(source, ast.Call) and isinstance(
        source.func, ast.Attribute) and not source.args else None
    if method in ('keys', 'items'):
      source = source.func.value
    if method == 'items' and isinstance(target, ast.Tuple) and target.elts:
      target = target.elts[0]
    return isinstance(source, ast.Name) and source.id == read.id and (
        self.binding_scope_of(source, source.id) is self.binding_scope_of(
            read, read.id)) and isinstance(target, ast.Name) and (
                target.id == key)
