"""Placeholder: RMSProp lands with issue 3."""

from legacy_optim import base


class RMSProp(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('RMSProp is not implemented yet (issue 3).')
