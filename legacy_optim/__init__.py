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
import sys

import _flax_optim_compat_hook
from legacy_optim import catalogue

__version__ = '0.1.0'

# Name -> the module that defines it, imported at the name's first use:
# ``import legacy_optim.deprecation`` (stdlib only) must not import flax, as
# the legacy jax layer warns through it in programs that never import flax.
_DEFINED_IN = {
    'DynamicScale': 'legacy_optim.dynamic_scale',
    'LegacyOptimDeprecationWarning': 'legacy_optim.deprecation',
    'LegacyRuleState': 'legacy_optim.base',
    'ModelParamTraversal': 'legacy_optim.traverse_util',
    'MultiOptimizer': 'legacy_optim.multi',
    'OptaxOptimizerDef': 'legacy_optim.optax_adapter',
    'Optimizer': 'legacy_optim.base',
    'OptimizerDef': 'legacy_optim.base',
    'OptimizerState': 'legacy_optim.base',
    'ReplicatedOptimizer': 'legacy_optim.replicated',
    'traverse_util': 'legacy_optim.traverse_util',  # the module itself
    'usage_report': 'legacy_optim.deprecation',
}
# The built-in algorithms (one module each), as the catalogue lists them.
_DEFINED_IN.update({algorithm.name: f'legacy_optim.{algorithm.module}'
                    for algorithm in catalogue.BUILT_INS})

__all__: tuple[str, ...] = tuple(_DEFINED_IN)


# What ``Optimizer`` looks up when it wraps a definition (``replicate()``,
# ``create(focus=...)``): they register with ``base`` when imported, so they
# load with the first name that needs flax.
_WRAPPER_MODULES = ('legacy_optim.multi', 'legacy_optim.replicated')
# Stdlib only: the legacy jax layer warns through it without flax.
_WITHOUT_FLAX = frozenset({'legacy_optim.deprecation'})


def _load_wrappers() -> None:
  for wrapper in _WRAPPER_MODULES:
    importlib.import_module(wrapper)


def __getattr__(name: str):
  if name not in _DEFINED_IN:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  if _DEFINED_IN[name] not in _WITHOUT_FLAX:
    _load_wrappers()
  module = importlib.import_module(_DEFINED_IN[name])
  value = module if module.__name__ == f'{__name__}.{name}' else getattr(
      module, name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))


# A program reaching this package through flax.optim has imported flax, so
# nothing is saved by waiting: every name loads now, as flax.optim's did, and
# the alias serves each submodule under flax.optim's name too
# (``from flax.optim import dynamic_scale``).
if 'flax' in sys.modules:
  for _name in __all__:
    __getattr__(_name)
  del _name

# `import legacy_optim` also serves `flax.optim` (unless switched off with
# LEGACY_OPTIM_IMPORT_HOOK=0); see compat.importer.
_flax_optim_compat_hook.activate()
