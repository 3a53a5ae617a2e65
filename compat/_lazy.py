"""Lazily resolved package exports (PEP 562), so imports stay cheap."""

import functools
import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Callable, Mapping


def exports(package: str, table: Mapping[str, str],
            package_globals: dict) -> tuple[Callable, Callable]:
  """``(__getattr__, __dir__)`` resolving ``table[name]`` modules on use."""

  def __getattr__(name):
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
  from the file and kept.
  """
  if package in sys.modules:
    return importlib.import_module(f'{package}.{name}')
  return _private_copy(package, name)


@functools.lru_cache(maxsize=None)
def _private_copy(package: str, name: str) -> ModuleType:
  origin = importlib.util.find_spec(package).origin
  spec = importlib.util.spec_from_file_location(
      f'_compat_{package}_{name}',
      os.path.join(os.path.dirname(origin), f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
