"""Old programs run unchanged: the opt-in layer for the jax/flax names removed
next to flax.optim (``jax.tree_map``, ``jnp.DeviceArray``, ``from jax.config
import config``, linen's FrozenDict ``init``...).

Off by default; three switches turn it on:

* ``flax-optim-compat run SCRIPT [ARGS...]`` (or ``python -m
  flax_optim_compat run -m MODULE ...``) runs a program with it;
* ``LEGACY_OPTIM_JAX_ALIASES=1`` turns it on in every interpreter of the
  environment (read by the start-up hook, which loads it at the first jax or
  flax import);
* :func:`install` from code, before or after jax/flax are imported.

What it adds, and how each is rewritten by ``migrate``, is one table
(``compat/codemod/_removals.py``, ``runtime_aliases()``): only names the
installed jax/flax lacks are added, bound to today's equivalent. Each use
warns once per call site with the ``migrate`` fix
(``legacy_optim.deprecation.RemovedJaxApiWarning``, a
``LegacyOptimDeprecationWarning``); ``LEGACY_OPTIM_STRICT=1`` raises it;
``legacy_optim.usage_report()`` lists the uses. What cannot be served safely
(``flax.nn``) raises an ImportError naming it and the way forward.

The implementation is ``flax_optim_compat._legacy_jax`` (it runs inside any
program, so it never imports a package named ``compat``); this module is its
public face.
"""

from flax_optim_compat._legacy_jax import JAX_ALIASES_ENV_VAR as ENV_VAR
from flax_optim_compat._legacy_jax import install
from flax_optim_compat._legacy_jax import is_installed
from flax_optim_compat._legacy_jax import uninstall

__all__ = (
    'ENV_VAR',
    'install',
    'is_installed',
    'uninstall',
)
