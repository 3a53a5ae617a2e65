"""The one walk of a source tree that ``scan``, ``migrate`` and the copy
``migrate --out`` writes all use.

A link to a directory is never entered: a tree whose links loop (``a/b ->
..``) would otherwise be walked, and copied, without end; it is listed so
a copy can make the same link. A link to a file is listed with the files
(its content is what is read). A directory that cannot be listed is never
passed over in silence: it is recorded in ``Walk.unreadable`` with the
reason, for the command to report and count in its exit status.
Stdlib only.
"""

import os
from typing import Callable, Iterator, NamedTuple


class Unreadable(NamedTuple):
  path: str
  reason: str  # 'PermissionError: [Errno 13] Permission denied: ...'


class Directory(NamedTuple):
  """One directory of the walk: the names in it, each sorted."""
  path: str
  dirs: list  # entered after this one (those ``enter`` kept)
  files: list  # files, links to files and links that lead nowhere
  links: list  # links to directories (never entered)


def _reason(error: OSError) -> str:
  return f'{type(error).__name__}: {error}'


class Walk:
  """Walks trees top-down; ``enter(path, name)`` says whether to go into a
  directory. What cannot be listed accumulates in ``unreadable``."""

  def __init__(self, enter: Callable[[str, str], bool] = lambda p, n: True):
    self.enter = enter
    self.unreadable: list[Unreadable] = []

  def directories(self, root: str) -> Iterator[Directory]:
    todo = [root]
    while todo:
      path = todo.pop()
      listed = self.list_directory(path)
      if listed is None:
        continue
      yield listed
      todo.extend(os.path.join(path, name) for name in reversed(listed.dirs))

  def list_directory(self, path: str):
    """One ``Directory`` (None where it cannot be listed: recorded)."""
    dirs, files, links = [], [], []
    try:
      with os.scandir(path) as entries:
        for entry in entries:
          if entry.is_dir(follow_symlinks=False):
            if self.enter(entry.path, entry.name):
              dirs.append(entry.name)
          elif entry.is_dir():
            links.append(entry.name)  # a link to a directory
          else:
            files.append(entry.name)
    except OSError as e:
      self.unreadable.append(Unreadable(path, _reason(e)))
      return None
    return Directory(path, sorted(dirs), sorted(files), sorted(links))

  def files(self, root: str, keep: Callable[[str], bool]) -> list:
    """The paths of the files under ``root`` that ``keep`` takes, sorted
    (``root`` itself when it is a file)."""
    if not os.path.isdir(root):
      return [root]
    return sorted(os.path.join(d.path, name)
                  for d in self.directories(root) for name in d.files
                  if keep(os.path.join(d.path, name)))
