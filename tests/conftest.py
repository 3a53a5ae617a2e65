"""Keeps the default test run within its budget (about 4 minutes, 1.5 GB).

* Every test module compiles its own small XLA programs; jax (and the eager
  kernel cache) keep them in process-wide caches, which would hold some
  2.7 GB by the end of the run. Dropping them between modules costs a few
  recompiles of shared helpers.
* The multi-device and multi-process cases run in child processes
  (``_devices.py``); they start right after collection, one module at a
  time, and use the second core while this process runs the other modules.
"""

import ctypes
import ctypes.util
import gc

import _devices
import jax
import pytest

from legacy_optim import eager


@pytest.fixture(scope='module', autouse=True)
def _drop_compiled_programs_after_each_module():
  yield
  jax.clear_caches()
  eager.clear_cache()
  gc.collect()
  _return_freed_memory_to_the_system()


# Looked up once: find_library runs external tools (ldconfig) on Linux.
_LIBC_NAME = ctypes.util.find_library('c')
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None


def _return_freed_memory_to_the_system():
  """glibc keeps freed heap pages; without this the RSS only ever grows."""
  if _LIBC is not None and hasattr(_LIBC, 'malloc_trim'):
    _LIBC.malloc_trim(0)


def pytest_collection_finish(session):
  """Starts the multi-device child processes the selected tests wait for."""
  _devices.start_for({
      str(item.path) for item in session.items
      if 'outcomes' in getattr(item, 'fixturenames', ())})

