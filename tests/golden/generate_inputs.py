"""Records what flax 0.5.3 returned for non-float32 inputs (inputs.json).

Run with the oracle interpreter (jax 0.4.13, flax 0.5.3, numpy<2)::

  /work/oracle/bin/python tests/golden/generate_inputs.py

flax.optim computed with whatever it was given: NumPy float64 arrays stayed
NumPy float64 where a rule used only NumPy-compatible arithmetic, Python
numbers stayed Python numbers, integer params were promoted to float by the
update, and a Python ``int`` step came back as an ``int``. This script runs
every algorithm on each such input kind, eager and jitted, through
``Optimizer.apply_gradient`` and through the def-level
``apply_gradient(hyper_params, params, state, grads)``, and records each
result leaf: its container kind (``python``/``numpy``/``jax``), its type
name, dtype and exact values. ``tests/test_flax_behaviour.py`` reads the file.

Inputs and specs live in ``input_cases.py`` (NumPy only), shared with the
test.
"""

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
warnings.simplefilter('ignore')

import flax
from flax import optim
from flax import serialization
import jax
import numpy as np

from golden import input_cases

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'inputs.json')


def main() -> int:
  if flax.__version__ != '0.5.3':
    print(f'generate_inputs.py needs flax 0.5.3, found {flax.__version__}',
          file=sys.stderr)
    return 2
  warnings.simplefilter('ignore')
  results = {}
  for case in input_cases.CASES:
    opt_def = input_cases.build(optim, case['optimizer'])
    try:
      new_params, new_state = input_cases.run(optim, opt_def, case)
    except Exception as e:
      results[case['name']] = {'error': type(e).__name__}
      continue
    results[case['name']] = {
        'params': input_cases.describe(new_params),
        'state': input_cases.describe(serialization.to_state_dict(new_state)),
    }
  meta = {'flax': flax.__version__, 'jax': jax.__version__,
          'numpy': np.__version__}
  with open(OUT, 'w') as f:
    json.dump({'meta': meta, 'results': results}, f, sort_keys=True,
              separators=(',', ':'))
    f.write('\n')
  print(f'{len(results)} cases -> {OUT}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
