"""A corpus repository's migrated train step beside the original's.

Used by tests/test_corpus_train.py and ``scripts/corpus.py --train`` (which
``tox -e corpus`` runs). For a repository with a recipe in
tests/_corpus_driver.py, the code that recipe runs is copied twice
(tests/_migrated_copies.py): as written, running its flax.optim code through
this library's import alias, and as ``migrate --tier exact`` wrote it, which
must leave nothing there (with ``--unsafe-fixes`` where ``UNSAFE_FIXES``
names the repository). The migrated copy is trained with the alias off
and this library's modules blocked; every step's parameters and metrics
must equal the original's bit for bit.
"""

import os
import subprocess
import sys

import _migrated_copies
import numpy as np

DRIVER = os.path.join(os.path.dirname(__file__), '_corpus_driver.py')
# Repositories with a resume recipe (tests/_corpus_driver.py's RESUME).
RESUMES = ('ble', 'dopamine', 'hypernerf', 'jax3d', 'jax_rl', 'jaxrl', 'l2p',
           'meliad', 'mipnerf', 'nerfies', 'nested', 'scenic', 'score_sde',
           'ub', 'vit')
# Repository (tests/corpus/repos.toml's name) -> the subdirectory whose
# files the recipe runs: what must migrate completely.
RUNS = {'ble': 'balloon_learning_environment/generative/',
        'dopamine': 'dopamine/jax/', 'hypernerf': '',
        'jax3d': 'jax3d/projects/nesf/', 'jax_rl': 'jax_rl/',
        'jaxrl': '', 'l2p': '', 'meliad': '', 'mipnerf': '', 'nerfies': '',
        'nested': '', 'scenic': 'scenic/train_lib/', 'score_sde': '',
        'ub': 'baselines/jft/', 'vit': 'vit_jax/'}
# Repositories whose recipe runs ``migrate --unsafe-fixes``'s output: its
# exact tier keeps them whole (dopamine's optimizer definitions come from a
# ``@gin.configurable`` factory, which a gin config could call), and the
# assumption its unsafe fix rests on holds in the recipe (no gin config).
# (ub's checkpoint walker is a proven fix: its exact tier is the output.)
UNSAFE_FIXES = ('dopamine',)
# Repository -> removed APIs next to flax.optim (as migrate's report names
# them) that migrate leaves in its RUNS subdirectory and that its recipe
# serves to both copies alike (tests/_corpus_driver.py says how): those
# leftovers do not block. Its flax.optim code must still all migrate.
SERVED = {'scenic': ('flax.core.pop(variables, key)',)}
# Files there whose leftovers the recipe never runs: score_sde's
# noise-conditional WideResNet (a classifier for controllable sampling,
# imported) is flax.nn, out of migrate's scope; ub's plex fine-tuning sweep
# (a config nothing imports) does not parse as published (an ``if`` with no
# body).
NOT_RUN = {'score_sde': ('models/wideresnet_noise_conditional.py:',),
           'ub': ('baselines/jft/experiments/vit_l32_plex_finetune.py:',)}


def blocking(name, problems) -> list:
  """The ``problems`` (``_migrated_copies.copies``) that keep the files
  recipe ``name`` runs from running without the shim."""
  served = tuple(f': removed_api: {api}:' for api in SERVED.get(name, ()))
  return [p for p in problems if p.startswith(RUNS[name]) and
          not p.startswith(NOT_RUN.get(name, ())) and
          not any(mark in p for mark in served)]


def train(directory, name, out, shim, resume=None, driver=DRIVER) -> dict:
  """The driver's run of recipe ``name`` on ``directory``: ``stepN/...`` ->
  array. ``resume``: ``(mode, checkpoints)``, the driver's ``--resume``
  (``save`` or ``restore`` in that directory). ``driver``: this one's or
  another with its command line (tests/_v033_driver.py)."""
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  command = [sys.executable, driver, str(directory), name, str(out)]
  side = 'original' if shim else 'migrated'
  what = f'{side} run'
  if resume is not None:
    mode, checkpoints = resume
    command += ['--resume', mode, str(checkpoints)]
    what = f'{mode} run ({side})'
  if not shim:
    env['LEGACY_OPTIM_IMPORT_HOOK'] = '0'
    command.append('--no-shim')
  run = subprocess.run(command, env=env, capture_output=True, text=True,
                       timeout=900, check=False)
  assert run.returncode == 0, f'{what} failed:\n{run.stderr[-4000:]}'
  with np.load(out) as arrays:
    return {key: arrays[key] for key in arrays.files}


def _copies(name, repository, tmp_path):
  """``_migrated_copies.copies`` of ``repository``, migrated as recipe
  ``name`` runs it (``UNSAFE_FIXES``)."""
  return _migrated_copies.copies(repository, tmp_path,
                                 unsafe_fixes=name in UNSAFE_FIXES)


def compare(name, repository, tmp_path) -> int:
  """Trains both copies of ``repository`` (recipe ``name``) in ``tmp_path``
  (a ``pathlib.Path``); raises AssertionError where the migrated copy is
  incomplete, fails or differs. Returns the number of steps compared."""
  original, migrated, problems = _copies(name, repository, tmp_path)
  old = train(original, name, tmp_path / 'original.npz', shim=True)
  left = blocking(name, problems)
  assert not left, left
  new = train(migrated, name, tmp_path / 'migrated.npz', shim=False)
  _migrated_copies.assert_bit_identical(old, new)
  return len({key.split('/')[0] for key in old})


def compare_resume(name, repository, tmp_path) -> int:
  """``compare_resumed`` on both copies of ``repository`` (recipe
  ``name``), which must leave nothing blocking. Returns N."""
  original, migrated, problems = _copies(name, repository, tmp_path)
  left = blocking(name, problems)
  assert not left, left
  return compare_resumed(original, migrated, name, tmp_path)


def compare_resumed(original, migrated, name, tmp_path, driver=DRIVER) -> int:
  """The ``original`` copy (through the shim) trains N steps, saves with
  its own save code, trains N more; the ``migrated`` copy, the shim
  blocked, restores that checkpoint with its own (migrated) restore code
  and trains the same N steps. Each of those steps' params and metrics,
  and the final step, params and optimizer moments must be bit-identical.
  ``driver`` runs recipe ``name``. Returns N."""
  checkpoints = tmp_path / 'checkpoints'
  checkpoints.mkdir()
  old = train(original, name, tmp_path / 'original.npz', shim=True,
              resume=('save', checkpoints), driver=driver)
  new = train(migrated, name, tmp_path / 'resumed.npz', shim=False,
              resume=('restore', checkpoints), driver=driver)
  assert sorted(old) == sorted(new), (sorted(set(old) ^ set(new)))
  assert any(k.startswith('final/moments/') for k in old), sorted(old)
  for key in sorted(old):
    a, b = old[key], new[key]
    assert a.dtype == b.dtype and a.shape == b.shape, (key, a, b)
    assert a.tobytes() == b.tobytes(), (
        f'the resumed migrated run differs at {key}: original {a}, '
        f'resumed {b}')
  return len({k.split('/')[0] for k in old if k.startswith('step')})
