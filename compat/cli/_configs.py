"""The optimizer configurations that ``flax-optim-compat check`` and the tests
run through the legacy path and every new path.

One or more rows per built-in rule (``legacy_optim.catalogue``), then the
wrappers. Each entry builds its ``OptimizerDef`` lazily, so the table can
name every algorithm even while one of them is unavailable (its row then
reports the error instead of aborting the run).
"""

import dataclasses
import functools
from typing import Any, Callable, Optional

import optax

import legacy_optim as optim
from legacy_optim import catalogue
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
    """The overrides the legacy loop passes to ``apply_gradient`` at a step."""
    return {'learning_rate': self.schedule(step)} if self.schedule else {}

  def optax_overrides(self) -> dict[str, Any]:
    """The overrides the new paths pass once, when converting."""
    return {'learning_rate': self.schedule} if self.schedule else {}


_COSINE = optax.cosine_decay_schedule(0.1, decay_steps=8, alpha=0.1)


def _algorithm_rows():
  """The catalogue's rows, one or more per built-in rule."""
  for algorithm in catalogue.RULES:
    for check in algorithm.checks:
      yield Config(
          algorithm.name + check.label,
          functools.partial(getattr(optim, algorithm.name), **check.kwargs),
          schedule=_COSINE if check.schedule else None)


CONFIGS = (
    *_algorithm_rows(),
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
