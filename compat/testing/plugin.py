"""The pytest plugin under its earlier name: ``-p compat.testing.plugin``.

The plugin is ``flax_optim_compat.pytest_plugin``; load it by that name,
which no project's own ``compat`` module can hide.
"""

from flax_optim_compat.pytest_plugin import *  # noqa: F403  (re-exports the hooks)
