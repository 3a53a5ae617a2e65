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


# Members named by words other code uses too (``decode(..., 'replace')``,
# restore_checkpoint's ``step`` parameter): a literal of one counts where it
# is compared with an attribute's or keyword's name (``node.attr ==
# 'state'``) or listed with the table's names (``(_members.TARGET,
# 'state')``).
_NAME_READS = ('attr', 'arg')


def _common_word_literals(path: pathlib.Path) -> list:
  words = {_members.STATE, _members.REPLACE, _members.STEP}
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Compare) and any(
        isinstance(side, ast.Attribute) and side.attr in _NAME_READS
        for side in (node.left, *node.comparators)):
      candidates = list(ast.walk(node))
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(
        isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and
        e.value.id == '_members' for e in node.elts):
      candidates = node.elts
    else:
      continue
    found += [f'{path.name}:{c.lineno}: {c.value!r}' for c in candidates
              if isinstance(c, ast.Constant) and c.value in words]
  return found


def test_common_word_members_are_compared_only_through_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path != TABLE:
      found += _common_word_literals(path)
  assert not found, ('Optimizer members compared by a literal outside '
                     'compat/codemod/_members.py (use STATE, REPLACE, '
                     f'STEP): {found}')


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


def test_class_names_are_written_only_in_the_table():
  # The classes the mapping maps and the two more detection names.
  classes = set(_members.CLASS_COUNTERPARTS) | {
      _members.WEIGHT_NORM_CLASS, _members.REPLICATED_OPTIMIZER_CLASS}
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path == TABLE:
      continue
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Constant) and node.value in classes:
        found.append(f'{path.name}:{node.lineno}: {node.value!r}')
  assert not found, f'flax.optim class names written outside the table: {found}'


def test_every_member_has_one_row():
  names = [member.name for member in _members.MEMBERS]
  assert len(names) == len(set(names))
  assert {member.kind for member in _members.MEMBERS} <= {'method',
                                                          'attribute'}
