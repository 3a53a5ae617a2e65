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

Most migrated modules need neither visitor: they import already what the
rewrite adds (``import jax`` for ``x.at[i].set(v)``) and nothing the plan
drops. ``imports_to_add`` and ``may_remove`` say so from ``ast`` (erring
only towards running the visitor), so ``migrate`` runs a visitor only where
it can change something.

Stdlib only.
"""

import ast
import io
import re
import tokenize
from typing import Optional

_LINE = re.compile(r'[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+')  # ast's line breaks
_INDENTED_COMMENT = re.compile(r'[ \t\f]+#')
_COMMENT = re.compile(r'#[^\r\n]*')


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



# What the visitors would do, read from ``ast`` first: LibCST's walks cost
# tens of milliseconds a module even on a skeleton, and most migrated
# modules already import what their rewrite needs (``import jax`` for
# ``x.at[i].set(v)``) and import nothing the plan drops. Each answer errs
# only towards running the visitor (which then decides as before).


def _gaps(code: str, body: list) -> list:
  """The text before each top-level statement (after the one before it)
  and, last, the text after the last one."""
  offsets = [0]
  for line in _lines(code):
    offsets.append(offsets[-1] + len(line))
  def at(line, column):  # (ast's columns count UTF-8 bytes)
    start = offsets[line - 1]
    text = code[start:offsets[line]] if line < len(offsets) else ''
    return start + len(text.encode('utf-8')[:column].decode('utf-8',
                                                             'replace'))
  ends = [0] + [at(n.end_lineno, n.end_col_offset) for n in body]
  starts = [at(n.lineno, n.col_offset) for n in body] + [len(code)]
  return [code[end:start] for end, start in zip(ends, starts)]


def _one_string(text: str) -> bool:
  """Whether ``text`` (an expression statement) is one string literal
  (LibCST's ``SimpleString``, not two concatenated)."""
  try:
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
  except (tokenize.TokenError, SyntaxError):
    return False
  return sum(t.type == tokenize.STRING for t in tokens) == 1


def _top_imports(code: str) -> Optional[list]:
  """The imports ``AddImportsVisitor`` finds at the top of ``code``: the
  statements after a docstring, each alone on its line, up to the first
  other one; None where unsure (not parsed, ``__strict__``)."""
  try:
    body = ast.parse(code).body
  except (SyntaxError, ValueError):
    return None
  # Alone on its line: no ``;`` before or after it (between statements
  # there are only blanks, comments, line continuations and semicolons).
  gaps = [_COMMENT.sub('', gap) for gap in _gaps(code, body)]
  alone = [';' not in gaps[i] and ';' not in gaps[i + 1]
           for i in range(len(body))]
  start = 0
  if body and not isinstance(body[0], (ast.Import, ast.ImportFrom)):
    first = body[0]
    if not (alone[0] and isinstance(first, ast.Expr) and isinstance(
        first.value, ast.Constant) and isinstance(first.value.value, str)
            and _one_string(ast.get_source_segment(code, first) or '')):
      # No docstring LibCST skips: no imports at the top, or unsure.
      return None if isinstance(first, (ast.Assign, ast.AnnAssign)) else []
    start = 1
  found = []
  for node, lone in zip(body[start:], alone[start:]):
    if not (lone and isinstance(node, (ast.Import, ast.ImportFrom))):
      break
    found.append(node)
  return found


def imports_to_add(code: str, imports) -> list:
  """``imports`` ``(module, obj, asname)`` less those ``AddImportsVisitor``
  finds imported at the top of ``code`` and so would not add (an alias
  asked for is always kept)."""
  top = _top_imports(code)
  if not top:
    return list(imports)
  plain = {a.name for n in top if isinstance(n, ast.Import)
           for a in n.names if a.asname is None}
  objects: dict = {}
  for node in top:
    if isinstance(node, ast.ImportFrom) and node.level == 0:
      objects.setdefault(node.module, set()).update(
          a.name for a in node.names if a.asname is None)
  return [(module, obj, asname) for module, obj, asname in imports
          if asname is not None or (
              module not in plain if obj is None else not (
                  objects.get(module, set()) & {obj, '*'}))]


def may_remove(code: str, removed) -> bool:
  """Whether ``RemoveImportsVisitor`` could change an import of ``code``
  for ``removed`` ``(module, obj, asname)``: it changes only an import of
  one of their modules, or of one of their objects by the same local name
  (True where unsure: a relative import)."""
  try:
    tree = ast.parse(code)
  except (SyntaxError, ValueError):
    return True
  whole = {module for module, obj, _ in removed if obj is None}
  parts = {(module, obj, asname) for module, obj, asname in removed
           if obj is not None}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import) and any(a.name in whole
                                            for a in node.names):
      return True
    if isinstance(node, ast.ImportFrom) and (node.level or any(
        (node.module, a.name, a.asname) in parts for a in node.names)):
      return True
  return False
