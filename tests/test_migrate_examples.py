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

Resumed from the original's checkpoint: the original copy trains, saves with
its own save code and trains on; the migrated copy (the shim blocked)
restores that checkpoint with its own migrated restore code and must train
on bit for bit alike, ending with the same step, params and optimizer
moments (imagenet, lm1b, wmt; mnist with the generic checkpoints a user
would add, tests/_v033_mnist_checkpoints.py).

The examples' own unit tests (``*_test.py``) are migrated with their
example, as one project, and run with pytest in both copies (the migrated
one with this library's modules blocked): every test that passes on the
original passes on the migrated copy. ``OWN_TESTS`` pins which tests run
here at all: those that need what is stood in for (tfds data, a gym
environment) fail on the original too. The optimizer code those leave out
(``train_and_evaluate``) is what the bit-identical training above runs.

A third copy, *unchanged* (flax's files as they are, no edit at all), runs
under ``flax-optim-compat run`` (the legacy jax layer, compat.legacy_jax) and
must train bit for bit like the migrated copy.

``migrate --out DIR --prove CMD`` runs a short run of mnist's and vae's own
code (tests/_v033_prove_*.py, placed in the copy) on both trees and compares
the checkpoints they leave: proven in the exact tier; in the stock tier vae's
Adam is not, and the first difference is named.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import _corpus_train
import _migrated_copies
import _v033_driver
import numpy as np
import pytest

from compat.codemod import migrate

EXAMPLES = os.environ.get('FLAX_V033_EXAMPLES')
DRIVER = os.path.join(os.path.dirname(__file__), '_v033_driver.py')
NAMES = ('mnist', 'imagenet', 'lm1b', 'wmt', 'nlp_seq', 'pixelcnn', 'ppo',
         'vae')

# Example -> its own tests that pass on the original with the stand-ins;
# every other test of the example needs a real data pipeline or gym
# environment (tfds' mock data for mnist's, imagenet's, pixelcnn's, lm1b's
# and wmt's ``train_and_evaluate`` crashes in tensorflow 2.21 here, with
# ``batch_size=-1``). vae has no tests.
OWN_TESTS = {
    'mnist': {'train_test.py::MnistLibTest::test_cnn'},
    'imagenet': {'models_test.py::ResNetV1Test::test_resnet_v1_model',
                 'train_test.py::TrainTest::test_create_model'},
    'pixelcnn': {f'model_test.py::ModelTest::test_{name}' for name in (
        'conv', 'conv_down', 'conv_down_right', 'conv_transpose',
        'conv_transpose_down', 'conv_transpose_down_right', 'pcnn_shape')},
    'ppo': {'ppo_lib_test.py::TestGAE::test_gae_hardcoded',
            'ppo_lib_test.py::TestGAE::test_gae_shape_on_random',
            'ppo_lib_test.py::TestModel::test_model',
            'ppo_lib_test.py::TestOptimizationStep::test_optimization_step'},
    'lm1b': set(), 'wmt': set(), 'nlp_seq': set(),
}

pytestmark = pytest.mark.skipif(
    not EXAMPLES, reason='FLAX_V033_EXAMPLES is set by tox -e migrate-examples')


def copies(name, tmp_path):
  """(original_dir, migrated_dir) of example ``name``."""
  original, migrated, problems = _migrated_copies.copies(
      os.path.join(EXAMPLES, name), tmp_path, exclude=('*_test.py',))
  assert not problems, problems
  return original, migrated


def copies_with_tests(name, tmp_path):
  """``copies`` with the example's own ``*_test.py`` migrated beside it."""
  original, migrated, problems = _migrated_copies.copies(
      os.path.join(EXAMPLES, name), tmp_path)
  assert not problems, problems
  return original, migrated


def own_tests(directory, variant):
  """{test id: outcome} of pytest on the ``*_test.py`` in ``directory``."""
  tests = sorted(f for f in os.listdir(directory) if f.endswith('_test.py'))
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             PYTHONPATH=os.pathsep.join([os.path.dirname(__file__),
                                         str(directory)]))
  env.pop('FLAX_V033_EXAMPLES', None)
  if variant == 'migrated':
    env.update(FLAX_OPTIM_BLOCK_SHIM='1', LEGACY_OPTIM_IMPORT_HOOK='0')
  run = subprocess.run(
      [sys.executable, '-m', 'pytest', '-p', '_example_tests_plugin', '-p',
       'no:cacheprovider', '-q', '-rA', '--no-header', '-W', 'ignore', *tests],
      cwd=directory, env=env, capture_output=True, text=True, timeout=1800,
      check=False)
  outcomes = {}
  for line in run.stdout.splitlines():
    outcome, _, rest = line.partition(' ')
    if outcome in ('PASSED', 'FAILED', 'ERROR') and '::' in rest:
      outcomes[rest.split(' - ')[0]] = outcome
  assert outcomes, f'{variant}: no test ran:\n{run.stdout[-3000:]}'
  return outcomes


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


@pytest.mark.parametrize('name', sorted(OWN_TESTS))
def test_migrated_example_passes_its_own_tests(name, tmp_path):
  original_dir, migrated_dir = copies_with_tests(name, tmp_path)
  old = own_tests(original_dir, 'original')
  passing = {t for t, outcome in old.items() if outcome == 'PASSED'}
  assert passing == OWN_TESTS[name], old
  new = own_tests(migrated_dir, 'migrated')
  broken = sorted(t for t in passing if new.get(t) != 'PASSED')
  assert not broken, (f'pass on the original, not migrated: {broken}; '
                      f'all outcomes, migrated: {new}')


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


# ``migrate --out DIR --prove CMD`` on an example: CMD, a short run of the
# example's own code leaving a checkpoint in {workdir}, is placed in the copy
# as prove_run.py and migrated with it. Both trees run under ``flax-optim-
# compat run``: the original calls jax APIs removed since (jax.tree_map),
# the migrated one no longer does.
PROVE_RUNS = {'mnist': '_v033_prove_mnist.py', 'vae': '_v033_prove_vae.py'}
PROVE_COMMAND = (f'{sys.executable} -m flax_optim_compat run prove_run.py '
                 '{workdir}')


def prove(name, tmp_path, monkeypatch, capsys, *tier):
  """migrate's exit code and terminal output on a copy of ``name``."""
  project = tmp_path / name
  shutil.copytree(os.path.join(EXAMPLES, name), project)
  shutil.copy(os.path.join(os.path.dirname(__file__), PROVE_RUNS[name]),
              project / 'prove_run.py')
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
      p for p in (os.path.dirname(__file__), os.environ.get('PYTHONPATH'))
      if p))
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))  # kept runs
  code = migrate.main([name, '--exclude', '*_test.py', '--out', 'out',
                       '--prove', PROVE_COMMAND, *tier])
  return code, capsys.readouterr().out


@pytest.mark.parametrize('name', sorted(PROVE_RUNS))
def test_the_exact_tier_is_proven_on_the_examples_own_run(
    name, tmp_path, monkeypatch, capsys):
  code, out = prove(name, tmp_path, monkeypatch, capsys)
  assert 'proven (bit-identical)' in out, out
  assert ('checkpoint_5 (step 5): params, step and optimizer state '
          'bit-identical') in out, out
  assert code == migrate.EXIT_CLEAN, out


def test_the_stock_tier_is_not_proven_on_vae(tmp_path, monkeypatch, capsys):
  # vae's Adam: stock optax.adam rounds otherwise than flax.optim's. (mnist's
  # Momentum is optax.sgd in either tier: the same numbers, proven.)
  code, out = prove('vae', tmp_path, monkeypatch, capsys, '--tier', 'stock')
  assert 'not proven (bit-identical required)' in out, out
  # The first difference: the checkpoint, a leaf, how many values, how far.
  assert 'checkpoint_5 (step 5): leaf params/' in out, out
  assert 'elements differ; max |original - migrated| = ' in out, out
  assert code == migrate.EXIT_NOT_PROVEN, out


# Example -> a module placed in its copy before migrating (as
# checkpointing.py): mnist has no checkpoints of its own, so the resume test
# adds what a user would, flax's generic save and restore.
ADDED_CHECKPOINTS = {'mnist': '_v033_mnist_checkpoints.py'}
# Resume recipe -> its example, where they differ: imagenet_half is
# imagenet's half-precision path (its DynamicScale in the checkpoint).
RESUMED_EXAMPLE = {'imagenet_half': 'imagenet'}


@pytest.mark.parametrize('name', ('mnist', 'imagenet', 'imagenet_half',
                                  'lm1b', 'wmt'))
def test_migrated_example_resumes_from_the_originals_checkpoint(name,
                                                                tmp_path):
  """The original saves with its own code after N steps; the migrated copy
  restores with its own migrated restore and trains on exactly as the
  original does (tests/_corpus_train.py's ``compare_resumed``)."""
  source = tmp_path / 'source'
  shutil.copytree(os.path.join(EXAMPLES, RESUMED_EXAMPLE.get(name, name)),
                  source)
  if name in ADDED_CHECKPOINTS:
    shutil.copy(os.path.join(os.path.dirname(__file__),
                             ADDED_CHECKPOINTS[name]),
                source / 'checkpointing.py')
  original, migrated, problems = _migrated_copies.copies(
      source, tmp_path, exclude=('*_test.py',))
  assert not problems, problems
  assert _corpus_train.compare_resumed(original, migrated, name, tmp_path,
                                       driver=DRIVER) == _v033_driver.STEPS
