"""Writes the edge-case golden data with REAL flax 0.5.3 (``flax.optim``).

Run with the oracle interpreter (jax 0.4.13, flax 0.5.3, numpy<2)::

  $ORACLE_PYTHON tests/golden/generate_edges.py [CASE ...]

(``tox -e golden-edges``). Every case of ``edge_cases.py`` (or only the named
ones, merged into the existing data) runs its steps jitted and eagerly; the
params after each step and the final state dict go to ``edges.npz``, digests
and layouts to ``edges.json`` (entries ``<case>.jit`` and ``<case>.eager``).
Non-finite results are kept: they are what flax 0.5.3 did.
"""

import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# flax 0.5.3 warns on import (struct registration) and on every OptimizerDef.
warnings.simplefilter('ignore', DeprecationWarning)
warnings.simplefilter('ignore', FutureWarning)

from flax import optim
from flax import traverse_util

from golden import edge_cases
from golden import runner
from golden import store


def _existing_results(keep) -> dict:
  """Entries already on disk for the cases in ``keep`` (still current)."""
  if not os.path.exists(store.EDGES_JSON):
    return {}
  golden = store.Golden(store.EDGES_NPZ, store.EDGES_JSON)
  out = {}
  for case in edge_cases.EDGE_CASES:
    for mode in edge_cases.MODES:
      name = edge_cases.entry_name(case, mode)
      entry = golden.entries.get(name)
      spec = edge_cases.entry_spec(case, mode)
      if (case['name'] not in keep or entry is None or
          entry['spec_digest'] != store.spec_digest(spec)):
        continue
      out[name] = (spec, runner.stored_result(golden, name))
  return out


def main(argv) -> int:
  problem = runner.oracle_version_error('generate_edges.py')
  if problem:
    print(problem, file=sys.stderr)
    return 2
  unknown = sorted(set(argv) - set(edge_cases.EDGE_CASES_BY_NAME))
  if unknown:
    print(f'unknown case(s): {", ".join(unknown)}', file=sys.stderr)
    return 2
  selected = [c for c in edge_cases.EDGE_CASES if not argv or
              c['name'] in argv]
  results = _existing_results(
      set(edge_cases.EDGE_CASES_BY_NAME) - set(argv)) if argv else {}

  start = time.perf_counter()
  for case in selected:
    t0 = time.perf_counter()
    for mode in edge_cases.MODES:
      result = runner.run_edge_case(optim, traverse_util, case,
                                    jit=mode == 'jit')
      results[edge_cases.entry_name(case, mode)] = (
          edge_cases.entry_spec(case, mode), result)
    print(f'{case["name"]:<24} {time.perf_counter() - t0:6.1f} s', flush=True)
  total = time.perf_counter() - start
  meta = dict(runner.environment(), steps=edge_cases.STEPS,
              seconds_last_run=round(total, 1))
  store.save_oracle(results, meta, store.EDGES_NPZ, store.EDGES_JSON,
                    packed=True)
  print(f'{len(selected)} case(s) in {total:.1f} s -> {store.EDGES_NPZ} '
        f'({os.path.getsize(store.EDGES_NPZ) / 1e3:.0f} kB)')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
