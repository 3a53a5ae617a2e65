"""``migrate --tier exact`` on flax v0.3.3's examples: what is left, each.

Run by ``tox -e migrate-examples``, which clones flax v0.3.3 into the env's
temporary directory (never committed) and passes its ``examples`` directory:

  python scripts/migrate_examples.py FLAX_CHECKOUT/examples

For each example that used flax.optim (mnist, imagenet, lm1b, wmt, nlp_seq,
pixelcnn, ppo, vae) it migrates the example's modules in memory (nothing is
written) and prints one row: the scanner's flax.optim findings, how many
source edits the exact tier made, how many usages it left (with their
reasons below the table), and whether the migrated modules still import
flax.optim or legacy_optim.

Then ``migrate --diff``'s output and report on every example directory are
compared with the digests recorded in ``tests/corpus/outputs.toml``
(scripts/migrate_outputs.py); ``--record-outputs`` records them instead (a
change of output listed in the closing note); and the statements migrate
changes or leaves that carry no scan finding are listed, more than
``UNREPORTED_CEILING`` failing. Exit status 0 when every example was read,
every output is as recorded and the unreported statements are within their
ceiling, else 1 (2: an example is missing).
"""

import argparse
import ast
import collections
import os
import sys

from compat.codemod import migrate
from compat.codemod import scan

# Its neighbour, also when a test loads this file by its path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import migrate_outputs  # noqa: E402

# Statements of the examples (their tests too) that migrate changes or leaves
# with no scan finding (corpus.unreported_statements), at most: none since
# scan plans each module as migrate does, with its analysis across modules
# (the two left before needed it: imagenet/train.py's restore of a state that
# train_test.py's calls pass, ppo_lib_test.py's optimizer.target on what
# models.create_optimizer returns).
UNREPORTED_CEILING = 0
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
  parser.add_argument('--record-outputs', action='store_true',
                      help='record the digests of migrate\'s output and '
                      f'report in {migrate_outputs.OUTPUTS_FILE} instead of '
                      'comparing them (a change listed in the closing note)')
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
  changed = check_outputs(args.examples, args.record_outputs)
  return 1 if changed or check_unreported(args.examples) else 0


def check_unreported(examples: str) -> list:
  """The statements migrate changes or leaves with no scan finding, printed;
  failing (returned) when more than ``UNREPORTED_CEILING``."""
  touched, unreported = corpus.unreported_statements([examples])
  print(f'\nstatements migrate changes or leaves: {touched}, with no scan '
        f'finding: {len(unreported)} (at most {UNREPORTED_CEILING})')
  for path, line, text in unreported:
    print(f'  {os.path.relpath(path, examples)}:{line}: {text}')
  if len(unreported) < UNREPORTED_CEILING:
    print(f'better than recorded: lower UNREPORTED_CEILING to '
          f'{len(unreported)} in scripts/migrate_examples.py')
  return unreported if len(unreported) > UNREPORTED_CEILING else []


def check_outputs(examples: str, record: bool) -> list:
  """migrate's output on each example directory against its recorded
  digests (or recorded, with ``record``): the failure lines, printed."""
  recorded = migrate_outputs.load_outputs()
  outputs = {name: migrate_outputs.migrate_outputs(
      os.path.join(examples, name)) for name in sorted(os.listdir(examples))
             if os.path.isdir(os.path.join(examples, name))}
  if record:
    migrate_outputs.record_outputs('examples', outputs)
    return []
  changed = migrate_outputs.compare_outputs('examples', outputs, recorded)
  changed += [f'examples.{name}: recorded, but no such directory in '
              f'{examples}' for name in recorded.get('examples', {})
              if name not in outputs]
  for line in changed:
    print(f'\nOUTPUT CHANGED: {line}')
  print(f'\nmigrate\'s output on {len(outputs)} example directories: '
        f'{len(outputs) - len(changed)} as recorded')
  return changed


if __name__ == '__main__':
  sys.exit(main())
