"""Atomic destination writes and a small progress bar for conversions.

A destination is produced under a temporary name next to it and renamed into
place only once complete, so an interrupted conversion never leaves a partial
destination. An existing destination is refused unless ``force``; with
``force`` the old one is swapped out and deleted only after the new one is
in place.
"""

import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Iterator, Optional, TextIO


class DestinationExistsError(FileExistsError):
  """The destination exists and overwriting was not requested."""


def refuse_existing(dst: pathlib.Path, force: bool) -> None:
  if not force and (dst.exists() or dst.is_symlink()):
    raise DestinationExistsError(
        f'{dst} already exists; pass --force (force=True) to replace it.')


def _temp_name(dst: pathlib.Path, tag: str) -> pathlib.Path:
  fd, name = tempfile.mkstemp(prefix=f'.{dst.name}.{tag}-', dir=dst.parent)
  os.close(fd)
  os.unlink(name)
  return pathlib.Path(name)


def _remove(path: pathlib.Path) -> None:
  if path.is_dir() and not path.is_symlink():
    shutil.rmtree(path, ignore_errors=True)
  elif path.exists() or path.is_symlink():
    path.unlink()


def _fsync_dir(path: pathlib.Path) -> None:
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


@contextlib.contextmanager
def atomic_destination(dst, force: bool = False) -> Iterator[pathlib.Path]:
  """Yields a temporary path to write ``dst`` into; renames it on success.

  The temporary path lies in a private directory next to ``dst`` (same file
  system, so the final rename is atomic); that directory, with anything a
  failed or interrupted body (KeyboardInterrupt included) left in it, is
  removed on exit. The body may create a file or a directory at the path.
  """
  dst = pathlib.Path(dst)
  dst.parent.mkdir(parents=True, exist_ok=True)
  refuse_existing(dst, force)
  workdir = pathlib.Path(
      tempfile.mkdtemp(prefix=f'.{dst.name}.tmp-', dir=dst.parent))
  tmp = workdir / dst.name
  try:
    yield tmp
    if not tmp.exists():
      raise RuntimeError(f'Nothing was written to {tmp}.')
    _commit(tmp, dst, force)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)


def _commit(tmp: pathlib.Path, dst: pathlib.Path, force: bool) -> None:
  if not (dst.exists() or dst.is_symlink()):
    if tmp.is_dir():
      # rename() replaces an empty directory: re-check right before it.
      refuse_existing(dst, force=False)
      os.rename(tmp, dst)
    else:
      os.link(tmp, dst)  # Fails if dst appeared meanwhile: never clobbers.
    _fsync_dir(dst.parent)
    return
  refuse_existing(dst, force)
  if tmp.is_file() and not dst.is_dir():
    os.replace(tmp, dst)
    _fsync_dir(dst.parent)
    return
  old = _temp_name(dst, 'old')
  os.rename(dst, old)
  try:
    os.rename(tmp, dst)
  except BaseException:
    os.rename(old, dst)
    raise
  _fsync_dir(dst.parent)
  _remove(old)


def write_bytes(path: pathlib.Path, data: bytes) -> None:
  """Writes and fsyncs a file (inside an ``atomic_destination``)."""
  with open(path, 'xb') as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())


def rewrite_in_place(path: str, data: bytes) -> None:
  """Replaces ``path``'s content atomically (the old file is never lost)."""
  mode = os.stat(path).st_mode
  fd, temp = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.',
                              dir=os.path.dirname(os.path.abspath(path)))
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(temp, mode)
    os.replace(temp, path)
  except BaseException:
    if os.path.exists(temp):
      os.unlink(temp)
    raise


class Progress:
  """A one-line text progress bar on a terminal (silent otherwise).

  Shown when ``enabled`` is True, or when it is None and the stream is a
  terminal and the work is at least ``threshold`` bytes.
  """

  def __init__(self, total: int, label: str, enabled: Optional[bool] = None,
               stream: Optional[TextIO] = None, threshold: int = 64 << 20):
    self.stream = stream or sys.stderr
    self.total = max(int(total), 1)
    self.label = label
    self.done = 0
    if enabled is None:
      enabled = total >= threshold and getattr(self.stream, 'isatty',
                                               lambda: False)()
    self.enabled = enabled
    self._last = 0.0

  def phase(self, label: str, total: Optional[int] = None) -> None:
    self.label = label
    self.done = 0
    if total is not None:
      self.total = max(int(total), 1)
    self._draw(force=True)

  def advance(self, amount: int) -> None:
    self.done = min(self.done + amount, self.total)
    self._draw()

  def _draw(self, force: bool = False) -> None:
    if not self.enabled:
      return
    now = time.monotonic()
    if not force and now - self._last < 0.1 and self.done < self.total:
      return
    self._last = now
    frac = self.done / self.total
    bar = '#' * int(frac * 30)
    self.stream.write(f'\r{self.label:<10} [{bar:<30}] {frac:6.1%} '
                      f'{self.done / 2**20:9.1f}/{self.total / 2**20:.1f} MiB')
    self.stream.flush()

  def complete(self) -> None:
    """Marks the current phase done (its estimate may have been high)."""
    self.done = self.total
    self._draw(force=True)

  def close(self) -> None:
    if self.enabled:
      self.stream.write('\n')
      self.stream.flush()
