"""The flax 0.5.3 oracle interpreter, for the tests that run it.

Without it (CI, a contributor's machine) those tests skip with this reason;
``REQUIRE_ORACLE=1`` (``tox -e checkpoint-fixtures``) makes its absence fatal.
"""

import os
import pathlib

import pytest

PYTHON = os.environ.get('ORACLE_PYTHON', '/opt/venvs/oracle/bin/python')


def require() -> str:
  """The interpreter's path; skips the calling test when it is missing."""
  if not pathlib.Path(PYTHON).exists() and not os.environ.get(
      'REQUIRE_ORACLE'):
    pytest.skip(f'flax 0.5.3 oracle interpreter not found at {PYTHON} '
                '(set ORACLE_PYTHON; REQUIRE_ORACLE=1 makes this fatal)')
  return PYTHON
