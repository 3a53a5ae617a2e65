"""Placeholder: Adagrad lands with issue 3."""

from legacy_optim import base


class Adagrad(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('Adagrad is not implemented yet (issue 3).')
