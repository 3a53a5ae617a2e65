"""Placeholder: AdaBelief lands with issue 3."""

from legacy_optim import base


class AdaBelief(base.OptimizerDef):

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError('AdaBelief is not implemented yet (issue 3).')
