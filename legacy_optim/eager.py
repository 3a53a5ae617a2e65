"""Eager (un-jitted) ``Optimizer.apply_gradient``: its compiled-kernel cache.

An eager step runs small compiled kernels, each stepping up to ``CHUNK``
alike leaves (see ``legacy_optim._eager`` for how, and when the cache is
bypassed). Equal optimizer definitions share kernels. The cache keeps at most
``MAX_ENTRIES`` kernels, least recently used first out; ``clear_cache()``
frees them all, e.g. after a notebook's experiments with many models.

Switch the cache off with ``LEGACY_OPTIM_EAGER_JIT=0`` in the environment
(or ``legacy_optim._eager.ENABLED = False``): eager steps then run op by op,
as in flax.optim, and round like the op-by-op step.
"""

from legacy_optim._eager import cache_size
from legacy_optim._eager import clear_cache

__all__ = ('cache_size', 'clear_cache')
