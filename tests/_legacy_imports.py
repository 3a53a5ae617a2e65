"""What migrated code must not import: flax.optim, this library's modules."""

import ast

LEGACY_MODULES = ('flax.optim', 'legacy_optim', 'compat')


def legacy_imports(source: bytes) -> list:
  """The dotted names ``source`` imports from ``LEGACY_MODULES``."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      found += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
      found += [f'{node.module}.{a.name}' for a in node.names]
  return [name for name in found if name.startswith(LEGACY_MODULES)]
