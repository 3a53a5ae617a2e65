"""Placeholder: Adafactor lands with issue 3."""

from legacy_optim import base


class Adafactor(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('Adafactor is not implemented yet (issue 3).')
