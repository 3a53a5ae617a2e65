"""LibCST's matcher visitors, their methods read once per class.

Each ``MatcherDecoratableTransformer``/``Visitor`` (``AddImportsVisitor``,
``RemoveImportsVisitor`` and the visitors they build for each module:
``GatherImportsVisitor``, ``GatherUnusedImportsVisitor``, ...) looks, when
it is made, at every attribute of itself for the matchers its methods'
decorators declare: three walks over ``dir()`` of a class with hundreds of
``visit_``/``leave_`` methods, about half of what ``migrate`` spends in
LibCST (it makes four to six visitors per changed file). What they find
depends on the class only (decorators sit on methods; an instance's own
attributes carry none), so ``read_once`` finds it on a class's first
visitor and hands later ones the same: the same matchers, mapped to the
new visitor's own bound methods, in the same order.

LibCST only.
"""

import contextlib
import types

from libcst.matchers import _visitors as _matcher_visitors

_GATHER_FUNCS = ('_gather_constructed_visit_funcs',
                 '_gather_constructed_leave_funcs')
# What a class's first visitor found, for the process's later ones:
# (gather's name, class) -> [(matcher, ((function, its class where it is a
# class method, else None), ...))]; class -> its matchers.
_FUNCS_OF: dict = {}
_MATCHERS_OF: dict = {}


def _funcs_once(name: str, gather):
  """``gather`` (obj -> {matcher: (bound method, ...)}) read once per
  class: later objects get the same matchers with the same functions
  bound to them (a class method stays bound to its class)."""
  def gathered(obj):
    key = (name, type(obj))
    if key not in _FUNCS_OF:
      found = gather(obj)
      _FUNCS_OF[key] = [(matcher, tuple(
          (f.__func__, None if f.__self__ is obj else f.__self__)
          for f in funcs)) for matcher, funcs in found.items()]
      return found
    return {matcher: tuple(types.MethodType(function, owner or obj)
                           for function, owner in funcs)
            for matcher, funcs in _FUNCS_OF[key]}
  return gathered


def _matchers_once(gather):
  """``_gather_matchers`` (obj -> {matcher: None}) read once per class."""
  def gathered(obj):
    if type(obj) not in _MATCHERS_OF:
      _MATCHERS_OF[type(obj)] = list(gather(obj))
    return dict.fromkeys(_MATCHERS_OF[type(obj)])
  return gathered


@contextlib.contextmanager
def read_once():
  """Within: the matcher visitors made read their class's decorated
  methods once per class and process (see the module docstring); as
  before after."""
  saved = {name: getattr(_matcher_visitors, name)
           for name in _GATHER_FUNCS + ('_gather_matchers',)}
  for name in _GATHER_FUNCS:
    setattr(_matcher_visitors, name, _funcs_once(name, saved[name]))
  _matcher_visitors._gather_matchers = _matchers_once(
      saved['_gather_matchers'])
  try:
    yield
  finally:
    for name, gather in saved.items():
      setattr(_matcher_visitors, name, gather)
