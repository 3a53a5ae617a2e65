#!/usr/bin/env python3
"""The ``flax-optim-compat-scan`` pre-commit hook (``language: script``).

Runs ``flax-optim-compat scan`` from the hook's clone of this repository
with the interpreter on the PATH, installing nothing: the scanner needs only
the standard library (and ``tomli`` on Python 3.10, only to read a
``[tool.flax-optim-compat]`` section). Arguments are scan's: pre-commit
appends the staged Python files.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from compat.codemod import scan  # noqa: E402  (after the path is set)

if __name__ == '__main__':
  sys.exit(scan.main(sys.argv[1:]))
