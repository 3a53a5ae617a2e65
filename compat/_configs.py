"""The optimizer configurations that ``python -m compat check`` and the tests
run through the legacy path and every new path.

Each entry builds its ``OptimizerDef`` lazily, so the table can name every
algorithm even while one of them is unavailable (its row then reports the
error instead of aborting the run).
"""

import dataclasses
from typing import Any, Callable, Optional

import optax

import legacy_optim as optim
from legacy_optim import traverse_util


def _kernels():
  return traverse_util.ModelParamTraversal(
      lambda path, _: path.endswith('/kernel'))


def _biases():
  return traverse_util.ModelParamTraversal(
      lambda path, _: path.endswith('/bias'))


def _first_layer():
  return traverse_util.ModelParamTraversal(
      lambda path, _: path.startswith('/Dense_0/'))


@dataclasses.dataclass(frozen=True)
class Config:
  """One row of the equivalence table.

  Attributes:
    name: the row label (also the pytest id).
    make_def: builds the ``OptimizerDef``.
    focus: builds the traversal passed as ``create(params, focus=...)``.
    schedule: a learning-rate schedule (a function of the step count). The
      legacy loop passes ``learning_rate=schedule(step)`` to every
      ``apply_gradient``; the new paths get ``learning_rate=schedule`` once.
  """
  name: str
  make_def: Callable[[], optim.OptimizerDef]
  focus: Optional[Callable[[], Any]] = None
  schedule: Optional[Callable[[Any], Any]] = None

  def create(self, params) -> optim.Optimizer:
    focus = self.focus() if self.focus else None
    return self.make_def().create(params, focus=focus)

  def legacy_overrides(self, step) -> dict[str, Any]:
    """The overrides the legacy loop passes to ``apply_gradient`` at ``step``."""
    return {'learning_rate': self.schedule(step)} if self.schedule else {}

  def optax_overrides(self) -> dict[str, Any]:
    """The overrides the new paths pass once, when converting."""
    return {'learning_rate': self.schedule} if self.schedule else {}


_COSINE = optax.cosine_decay_schedule(0.1, decay_steps=8, alpha=0.1)

CONFIGS = (
    Config('GradientDescent', lambda: optim.GradientDescent(0.1)),
    Config('Momentum', lambda: optim.Momentum(0.1, beta=0.9)),
    Config('Momentum(nesterov, wd)', lambda: optim.Momentum(
        0.1, beta=0.8, weight_decay=1e-2, nesterov=True)),
    Config('Momentum + lr schedule', lambda: optim.Momentum(beta=0.9),
           schedule=_COSINE),
    Config('Adam', lambda: optim.Adam(0.01, beta2=0.99, weight_decay=1e-3)),
    Config('AdaBelief', lambda: optim.AdaBelief(0.01, weight_decay=1e-3)),
    Config('Adadelta', lambda: optim.Adadelta(1.0, weight_decay=1e-3)),
    Config('Adafactor', lambda: optim.Adafactor(0.01)),
    Config('Adafactor(factored, beta1)', lambda: optim.Adafactor(
        0.01, beta1=0.9, min_dim_size_to_factor=2, weight_decay_rate=1e-3)),
    Config('Adagrad', lambda: optim.Adagrad(0.1)),
    Config('LAMB', lambda: optim.LAMB(0.01, weight_decay=1e-3)),
    Config('LARS', lambda: optim.LARS(0.1, weight_decay=1e-3)),
    Config('LARS(nesterov)', lambda: optim.LARS(
        0.1, weight_decay=1e-3, eps=1e-6, nesterov=True)),
    Config('RMSProp', lambda: optim.RMSProp(0.01)),
    Config('RMSProp(centered)', lambda: optim.RMSProp(0.01, centered=True)),
    Config('WeightNorm(Momentum)', lambda: optim.WeightNorm(
        optim.Momentum(0.1), wn_decay=1e-3)),
    Config('MultiOptimizer', lambda: optim.MultiOptimizer(
        (_kernels(), optim.Momentum(0.1)),
        (_biases(), optim.GradientDescent(0.05)))),
    Config('MultiOptimizer(unmatched)', lambda: optim.MultiOptimizer(
        (_first_layer(), optim.Momentum(0.1)),)),
    Config('focus', lambda: optim.Momentum(0.1), focus=_kernels),
)

BY_NAME = {config.name: config for config in CONFIGS}
