"""Prints how closely legacy_optim tracks real flax 0.5.3, case by case.

For every case of ``tests/golden/cases.py``: the relative error of the
accumulated update after 100 steps against the golden data (real flax 0.5.3),
the case's floor (flax 0.5.3's own rules on today's JAX), the bound
(``max(1e-6, 1.5 * floor)``), whether the final params are bit-identical, the
state error, and whether the case passes (within the bound, and bit-identical
where the floor is 0: the rule ``tests/test_fidelity.py`` enforces).

Run::

  python scripts/fidelity_table.py [--markdown] [CASE ...]

(``tox -e fidelity-table``). Exits 1 when a case fails.
"""

import argparse
import os
import sys
import warnings

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    'tests'))

from golden import cases
from golden import runner
from golden import store
import numpy as np

import legacy_optim
from legacy_optim import traverse_util

COLUMNS = ('case', 'error', 'floor', 'bound', 'bit-identical', 'state error',
           'state floor', 'pass')


def _bit_identical(expected: dict, actual: dict) -> bool:
  """Equal dtypes and values (as chex.assert_trees_all_equal compares)."""
  return all(
      isinstance(actual.get(path), np.ndarray)
      and actual[path].dtype == value.dtype
      and actual[path].shape == value.shape
      and np.array_equal(actual[path], value, equal_nan=True)
      for path, value in expected.items() if isinstance(value, np.ndarray))


def row(case, golden, floors) -> tuple:
  """One table row; an exception while running becomes the row's verdict."""
  name = case['name']
  floor = floors[name]['params']
  state_floor = floors[name]['state']
  try:
    result = runner.run_case(legacy_optim, traverse_util, case)
  except Exception as e:
    reason = f'{type(e).__name__}: {e}'.splitlines()[0][:60]
    return (name, '-', f'{floor:.2e}', f'{store.bound(floor):.2e}', '-', '-',
            f'{state_floor:.2e}', f'FAIL ({reason})')
  entry = golden.entries[name]
  if (result.params_digest, result.grads_digest) != (
      entry['params_digest'], entry['grads_digest']):
    verdict = 'FAIL (inputs differ from the golden data: regenerate)'
  else:
    verdict = None
  expected = golden.params(name)
  error = store.update_error(result.initial, expected, result.final)
  identical = _bit_identical(expected, result.final)
  expected_state = golden.state(name)
  state_error = store.state_error(expected_state, result.state)
  layout = store.layout_differences(expected_state, result.state)
  if verdict is None:
    failures = []
    if error > store.bound(floor) or (floor == 0 and not identical):
      failures.append('params')
    if layout:
      failures.append('state layout')
    elif state_error > store.bound(state_floor) or (
        state_floor == 0 and not _bit_identical(expected_state, result.state)):
      failures.append('state')
    verdict = f'FAIL ({", ".join(failures)})' if failures else 'pass'
  return (name, f'{error:.2e}', f'{floor:.2e}', f'{store.bound(floor):.2e}',
          'yes' if identical else 'no', f'{state_error:.2e}',
          f'{state_floor:.2e}', verdict)


def render(rows, markdown: bool) -> str:
  if markdown:
    lines = ['| ' + ' | '.join(COLUMNS) + ' |',
             '|' + '|'.join('---' for _ in COLUMNS) + '|']
    lines += ['| ' + ' | '.join(r) + ' |' for r in rows]
    return '\n'.join(lines)
  widths = [max(len(str(x)) for x in column)
            for column in zip(COLUMNS, *rows)]
  fmt = '  '.join(f'{{:<{w}}}' for w in widths)
  return '\n'.join(fmt.format(*r) for r in [COLUMNS, *rows])


def main(argv) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--markdown', action='store_true',
                      help='print a Markdown table')
  parser.add_argument('cases', nargs='*', help='only these cases')
  args = parser.parse_args(argv)
  selected = cases.select(args.cases)
  warnings.simplefilter('ignore')
  golden = store.Golden()
  floors = store.load_floors()['cases']
  rows = [row(case, golden, floors) for case in selected]
  print(render(rows, args.markdown))
  failed = sum(not r[-1].startswith('pass') for r in rows)
  print(f'\n{len(rows) - failed}/{len(rows)} cases pass.')
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
