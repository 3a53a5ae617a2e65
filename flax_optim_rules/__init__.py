"""flax.optim's update rules as Optax transforms: jax and optax, nothing else.

Code migrated off ``flax.optim`` (``flax-optim-compat migrate``) imports this
package where stock Optax cannot reproduce a legacy rule bit for bit. Each
function takes the legacy constructor's keyword hyper-parameters and returns
exactly the transform ``<Algorithm>(...).to_optax()`` builds in
``legacy_optim``: the same updates to the bit and the same state (legacy field
names, e.g. ``LegacyAdamState(count, grad_ema, grad_sq_ema)``)::

  tx = flax_optim_rules.adam(learning_rate=1e-3, beta1=0.9, weight_decay=1e-4)

A learning rate set per step (flax.optim's ``apply_gradient(g,
learning_rate=lr)``) is injected with ``inject_learning_rate``, which is
``optax.inject_hyperparams`` with every other hyper-parameter static (so they
stay the Python numbers flax.optim computed with; injected, they would become
float32 arrays and round differently)::

  tx = flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)(
      learning_rate=0.0, beta2=0.99)
  opt_state = optax.tree_utils.tree_set(opt_state, learning_rate=lr)

A rule of the user's own (a former ``flax.optim.OptimizerDef`` subclass)
keeps its methods on ``RuleDef`` and is injected the same way::

  tx = flax_optim_rules.inject_learning_rate(MyRule(beta=0.9))(
      learning_rate=0.0)

A TrainState of one of these transforms also reads and writes flax.optim's
state layout (``optimizer_state``, ``state_dict``, ``restore_state``) and
its pytree (``legacy_tree``: what a checkpoint that flattened the Optimizer
held, leaf for leaf; ``from_legacy_tree`` reads it back). A migrated
program resumes from checkpoints of either layout, its original's or its
own, with ``from_either_layout(state, raw_restore)``.

``learning_rate`` may also be a schedule (a callable of the step count):
``flax_optim_rules.lr_schedule`` holds flax 0.5.3's removed
``flax.training.lr_schedule`` helpers, bit for bit.
The ``legacy_*`` transforms take all hyper-parameters as one object with
attributes (``legacy_optim``'s dataclasses, or ``HyperParams``).
"""

import inspect
from typing import Callable

import optax

from flax_optim_rules import _adabelief
from flax_optim_rules import _adadelta
from flax_optim_rules import _adafactor
from flax_optim_rules import _adagrad
from flax_optim_rules import _adam
from flax_optim_rules import _either_layout
from flax_optim_rules import _lamb
from flax_optim_rules import _lars
from flax_optim_rules import _legacy_layout
from flax_optim_rules import _legacy_tree
from flax_optim_rules import _multi
from flax_optim_rules import _numerics
from flax_optim_rules import _rmsprop
from flax_optim_rules import _rule_def
from flax_optim_rules import _sgd
from flax_optim_rules import _weight_norm
from flax_optim_rules import lr_schedule

AdaBeliefParamState = _legacy_layout.AdaBeliefParamState
AdadeltaParamState = _legacy_layout.AdadeltaParamState
AdafactorParamState = _legacy_layout.AdafactorParamState
AdagradParamState = _legacy_layout.AdagradParamState
AdamParamState = _legacy_layout.AdamParamState
HyperParams = _numerics.HyperParams
LAMBParamState = _legacy_layout.LAMBParamState
LARSParamState = _legacy_layout.LARSParamState
LegacyAdaBeliefState = _adabelief.LegacyAdaBeliefState
LegacyAdadeltaState = _adadelta.LegacyAdadeltaState
LegacyAdafactorState = _adafactor.LegacyAdafactorState
LegacyAdagradState = _adagrad.LegacyAdagradState
LegacyAdamState = _adam.LegacyAdamState
LegacyRMSPropState = _rmsprop.LegacyRMSPropState
LegacyOptimizerTree = _legacy_tree.LegacyOptimizerTree
LegacyRuleState = _rule_def.LegacyRuleState
ModelParamTraversal = _multi.ModelParamTraversal
MomentumParamState = _legacy_layout.MomentumParamState
MultiRuleDef = _multi.MultiRuleDef
OptimizerState = _legacy_layout.OptimizerState
RMSPropParamState = _legacy_layout.RMSPropParamState
RuleDef = _rule_def.RuleDef
RuleState = _rule_def.RuleState
ScaleByLegacyLarsState = _lars.ScaleByLegacyLarsState
WeightNormState = _weight_norm.WeightNormState
adabelief = _adabelief.adabelief
adadelta = _adadelta.adadelta
adafactor = _adafactor.adafactor
adagrad = _adagrad.adagrad
adam = _adam.adam
from_either_layout = _either_layout.from_either_layout
from_legacy_tree = _legacy_tree.from_legacy_tree
lamb = _lamb.lamb
lars = _lars.lars
legacy_adabelief = _adabelief.legacy_adabelief
legacy_adadelta = _adadelta.legacy_adadelta
legacy_adagrad = _adagrad.legacy_adagrad
legacy_adam = _adam.legacy_adam
legacy_gradient_descent = _sgd.legacy_gradient_descent
legacy_lamb = _lamb.legacy_lamb
legacy_lars = _lars.legacy_lars
legacy_momentum = _sgd.legacy_momentum
legacy_rmsprop = _rmsprop.legacy_rmsprop
legacy_trace = _lars.legacy_trace
legacy_tree = _legacy_tree.legacy_tree
momentum = _sgd.momentum
multi_optimizer = _multi.multi_optimizer
optimizer_state = _legacy_layout.optimizer_state
replace_optimizer_state = _legacy_layout.replace_optimizer_state
restore_state = _legacy_layout.restore_state
rmsprop = _rmsprop.rmsprop
scale_by_legacy_adafactor = _adafactor.scale_by_legacy_adafactor
scale_by_legacy_lars = _lars.scale_by_legacy_lars
set_learning_rates = _multi.set_learning_rates
sgd = _sgd.sgd
state_dict = _legacy_layout.state_dict
traversal_labels = _multi.traversal_labels
weight_norm = _weight_norm.weight_norm


# flax.optim's update rules by class name; ``legacy_optim``'s catalogue
# names each rule's module, and ``tests/test_catalogue.py`` checks that
# the two agree.
_RULES_BY_CLASS_NAME: dict[str, Callable[..., optax.GradientTransformation]]
_RULES_BY_CLASS_NAME = {
    'AdaBelief': adabelief,
    'Adadelta': adadelta,
    'Adafactor': adafactor,
    'Adagrad': adagrad,
    'Adam': adam,
    'GradientDescent': sgd,
    'LAMB': lamb,
    'LARS': lars,
    'Momentum': momentum,
    'RMSProp': rmsprop,
}


def rule_named(name: str) -> Callable[..., optax.GradientTransformation]:
  """This package's function for the flax.optim rule class named ``name``.

  ``rule_named('Adam')`` is ``adam``. It takes the same keywords as the
  class did, so a definition chosen by name when the program runs,
  ``getattr(flax.optim, name)(**hyper_params)``, becomes
  ``rule_named(name)(**hyper_params)``: the same rule, bit for bit (what
  ``flax-optim-compat migrate`` writes).

  Raises:
    ValueError: ``name`` is no flax.optim update rule (``MultiOptimizer``
      and ``WeightNorm`` wrap other rules and have their own functions:
      ``multi_optimizer``, ``weight_norm``).
  """
  if not isinstance(name, str) or name not in _RULES_BY_CLASS_NAME:
    raise ValueError(
        f'rule_named({name!r}): not the class name of a flax.optim update '
        f'rule; expected one of {", ".join(sorted(_RULES_BY_CLASS_NAME))}')
  return _RULES_BY_CLASS_NAME[name]


def inject_learning_rate(
    factory: Callable[..., optax.GradientTransformation] | _rule_def.RuleDef):
  """``optax.inject_hyperparams(factory)`` injecting only ``learning_rate``.

  ``factory``: a function of this package (``adam``...), or a ``RuleDef``
  (its ``to_optax(learning_rate=...)``, the rate's default its own). Every
  other parameter of ``factory`` (defaults included) is a static
  argument; set the rate per step with ``optax.tree_utils.tree_set(opt_state,
  learning_rate=lr)``. The injected rate takes the parameters' dtype (as
  ``optax.inject_hyperparams`` does).
  """
  if isinstance(factory, _rule_def.RuleDef):
    factory = factory.learning_rate_factory()
  static = tuple(name for name in inspect.signature(factory).parameters
                 if name != 'learning_rate')
  return optax.inject_hyperparams(factory, static_args=static)

__all__ = (
    'AdaBeliefParamState',
    'AdadeltaParamState',
    'AdafactorParamState',
    'AdagradParamState',
    'AdamParamState',
    'HyperParams',
    'LAMBParamState',
    'LARSParamState',
    'LegacyAdaBeliefState',
    'LegacyAdadeltaState',
    'LegacyAdafactorState',
    'LegacyAdagradState',
    'LegacyAdamState',
    'LegacyOptimizerTree',
    'LegacyRMSPropState',
    'LegacyRuleState',
    'ModelParamTraversal',
    'MomentumParamState',
    'MultiRuleDef',
    'OptimizerState',
    'RMSPropParamState',
    'RuleDef',
    'RuleState',
    'ScaleByLegacyLarsState',
    'WeightNormState',
    'adabelief',
    'adadelta',
    'adafactor',
    'adagrad',
    'adam',
    'from_either_layout',
    'from_legacy_tree',
    'inject_learning_rate',
    'lamb',
    'lars',
    'legacy_adabelief',
    'legacy_adadelta',
    'legacy_adagrad',
    'legacy_adam',
    'legacy_gradient_descent',
    'legacy_lamb',
    'legacy_lars',
    'legacy_momentum',
    'legacy_rmsprop',
    'legacy_trace',
    'legacy_tree',
    'lr_schedule',
    'momentum',
    'multi_optimizer',
    'optimizer_state',
    'replace_optimizer_state',
    'restore_state',
    'rmsprop',
    'rule_named',
    'scale_by_legacy_adafactor',
    'scale_by_legacy_lars',
    'set_learning_rates',
    'sgd',
    'state_dict',
    'traversal_labels',
    'weight_norm',
)
