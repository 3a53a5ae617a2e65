"""Placeholder: WeightNorm lands with issue 3."""

from legacy_optim import base


class WeightNorm(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('WeightNorm is not implemented yet (issue 3).')
