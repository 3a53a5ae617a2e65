"""Per-file work spread over forked processes that share what is read.

``scan -j N`` first reads every file and builds what crosses modules (the
re-export table, the project's model) in this process; each file's own
work (parse, walk) then runs in N processes. Forked workers inherit those
inputs as they are in memory: nothing is pickled or read twice, so their
output is the one this process would give. Only each share's result (a
few findings) travels back. Stdlib only.
"""

import concurrent.futures
import multiprocessing
import sys
import threading
from typing import Any, Callable, Sequence

# What the work reads in a worker: set before the fork, inherited.
_INPUTS: list = [None]


def can_fork() -> bool:
  """Whether workers can be forked from here: a fork copies one thread,
  so a process running others (jax starts its runtime's) is not forked."""
  return ('fork' in multiprocessing.get_all_start_methods() and
          'jax' not in sys.modules and threading.active_count() == 1)


def shares(count: int, jobs: int) -> list:
  """``range(count)`` in contiguous slices, a few per process (a slow file
  delays one small slice, not a whole process's part)."""
  size = max(1, -(-count // (jobs * 4)))
  return [range(start, min(start + size, count))
          for start in range(0, count, size)]


def _run_share(task) -> Any:
  work, share = task
  return work(_INPUTS[0], share)


def map_shares(work: Callable[[Any, range], Any], inputs: Any, count: int,
               jobs: int) -> Sequence:
  """``[work(inputs, share) for share in shares(count, jobs)]``, in that
  order, in ``jobs`` forked processes (``work``: a module-level function;
  its results are pickled back), or here where ``jobs`` is 1 or workers
  cannot be forked."""
  if jobs <= 1 or not can_fork():
    return [work(inputs, range(count))]
  _INPUTS[0] = inputs
  try:
    with concurrent.futures.ProcessPoolExecutor(
        jobs, multiprocessing.get_context('fork')) as pool:
      return list(pool.map(_run_share, [(work, share) for share in
                                        shares(count, jobs)]))
  finally:
    _INPUTS[0] = None
