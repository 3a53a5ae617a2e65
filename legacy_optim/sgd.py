"""Plain gradient descent: ``p <- p - learning_rate * g``."""

from flax import struct
import numpy as np

from flax_optim_rules import _sgd as _rules_sgd
from legacy_optim import base


@struct.dataclass
class _GradientDescentHyperParams:
  learning_rate: np.ndarray


class GradientDescent(base.OptimizerDef):
  """Gradient descent: ``p <- p - learning_rate * g``.

  Optax equivalent (bit-identical): ``optax.sgd(learning_rate)``. The
  per-parameter state is the empty tuple ``()``.
  """

  _host_arithmetic = True

  def __init__(self, learning_rate=None):
    """Args: learning_rate: the step size (may be given per step instead)."""
    super().__init__(_GradientDescentHyperParams(learning_rate))

  def _native_transform(self, hyper_params):
    return _rules_sgd.legacy_gradient_descent(hyper_params, self._name)
