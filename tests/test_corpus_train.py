"""Corpus repositories, migrated, train bit-identically without the shim.

``tox -e corpus`` gets the repositories of tests/corpus/repos.toml into
``FLAX_OPTIM_CORPUS_DIR`` (scripts/corpus.py; never committed) and runs
these comparisons itself (``scripts/corpus.py --train``, a line each below
its table); without that directory these tests are skipped. What is
compared, and how: tests/_corpus_train.py.
"""

import os

import _corpus_train
import pytest

CORPUS = os.environ.get('FLAX_OPTIM_CORPUS_DIR')

pytestmark = pytest.mark.skipif(
    not CORPUS, reason='FLAX_OPTIM_CORPUS_DIR names the fetched corpus')


def _repository(name) -> str:
  """Where the corpus holds ``name``; a row it lacks (the mirrors lack
  it: scripts/corpus.py names it not available) is not available here
  either."""
  path = os.path.join(CORPUS, name)
  if not os.path.isdir(path):
    pytest.skip(f'{name}: not available (not in {CORPUS})')
  return path


@pytest.mark.parametrize('name', sorted(_corpus_train.RUNS))
def test_migrated_repository_trains_bit_identically(name, tmp_path):
  _corpus_train.compare(name, _repository(name), tmp_path)


@pytest.mark.parametrize('name', _corpus_train.RESUMES)
def test_migrated_repository_resumes_the_originals_checkpoint(name,
                                                              tmp_path):
  _corpus_train.compare_resume(name, _repository(name), tmp_path)
