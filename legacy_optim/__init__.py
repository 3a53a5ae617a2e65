"""The removed ``flax.optim`` API (flax <= 0.5.3), running on Optax.

Old code keeps working unchanged (``from flax import optim`` is served by this
package once it is installed; see ``compat.importer``), old checkpoints keep
loading, and every optimizer converts to Optax, ``TrainState`` and
``nnx.Optimizer`` with the same numbers (see ``compat``).

Every ``OptimizerDef`` has ``to_optax()``, the ``optax.GradientTransformation``
that its updates run through; the other way round, ``OptaxOptimizerDef(tx)``
is any Optax transform as an ``OptimizerDef`` (for code whose API is the
``Optimizer``).
"""

import importlib

import _flax_optim_compat_hook
from legacy_optim import catalogue
from legacy_optim import traverse_util
from legacy_optim.base import LegacyRuleState
from legacy_optim.base import Optimizer
from legacy_optim.base import OptimizerDef
from legacy_optim.base import OptimizerState
from legacy_optim.deprecation import LegacyOptimDeprecationWarning
from legacy_optim.deprecation import usage_report
from legacy_optim.dynamic_scale import DynamicScale
from legacy_optim.multi import MultiOptimizer
from legacy_optim.optax_adapter import OptaxOptimizerDef
from legacy_optim.replicated import ReplicatedOptimizer
from legacy_optim.traverse_util import ModelParamTraversal

__version__ = '0.1.0'

__all__: tuple[str, ...] = (
    'DynamicScale',
    'LegacyOptimDeprecationWarning',
    'LegacyRuleState',
    'ModelParamTraversal',
    'MultiOptimizer',
    'OptaxOptimizerDef',
    'Optimizer',
    'OptimizerDef',
    'OptimizerState',
    'ReplicatedOptimizer',
    'traverse_util',
    'usage_report',
)

# The built-in algorithms (one module each), as the catalogue lists them.
for _algorithm in catalogue.BUILT_INS:
  globals()[_algorithm.name] = getattr(
      importlib.import_module(f'legacy_optim.{_algorithm.module}'),
      _algorithm.name)
  __all__ += (_algorithm.name,)
del _algorithm

# `import legacy_optim` also serves `flax.optim` (unless switched off with
# LEGACY_OPTIM_IMPORT_HOOK=0); see compat.importer.
_flax_optim_compat_hook.activate()
