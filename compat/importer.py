"""``flax.optim`` without code changes: the import alias, and its switches.

After ``pip install`` (regular or ``-e``), ``flax_optim_compat.pth`` installs a
tiny lazy meta-path finder at interpreter start, so all of these work
unchanged and give the very same objects as ``legacy_optim``::

  from flax import optim
  import flax.optim as optim
  import flax; flax.optim.Adam(...)
  from flax.optim.adam import _AdamHyperParams, _AdamParamState
  from flax.optim.base import ReplicatedOptimizer

``import legacy_optim`` activates it as well. The finder only reacts to
``flax`` and ``flax.optim*`` imports, imports nothing heavy until one happens,
and never shadows a real ``flax.optim`` (an old flax installed).

Switches:

* ``LEGACY_OPTIM_IMPORT_HOOK=0`` (also false/no/off): no automatic activation
  (neither at start-up nor by ``import legacy_optim``).
* :func:`install` / :func:`uninstall`: explicit control in this process
  (``install`` ignores the environment variable).

The implementation is two stdlib-only top-level modules: the start-up stub
``_flax_optim_compat_startup`` and the finder ``_flax_optim_compat_hook`` it
loads at the first ``flax*`` import (so start-up never imports this package);
this module is their public face.
"""

from _flax_optim_compat_hook import ALIAS
from _flax_optim_compat_hook import ENV_VAR
from _flax_optim_compat_hook import TARGET
from _flax_optim_compat_hook import activate
from _flax_optim_compat_hook import enabled_by_environment
from _flax_optim_compat_hook import install
from _flax_optim_compat_hook import is_installed
from _flax_optim_compat_hook import uninstall

__all__ = (
    'ALIAS',
    'ENV_VAR',
    'TARGET',
    'activate',
    'enabled_by_environment',
    'install',
    'is_installed',
    'uninstall',
)
