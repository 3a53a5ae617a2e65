"""``flax-optim-compat run SCRIPT [ARGS...]`` (or ``run -m MODULE [ARGS...]``):
an old program run unchanged, with the legacy jax layer on
(``compat.legacy_jax``).

The program runs as ``python SCRIPT ARGS...`` (``python -m MODULE ARGS...``)
would: as ``__main__``, with ``sys.argv`` set to the script and its arguments
and its directory (the current directory) first on ``sys.path``; its exit
status is the command's.
"""

import os
import runpy
import sys

# The layer itself (compat.legacy_jax is its public face, above the
# subsystems; the command sits in cli).
from flax_optim_compat import _legacy_jax as legacy_jax

USAGE = '''usage: flax-optim-compat run SCRIPT [ARGS...]
       flax-optim-compat run -m MODULE [ARGS...]

Runs an old program unchanged with the jax/flax names removed next to
flax.optim served from today's equivalents (jax.tree_map, jnp.DeviceArray,
from jax.config import config, linen's FrozenDict init...). Each use warns
once per call site with the fix `flax-optim-compat migrate` makes;
LEGACY_OPTIM_STRICT=1 makes them errors. LEGACY_OPTIM_JAX_ALIASES=1 turns the
same layer on for every interpreter instead.'''


def main(argv) -> int:
  argv = list(argv)
  if not argv or argv[0] in ('-h', '--help'):
    print(USAGE)
    return 0 if argv else 2
  if argv[0] == '-m':
    if len(argv) < 2:
      print(f'run -m: expected a module name\n\n{USAGE}', file=sys.stderr)
      return 2
    legacy_jax.install()
    sys.argv = argv[1:]
    sys.path.insert(0, os.getcwd())
    runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    return 0
  script = argv[0]
  if not os.path.isfile(script):
    print(f'run: {script}: no such file (expected a Python script; use '
          '-m MODULE for a module)', file=sys.stderr)
    return 2
  legacy_jax.install()
  sys.argv = argv
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  runpy.run_path(script, run_name='__main__')
  return 0
