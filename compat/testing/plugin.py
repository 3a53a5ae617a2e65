"""The pytest plugin under its earlier name: ``-p compat.testing.plugin``.

The plugin is ``flax_optim_compat.pytest_plugin``; load it by that name,
which no project's own ``compat`` module can hide.
"""

from flax_optim_compat.pytest_plugin import *  # pylint: disable=wildcard-import,unused-wildcard-import
