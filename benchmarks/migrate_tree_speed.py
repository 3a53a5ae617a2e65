"""``migrate --diff`` on a real tree against ``ast.parse`` of the same files.

The issue's target: ``migrate`` on t5x's package within 30x the time
``ast.parse`` takes over the same files (BENCHMARKS.md). Each measurement
runs in a fresh process, the two alternate their order between runs, and
the table gives medians of CPU seconds (the process's own, from just before
the work to just after: the interpreter's start and the imports are left
out of both). ``ast.parse`` reads and parses the files of scan's walk as in
benchmarks/scan_speed.py; ``migrate`` is the command's own entry point
(``migrate --diff TREE``, its output thrown away).

  python benchmarks/migrate_tree_speed.py path/to/t5x/t5x --runs 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import scan_speed

_MIGRATE_CHILD = r'''
import contextlib, io, json, resource, sys, time
sys.path.insert(0, {root!r})
from compat.codemod import migrate

def cpu():
  own = resource.getrusage(resource.RUSAGE_SELF)
  return own.ru_utime + own.ru_stime

wall, start = time.perf_counter(), cpu()
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
  code = migrate.main(['--diff', *sys.argv[2:]])
print(json.dumps({{'variant': 'migrate', 'code': code,
                  'diff_lines': out.getvalue().count('\n'),
                  'wall': time.perf_counter() - wall, 'cpu': cpu() - start}}))
'''


def _child(variant: str, tree: str) -> dict:
  source = (scan_speed._CHILD if variant == 'ast.parse' else
            _MIGRATE_CHILD).format(root=scan_speed.ROOT)
  out = subprocess.run([sys.executable, '-c', source, variant, tree],
                       check=True, capture_output=True, text=True,
                       env=dict(os.environ, JAX_PLATFORMS='cpu'))
  return json.loads(out.stdout.splitlines()[-1])


def measure(tree: str, runs: int) -> dict:
  results = {'ast.parse': [], 'migrate': []}
  for run in range(runs):
    order = ('ast.parse', 'migrate') if run % 2 == 0 else ('migrate',
                                                           'ast.parse')
    for variant in order:
      results[variant].append(_child(variant, tree))
  return results


def table(tree: str, results: dict) -> str:
  cpu = {v: statistics.median(r['cpu'] for r in rows)
         for v, rows in results.items()}
  files = results['ast.parse'][0]['files']
  diff = {r['diff_lines'] for r in results['migrate']}
  return '\n'.join([
      f'{tree}: {files} files, {len(results["migrate"])} runs, load average '
      f'{os.getloadavg()[0]:.1f}; migrate --diff printed {sorted(diff)} lines',
      f'ast.parse CPU s: {cpu["ast.parse"]:.3f}; migrate --diff CPU s: '
      f'{cpu["migrate"]:.2f}; migrate / ast.parse: '
      f'{cpu["migrate"] / cpu["ast.parse"]:.1f}x'])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('tree')
  parser.add_argument('--runs', type=int, default=3)
  parser.add_argument('--json', metavar='FILE', help='write raw figures')
  args = parser.parse_args(argv)
  results = measure(args.tree, args.runs)
  print(table(args.tree, results))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
