"""Placeholder: LAMB lands with issue 3."""

from legacy_optim import base


class LAMB(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('LAMB is not implemented yet (issue 3).')
