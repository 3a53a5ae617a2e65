"""Interpreter start-up stub of the flax.optim import alias.

``flax_optim_compat.pth`` runs :func:`activate` in every interpreter, so this
module is all that start-up pays for: it puts a lazy finder first on
``sys.meta_path``, which loads the real one (``_flax_optim_compat_hook``) at
the first import of ``flax`` or a ``flax.`` submodule and steps aside (other
names, ``flaxformer`` or ``flax_optim_compat``, pass straight through).
``LEGACY_OPTIM_IMPORT_HOOK=0`` (or false/no/off) keeps it out.

``LEGACY_OPTIM_JAX_ALIASES=1`` (or true/yes/on; off by default) also turns
on the layer for old programs (``compat.legacy_jax``): a second stub loads it
at the first ``jax`` or ``flax`` import.
(Imported before pytest starts: PYTEST_DONT_REWRITE.)
"""

import os
import sys

ENV_VAR = 'LEGACY_OPTIM_IMPORT_HOOK'
JAX_ALIASES_ENV_VAR = 'LEGACY_OPTIM_JAX_ALIASES'


def enabled_by_environment(environ=None) -> bool:
  """False when ``LEGACY_OPTIM_IMPORT_HOOK`` switches the alias off."""
  value = (os.environ if environ is None else environ).get(ENV_VAR, '1')
  return value.strip().lower() not in ('0', 'false', 'no', 'off')


def jax_aliases_requested(environ=None) -> bool:
  """True when ``LEGACY_OPTIM_JAX_ALIASES`` turns the legacy jax layer on."""
  value = (os.environ if environ is None else environ).get(
      JAX_ALIASES_ENV_VAR, '')
  return value.strip().lower() in ('1', 'true', 'yes', 'on')


class LazyJaxAliases:
  """Stands in for the legacy jax layer until jax or flax is imported."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname.partition('.')[0] not in ('jax', 'flax'):
      return None
    if self in sys.meta_path:
      sys.meta_path.remove(self)
    from flax_optim_compat import _legacy_jax
    _legacy_jax.install()
    return _legacy_jax.find_spec(fullname, path, target)


class LazyFinder:
  """Stands in for the real finder until flax is imported."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname != 'flax' and not fullname.startswith('flax.'):
      return None
    import _flax_optim_compat_hook
    _flax_optim_compat_hook.install()  # replaces this stub
    return _flax_optim_compat_hook.find_spec(fullname, path, target)


def activate() -> bool:
  if jax_aliases_requested() and not any(
      isinstance(f, LazyJaxAliases) for f in sys.meta_path):
    sys.meta_path.insert(0, LazyJaxAliases())
  if not enabled_by_environment():
    return False
  if not any(isinstance(f, LazyFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, LazyFinder())
  return True
