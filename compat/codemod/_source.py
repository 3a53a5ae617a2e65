"""The one reader of a module's bytes, for ``scan`` and ``migrate`` alike.

A file Python itself would refuse to run (a NUL byte, bytes its declared
encoding, UTF-8 by default, cannot decode) is refused by both, with the
line and what is wrong. What is read also tells how to write the text
back byte for byte: the encoding its declaration names (PEP 263) and
whether it starts with a UTF-8 byte order mark. Stdlib only.
"""

import codecs
import io
import tokenize
from typing import NamedTuple


class NotSourceText(ValueError):
  """Bytes Python would not read as source; ``lineno``: where."""
  lineno = None


def _not_text(lineno: int, message: str) -> NotSourceText:
  error = NotSourceText(f'line {lineno}{message}')
  error.lineno = lineno  # (in __dict__: copies of the error keep it)
  return error


class Text(NamedTuple):
  text: str  # without the byte order mark
  encoding: str  # the declared one ('utf-8' without a declaration)
  bom: bool  # the file starts with a UTF-8 byte order mark


def _line_of(source: bytes, offset: int) -> int:
  return source.count(b'\n', 0, offset) + 1


def read(source: bytes) -> Text:
  """``source`` decoded. Raises NotSourceText (a ValueError) naming the
  line where it is not text in its encoding, SyntaxError for an encoding
  declaration Python rejects."""
  nul = source.find(b'\x00')
  if nul >= 0:
    raise _not_text(_line_of(source, nul), ' holds a NUL byte (\\x00): not '
                    'Python source text (a binary file?)')
  bom = source.startswith(codecs.BOM_UTF8)
  body = source[len(codecs.BOM_UTF8):] if bom else source
  try:
    declared, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
  except SyntaxError:
    # Its first lines are not UTF-8 (say where), or their declaration
    # names no codec (raised again below).
    _decoded(body, 'utf-8')
    raise
  encoding = 'utf-8' if declared == 'utf-8-sig' else declared
  return Text(_decoded(body, encoding), encoding, bom)


def _decoded(body: bytes, encoding: str) -> str:
  try:
    return body.decode(encoding)
  except UnicodeDecodeError as e:
    raise _not_text(
        _line_of(body, e.start), f': byte {body[e.start]:#04x} is not '
        f'{encoding} (Python refuses the file too; declare its encoding, '
        'PEP 263)') from None


def write(text: str, like: Text) -> bytes:
  """``text`` as bytes in ``like``'s encoding, with its byte order mark."""
  return (codecs.BOM_UTF8 if like.bom else b'') + text.encode(like.encoding)
