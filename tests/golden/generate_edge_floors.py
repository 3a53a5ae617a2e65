"""Measures the edge cases' floors: flax 0.5.3's own rules on TODAY's JAX.

For every jitted entry of ``edges.json`` (written by ``generate_edges.py``),
flax 0.5.3's ``optim`` modules, loaded from the oracle environment as
``generate_floor.py`` does, run the same steps on today's JAX; the floor of
each leaf is its largest ulp distance from real flax 0.5.3 (``None`` where
even the non-finite elements differ). ``tests/test_overflow_edges.py`` holds
``legacy_optim`` to ``ceil(1.5 * floor)`` ulps per leaf (0: bit-identical)
and to flax 0.5.3's non-finite elements exactly.

Run with today's environment, after ``generate_edges.py``::

  python tests/golden/generate_edge_floors.py [--python ORACLE_PYTHON]
(``tox -e golden-floor`` runs it after ``generate_floor.py``.)
"""

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flax import traverse_util

from golden import edge_cases
from golden import edge_metric
from golden import generate_floor
from golden import runner
from golden import store


def measure(optim, case, golden) -> dict:
  """Per-leaf floors of one case's jitted entry."""
  name = edge_cases.entry_name(case, 'jit')
  entry = golden.entries[name]
  if entry['spec_digest'] != store.spec_digest(
      edge_cases.entry_spec(case, 'jit')):
    raise SystemExit(f'{name}: the case changed since the golden data was '
                     'written; run generate_edges.py first.')
  result = runner.run_edge_case(optim, traverse_util, case, jit=True)
  for kind in ('params', 'grads'):
    if getattr(result, f'{kind}_digest') != entry[f'{kind}_digest']:
      raise SystemExit(f'{name}: the {kind} generated here differ from the '
                       "oracle's (NumPy stream or dtype conversion changed).")
  return {
      'spec_digest': entry['spec_digest'],
      'params': edge_metric.leaf_ulps(golden.params(name), result.final),
      'state': edge_metric.leaf_ulps(golden.state(name), result.state),
  }


def main(argv) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--python', help='the oracle interpreter (flax 0.5.3)',
                      default=os.environ.get(
                          'ORACLE_PYTHON',
                          generate_floor.DEFAULT_ORACLE_PYTHON))
  args = parser.parse_args(argv)
  optim = generate_floor.load_legacy_optim(
      generate_floor.oracle_site_packages(args.python))
  # After loading: flax 0.5.3's optim/__init__ installs an 'always' filter.
  warnings.simplefilter('ignore', DeprecationWarning)
  golden = store.Golden(store.EDGES_NPZ, store.EDGES_JSON)
  start = time.perf_counter()
  floors = {}
  for case in edge_cases.EDGE_CASES:
    floors[case['name']] = floor = measure(optim, case, golden)
    worst = [v for kind in ('params', 'state') for v in floor[kind].values()]
    note = ('  NON-FINITE ELEMENTS DIFFER' if None in worst else
            f'  max {max(worst, default=0)} ulp')
    print(f'{case["name"]:<24}{note}', flush=True)
  meta = dict(runner.environment(), oracle=golden.meta,
              seconds_last_run=round(time.perf_counter() - start, 1))
  with open(store.EDGE_FLOORS_JSON, 'w') as f:
    json.dump({'generator': meta, 'cases': floors}, f, indent=1,
              sort_keys=True)
    f.write('\n')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
