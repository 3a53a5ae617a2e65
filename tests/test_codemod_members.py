"""Each flax.optim member name and class mapping is written in one place.

compat/codemod/_members.py holds them; every other codemod module reads its
constants. A member name written as a string elsewhere (``'target'``,
``b'apply_gradient'``) is a second copy of the fact, so this test names it.
Only whole strings count: prose that mentions a member (a docstring, a note)
is not a copy of the name.
"""

import ast
import pathlib

from compat.codemod import _members

CODEMOD = pathlib.Path(_members.__file__).resolve().parent
TABLE = pathlib.Path(_members.__file__).resolve()


def _member_literals(path: pathlib.Path) -> list:
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if not isinstance(node, ast.Constant):
      continue
    value = node.value
    if isinstance(value, bytes):
      value = value.decode('latin-1')
    if isinstance(value, str) and value in _member_names():
      found.append(f'{path.name}:{node.lineno}: {value!r}')
  return found


def _member_names() -> frozenset:
  return _members.NAMES | {_members.CHECKPOINT_TARGET}


def _counterpart_texts() -> set:
  """Each mapping's text and the dotted name it starts with."""
  return set(_members.CLASS_COUNTERPARTS.values()) | {
      _members.counterpart_path(name) for name in _members.CLASS_COUNTERPARTS}


def test_member_names_are_written_only_in_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path != TABLE:
      found += _member_literals(path)
  assert not found, ('flax.optim member names written outside '
                     'compat/codemod/_members.py (use its constants): '
                     f'{found}')


def test_class_mappings_are_written_only_in_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path == TABLE:
      continue
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
          node.value in _counterpart_texts()):
        found.append(f'{path.name}:{node.lineno}: {node.value!r}')
  assert not found, f'class mappings written outside the table: {found}'


def test_every_member_has_one_row():
  names = [member.name for member in _members.MEMBERS]
  assert len(names) == len(set(names))
  assert {member.kind for member in _members.MEMBERS} <= {'method',
                                                          'attribute'}
