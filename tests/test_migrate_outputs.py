"""The recorded digests of migrate's output (scripts/migrate_outputs.py).

``tox -e corpus`` and ``tox -e migrate-examples`` compare migrate's output on
real code with ``tests/corpus/outputs.toml``; these check the comparison
itself on small texts (fast, no migrate run).
"""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load():
  spec = importlib.util.spec_from_file_location(
      'migrate_outputs', ROOT / 'scripts' / 'migrate_outputs.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


outputs = _load()

DIFF = ('--- a/{rel}/train.py\n+++ b/{rel}/train.py\n'
        '{abs}/train.py:3 makes the definition\n')


def test_a_digest_does_not_depend_on_where_the_tree_is():
  here = DIFF.format(rel='../../tmp/corpus1/vit', abs='/tmp/corpus1/vit')
  there = DIFF.format(rel='corpus/vit', abs='/work/x/.tox/corpus/vit')
  assert outputs.normalise(here, '/tmp/corpus1/vit', '/work/main') == (
      outputs.normalise(there, '/work/x/.tox/corpus/vit', '/work/x/.tox'))
  assert outputs.normalise(here, '/tmp/corpus1/vit', '/work/main') == (
      '--- a/<ROOT>/train.py\n+++ b/<ROOT>/train.py\n'
      '<ROOT>/train.py:3 makes the definition\n')


def test_a_longer_neighbour_of_the_root_is_not_cut():
  text = '/tmp/corpus1/vit_jax/a.py /tmp/corpus1/vit/a.py'
  assert outputs.normalise(text, '/tmp/corpus1/vit', '/') == (
      '/tmp/corpus1/vit_jax/a.py <ROOT>/a.py')


def test_a_changed_output_fails_naming_the_row_and_how_to_record():
  recorded = {'corpus': {
      't5x': outputs.digests_of('diff', 'report', '/r', '/'),
      'vit': outputs.digests_of('diff', 'report', '/r', '/')}}
  measured = {'t5x': outputs.digests_of('diff!', 'report', '/r', '/'),
              'vit': outputs.digests_of('diff', 'report', '/r', '/')}
  failures = outputs.compare_outputs('corpus', measured, recorded)
  assert len(failures) == 1
  assert failures[0].startswith("corpus.t5x: migrate's diff changed;")
  assert '--record-outputs' in failures[0]
  assert 'closing note' in failures[0]


def test_an_unrecorded_row_fails():
  measured = {'new': outputs.digests_of('d', 'r', '/r', '/')}
  [failure] = outputs.compare_outputs('examples', measured, {})
  assert failure.startswith("examples.new: migrate's output has no recorded")


def test_recorded_digests_read_back_and_keep_the_other_group(tmp_path):
  path = tmp_path / 'outputs.toml'
  corpus = {'vit': outputs.digests_of('d', 'r', '/r', '/')}
  examples = {'mnist': outputs.digests_of('e', 'f', '/r', '/')}
  outputs.record_outputs('corpus', corpus, str(path))
  outputs.record_outputs('examples', examples, str(path))
  assert outputs.load_outputs(str(path)) == {'corpus': corpus,
                                             'examples': examples}


def test_a_malformed_entry_is_named(tmp_path):
  path = tmp_path / 'outputs.toml'
  path.write_text('[corpus.vit]\ndiff = "abc"\nreport = "abc"\n')
  with pytest.raises(ValueError, match=r'\[corpus\.vit\] must give'):
    outputs.load_outputs(str(path))


def test_the_committed_file_records_every_corpus_row_and_example():
  recorded = outputs.load_outputs()
  table = (ROOT / 'tests' / 'corpus' / 'repos.toml').read_text()
  names = {line.split('"')[1] for line in table.splitlines()
           if line.startswith('name = ')}
  assert set(recorded['corpus']) == names
  assert {'mnist', 'imagenet', 'lm1b', 'wmt', 'nlp_seq', 'pixelcnn', 'ppo',
          'vae'} <= set(recorded['examples'])
