"""Where this library's previous release defined ``OptimizerState``.

That release pickled optimizer states as ``legacy_optim._state.OptimizerState``
(its ``__reduce__`` rebuilt the state from ``(step, param_states)``). Such
pickles keep loading: the name now refers to flax 0.5.3's layout in ``base``.
"""

from legacy_optim.base import OptimizerState  # noqa: F401  (the old pickles' name)
