"""Measures each case's floor: flax 0.5.3's own rules on TODAY's JAX.

The floor is what the XLA version alone changes. flax 0.5.3's ``optim``
modules are loaded at runtime from the oracle environment's site-packages
(nothing of them is copied into this repository); their relative imports
(``from .. import struct``, ``serialization``, ``traverse_util``,
``jax_utils``, ``core``) are served by today's flax, and the few ``jax.*``
tree aliases they call that today's JAX removed go through a module-local
stand-in (the real ``jax`` module is not patched). Each case then runs the
same 100 jitted steps as ``generate_oracle.py`` and is compared with the
golden data; results go to ``floors.json``.

Run with today's environment, after ``generate_oracle.py``::

  python tests/golden/generate_floor.py [--python ORACLE_PYTHON |
                                         --site-packages DIR]

(``tox -e golden-floor``). Without either option the oracle is found through
``$ORACLE_PYTHON`` or ``/opt/venvs/oracle/bin/python``.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import time
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flax import core
from flax import jax_utils
from flax import serialization
from flax import struct
from flax import traverse_util
import jax

from golden import cases
from golden import runner
from golden import store

DEFAULT_ORACLE_PYTHON = '/opt/venvs/oracle/bin/python'
PACKAGE = '_flax053'  # the synthetic parent package of the loaded modules

# Tree aliases flax 0.5.3 calls as ``jax.<name>`` (removed from today's jax).
_JAX_ALIASES = ('tree_flatten', 'tree_unflatten', 'tree_structure',
                'tree_map', 'tree_leaves')


class _LegacyJax(types.ModuleType):
  """``jax`` plus the old top-level tree aliases; given to the loaded modules
  as their ``jax`` global instead of patching the real module."""

  def __init__(self):
    super().__init__('jax')
    for name in _JAX_ALIASES:
      setattr(self, name, getattr(jax.tree_util, name))

  def __getattr__(self, name):
    return getattr(jax, name)


def oracle_site_packages(python: str) -> str:
  out = subprocess.run(
      [python, '-c',
       'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
      check=True, capture_output=True, text=True)
  return out.stdout.strip()


def _flax_version(site_packages: str) -> str:
  namespace = {}
  with open(os.path.join(site_packages, 'flax', 'version.py')) as f:
    exec(f.read(), namespace)
  return namespace['__version__']


def load_legacy_optim(site_packages: str) -> types.ModuleType:
  """Imports ``<site_packages>/flax/optim`` as ``_flax053.optim``."""
  optim_dir = os.path.join(site_packages, 'flax', 'optim')
  parent = types.ModuleType(PACKAGE)
  parent.__path__ = []  # a package with nothing of its own on disk
  stand_ins = {
      'struct': struct,
      'serialization': serialization,
      'traverse_util': traverse_util,
      'jax_utils': jax_utils,
      'core': core,
  }
  sys.modules[PACKAGE] = parent
  for name, module in stand_ins.items():
    sys.modules[f'{PACKAGE}.{name}'] = module
    setattr(parent, name, module)
  spec = importlib.util.spec_from_file_location(
      f'{PACKAGE}.optim', os.path.join(optim_dir, '__init__.py'),
      submodule_search_locations=[optim_dir])
  optim = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = optim
  dont_write = sys.dont_write_bytecode
  sys.dont_write_bytecode = True  # leave the oracle environment untouched
  try:
    spec.loader.exec_module(optim)
  finally:
    sys.dont_write_bytecode = dont_write
  legacy_jax = _LegacyJax()
  for name, module in list(sys.modules.items()):
    if name.startswith(f'{PACKAGE}.optim.') and getattr(
        module, 'jax', None) is jax:
      module.jax = legacy_jax
  return optim


def measure(optim, case, golden) -> dict:
  """The floor of one case: today's-JAX flax 0.5.3 vs real flax 0.5.3."""
  name = case['name']
  entry = golden.entries[name]
  if entry['spec_digest'] != store.spec_digest(case):
    raise SystemExit(f'{name}: the case changed since the golden data was '
                     'written; run generate_oracle.py first.')
  result = runner.run_case(optim, traverse_util, case)
  for kind in ('params', 'grads'):
    if getattr(result, f'{kind}_digest') != entry[f'{kind}_digest']:
      raise SystemExit(f'{name}: the {kind} generated here differ from the '
                       "oracle's (NumPy stream or dtype conversion changed).")
  oracle_state = golden.state(name)
  return {
      'spec_digest': entry['spec_digest'],
      'params': store.update_error(result.initial, golden.params(name),
                                   result.final),
      'state': store.state_error(oracle_state, result.state),
      'layout_differences': store.layout_differences(oracle_state,
                                                     result.state),
  }


def main(argv) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  group = parser.add_mutually_exclusive_group()
  group.add_argument('--python', help='the oracle interpreter (flax 0.5.3)')
  group.add_argument('--site-packages', help="the oracle's site-packages")
  parser.add_argument('cases', nargs='*', help='only these cases (merged)')
  args = parser.parse_args(argv)

  site_packages = args.site_packages or oracle_site_packages(
      args.python or os.environ.get('ORACLE_PYTHON', DEFAULT_ORACLE_PYTHON))
  version = _flax_version(site_packages)
  if version != '0.5.3':
    print(f'{site_packages} holds flax {version}, not 0.5.3', file=sys.stderr)
    return 2
  optim = load_legacy_optim(site_packages)
  # After loading: flax 0.5.3's optim/__init__ installs an 'always' filter.
  warnings.simplefilter('ignore', DeprecationWarning)
  golden = store.Golden()

  selected = cases.select(args.cases)
  floors = {}
  if args.cases and os.path.exists(store.FLOORS_JSON):
    recorded = store.load_floors()['cases']
    floors = {name: value for name, value in recorded.items()
              if name in cases.CASES_BY_NAME}

  start = time.perf_counter()
  for case in selected:
    floors[case['name']] = floor = measure(optim, case, golden)
    note = '' if not floor['layout_differences'] else '  LAYOUT DIFFERS'
    print(f'{case["name"]:<45} params {floor["params"]:9.2e}  '
          f'state {floor["state"]:9.2e}{note}', flush=True)
  total = time.perf_counter() - start

  meta = dict(
      runner.environment(), oracle=golden.meta,
      flax_rules_from=os.path.join(site_packages, 'flax', 'optim'),
      flax_rules_version=version, seconds_last_run=round(total, 1))
  store.save_floors(floors, meta)
  print(f'{len(selected)} case(s) in {total:.1f} s -> {store.FLOORS_JSON}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
