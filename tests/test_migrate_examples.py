"""flax v0.3.3's own examples, migrated, train bit-identically.

``tox -e migrate-examples`` clones flax v0.3.3 (never committed) and points
``FLAX_V033_EXAMPLES`` at its ``examples`` directory; without it these tests
are skipped (the default run has the small look-alike fixtures of
tests/test_migrate.py instead).

Each example is copied twice:
- *original*: flax's modules with only the neighbouring removals rewritten
  (``jax.tree_map``, ``from jax.config import config``...), the same edits
  ``migrate`` makes, so that the old code can run on today's jax at all; its
  ``flax.optim`` code is untouched and runs through this library's import
  alias;
- *migrated*: ``migrate --tier exact``'s output, which must import neither
  ``flax.optim`` nor ``legacy_optim``.

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

import _legacy_imports
import numpy as np
import pytest

from compat.codemod import _rewrite_plan
from compat.codemod import migrate

EXAMPLES = os.environ.get('FLAX_V033_EXAMPLES')
DRIVER = os.path.join(os.path.dirname(__file__), '_v033_driver.py')
NAMES = ('mnist', 'imagenet', 'lm1b', 'wmt', 'nlp_seq', 'pixelcnn', 'ppo',
         'vae')

pytestmark = pytest.mark.skipif(
    not EXAMPLES, reason='FLAX_V033_EXAMPLES is set by tox -e migrate-examples')


def removals_only(source: bytes, path: str) -> bytes:
  """``source`` with only migrate's neighbouring-removal edits applied."""
  _, plan = migrate.migrate_source(source, path)
  edits = [e for e in plan.edits if e.construct == 'removed_api']
  rendered, dropped = _rewrite_plan.render(source, edits)
  assert not dropped, dropped
  return rendered


def copies(name, tmp_path):
  """(original_dir, migrated_dir) of example ``name``."""
  source_dir = os.path.join(EXAMPLES, name)
  original, migrated = tmp_path / 'original', tmp_path / 'migrated'
  for target in (original, migrated):
    shutil.copytree(source_dir, target)
  sources, results = migrate.migrate_paths([source_dir], 'exact',
                                           exclude=('*_test.py',))
  for path, result in zip(sources, results):
    if not path.endswith('.py'):
      continue
    relative = os.path.relpath(path, source_dir)
    (original / relative).write_bytes(removals_only(result.old, relative))
    assert result.error is None, (relative, result.error)
    assert not result.plan.leftovers, (relative, result.plan.leftovers)
    assert not _legacy_imports.legacy_imports(result.new), relative
    (migrated / relative).write_bytes(result.new)
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


def assert_same_steps(old, new):
  assert sorted(old) == sorted(new)
  steps = {key.split('/')[0] for key in old}
  assert len(steps) >= 5, steps
  for key in sorted(old):
    a, b = old[key], new[key]
    assert a.dtype == b.dtype and a.shape == b.shape, key
    assert a.tobytes() == b.tobytes(), (key, a, b)


@pytest.mark.parametrize('name', NAMES)
def test_migrated_example_trains_bit_identically(name, tmp_path):
  original_dir, migrated_dir = copies(name, tmp_path)
  old = train(original_dir, name, tmp_path, 'original')
  new = train(migrated_dir, name, tmp_path, 'migrated')
  assert_same_steps(old, new)


@pytest.mark.parametrize('name', NAMES)
def test_unchanged_example_runs_under_the_legacy_layer(name, tmp_path):
  """flax's files, no edit at all, under ``flax-optim-compat run``."""
  unchanged = tmp_path / 'unchanged'
  shutil.copytree(os.path.join(EXAMPLES, name), unchanged)
  _, migrated_dir = copies(name, tmp_path)
  old = train(unchanged, name, tmp_path, 'unchanged',
              runner=('-m', 'flax_optim_compat', 'run'))
  new = train(migrated_dir, name, tmp_path, 'migrated')
  assert_same_steps(old, new)
