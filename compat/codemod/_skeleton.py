"""A module's import skeleton: what LibCST's import visitors need to see.

``migrate`` adds and drops imports with LibCST's ``AddImportsVisitor`` and
``RemoveImportsVisitor``. Both walk the whole module with metadata (scopes,
string annotations, ``__all__``), about a thousand times slower than
``ast.parse`` and growing faster than the file: a 5 MB module with one
usage took more than ten minutes. Their result depends only on

* the module's top-level import statements and its first statement (a
  docstring keeps the new imports below it), where new imports go and what
  is already imported;
* the statements that can read a name a dropped import binds: they write
  that name, so their text contains it as a whole word (a string
  annotation and ``__all__`` included): ``optim`` inside ``optimizer`` or
  ``self._optim`` reads nothing, and such a statement is elided.

``Skeleton(code, names)`` keeps those statements byte for byte and puts one
``pass  # <marker>`` line in place of each run of other top-level
statements (their decorators and the comments between them included); the
comments and blank lines before a kept statement stay where they were, so
LibCST sees the same leading lines on it. ``restore`` puts the runs back
into LibCST's output. The visitors never change a ``pass`` line they do not
remove, and they remove none (it is no import), so the result is the one
they give on the whole module.

Stdlib only.
"""

import ast
import re
from typing import Optional

_LINE = re.compile(r'[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+')  # ast's line breaks
_INDENTED_COMMENT = re.compile(r'[ \t\f]+#')


def _lines(code: str) -> list:
  return _LINE.findall(code)


def _line_break(text: str) -> str:
  """The line break ``text`` ends with ('' at the end of a file without)."""
  return text[len(text.rstrip('\r\n')):]


def _marker(code: str) -> str:
  """A comment text that occurs nowhere in ``code``."""
  suffix = 0
  while f'foc-elided-{suffix}-' in code:
    suffix += 1
  return f'foc-elided-{suffix}-'


def _continues_name(char: str) -> bool:
  return ('a' + char).isidentifier()


def _names_word(text: str, name: str) -> bool:
  """Whether ``name`` occurs in ``text`` as a whole word: not inside a
  longer identifier (exact for Python's identifier characters, Unicode
  ones included, where a regex ``\\b`` is not)."""
  at = text.find(name)
  while at >= 0:
    end = at + len(name)
    if not (at and _continues_name(text[at - 1]) or
            end < len(text) and _continues_name(text[end])):
      return True
    at = text.find(name, at + 1)
  return False


def _groups(tree: ast.Module) -> list:
  """``[first_line, last_line, statements]`` of the top-level statements,
  those sharing a line (``a = 1; b = 2``) in one group (1-based lines)."""
  groups: list = []
  for node in tree.body:
    first = min([node.lineno] + [d.lineno for d in getattr(
        node, 'decorator_list', ())])
    if groups and first <= groups[-1][1]:
      groups[-1][1] = max(groups[-1][1], node.end_lineno)
      groups[-1][2].append(node)
    else:
      groups.append([first, node.end_lineno, [node]])
  return groups


class Skeleton:
  """``code`` with the top-level statements that neither import nor name
  one of ``names`` replaced (see the module docstring)."""

  def __init__(self, code: str, names):
    self._runs: list = []  # the original text of each elided run
    self.code = code
    try:
      tree = ast.parse(code)
    except (SyntaxError, ValueError):
      return  # LibCST sees the whole module and says what is wrong
    lines = _lines(code)
    self._marker = _marker(code)
    groups = _groups(tree)
    kept = [i == 0 or self._must_see(lines, group, names)
            for i, group in enumerate(groups)]
    self.code = ''.join(self._elide(lines, groups, kept))

  @staticmethod
  def _must_see(lines: list, group, names) -> bool:
    first, last, nodes = group
    if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes):
      return True
    text = ''.join(lines[first - 1:last])
    return any(_names_word(text, name) for name in names)

  def _elide(self, lines: list, groups: list, kept: list) -> list:
    for i in reversed(range(len(groups) - 1)):
      if not kept[i] and kept[i + 1] and any(
          _INDENTED_COMMENT.match(line)
          for line in lines[groups[i][1]:groups[i + 1][0] - 1]):
        # LibCST gives an indented comment below a block to that block,
        # not to the statement after it: that statement would lose it.
        kept[i] = True
    out, line = [], 1  # the first line not yet in ``out``
    start = 0
    while start < len(groups):
      if kept[start]:
        start += 1
        continue
      stop = start  # the run of groups start..stop is elided
      while stop + 1 < len(groups) and not kept[stop + 1]:
        stop += 1
      first, last = groups[start][0], groups[stop][1]
      out.extend(lines[line - 1:first - 1])
      self._runs.append(''.join(lines[first - 1:last]))
      out.append(self._placeholder(len(self._runs) - 1))
      line, start = last + 1, stop + 1
    out.extend(lines[line - 1:])
    return out

  def restore(self, code: str) -> Optional[str]:
    """``code`` (LibCST's output for ``self.code``) with the elided runs
    back; None if a placeholder did not come back as it went."""
    if not self._runs:
      return code
    out, restored = [], 0
    for line in _lines(code):
      if line.startswith(f'pass  # {self._marker}'):
        if restored == len(self._runs) or line != self._placeholder(restored):
          return None
        line = self._runs[restored]
        restored += 1
      out.append(line)
    return ''.join(out) if restored == len(self._runs) else None

  def _placeholder(self, number: int) -> str:
    run = self._runs[number]
    return f'pass  # {self._marker}{number}{_line_break(run)}'

