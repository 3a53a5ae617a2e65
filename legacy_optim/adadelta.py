"""Placeholder: Adadelta lands with issue 3."""

from legacy_optim import base


class Adadelta(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('Adadelta is not implemented yet (issue 3).')
