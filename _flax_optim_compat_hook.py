"""Serves the removed ``flax.optim`` (flax <= 0.5.3) from ``legacy_optim``.

At interpreter start ``flax_optim_compat.pth`` installs a lazy stub
(``_flax_optim_compat_startup``) that loads this module at the first ``flax``
import, so ``from flax import optim``, ``import flax.optim.adam`` and
``import flax; flax.optim.Adam`` work with no change to old code; ``import
legacy_optim`` activates it too. The public face is ``compat.importer``.

Contract:

* Start-up cost is the stub (a few stdlib-only lines) and one
  ``sys.meta_path`` entry: nothing imports this module, jax, flax or
  ``legacy_optim`` until a ``flax*`` import actually happens.
* A real ``flax.optim`` (an old flax) always wins: the alias is only used when
  no other finder can find ``flax.optim``.
* ``flax.optim[.x]`` *is* ``legacy_optim[.x]`` (same module objects, aliased in
  ``sys.modules``), so classes are identical whichever spelling imported them.
* ``LEGACY_OPTIM_IMPORT_HOOK=0`` (or false/no/off) switches the automatic
  activation off; an explicit :func:`install` still works.

These are top-level modules (not ``compat.importer``) so that importing them
does not put a package named ``compat`` into ``sys.modules`` ahead of the
user's own. (They may be imported before pytest starts, hence
PYTEST_DONT_REWRITE: no warning that they cannot be rewritten.)
"""

import sys

from _flax_optim_compat_startup import ENV_VAR  # noqa: F401  (compat.importer)
from _flax_optim_compat_startup import LazyFinder
from _flax_optim_compat_startup import enabled_by_environment

ALIAS = 'flax.optim'
TARGET = 'legacy_optim'


class _AliasLoader:
  """Loads ``flax.optim[.x]`` as the module ``legacy_optim[.x]`` itself."""

  def __init__(self, target: str):
    self.target = target

  def create_module(self, spec):
    del spec
    return None  # a placeholder; exec_module swaps in the real module

  def exec_module(self, module):
    import importlib
    real = importlib.import_module(self.target)
    # The import system returns whatever sys.modules holds after exec_module.
    sys.modules[module.__name__] = real
    _alias_imported_submodules()


def _alias_imported_submodules() -> None:
  """Registers every imported ``legacy_optim.x`` as ``flax.optim.x``."""
  prefix = TARGET + '.'
  for name, module in list(sys.modules.items()):
    if name.startswith(prefix) and module is not None:
      sys.modules.setdefault(ALIAS + name[len(TARGET):], module)


class PostImportLoader:
  """Wraps a module's real loader; calls ``after(module)`` once it has run.

  Once the module has run, the original loader is put back on the module and
  its spec, so nothing downstream sees the wrapper (also when wrappers nest:
  the legacy jax layer, ``compat.legacy_jax``, wraps ``flax`` too).
  """

  def __init__(self, loader, after):
    self._loader = loader
    self._after = after

  def original(self):
    loader = self._loader
    while isinstance(loader, PostImportLoader):
      loader = loader._loader
    return loader

  def calls(self, after) -> bool:
    loader = self
    while isinstance(loader, PostImportLoader):
      if loader._after is after:
        return True
      loader = loader._loader
    return False

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    try:
      self._loader.exec_module(module)
    finally:
      module.__loader__ = self.original()
      if getattr(module, '__spec__', None) is not None:
        module.__spec__.loader = module.__loader__
    self._after(module)

  def __getattr__(self, name):
    return getattr(self._loader, name)


def run_after_import(spec, after):
  """``spec`` whose module calls ``after(module)`` once loaded (once, however
  often this is asked)."""
  if spec is not None and spec.loader is not None and not (
      isinstance(spec.loader, PostImportLoader) and spec.loader.calls(after)):
    spec.loader = PostImportLoader(spec.loader, after)
  return spec


def _patch_flax(flax_module) -> None:
  """Gives ``flax`` a module ``__getattr__`` that imports ``flax.optim``.

  Only consulted for attributes flax does not have, so an old flax's own
  ``optim`` is never replaced; an existing ``__getattr__`` is chained.
  """
  previous = flax_module.__dict__.get('__getattr__')
  if getattr(previous, '_flax_optim_compat', False):
    return

  def __getattr__(name):
    if name == 'optim' and _FINDER in sys.meta_path:
      import importlib
      try:
        return importlib.import_module(ALIAS)
      except ImportError as e:
        raise AttributeError(
            f'module {flax_module.__name__!r} has no attribute {name!r} '
            f'(importing {ALIAS} failed: {e})') from e
    if previous is not None:
      return previous(name)
    raise AttributeError(
        f'module {flax_module.__name__!r} has no attribute {name!r}')

  __getattr__._flax_optim_compat = True
  __getattr__.previous = previous
  flax_module.__getattr__ = __getattr__


def _unpatch_flax(flax_module) -> None:
  current = flax_module.__dict__.get('__getattr__')
  if getattr(current, '_flax_optim_compat', False):
    if current.previous is None:
      del flax_module.__getattr__
    else:
      flax_module.__getattr__ = current.previous


class _FlaxOptimFinder:
  """A meta-path finder that only reacts to ``flax`` and ``flax.optim*``."""

  def find_spec(self, fullname, path=None, target=None):
    if not fullname.startswith('flax'):
      return None
    if fullname == 'flax':
      return run_after_import(_other_finders_spec(fullname, path, target),
                              _patch_flax)
    if fullname == ALIAS:
      real = _other_finders_spec(fullname, path, target)
      return real if real is not None else _alias_spec(fullname, TARGET)
    if fullname.startswith(ALIAS + '.'):
      parent = sys.modules.get(ALIAS)
      if getattr(parent, '__name__', None) != TARGET:
        return None  # a real flax.optim: its submodules are its own
      target_name = TARGET + fullname[len(ALIAS):]
      import importlib.util
      if importlib.util.find_spec(target_name) is None:
        return None
      return _alias_spec(fullname, target_name)
    return None

  def __repr__(self):
    return f'<{__name__}: {ALIAS} -> {TARGET}>'


def _other_finders_spec(fullname, path, target):
  return other_finders_spec(_FINDER, fullname, path, target)


def other_finders_spec(own, fullname, path, target):
  """The spec the finders on ``sys.meta_path`` other than ``own`` give."""
  for finder in list(sys.meta_path):
    if finder is own or not hasattr(finder, 'find_spec'):
      continue
    spec = finder.find_spec(fullname, path, target)
    if spec is not None:
      return spec
  return None


def _alias_spec(fullname: str, target_name: str):
  import importlib.machinery
  return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name))


_FINDER = _FlaxOptimFinder()
find_spec = _FINDER.find_spec


def _remove_finders() -> None:
  sys.meta_path[:] = [f for f in sys.meta_path
                      if f is not _FINDER and not isinstance(f, LazyFinder)]


def install() -> None:
  """Makes ``flax.optim`` importable in this process (idempotent).

  Replaces the start-up stub, if any, keeping the finder first.
  """
  if _FINDER not in sys.meta_path or any(
      isinstance(f, LazyFinder) for f in sys.meta_path):
    _remove_finders()
    sys.meta_path.insert(0, _FINDER)
  flax_module = sys.modules.get('flax')
  if flax_module is not None:
    _patch_flax(flax_module)


def uninstall() -> None:
  """Undoes :func:`install` (and the start-up stub); already imported
  ``flax.optim`` modules stay."""
  _remove_finders()
  flax_module = sys.modules.get('flax')
  if flax_module is not None:
    _unpatch_flax(flax_module)


def is_installed() -> bool:
  """True when the finder (or its start-up stub) is on ``sys.meta_path``."""
  return any(f is _FINDER or isinstance(f, LazyFinder) for f in sys.meta_path)


def activate() -> bool:
  """:func:`install` unless the environment switches it off; True if on."""
  if not enabled_by_environment():
    return False
  install()
  return True
