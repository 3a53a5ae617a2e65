"""Writes the table of codes in migration_guide.md from the rule table.

The codes, their titles and guide sections are written once, in
``legacy_optim/_rule_table.py``; the guide's table is generated from them (as
ruff generates its rules' documentation). tests/test_scan_codes.py fails
when the committed guide differs from what this writes.

Usage: PYTHONPATH=. python scripts/guide_codes.py [--check]
"""

import argparse
import pathlib
import sys

from compat.codemod import _codes

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = ROOT / _codes.GUIDE_FILE


def rewritten(guide: str) -> str:
  """``guide`` with its table of codes (the first line that is the table's
  header to the first line after it that is not a row) generated anew."""
  table = _codes.guide_table()
  header = table.splitlines(keepends=True)[0]
  lines = guide.splitlines(keepends=True)
  if header not in lines:
    raise ValueError(f'{GUIDE}: no table of codes (expected a line '
                     f'{header.strip()!r})')
  start = lines.index(header)
  end = start
  while end < len(lines) and lines[end].startswith('|'):
    end += 1
  return ''.join(lines[:start]) + table + ''.join(lines[end:])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--check', action='store_true',
                      help='exit 1 if the guide differs, write nothing')
  args = parser.parse_args(argv)
  current = GUIDE.read_text(encoding='utf-8')
  wanted = rewritten(current)
  if wanted == current:
    return 0
  if args.check:
    print(f'{GUIDE}: its table of codes differs from the rule table; run '
          'scripts/guide_codes.py', file=sys.stderr)
    return 1
  GUIDE.write_text(wanted, encoding='utf-8')
  print(f'{GUIDE}: table of codes written')
  return 0


if __name__ == '__main__':
  sys.exit(main())
