"""Lazily resolved package exports (PEP 562), so imports stay cheap."""

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Callable, Mapping


def exports(package: str, table: Mapping[str, str], package_globals: dict,
            moved: Mapping[str, str] = {}) -> tuple[Callable, Callable]:
  """``(__getattr__, __dir__)`` resolving ``table[name]`` modules on use.

  ``moved`` (old name: new module) are submodules that moved: the attribute
  gives the module (see ``moved_modules``).
  """
  moved_modules(package, moved)

  def __getattr__(name):
    if name in moved:
      return importlib.import_module(f'{package}.{name}')
    module = table.get(name)
    if module is None:
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    return getattr(importlib.import_module(module), name)

  def __dir__():
    return sorted(set(package_globals) | set(table))

  return __getattr__, __dir__


def module_without_package(package: str, name: str) -> ModuleType:
  """``package.name`` without running ``package/__init__`` (it imports jax).

  For stdlib-only modules such as ``legacy_optim.catalogue``: the scanner and
  the optimizer specs read them without jax. When ``package`` is already
  imported its own module is returned; otherwise one private copy is loaded
  from the file and kept (with those it imports relatively).
  """
  if package in sys.modules:
    return importlib.import_module(f'{package}.{name}')
  return _private_copy(package, name)


def _private_copy(package: str, name: str) -> ModuleType:
  return importlib.import_module(f'{_stand_in(package)}.{name}')


@functools.lru_cache(maxsize=None)
def _stand_in(package: str) -> str:
  """A package that finds ``package``'s modules in its directory without
  running its ``__init__``: a private copy's relative imports (``from .
  import _rule_table``) load private copies too, each once."""
  origin = importlib.util.find_spec(package).origin
  stand_in = f'_compat_{package}'
  spec = importlib.machinery.ModuleSpec(stand_in, None, is_package=True)
  spec.submodule_search_locations = [os.path.dirname(origin)]
  sys.modules[stand_in] = importlib.util.module_from_spec(spec)
  return stand_in


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """``import old.name`` gives the module that now lives at its new name.

  The import system gives a module found here the spec of the old name; the
  module keeps its own, so ``__spec__``, reloads and pickles still name where
  it lives.
  """

  def __init__(self, moves: Mapping[str, str]):
    self._moves = dict(moves)
    self._specs: dict[str, object] = {}

  def find_spec(self, fullname, path=None, target=None):
    if fullname not in self._moves:
      return None
    return importlib.util.spec_from_loader(fullname, self)

  def create_module(self, spec):
    module = importlib.import_module(self._moves[spec.name])
    self._specs[spec.name] = module.__spec__
    return module

  def exec_module(self, module):
    module.__spec__ = self._specs.pop(module.__spec__.name)


def moved_modules(package: str, table: Mapping[str, str]) -> None:
  """Keeps ``package.old`` importable for each ``old: new module`` of table.

  For modules that moved inside ``package``: ``import package.old`` and
  ``from package import old`` give the module at its new place, the same
  object.
  """
  moves = {f'{package}.{old}': new for old, new in table.items()}
  if moves and not any(isinstance(finder, _MovedModules) and
             finder._moves == moves for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules(moves))
