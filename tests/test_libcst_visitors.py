"""compat/codemod/_libcst_visitors.py: LibCST's matcher visitors read their
class's decorated methods once, and behave as without."""

import libcst
from libcst import matchers
from libcst.matchers import _visitors as matcher_visitors

from compat.codemod import _libcst_visitors


def _renamer():
  """A new class each time (the memo is per class and process)."""

  class Renamer(matchers.MatcherDecoratableTransformer):
    """Renames ``a`` to ``b`` inside functions only; counts the calls."""

    def __init__(self):
      super().__init__()
      self.calls = 0

    @matchers.visit(matchers.Call())
    def count_call(self, node):
      del node
      self.calls += 1

    @matchers.call_if_inside(matchers.FunctionDef())
    @matchers.leave(matchers.Name('a'))
    def rename(self, original, updated):
      del original
      return updated.with_changes(value='b')

  return Renamer


_SOURCE = 'a = f(a)\n\ndef g():\n  return a(a)\n'
_EXPECTED = 'a = f(a)\n\ndef g():\n  return b(b)\n'


def test_each_visitor_gets_its_own_methods_and_transforms_as_without():
  renamer = _renamer()
  module = libcst.parse_module(_SOURCE)
  alone = renamer()
  assert module.visit(alone).code == _EXPECTED
  with _libcst_visitors.read_once():
    first, second = renamer(), renamer()
    assert module.visit(first).code == _EXPECTED
    assert module.visit(second).code == _EXPECTED
  assert (alone.calls, first.calls, second.calls) == (2, 2, 2)
  for visitor in (first, second):
    [[count]] = visitor._extra_visit_funcs.values()
    [[rename]] = visitor._extra_leave_funcs.values()
    assert count.__self__ is visitor and rename.__self__ is visitor
  assert list(first._matchers) == list(alone._matchers)


def test_a_class_is_read_once_and_libcst_is_as_before_after(monkeypatch):
  read = []
  for name in ('_gather_constructed_visit_funcs',
               '_gather_constructed_leave_funcs', '_gather_matchers'):
    gather = getattr(matcher_visitors, name)
    monkeypatch.setattr(matcher_visitors, name,
                        lambda obj, gather=gather, name=name: (
                            read.append(name) or gather(obj)))
  renamer = _renamer()
  module = libcst.parse_module(_SOURCE)
  with _libcst_visitors.read_once():
    for _ in range(3):
      module.visit(renamer())
  assert sorted(read) == ['_gather_constructed_leave_funcs',
                          '_gather_constructed_visit_funcs',
                          '_gather_matchers']
  del read[:]
  module.visit(renamer())  # outside: LibCST's own reading again
  assert len(read) == 3
