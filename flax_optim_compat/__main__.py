"""``python -m flax_optim_compat COMMAND``: the ``flax-optim-compat`` command.

``python -m`` puts the current directory first on ``sys.path``, so in a
project with its own ``compat`` or ``legacy_optim`` those would be imported
instead of this library's. The entry is dropped here, as ``python -P`` does,
before anything of the library is imported: this form then finds the same
modules as the console script. (The commands read files by path; none imports
code from the current directory.)
"""

import os
import sys


def _drop_current_directory() -> None:
  if sys.flags.safe_path or not sys.path:
    return
  here = os.path.abspath(sys.path[0] or os.curdir)
  package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  # Run from a source checkout, the current directory holds the library.
  if here == os.getcwd() and here != package_root:
    del sys.path[0]


_drop_current_directory()

from compat import cli

sys.exit(cli.main())
