"""Jupyter notebooks as Python source, and edits that keep their bytes.

``scan`` and ``migrate`` read a notebook's code cells as one module
(``Notebook.module``: each cell behind a marker line, IPython magics
replaced by calls of the same length in lines, so a line of the module is a
line of a cell). ``Notebook.rewrite`` puts rewritten cells back by editing
the notebook's JSON text in place: only the string literals of the source
lines that changed are replaced, so indentation, key order, outputs,
metadata, escaping and the trailing newline stay byte for byte (a file
re-serialised by ``json.dumps`` would differ in every line).

Stdlib only. The JSON text is walked once by ``_Spans``, which records where
each code cell's ``source`` strings lie; ``json.loads`` still decides what
the file means (a file it rejects is not a notebook).
"""

import ast
import json
import re
from typing import NamedTuple, Optional

from compat.codemod import _line_match

_MAGIC = re.compile(r'^\s*[%!?]')
CELL_MARKER = '__flax_optim_compat_cell__'
MAGIC_CALL = '__flax_optim_compat_magic__'
# A magic's line in the module, its indentation included (the magic's own
# text, kept whole, replaces it all).
_MAGIC_LINE = re.compile(rf'^[ \t]*{MAGIC_CALL}\((\d+)\)', re.MULTILINE)
_NUMBER_OR_WORD = re.compile(r'-?[0-9.eE+\-]+|true|false|null')
_SPACE = re.compile(r'\s*')


class NotNotebookError(ValueError):
  """The file is JSON but not a notebook with a list of cells."""


class _Literal(NamedTuple):
  start: int  # offsets in the notebook text, quotes included
  end: int
  value: str


class _Source(NamedTuple):
  """One code cell's ``source``: a list of lines, or one string."""
  literals: tuple  # of _Literal, in order
  is_list: bool
  start: int  # the list's '[' (or the string's opening quote)
  end: int  # one past its ']' (or the closing quote)

  @property
  def text(self) -> str:
    return ''.join(l.value for l in self.literals)


def _not_json(constant: str):
  raise ValueError(f'{constant} is not JSON')


# Skips a value no code cell's source can lie in (outputs, metadata) in C;
# NaN and Infinity, which json.loads takes, are left to the walk to reject.
_SKIP = json.JSONDecoder(parse_constant=_not_json)


def _may_hold_sources(path: tuple) -> bool:
  """The document, its ``cells`` and each cell (sources are at
  ``('cells', i, 'source')``)."""
  return not path or (path[0] == 'cells' and len(path) <= 2)


class _Spans:
  """Walks JSON text, recording the code cells' source literals."""

  def __init__(self, text: str):
    self.text = text
    self.sources: list[_Source] = []

  def skip(self, position: int) -> int:
    match = _SPACE.match(self.text, position)
    return match.end() if match else position

  def value(self, position: int, path: tuple):
    """(the value's end, the value if a string or a code cell's type)."""
    position = self.skip(position)
    char = self.text[position]
    if char == '"':
      value, end = json.decoder.scanstring(self.text, position + 1)
      return end, value
    if char in '{[' and not _may_hold_sources(path):
      try:
        return _SKIP.raw_decode(self.text, position)[1], None
      except ValueError:
        pass  # the walk below says where
    if char == '{':
      return self.object(position, path), None
    if char == '[':
      return self.array(position, path), None
    match = _NUMBER_OR_WORD.match(self.text, position)
    if match is None:
      raise ValueError(f'unexpected {char!r} at offset {position}')
    return match.end(), None

  def object(self, position: int, path: tuple) -> int:
    position = self.skip(position + 1)
    members: dict = {}
    while self.text[position] != '}':
      key, position = json.decoder.scanstring(self.text, position + 1)
      position = self.skip(position)
      start = self.skip(position + 1)  # after ':'
      is_source = len(path) == 2 and path[0] == 'cells' and key == 'source'
      if is_source:
        members[key] = self.source(start)
        position = members[key].end
      else:
        position, members[key] = self.value(start, path + (key,))
      position = self.skip(position)
      if self.text[position] == ',':
        position = self.skip(position + 1)
    if len(path) == 2 and path[0] == 'cells' and members.get(
        'cell_type') == 'code' and isinstance(members.get('source'), _Source):
      self.sources.append(members['source'])
    return position + 1

  def array(self, position: int, path: tuple) -> int:
    position = self.skip(position + 1)
    index = 0
    while self.text[position] != ']':
      position, _ = self.value(position, path + (index,))
      position = self.skip(position)
      if self.text[position] == ',':
        position = self.skip(position + 1)
      index += 1
    return position + 1

  def source(self, start: int) -> _Source:
    if self.text[start] == '"':
      value, end = json.decoder.scanstring(self.text, start + 1)
      return _Source((_Literal(start, end, value),), False, start, end)
    if self.text[start] != '[':
      raise NotNotebookError(f'a cell source at offset {start} is neither a '
                             'string nor a list of strings')
    literals = []
    position = self.skip(start + 1)
    while self.text[position] != ']':
      if self.text[position] != '"':
        raise NotNotebookError(f'a cell source at offset {start} holds '
                               'something other than strings')
      value, end = json.decoder.scanstring(self.text, position + 1)
      literals.append(_Literal(position, end, value))
      position = self.skip(end)
      if self.text[position] == ',':
        position = self.skip(position + 1)
    return _Source(tuple(literals), True, start, position + 1)


def _parses(text: str) -> bool:
  try:
    ast.parse(text)
  except (SyntaxError, ValueError):
    return False
  return True


def _split_magics(cell: str):
  """The cell with each magic line replaced by a numbered call, and the
  magics (so line numbers stay those of the cell).

  As IPython reads them: a cell magic makes the rest of the cell its input
  (Python for ``%%time``, a shell script for ``%%bash``: the rest is read
  as Python where it parses as Python), and a line magic or shell line
  ending in a backslash goes on onto the next line (``!colmap
  feature_extractor \\``): each of those lines is a call too, at the first
  line's indentation (its own may be any). ``_MAGIC_LINE`` puts each line
  back whole.
  """
  lines: list[str] = []
  magics: list[str] = []
  first, _, rest = cell.lstrip().partition('\n')
  whole_cell = first.startswith('%%') and not _parses(rest)
  indent, continued = '', False
  for line in cell.split('\n'):
    if whole_cell or continued or _MAGIC.match(line):
      if not (whole_cell or continued):
        indent = line[:len(line) - len(line.lstrip())]
      lines.append(f'{indent}{MAGIC_CALL}({len(magics)})')
      magics.append(line)
      continued = line.endswith('\\')
    else:
      lines.append(line)
  return '\n'.join(lines), magics


class Notebook:
  """A notebook's code cells, where they lie in its text, and its module.

  Raises ``ValueError`` (``json.JSONDecodeError``, ``NotNotebookError``,
  ``UnicodeDecodeError``) for a file that is not a JSON notebook.
  """

  def __init__(self, raw: bytes):
    self.raw = raw
    self.text = raw.decode('utf-8')
    start = 1 if self.text.startswith('\ufeff') else 0  # a BOM stays
    document = json.loads(self.text[start:])
    if not isinstance(document, dict) or not isinstance(
        document.get('cells'), list):
      raise NotNotebookError('no list of "cells" at the top level')
    walker = _Spans(self.text)
    walker.value(start, ())
    self.sources = walker.sources
    self._magics: list[list[str]] = []
    parts: list[str] = []
    # Module line -> (cell index, line within the cell), both from 0.
    self._lines: list[Optional[tuple[int, int]]] = [None]
    for index, source in enumerate(self.sources):
      body, magics = _split_magics(source.text)
      self._magics.append(magics)
      parts.append(f'{CELL_MARKER}({index})\n{body}\n')
      self._lines.append(None)
      self._lines += [(index, n) for n in range(body.count('\n') + 1)]
    self.module = ''.join(parts)
    # ASCII escapes (json.dumps' default) or the characters themselves
    # (nbformat's): new literals follow what the file already does.
    self.ensure_ascii = self.text.isascii() and bool(
        re.search(r'\\u(?!00[0-7])[0-9a-fA-F]{4}', self.text))

  def file_line(self, module_line: int) -> int:
    """The notebook file's line holding a line of ``module`` (for a cell
    whose source is one string: the line where that string starts)."""
    where = self._lines[module_line] if module_line < len(self._lines) else (
        None)
    if where is None:
      return 1
    cell, line = where
    source = self.sources[cell]
    offset = 0
    literal = source.literals[0] if source.literals else None
    for candidate in source.literals:
      breaks = candidate.value.count('\n')
      if offset + breaks - candidate.value.endswith('\n') >= line:
        literal = candidate
        break
      offset += breaks
    position = literal.start if literal else source.start
    return self.text.count('\n', 0, position) + 1

  def cells_of(self, module: str) -> list:
    """The cell texts of a rewritten ``module`` (magics put back)."""
    chunks = re.split(rf'^{CELL_MARKER}\((\d+)\)\n', module,
                      flags=re.MULTILINE)
    prefix, bodies = chunks[0], dict(zip(chunks[1::2], chunks[2::2]))
    cells = []
    for index in range(len(self.sources)):
      body = bodies[str(index)]
      body = body[:-1] if body.endswith('\n') else body
      if index == 0:
        body = prefix + body
      body = _MAGIC_LINE.sub(
          lambda m, i=index: self._magics[i][int(m.group(1))], body)
      cells.append(body)
    return cells

  def rewrite(self, module: str) -> bytes:
    """The notebook's bytes with the cells of ``module``; only the source
    strings that changed differ."""
    edits = []  # (start, end, new text), in order
    for source, new in zip(self.sources, self.cells_of(module)):
      if new == source.text:
        continue
      if not source.is_list:
        literal = source.literals[0]
        edits.append((literal.start, literal.end, self._dump(new)))
      else:
        edits.append((source.start, source.end,
                      self._list(source, new.splitlines(keepends=True))))
    out, position = [], 0
    for start, end, text in edits:
      out += [self.text[position:start], text]
      position = end
    out.append(self.text[position:])
    return ''.join(out).encode('utf-8')

  def _dump(self, value: str) -> str:
    return json.dumps(value, ensure_ascii=self.ensure_ascii)

  def _list(self, source: _Source, lines: list) -> str:
    """The source list's new text: unchanged elements and the separators
    between neighbours that stay neighbours keep their bytes."""
    literals = source.literals
    text = self.text
    if literals:
      opener = text[source.start:literals[0].start]
      closer = text[literals[-1].end:source.end]
      indent = opener[1:]
      separator = (text[literals[0].end:literals[1].start]
                   if len(literals) > 1 else ',' + (indent or ' '))
    else:
      opener, closer, separator = '[', ']', ', '
    old = [l.value for l in literals]
    pieces: list[tuple[Optional[int], str]] = []  # (old index or None, text)
    for tag, i1, i2, j1, j2 in _line_match.opcodes(old, lines):
      if tag == 'equal':
        pieces += [(i, text[literals[i].start:literals[i].end])
                   for i in range(i1, i2)]
      else:
        pieces += [(None, self._dump(line)) for line in lines[j1:j2]]
    out = [opener]
    for position, (index, literal) in enumerate(pieces):
      if position:
        before = pieces[position - 1][0]
        kept = index is not None and before is not None and before + 1 == (
            index)
        out.append(text[literals[before].end:literals[index].start]
                   if kept else separator)
      out.append(literal)
    out.append(closer)
    return ''.join(out)
