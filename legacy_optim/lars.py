"""Placeholder: LARS lands with issue 3."""

from legacy_optim import base


class LARS(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('LARS is not implemented yet (issue 3).')
