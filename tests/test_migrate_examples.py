"""flax v0.3.3's own examples, migrated, train bit-identically.

``tox -e migrate-examples`` clones flax v0.3.3 (never committed) and points
``FLAX_V033_EXAMPLES`` at its ``examples`` directory; without it these tests
are skipped (the default run has the small look-alike fixtures of
tests/test_migrate.py instead).

Each example is copied twice (tests/_migrated_copies.py): *original*, with
only the neighbouring removals rewritten and its ``flax.optim`` code running
through this library's import alias, and *migrated*, ``migrate --tier
exact``'s output, which must leave nothing and import neither ``flax.optim``
nor ``legacy_optim``.

Both copies are trained by tests/_v033_driver.py in their own process on the
same synthetic batches; every step's parameters and metrics must be equal
bit for bit.

A third copy, *unchanged* (flax's files as they are, no edit at all), runs
under ``flax-optim-compat run`` (the legacy jax layer, compat.legacy_jax) and
must train bit for bit like the migrated copy.
"""

import os
import shutil
import subprocess
import sys

import _migrated_copies
import numpy as np
import pytest

EXAMPLES = os.environ.get('FLAX_V033_EXAMPLES')
DRIVER = os.path.join(os.path.dirname(__file__), '_v033_driver.py')
NAMES = ('mnist', 'imagenet', 'lm1b', 'wmt', 'nlp_seq', 'pixelcnn', 'ppo',
         'vae')

pytestmark = pytest.mark.skipif(
    not EXAMPLES, reason='FLAX_V033_EXAMPLES is set by tox -e migrate-examples')


def copies(name, tmp_path):
  """(original_dir, migrated_dir) of example ``name``."""
  original, migrated, problems = _migrated_copies.copies(
      os.path.join(EXAMPLES, name), tmp_path, exclude=('*_test.py',))
  assert not problems, problems
  return original, migrated


def train(directory, name, tmp_path, variant, runner=()):
  out = tmp_path / f'{variant}.npz'
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('FLAX_V033_EXAMPLES', None)
  run = subprocess.run([sys.executable, *runner, DRIVER, str(directory), name,
                        str(out)], env=env, capture_output=True, text=True,
                       timeout=900, check=False)
  assert run.returncode == 0, f'{variant} run failed:\n{run.stderr[-4000:]}'
  with np.load(out) as arrays:
    return {key: arrays[key] for key in arrays.files}


@pytest.mark.parametrize('name', NAMES)
def test_migrated_example_trains_bit_identically(name, tmp_path):
  original_dir, migrated_dir = copies(name, tmp_path)
  old = train(original_dir, name, tmp_path, 'original')
  new = train(migrated_dir, name, tmp_path, 'migrated')
  _migrated_copies.assert_bit_identical(old, new)


@pytest.mark.parametrize('name', NAMES)
def test_unchanged_example_runs_under_the_legacy_layer(name, tmp_path):
  """flax's files, no edit at all, under ``flax-optim-compat run``."""
  unchanged = tmp_path / 'unchanged'
  shutil.copytree(os.path.join(EXAMPLES, name), unchanged)
  _, migrated_dir = copies(name, tmp_path)
  old = train(unchanged, name, tmp_path, 'unchanged',
              runner=('-m', 'flax_optim_compat', 'run'))
  new = train(migrated_dir, name, tmp_path, 'migrated')
  _migrated_copies.assert_bit_identical(old, new)
