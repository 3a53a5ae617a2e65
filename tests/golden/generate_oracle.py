"""Writes the golden data with REAL flax 0.5.3 (``from flax import optim``).

Run with the oracle interpreter (jax 0.4.13, flax 0.5.3, numpy<2)::

  /opt/venvs/oracle/bin/python tests/golden/generate_oracle.py [CASE ...]

or ``tox -e golden``. Every case of ``cases.py`` (or only the named ones,
merged into the existing data) runs 100 jitted steps; the final params and
optimizer state dict go to ``oracle.npz``, digests and layouts to
``oracle.json``. Re-run ``generate_floor.py`` afterwards.
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
import numpy as np

from golden import cases
from golden import runner
from golden import store


def _existing_results() -> dict:
  """Results already on disk, to merge a partial regeneration into."""
  if not os.path.exists(store.ORACLE_JSON):
    return {}
  golden = store.Golden()
  out = {}
  for name, entry in golden.entries.items():
    case = cases.CASES_BY_NAME.get(name)
    if case is None or entry['spec_digest'] != store.spec_digest(case):
      continue  # dropped or edited since: not carried over.
    out[name] = (case, runner.stored_result(golden, name))
  return out


def main(argv) -> int:
  problem = runner.oracle_version_error('generate_oracle.py')
  if problem:
    print(problem, file=sys.stderr)
    return 2
  selected = cases.select(argv)
  results = _existing_results() if argv else {}

  start = time.perf_counter()
  for case in selected:
    t0 = time.perf_counter()
    result = runner.run_case(optim, traverse_util, case)
    broken = [path for path, value in result.final.items()
              if not np.all(np.isfinite(value.astype(np.float64)))]
    if broken:
      print(f'{case["name"]}: flax 0.5.3 produced non-finite params at '
            f'{", ".join(broken)}; fix the case.', file=sys.stderr)
      return 1
    seconds = time.perf_counter() - t0
    results[case['name']] = (case, result)
    print(f'{case["name"]:<45} {seconds:6.1f} s', flush=True)
  total = time.perf_counter() - start

  meta = dict(runner.environment(), steps=cases.STEPS,
              seconds_last_run=round(total, 1))
  store.save_oracle(results, meta)
  print(f'{len(selected)} case(s) in {total:.1f} s -> {store.ORACLE_NPZ} '
        f'({os.path.getsize(store.ORACLE_NPZ) / 1e6:.2f} MB)')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
