"""Plain gradient descent: ``p <- p - learning_rate * g``."""

import numpy as np
import optax
from flax import struct

from legacy_optim import _hyper
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
    return optax.scale_by_learning_rate(
        _hyper.learning_rate_schedule(hyper_params.learning_rate, self._name))
