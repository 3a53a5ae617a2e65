"""Lazily resolved package exports (PEP 562), so imports stay cheap."""

import importlib
from typing import Callable, Mapping


def exports(package: str, table: Mapping[str, str],
            package_globals: dict) -> tuple[Callable, Callable]:
  """``(__getattr__, __dir__)`` resolving ``table[name]`` modules on use."""

  def __getattr__(name):  # pylint: disable=invalid-name
    module = table.get(name)
    if module is None:
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    return getattr(importlib.import_module(module), name)

  def __dir__():  # pylint: disable=invalid-name
    return sorted(set(package_globals) | set(table))

  return __getattr__, __dir__
