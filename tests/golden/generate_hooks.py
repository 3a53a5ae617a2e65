"""Records what flax 0.5.3's hooks receive into ``hooks.json``.

Run with the oracle interpreter (REAL flax 0.5.3, jax 0.4.13)::

  $ORACLE_PYTHON tests/golden/generate_hooks.py

The scenarios live in ``hook_cases.py``; ``tests/test_subclass_hooks.py``
runs them on the shim and compares with this file.
"""

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
warnings.simplefilter('ignore', DeprecationWarning)
warnings.simplefilter('ignore', FutureWarning)

import flax

from golden import hook_cases

HOOKS_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'hooks.json')


def main():
  if flax.__version__ != '0.5.3':
    sys.exit('generate_hooks.py needs REAL flax 0.5.3, found '
             f'{flax.__version__}')
  data = {'flax': flax.__version__,
          'scenarios': {name: hook_cases.run(name)
                        for name in hook_cases.SCENARIOS}}
  with open(HOOKS_JSON, 'w') as f:
    json.dump(data, f, indent=None, separators=(',', ':'), sort_keys=True)
    f.write('\n')
  print(f'wrote {HOOKS_JSON} ({os.path.getsize(HOOKS_JSON)} bytes)')


if __name__ == '__main__':
  main()
