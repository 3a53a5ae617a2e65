"""``flax-optim-compat guide``: the migration guide, as installed.

Warnings and ``scan`` point to sections of ``migration_guide.md``. A wheel
carries it as ``compat/migration_guide.md`` (``setup.py`` copies it in at
build time); a source checkout or an editable install reads the one at the
repository's root. Standard library only.
"""

import argparse
import pathlib
import sys
from typing import Optional

from compat.codemod import _codes

FILE_NAME = _codes.GUIDE_FILE
_CANDIDATES = _codes.GUIDE_CANDIDATES


def path() -> pathlib.Path:
  """Where the migration guide is on this machine.

  Raises:
    FileNotFoundError: neither the packaged copy nor a checkout's file exists.
  """
  for candidate in _CANDIDATES:
    if candidate.is_file():
      return candidate
  raise FileNotFoundError(
      f'{FILE_NAME} is not installed (looked at: '
      f'{", ".join(str(c) for c in _CANDIDATES)})')


def _heading_levels(lines) -> list:
  """Per line: 2 for a ``## `` heading, 3 for ``### ``..., 0 for any other
  line (also a ``# comment`` inside a fenced code block)."""
  levels, in_code = [], False
  for line in lines:
    if line.startswith('```'):
      in_code = not in_code
    level = len(line) - len(line.lstrip('#'))
    heading = not in_code and level and line[level:level + 1] == ' '
    levels.append(level if heading else 0)
  return levels


def section(text: str, title: str) -> Optional[str]:
  """The first ``##``/``###`` section whose heading contains ``title``
  (case-insensitive), down to the next heading of its level or above."""
  lines = text.splitlines()
  levels = _heading_levels(lines)
  wanted = title.strip().lower()
  for start, (line, level) in enumerate(zip(lines, levels)):
    if level in (2, 3) and wanted in line.lower():
      end = start + 1
      while end < len(lines) and not 0 < levels[end] <= level:
        end += 1
      return '\n'.join(lines[start:end]).rstrip() + '\n'
  return None


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='flax-optim-compat guide',
      description=f'Print the migration guide ({FILE_NAME}), one section of '
      'it, or where it is installed.')
  parser.add_argument('section', nargs='?', metavar='SECTION',
                      help='print only the section whose heading contains '
                      'this text (e.g. "Step 4")')
  parser.add_argument('--path', action='store_true',
                      help='print the file\'s location instead')
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:
    return 2 if e.code else 0
  try:
    guide = path()
  except FileNotFoundError as e:
    print(e, file=sys.stderr)
    return 1
  if args.path:
    print(guide)
    return 0
  text = guide.read_text(encoding='utf-8')
  if args.section is None:
    sys.stdout.write(text)
    return 0
  found = section(text, args.section)
  if found is None:
    print(f'no section of {guide} has a heading containing '
          f'{args.section!r}', file=sys.stderr)
    return 2
  sys.stdout.write(found)
  return 0
