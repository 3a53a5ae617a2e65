"""Records flax 0.5.3's learning-rate schedules into ``schedules.json``.

Run with the oracle interpreter (REAL flax 0.5.3, jax 0.4.13)::

  $ORACLE_PYTHON tests/golden/generate_schedules.py

The grid lives in ``schedule_cases.py``: each case of
``flax.training.lr_schedule`` at every step, the step given as a Python
``int``, as a ``jnp.int32`` scalar and as a ``jnp.int32`` scalar under
``jax.jit``; each value is kept as its exact bits with its type and weak
type. Also each helper's parameters (``[name]``, or ``[name, default]``).
``tests/test_lr_schedule.py`` compares ``flax_optim_rules.lr_schedule`` with
it; ``scripts/schedule_deviation.py`` measures stock Optax against it.
"""

import inspect
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
warnings.simplefilter('ignore', DeprecationWarning)
warnings.simplefilter('ignore', FutureWarning)

import flax
from flax.training import lr_schedule
import jax
import numpy as np

from golden import schedule_cases

SCHEDULES_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              'schedules.json')


def main() -> int:
  if flax.__version__ != '0.5.3':
    print('generate_schedules.py needs REAL flax 0.5.3, found '
          f'{flax.__version__}', file=sys.stderr)
    return 2
  results = {
      case['name']: {kind: schedule_cases.describe(
          schedule_cases.evaluate(lr_schedule, case, kind))
                     for kind in schedule_cases.STEP_KINDS}
      for case in schedule_cases.CASES}
  signatures = {
      name: [[p.name] if p.default is p.empty else [p.name, p.default]
             for p in inspect.signature(getattr(lr_schedule, name)).parameters
             .values()]
      for name in schedule_cases.HELPERS.values()}
  meta = {'flax': flax.__version__, 'jax': jax.__version__,
          'numpy': np.__version__, 'backend': jax.default_backend()}
  with open(SCHEDULES_JSON, 'w') as f:
    json.dump({'meta': meta, 'cases': list(schedule_cases.CASES),
               'signatures': signatures, 'results': results}, f, sort_keys=True,
              separators=(',', ':'))
    f.write('\n')
  print(f'{len(results)} cases -> {SCHEDULES_JSON} '
        f'({os.path.getsize(SCHEDULES_JSON)} bytes)')
  return 0


if __name__ == '__main__':
  sys.exit(main())
