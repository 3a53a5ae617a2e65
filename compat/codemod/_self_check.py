"""What ``migrate`` checks in its own result before it writes a file.

``problems(old, new)`` lists why a rewritten module must not be written:
it does not parse, or a name that an import the rewrite removed bound is
still used (a NameError once it runs). ``migrate`` rolls such a file back
(it stays as it was) and reports each problem. The checks are per module
and mechanical; a check over a whole flow (no value a rewritten producer
makes reaches an unrewritten consumer) belongs beside them.

Stdlib only.
"""

import ast
import re
from typing import NamedTuple, Optional

from compat.codemod import _codes
from compat.codemod import _names
from compat.codemod import _walk


class Problem(NamedTuple):
  line: int  # in the original source
  reason: str


def _import_bindings(tree: ast.Module) -> dict:
  """Local name -> line of the first import statement binding it."""
  bound: dict[str, int] = {}
  for node in _walk.statements(tree):  # imports are statements
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        if alias.name == '*':
          continue
        local = alias.asname or alias.name.partition('.')[0]
        bound.setdefault(local, node.lineno)
  return bound


def dangling_names(old_tree: ast.Module, new_tree: ast.Module,
                   new_text: Optional[str] = None) -> list:
  """Uses, in the new module, of names only a removed import bound.
  ``new_text``: the new module's source, where given: a name it does not
  hold is used nowhere, and the module is not walked for it."""
  old = _import_bindings(old_tree)
  removed = set(old) - set(_import_bindings(new_tree))
  if new_text is not None:  # a Name is a word of the text
    removed = {name for name in removed
               if re.search(rf'\b{re.escape(name)}\b', new_text)}
  if removed:
    removed -= _names.bindings_of(new_tree).assigned
  found = {}
  for node in _walk.nodes(new_tree) if removed else ():
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and (
        node.id in removed):
      found.setdefault(node.id, node.lineno)
  return [Problem(old[name], _codes.filled_note(_codes.IMPORT_STILL_USED,
                                               name=name, line=line))
          for name, line in sorted(found.items())]


def problems(old: bytes, new: bytes, path: str = '<string>',
             old_tree: Optional[ast.Module] = None,
             trees: Optional[dict] = None) -> list:
  """Why ``new`` (the rewrite of ``old``) must not be written; [] if fine.
  ``old_tree``: ``old`` parsed, where the caller has it; ``trees``: where
  ``new``'s tree is kept, by its source, for the caller's re-scan of it."""
  try:
    new_tree = ast.parse(new, filename=path)
    if trees is not None:
      trees[new] = new_tree
  except SyntaxError as e:
    return [Problem(1, _codes.filled_note(_codes.REWRITE_UNPARSED,
                                          line=e.lineno, error=e.msg))]
  return dangling_names(old_tree or ast.parse(old, filename=path), new_tree,
                        new.decode('utf-8', 'replace'))
