"""``[tool.flax-optim-compat]`` in ``pyproject.toml``, for scan and migrate.

Found as ruff finds ``[tool.ruff]``: from the directory of the paths given
(their common parent) upwards, the first ``pyproject.toml`` that has the
section; one without it is passed over. Keys::

  [tool.flax-optim-compat]
  exclude = ["build", "*_pb2.py"]  # added to --exclude
  select = ["FOC1"]                # codes or prefixes (default: all)
  ignore = ["FOC201"]
  tier = "exact"                   # migrate only: exact | stock

Command-line flags win over the file (``--select`` replaces ``select``).
An unknown key, a value of the wrong type or an unknown code is an error
naming the file and the key (exit status 2). Reads TOML with ``tomllib``
(Python >= 3.11) or ``tomli``; stdlib otherwise.
"""

import os
from typing import NamedTuple, Optional

try:
  import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli (install_requires has it)
  try:
    import tomli as tomllib  # type: ignore[no-redef]
  except ModuleNotFoundError:  # the pre-commit hook runs from a clone
    tomllib = None  # type: ignore[assignment]

from compat.codemod import _codes

SECTION = 'flax-optim-compat'
TIERS = ('exact', 'stock')
# key -> what it holds, for the error messages
_KEYS = {'exclude': 'a list of names or globs',
         'select': 'a list of codes or prefixes',
         'ignore': 'a list of codes or prefixes',
         'tier': f'one of {", ".join(TIERS)}'}


class ConfigError(ValueError):
  """A bad ``[tool.flax-optim-compat]`` (the message names file and key)."""


class Config(NamedTuple):
  path: Optional[str]  # the pyproject.toml read, or None
  exclude: tuple = ()
  select: Optional[tuple] = None  # None: every code
  ignore: tuple = ()
  tier: Optional[str] = None


def find(paths) -> Optional[str]:
  """The first ``pyproject.toml`` with the section, from the paths' common
  directory upwards."""
  directories = [os.path.abspath(p if os.path.isdir(p) else
                                 os.path.dirname(p) or '.') for p in paths]
  directory = os.path.commonpath(directories) if directories else (
      os.getcwd())
  while True:
    candidate = os.path.join(directory, 'pyproject.toml')
    if os.path.isfile(candidate) and _section(candidate) is not None:
      return candidate
    parent = os.path.dirname(directory)
    if parent == directory:
      return None
    directory = parent


def _section(path: str) -> Optional[dict]:
  if tomllib is None:
    raise ConfigError(f'{path}: reading it needs Python >= 3.11 or the '
                      'tomli package')
  try:
    with open(path, 'rb') as f:
      document = tomllib.load(f)
  except tomllib.TOMLDecodeError as e:
    raise ConfigError(f'{path}: not valid TOML: {e}') from e
  return document.get('tool', {}).get(SECTION)


def load(paths) -> Config:
  """The configuration that applies to ``paths`` (``Config(None)`` if no
  file has the section). Raises ConfigError."""
  path = find(paths)
  if path is None:
    return Config(None)
  table = _section(path)
  where = f'{path}: [tool.{SECTION}]'
  if not isinstance(table, dict):
    raise ConfigError(f'{where} must be a table')
  values = {}
  for key, value in table.items():
    if key not in _KEYS:
      raise ConfigError(f'{where}: unknown key {key!r}; expected one of: '
                        f'{", ".join(_KEYS)}')
    if key == 'tier':
      if value not in TIERS:
        raise ConfigError(f'{where}: tier = {value!r}; expected '
                          f'{_KEYS[key]}')
    elif not (isinstance(value, list) and
              all(isinstance(v, str) for v in value)):
      raise ConfigError(f'{where}: {key} = {value!r}; expected '
                        f'{_KEYS[key]}')
    else:
      value = tuple(value)
    if key in ('select', 'ignore'):
      try:
        _codes.expand(value, f'{where}: {key}')
      except _codes.SelectionError as e:
        raise ConfigError(str(e)) from e
    values[key] = value
  return Config(path, **values)
