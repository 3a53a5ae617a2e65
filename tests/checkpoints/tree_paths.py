"""Pure-Python helpers shared by the fixture scripts in both venvs.

Imports nothing but the standard library, so the flax 0.5.3 scripts
(generate_fixtures.py, oracle_restore.py) and today's tests can share it.
"""


def nest(flat: dict) -> dict:
  """{'a/b': x, 'a/c': y} -> {'a': {'b': x, 'c': y}}."""
  out = {}
  for path, value in flat.items():
    *parents, leaf = path.split('/')
    node = out
    for key in parents:
      node = node.setdefault(key, {})
    node[leaf] = value
  return out
