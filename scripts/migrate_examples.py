"""``migrate --tier exact`` on flax v0.3.3's examples: what is left, each.

Run by ``tox -e migrate-examples``, which clones flax v0.3.3 into the env's
temporary directory (never committed) and passes its ``examples`` directory:

  python scripts/migrate_examples.py FLAX_CHECKOUT/examples

For each example that used flax.optim (mnist, imagenet, lm1b, wmt, nlp_seq,
pixelcnn, ppo, vae) it migrates the example's modules in memory (nothing is
written) and prints one row: the scanner's flax.optim findings, how many
source edits the exact tier made, how many usages it left (with their
reasons below the table), and whether the migrated modules still import
flax.optim or legacy_optim. Exit status 0 when every example was read.
"""

import argparse
import ast
import collections
import os
import sys

from compat.codemod import migrate
from compat.codemod import scan

EXAMPLES = ('mnist', 'imagenet', 'lm1b', 'wmt', 'nlp_seq', 'pixelcnn', 'ppo',
            'vae')
_LEGACY_MODULES = ('flax.optim', 'legacy_optim')


def _imports_legacy(source: bytes) -> bool:
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      names = [f'{node.module}.{a.name}' for a in node.names]
    else:
      continue
    if any(n.startswith(_LEGACY_MODULES) for n in names):
      return True
  return False


def migrate_example(directory: str):
  """(findings, edits, leftovers, still_legacy_files, reasons) of an example."""
  findings = edits = left = 0
  still_legacy, reasons = [], collections.Counter()
  sources, results = migrate.migrate_paths([directory], 'exact',
                                           exclude=('*_test.py',))
  for path, result in zip(sources, results):
    if not path.endswith('.py'):
      continue
    findings += sum(1 for f in scan.scan_source(result.old, path)
                    if f.construct not in ('import', 'shim'))
    if result.error:
      reasons[f'not migrated: {result.error}'] += 1
      continue
    edits += len(result.plan.edits)
    left += len(result.left)  # what a re-scan finds in the output
    for leftover in result.left:
      reasons[f'{leftover.construct}: {leftover.reason}'] += 1
    if _imports_legacy(result.new):
      still_legacy.append(os.path.relpath(path, directory))
  return findings, edits, left, still_legacy, reasons


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('examples', help="a flax checkout's examples directory")
  parser.add_argument('--only', nargs='*', default=EXAMPLES)
  args = parser.parse_args(argv)
  print(f'{"example":10} {"findings":>8} {"edits":>6} {"left":>5}  '
        'still imports flax.optim')
  details = []
  for name in args.only:
    directory = os.path.join(args.examples, name)
    if not os.path.isdir(directory):
      print(f'{name:10} missing: {directory}')
      return 2
    findings, edits, left, legacy, reasons = migrate_example(directory)
    print(f'{name:10} {findings:8} {edits:6} {left:5}  '
          f'{", ".join(legacy) or "no"}')
    details += [f'  {name}: {count} x {reason}'
                for reason, count in sorted(reasons.items())]
  if details:
    print('\nleft, and why:')
    print('\n'.join(details))
  return 0


if __name__ == '__main__':
  sys.exit(main())
