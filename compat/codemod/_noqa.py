"""``# noqa`` suppressions: reading them, applying them, adding them.

A line whose comment holds ``# noqa: FOC108[, FOC101]`` keeps those
findings (neither ``scan`` reports them nor ``migrate`` rewrites them); a
bare ``# noqa`` keeps every finding of its line. Codes of other tools on the
same comment (``# noqa: E501, FOC108``) are left to those tools. An FOC code
that keeps nothing is reported under ``_codes.UNUSED_NOQA``; a bare ``noqa``
is not (it may be there for another linter).

Comments are found with ``tokenize``, so ``"# noqa"`` inside a string is no
suppression; files that do not contain the word are not tokenized at all.
Stdlib only.
"""

import io
import re
import tokenize
from typing import NamedTuple, Optional

from compat.codemod import _codes

# A bare noqa, ``noqa: A1, B2``, ``NOQA:A1 B2`` after the hash (ruff's and
# flake8's spellings); codes are letters then digits.
_NOQA = re.compile(r'#\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+'
                   r'[A-Za-z]+\d+)*))?', re.IGNORECASE)


class Suppression(NamedTuple):
  line: int
  column: int  # 1-based, of the comment
  codes: Optional[frozenset]  # None: a bare noqa (every code)


def suppressions(source: bytes) -> dict:
  """``{line: Suppression}`` of the ``# noqa`` comments in ``source``
  (undecodable or untokenizable sources have none)."""
  if b'noqa' not in source.lower():
    return {}
  found = {}
  try:
    for token in tokenize.tokenize(io.BytesIO(source).readline):
      if token.type != tokenize.COMMENT:
        continue
      match = _NOQA.search(token.string)
      if match is None:
        continue
      codes = match.group('codes')
      line, column = token.start
      found[line] = Suppression(line, column + 1, None if codes is None else
                                frozenset(c.upper() for c in re.split(
                                    r'[\s,]+', codes)))
  except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
    return {}
  return found


def _is_ours(code: str) -> bool:
  return code.startswith(_codes.PREFIX)


def _marked(finding, marks: dict) -> bool:
  mark = marks.get(finding.line)
  return mark is not None and (mark.codes is None or
                               finding.rule in mark.codes)


def held(findings, source: bytes, chosen) -> set:
  """``{(line, code)}`` of the findings ``migrate`` keeps as they are: on a
  ``# noqa`` line for their code, or not in ``chosen`` (None: all)."""
  marks = suppressions(source)
  return {(f.line, f.rule) for f in findings
          if (chosen is not None and f.rule not in chosen) or
          _marked(f, marks)}


def apply(findings, marks: dict, chosen: set, unused_finding):
  """``(kept, suppressed)``: ``findings`` split by ``marks``
  (``suppressions``), plus one ``unused_finding(suppression, code)`` in
  ``kept`` for each selected FOC code of a mark that suppressed nothing.

  ``chosen``: the selected codes (findings of others are dropped first).
  """
  kept, suppressed, used = [], [], set()
  for finding in findings:
    if finding.rule not in chosen:
      continue
    if _marked(finding, marks):
      suppressed.append(finding)
      used.add((finding.line, finding.rule))
      continue
    kept.append(finding)
  if _codes.UNUSED_NOQA in chosen:
    for mark in marks.values():
      for code in sorted(mark.codes or ()):
        if _is_ours(code) and (mark.line, code) not in used and (
            code not in _codes.BY_CODE or code in chosen):
          kept.append(unused_finding(mark, code))
  return kept, suppressed


# ---------------------------------------------------------------------------
# --add-noqa


def _unmarkable_lines(source: bytes) -> set:
  """Lines whose end a comment cannot go after: inside a multi-line string,
  or continued with a backslash."""
  lines: set[int] = set()
  for token in tokenize.tokenize(io.BytesIO(source).readline):
    if token.type == tokenize.STRING and token.end[0] > token.start[0]:
      lines.update(range(token.start[0], token.end[0]))
  text = source.decode('utf-8', 'replace').splitlines()
  lines.update(i for i, line in enumerate(text, 1)
               if line.rstrip().endswith('\\'))
  return lines


def add(source: bytes, codes_by_line: dict) -> tuple:
  """``(new_source, unmarked_lines)``: ``# noqa: CODES`` at the end of each
  line of ``codes_by_line`` (``{line: {code, ...}}``), merged into an
  existing ``# noqa: ...`` there; every other byte stays. Lines no comment
  can end (``_unmarkable_lines``) are returned, not marked."""
  marks = suppressions(source)
  blocked = _unmarkable_lines(source)
  lines = source.splitlines(keepends=True)
  unmarked = []
  for number, codes in sorted(codes_by_line.items()):
    if number in blocked or number > len(lines):
      unmarked.append(number)
      continue
    mark = marks.get(number)
    if mark is not None and mark.codes is None:
      continue  # a bare noqa keeps them already
    line = lines[number - 1]
    body = line.rstrip(b'\r\n')
    ending = line[len(body):]
    text = body.decode('utf-8')
    if mark is not None:
      merged = ', '.join(sorted(mark.codes | set(codes)))
      start = text.find('#', mark.column - 1)
      comment = _NOQA.sub(f'# noqa: {merged}', text[start:], count=1)
      text = text[:start] + comment
    else:
      text = text.rstrip() + f'  # noqa: {", ".join(sorted(codes))}'
    lines[number - 1] = text.encode('utf-8') + ending
  return b''.join(lines), unmarked
