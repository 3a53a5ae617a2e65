"""Prove a migration on your own code: the old path and the new train alike.

* ``assert_same_training(old_step, new_step, old_init, ...)`` runs both step
  functions on the same batches from the same initial state (the new one
  derived through the compat bridges by default) and raises at the first
  step where params (optionally optimizer state) differ, naming the leaf and
  the size of the difference. Bit-identity is the default.
* ``record_trajectory(...)`` writes the params of a run on the old path (it
  also runs under real flax 0.5.3); ``assert_matches_trajectory(...)`` later
  checks the new path against that file. Format: ``_record_core``.
* An opt-in pytest plugin (``pytest -p flax_optim_compat.pytest_plugin``):
  the ``trajectory`` fixture records with ``--record-trajectories`` and
  asserts otherwise.

Names resolve lazily, so ``compat.testing`` imports nothing heavy until
used, and the recording core stays importable on the oracle's old stack.
"""

from compat import _lazy

_EXPORTS = {
    'LeafDiff': 'compat.testing._compare',
    'TrainingDivergence': 'compat.testing._compare',
    'Trajectory': 'compat.testing._record_core',
    'TrajectoryFileError': 'compat.testing._record_core',
    'assert_matches_trajectory': 'compat.testing._training',
    'assert_same_training': 'compat.testing._training',
    'default_convert': 'compat.testing._training',
    'params_of': 'compat.testing._kinds',
    'opt_state_of': 'compat.testing._kinds',
    'read_trajectory': 'compat.testing._record_core',
    'record_trajectory': 'compat.testing._record_core',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals())
