"""Param paths as tuples of names, and ``path_map`` renaming.

Shared by the nnx bridge (legacy params -> model params) and checkpoint
conversion (``convert ... --path-map``); stdlib only.
"""

from typing import Callable, Mapping, Optional, Sequence, Union

Path = tuple[str, ...]
PathMap = Union[Mapping[Union[str, Sequence[str]], Union[str, Sequence[str]]],
                Callable[[str], str]]


def segments(key_path) -> Path:
  """A jax key path as a tuple of strings ('Dense_0', 'kernel')."""
  out = []
  for key in key_path:
    for attr in ('key', 'name', 'idx'):
      if hasattr(key, attr):
        out.append(str(getattr(key, attr)))
        break
    else:
      out.append(str(key))
  return tuple(out)


def as_path(path: Union[str, Sequence[str]]) -> Path:
  if isinstance(path, str):
    return tuple(part for part in path.split('/') if part)
  return tuple(str(part) for part in path)


def show(path: Path) -> str:
  return '/'.join(path) or '<root>'


class PathRenamer:
  """Applies a ``path_map`` (longest matching prefix, or a function)."""

  def __init__(self, path_map: Optional[PathMap]):
    self._fn = path_map if callable(path_map) else None
    self._prefixes: dict[Path, Path] = {}
    if path_map is not None and not callable(path_map):
      self._prefixes = {as_path(old): as_path(new)
                        for old, new in path_map.items()}
    self.used: set[Path] = set()

  def __call__(self, path: Path) -> Path:
    if self._fn is not None:
      return as_path(self._fn(show(path)))
    for n in range(len(path), -1, -1):
      if path[:n] in self._prefixes:
        self.used.add(path[:n])
        return self._prefixes[path[:n]] + path[n:]
    return path

  def unused(self) -> list[Path]:
    return sorted(set(self._prefixes) - self.used)
