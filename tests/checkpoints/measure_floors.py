"""Measures each fixture's floor: flax 0.5.3's own rules on TODAY's JAX.

A continuation of only a few steps moves the params very little, so the
relative error of the accumulated update is dominated by last-bit rounding
differences between XLA versions. The floor measures exactly that: flax
0.5.3's ``optim`` modules (loaded from the oracle's site-packages by
``golden.generate_floor.load_legacy_optim``; nothing is copied) restore each
fixture and continue it with the same jitted steps on today's JAX; the
floor is their largest per-element ulp distance from the real flax 0.5.3
continuation. ``test_checkpoints.py`` then holds each non-bitwise case to
``ceil(1.5 * floor)`` ulps (0 ulps: bit-identical).

Run with today's environment after generate_fixtures.py::

  python tests/checkpoints/measure_floors.py   (tox -e checkpoint-fixtures)
"""

import json
import os
import pathlib
import sys
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))

import fixture_lib as fx
from flax import serialization
from golden import generate_floor
import jax


def _continue(optim, name):
  """Restores fixture ``name`` with flax 0.5.3's rules; continues it."""
  optimizer = fx.spec(name).build(optim).create(fx.zero_params(name))
  opt_sd = serialization.msgpack_restore(fx.checkpoint_bytes(name))
  for key in fx.optimizer_path(name):
    opt_sd = opt_sd[key]
  optimizer = serialization.from_state_dict(optimizer, opt_sd)
  step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  targets = []
  for grad in fx.continuation(name)['grads']:
    optimizer = step(optimizer, fx.like(optimizer.target, grad))
    targets.append(serialization.to_state_dict(optimizer.target))
  return opt_sd['target'], targets


def main() -> int:
  python = os.environ.get('ORACLE_PYTHON', '/opt/venvs/oracle/bin/python')
  optim = generate_floor.load_legacy_optim(
      generate_floor.oracle_site_packages(python))
  warnings.simplefilter('ignore', DeprecationWarning)
  floors = {}
  for name in fx.CASES:
    start, targets = _continue(optim, name)
    oracle = fx.continuation(name)['targets']
    floors[name] = max(fx.max_ulp_error(theirs, ours)
                       for theirs, ours in zip(oracle, targets))
    print(f'{name:<24} floor {floors[name]:4d} ulp', flush=True)
  out = HERE / 'floors.json'
  tmp = out.with_suffix('.json.tmp')
  tmp.write_text(json.dumps({'floor_ulps': floors}, indent=1, sort_keys=True) +
                 '\n')
  os.replace(tmp, out)
  return 0


if __name__ == '__main__':
  sys.exit(main())
