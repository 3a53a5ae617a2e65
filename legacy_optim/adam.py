"""Placeholder: Adam lands with issue 3."""

from legacy_optim import base


class Adam(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('Adam is not implemented yet (issue 3).')
