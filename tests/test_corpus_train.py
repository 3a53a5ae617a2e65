"""Corpus repositories, migrated, train bit-identically without the shim.

``tox -e corpus`` gets the repositories of tests/corpus/repos.toml into
``FLAX_OPTIM_CORPUS_DIR`` (scripts/corpus.py; never committed); without it
these tests are skipped. For each repository with a recipe in
tests/_corpus_driver.py, the code that recipe runs is copied twice
(tests/_migrated_copies.py): as written, running its flax.optim code through
this library's import alias, and as ``migrate --tier exact`` wrote it, which
must leave nothing there. The migrated copy is trained with the alias off
and this library's modules blocked; every step's parameters and metrics
must equal the original's bit for bit.
"""

import os
import subprocess
import sys

import _migrated_copies
import numpy as np
import pytest

CORPUS = os.environ.get('FLAX_OPTIM_CORPUS_DIR')
DRIVER = os.path.join(os.path.dirname(__file__), '_corpus_driver.py')
# Repository (tests/corpus/repos.toml's name) -> the subdirectory whose
# files the recipe runs: what must migrate completely.
RUNS = {'mipnerf': '', 'nerfies': '', 'nested': '', 'vit': 'vit_jax/'}

pytestmark = pytest.mark.skipif(
    not CORPUS, reason='FLAX_OPTIM_CORPUS_DIR is set by tox -e corpus')


def train(directory, name, out, shim):
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  command = [sys.executable, DRIVER, str(directory), name, str(out)]
  if not shim:
    env['LEGACY_OPTIM_IMPORT_HOOK'] = '0'
    command.append('--no-shim')
  run = subprocess.run(command, env=env, capture_output=True, text=True,
                       timeout=900, check=False)
  assert run.returncode == 0, (
      f'{"original" if shim else "migrated"} run failed:\n'
      f'{run.stderr[-4000:]}')
  with np.load(out) as arrays:
    return {key: arrays[key] for key in arrays.files}


@pytest.mark.parametrize('name', sorted(RUNS))
def test_migrated_repository_trains_bit_identically(name, tmp_path):
  original, migrated, problems = _migrated_copies.copies(
      os.path.join(CORPUS, name), tmp_path)
  old = train(original, name, tmp_path / 'original.npz', shim=True)
  blocking = [p for p in problems if p.startswith(RUNS[name])]
  assert not blocking, blocking
  new = train(migrated, name, tmp_path / 'migrated.npz', shim=False)
  _migrated_copies.assert_bit_identical(old, new)
