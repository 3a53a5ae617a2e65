"""The removed ``flax.optim`` API (flax <= 0.5.3), running on Optax.

Old code keeps working unchanged (``from flax import optim`` is served by this
package once it is installed; see ``compat.importer``), old checkpoints keep
loading, and every optimizer converts to Optax, ``TrainState`` and
``nnx.Optimizer`` with the same numbers (see ``compat``).

Every ``OptimizerDef`` has ``to_optax()``, the ``optax.GradientTransformation``
that its updates run through.
"""

import _flax_optim_compat_hook

from legacy_optim import traverse_util
from legacy_optim.adabelief import AdaBelief
from legacy_optim.adadelta import Adadelta
from legacy_optim.adafactor import Adafactor
from legacy_optim.adagrad import Adagrad
from legacy_optim.adam import Adam
from legacy_optim.base import LegacyRuleState
from legacy_optim.base import Optimizer
from legacy_optim.base import OptimizerDef
from legacy_optim.base import OptimizerState
from legacy_optim.deprecation import LegacyOptimDeprecationWarning
from legacy_optim.deprecation import usage_report
from legacy_optim.dynamic_scale import DynamicScale
from legacy_optim.lamb import LAMB
from legacy_optim.lars import LARS
from legacy_optim.momentum import Momentum
from legacy_optim.multi import MultiOptimizer
from legacy_optim.replicated import ReplicatedOptimizer
from legacy_optim.rmsprop import RMSProp
from legacy_optim.sgd import GradientDescent
from legacy_optim.traverse_util import ModelParamTraversal
from legacy_optim.weight_norm import WeightNorm

__version__ = '0.1.0'

__all__ = (
    'AdaBelief',
    'Adadelta',
    'Adafactor',
    'Adagrad',
    'Adam',
    'DynamicScale',
    'GradientDescent',
    'LAMB',
    'LARS',
    'LegacyOptimDeprecationWarning',
    'LegacyRuleState',
    'ModelParamTraversal',
    'Momentum',
    'MultiOptimizer',
    'Optimizer',
    'OptimizerDef',
    'OptimizerState',
    'RMSProp',
    'ReplicatedOptimizer',
    'WeightNorm',
    'traverse_util',
    'usage_report',
)

# `import legacy_optim` also serves `flax.optim` (unless switched off with
# LEGACY_OPTIM_IMPORT_HOOK=0); see compat.importer.
_flax_optim_compat_hook.activate()
