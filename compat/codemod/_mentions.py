"""Where the project's text may call one of its functions from outside
the code migrate follows: a place spelling its name in another module, a
notebook or another text file (configs, scripts, docs). A part of
``_project.Model``. Stdlib only.
"""

import re
from typing import Optional

from compat.codemod import _codes
from compat.codemod import _project_index


class Mentions:
  """Places naming a function (a part of ``_project.Model``)."""

  def _init_mentions(self, other_files):
    self._other_files = other_files
    self._other_texts: Optional[list] = None
    self._mentions: dict = {}  # (path, line, name) -> what mention gave

  def mention(self, node, path: str) -> Optional[str]:
    """Why code outside its definition may call the function or class
    ``node`` of the module at ``path``: ``named at path:line``, the first
    place the project spells its name (a whole word, comments and strings
    too; a notebook's path alone) in its Python modules, notebooks and
    other text files (``other_files``), or that files were passed one by
    one; None: nothing may."""
    if self._other_files is None:
      return _codes.note(_codes.SINGLE_FILES)
    key = (path, node.lineno, node.name)
    if key not in self._mentions:  # asked again by the plan and its notes
      self._mentions[key] = self._first_mention(node, path)
    return self._mentions[key]

  def mention_elsewhere(self, node, path: str) -> Optional[str]:
    """``named at path:line`` for the first place outside the module at
    ``path`` that spells the name of its function ``node`` (as
    ``mention``): for a notebook's function, only another notebook that
    does not define that name (one that may continue its kernel) counts;
    None where none does."""
    key = (path, node.lineno, node.name, 'elsewhere')
    if key not in self._mentions:
      self._mentions[key] = self._first_mention(
          node, path, elsewhere=True,
          notebooks=_project_index.is_notebook(path))
    return self._mentions[key]

  def called_elsewhere(self, node, path: str) -> Optional[str]:
    """Where a module other than ``path`` may call its module function
    ``node``: a reference the project resolves to it (``_params``), or for
    a function without parameters, a place spelling its name
    (``mention_elsewhere``); None: none may."""
    mine = self._model_ids(node, path)
    if mine and mine <= self.reference_candidates:
      where = [self.referenced_elsewhere[key] for key in mine
               if key in self.referenced_elsewhere]
      return _codes.note(_codes.CALLED_FROM_ANOTHER_MODULE) if where else None
    return self.mention_elsewhere(node, path)

  def used_otherwise_elsewhere(self, node, path: str) -> Optional[str]:
    """``path:line`` where another module refers to the module function
    ``node`` of ``path`` other than by calling it (``jax.jit(m.step)``, a
    callback): what it returns goes where migrate does not see."""
    for key in self._model_ids(node, path):
      for reference in self.referenced_elsewhere.get(key, ()):
        if reference.call is None:
          return f'{reference.path}:{reference.node.lineno}'
    return None

  def _first_mention(self, node, path: str, elsewhere=False,
                     notebooks=False) -> Optional[str]:
    word, lines = node.name, range(node.lineno, node.end_lineno + 1)
    escaped = re.escape(word.encode())
    # A notebook defining (or assigning) that name calls its own; one
    # naming it as an attribute (``training.train_step``) calls a module's.
    defining = re.compile(rb'\bdef\s+%s\s*\(|(?<![.\w])%s\s*=(?!=)' % (
        escaped, escaped))
    pattern = re.compile((rb'(?<![.\w])' if notebooks else rb'\b') + escaped +
                         rb'\b')
    if self._other_texts is None and self._other_files is not None:
      self._other_texts = list(self._other_files())
    for shown, text in [*sorted(self.sources.items()),
                        *(self._other_texts or ())]:
      if word.encode() not in text or (elsewhere and shown == path) or (
          notebooks and not (_project_index.is_notebook(shown) and (
              defining.search(text) is None))):
        continue
      for found in pattern.finditer(text):
        at = text.count(b'\n', 0, found.start()) + 1
        if shown != path or at not in lines:
          return 'named at ' + (shown if _project_index.is_notebook(shown) else
                                f'{shown}:{at}')
    return None
