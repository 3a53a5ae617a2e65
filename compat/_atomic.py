"""Atomic destination writes and a small progress bar for conversions.

A destination is produced under a temporary name next to it and renamed into
place only once complete, so an interrupted conversion never leaves a partial
destination. An existing destination is refused unless ``force`` and it
holds the marker this tool wrote (``refuse_existing``: never a path it did
not create); then the old one is swapped out and deleted only after the
new one is in place.

Also: stops that clean up (``stops_interrupt``), and files rewritten in
place as a whole, finished or undone after a kill (``rewrite_together``).
"""

import contextlib
import json
import os
import pathlib
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator, Optional, TextIO


class DestinationExistsError(FileExistsError):
  """The destination exists and overwriting was not requested."""


# Whether a path holds the marker this tool writes into what it makes (a
# checkpoint's conversion record): the only thing ``force`` replaces.
Marked = Optional[Callable[[pathlib.Path], bool]]


def refuse_existing(dst: pathlib.Path, force: bool,
                    ours: Marked = None) -> None:
  """The one rule for what a command may replace: nothing that exists,
  unless ``force`` and ``ours(dst)`` finds the marker this tool wrote
  there: a directory holding its record. A file or a link is never
  replaced (a legacy checkpoint file has no room for such a record), nor
  anything where ``ours`` is None."""
  if not (dst.exists() or dst.is_symlink()):
    return
  if not force:
    raise DestinationExistsError(
        f'{dst} already exists; pass --force (force=True) to replace it '
        '(only what flax-optim-compat wrote is replaced).')
  directory = dst.is_dir() and not dst.is_symlink()
  if not (directory and ours is not None and ours(dst)):
    what = ('a directory' if directory else
            'a link' if dst.is_symlink() else 'a file')
    why = '' if directory else (
        ' (only a directory holds the record a conversion writes)')
    raise DestinationExistsError(
        f'{dst} is {what} that is not a checkpoint flax-optim-compat '
        f'converted{why}; --force only replaces those. Choose another '
        'destination or remove it yourself.')


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
def atomic_destination(dst, force: bool = False,
                       ours: Marked = None) -> Iterator[pathlib.Path]:
  """Yields a temporary path to write ``dst`` into; renames it on success.

  The temporary path lies in a private directory next to ``dst`` (same file
  system, so the final rename is atomic); that directory, with anything a
  failed or interrupted body (KeyboardInterrupt included) left in it, is
  removed on exit. The body may create a file or a directory at the path.
  An existing ``dst`` is replaced only as ``refuse_existing`` allows.
  """
  dst = pathlib.Path(dst)
  dst.parent.mkdir(parents=True, exist_ok=True)
  refuse_existing(dst, force, ours)
  workdir = pathlib.Path(
      tempfile.mkdtemp(prefix=f'.{dst.name}.tmp-', dir=dst.parent))
  tmp = workdir / dst.name
  try:
    yield tmp
    if not tmp.exists():
      raise RuntimeError(f'Nothing was written to {tmp}.')
    _commit(tmp, dst, force, ours)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)


def _commit(tmp: pathlib.Path, dst: pathlib.Path, force: bool,
            ours: Marked) -> None:
  if not (dst.exists() or dst.is_symlink()):
    if tmp.is_dir():
      # rename() replaces an empty directory: re-check right before it.
      refuse_existing(dst, force=False)
      os.rename(tmp, dst)
    else:
      os.link(tmp, dst)  # Fails if dst appeared meanwhile: never clobbers.
    _fsync_dir(dst.parent)
    return
  refuse_existing(dst, force, ours)  # again: it may have changed since
  old = _temp_name(dst, 'old')  # a directory of ours: swapped out whole
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


# --------------------------------------------- stops that clean up after


@contextlib.contextmanager
def stops_interrupt() -> Iterator[None]:
  """SIGTERM and SIGHUP raise KeyboardInterrupt, as SIGINT does, so that
  a command stopped any of these ways runs its ``finally`` blocks: the
  temporary files and directories it was writing go with it."""
  if threading.current_thread() is not threading.main_thread():
    yield  # only the main thread may set handlers (then: as before)
    return

  def interrupt(signum, frame):
    del frame
    raise KeyboardInterrupt(f'stopped by {signal.Signals(signum).name}')

  previous = _handle(interrupt, (signal.SIGTERM, signal.SIGHUP))
  try:
    yield
  finally:
    _restore(previous)


def _handle(handler, stops) -> dict:
  """Sets ``handler`` for each of ``stops`` not ignored (``nohup``, or a
  background job's SIGINT: the caller's choice stands); returns what to
  restore."""
  previous = {}
  for stop in stops:
    if signal.getsignal(stop) is not signal.SIG_IGN:
      previous[stop] = signal.signal(stop, handler)
  return previous


def _restore(previous: dict) -> None:
  for stop, handler in previous.items():
    signal.signal(stop, signal.SIG_DFL if handler is None else handler)


# What a shell reports of a process stopped by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def run_stoppable(main: Callable[..., int], *args) -> int:
  """``main(*args)`` under ``stops_interrupt``; stopped, it says so on
  stderr and returns ``EXIT_INTERRUPTED`` (what it wrote is gone by then,
  or finished: ``rewrite_together``)."""
  try:
    with stops_interrupt():
      return main(*args)
  except KeyboardInterrupt as e:
    _say(f'flax-optim-compat: {str(e) or "interrupted"}')
    return EXIT_INTERRUPTED


# ------------------------------------------ files written as a whole


# Next to each file being rewritten: its new content, before the rename.
STAGED_SUFFIX = '.flax-optim-compat-new'
_STAGING, _COMMITTED = 'staging', 'committed'


def _staged_name(path: str, token: str) -> str:
  """A name no file has: ``token`` is this run's, the file is created
  exclusively (so an undo only ever removes what this tool created)."""
  head, name = os.path.split(os.path.abspath(path))
  return os.path.join(head, f'.{name}.{token}{STAGED_SUFFIX}')


def _write_journal(journal: pathlib.Path, state: str, files: list) -> None:
  """Replaces the journal in one rename: it is in one state or the other."""
  temp = journal.with_name(journal.name + '.tmp')
  with open(temp, 'w', encoding='utf-8') as f:
    json.dump({'state': state, 'files': files}, f)
    f.flush()
    os.fsync(f.fileno())
  os.replace(temp, journal)
  _fsync_dir(journal.parent)


def _say(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def rewrite_together(contents: dict, journal: pathlib.Path) -> None:
  """Replaces the content of every file in ``contents`` (path -> bytes):
  all of them or none, even where the process is killed (with
  ``finish_interrupted`` on the next run).

  Each new content is first written whole beside its file under a name
  that says whose it is (``STAGED_SUFFIX``), while the ``journal`` lists
  them as staging: stopped then, nothing changed, the staged files go.
  Once all are written the journal says committed (the point of no
  return) and each is renamed over its file; an interrupt from then on is
  reported and held until the last rename is done.
  """
  token = secrets.token_hex(4)
  files = [[os.path.abspath(path), _staged_name(path, token)]
           for path in contents]
  _write_journal(journal, _STAGING, files)
  created = []
  try:
    for (path, staged), data in zip(files, contents.values()):
      with open(staged, 'xb') as f:
        created.append([path, staged])
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
      os.chmod(staged, os.stat(path).st_mode)
  except BaseException:
    _undo(created, journal)
    _say('flax-optim-compat: stopped before any file was rewritten: '
         'nothing changed')
    raise
  with _held_interrupts(f'flax-optim-compat: interrupted while renaming '
                        f'the {len(files)} rewritten file(s) into place: '
                        'finishing, so that the project is written whole'):
    _write_journal(journal, _COMMITTED, files)
    _finish(files, journal)


def _undo(files: list, journal: pathlib.Path) -> None:
  for _, staged in files:
    if os.path.exists(staged):
      os.unlink(staged)
  _drop_journal(journal)


def _drop_journal(journal: pathlib.Path) -> None:
  """The journal goes, and the temporary a kill mid-write may have left."""
  journal.with_name(journal.name + '.tmp').unlink(missing_ok=True)
  journal.unlink(missing_ok=True)


def _finish(files: list, journal: pathlib.Path) -> None:
  for path, staged in files:
    if os.path.exists(staged):  # gone: renamed before the stop
      os.replace(staged, path)
  for directory in {os.path.dirname(path) for path, _ in files}:
    _fsync_dir(pathlib.Path(directory))
  _drop_journal(journal)


def finish_interrupted(journal: pathlib.Path) -> Optional[str]:
  """Completes or undoes what a stopped ``rewrite_together`` left, as its
  journal says; returns what it did (None: nothing was left)."""
  if not journal.exists():
    _drop_journal(journal)  # a kill while the first one was written
    return None
  with open(journal, encoding='utf-8') as f:
    record = json.load(f)
  files = record['files']
  shown = ', '.join(os.path.relpath(path) for path, _ in files)
  if record['state'] == _COMMITTED:
    _finish(files, journal)
    return f'finished the rewrite a stopped run had committed: {shown}'
  _undo(files, journal)
  return f'undid the rewrite a run stopped before committing: {shown} kept'


@contextlib.contextmanager
def _held_interrupts(message: str) -> Iterator[None]:
  """SIGINT/SIGTERM/SIGHUP say ``message`` at once and take effect
  (KeyboardInterrupt) once the block is done."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []

  def hold(signum, frame):
    del frame
    if not received:
      _say(message)
    received.append(signum)

  previous = _handle(hold, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
  try:
    yield
  finally:
    _restore(previous)
  if received:
    raise KeyboardInterrupt(
        f'stopped by {signal.Signals(received[0]).name}, after the write')
