"""Placeholder: DynamicScale lands with issue 3."""

from legacy_optim import base


class DynamicScale(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('DynamicScale is not implemented yet (issue 3).')
