"""Which files ``scan`` can skip without looking: the words every finding
needs.

Most modules of a research tree use neither flax.optim nor a removed API,
and walking their syntax trees costs more than parsing them. Each kind of
finding needs some word in the source: a name it resolves spells each
part of its path (``jax.ops.index`` needs ``index`` and ``ops``, as
attributes or in an import), a method finding needs the method's name,
a flax.optim construct needs an import that spells ``optim`` (or a name
another scanned module re-exports). A module without any of them has no
finding; ``found_words`` is empty only then. In one with some, a finding
is where one is spelled (``found_words`` says which; ``lines_spelling``
where). The words come from the tables
the rules read (the rule table's detection keys, ``_removals``' rows, scan's
checkpoint functions), so a new row brings its word; a new kind of matcher
must add its own here (tests/test_scan_codes.py lists the matchers it
knows). Stdlib only.
"""

import functools
import os
import re
from typing import Iterator, NamedTuple

from compat import _lazy
from compat.codemod import _names
from compat.codemod import _removals

# (read without running legacy_optim/__init__, which imports jax)
_rule_table = _lazy.module_without_package('legacy_optim', '_rule_table')

# The ``_removals.match`` helpers and the words each needs; a test fails
# when ``_removals`` grows a matcher not listed here.
MATCHER_WORDS = {
    # from jax.config import config: _JAX_CONFIG; flax.nn: _mentions_flax_nn;
    # flax.training.lr_schedule: by its path (each part spelled)
    '_match_import': (),
    '_match_lr_schedule_from': (),
    '_match_lr_schedule_import': (),
    '_match_pop_unpacking': ('pop',),
    '_match_positional_mask': (),  # by _KV_ATTENTION's names
    '_match_moved_module_from': (),  # by _MOVED_MODULES' names
    '_match_at_method': (),  # by _AT_METHODS' names
    '_match_frozen_copy': ('copy',),
}
# What those two matchers need after the method's name: ``x.copy({...})``
# (one dict display, maybe parenthesized), ``x.pop('key')`` (one string):
# ``.copy()`` and ``.pop(0)`` are no finding (``_called_as_matched``).
_CALLED_WITH = {
    'copy': r'\((?:{gap}\()*{gap}\{{',
    'pop': r'\((?:{gap}\()*{gap}[rRuU]?[\'"]',
}
# The flax.optim rules' detection keys (the rule table's): words a finding
# needs anywhere (``traverse_util``), packages it needs imported (the
# bridges') and the Optimizer's step methods, needed as an attribute's name.
_RULE_WORDS = tuple(word for rule in _rule_table.RULES for word in rule.words)
_RULE_METHODS = tuple(method for rule in _rule_table.RULES
                      for method in rule.methods)
_RULE_PACKAGES = tuple(package for rule in _rule_table.RULES
                       for package in rule.packages)
_SCAN_WORDS = (*_RULE_WORDS, *_RULE_METHODS, *_RULE_PACKAGES)
# Words whose findings read them only as an attribute's name (the legacy
# methods, ``x.copy({...})``, ``rest, params = v.pop('params')``: the
# matchers test ``node.func.attr``): ``copy`` in a licence header, or a
# local ``pop``, is not one. A word the tables also give stays plain.
_METHOD_WORDS = ('copy', 'pop', *_RULE_METHODS)


def _last(path: str) -> str:
  return path.rpartition('.')[2]


class Triggers(NamedTuple):
  words: frozenset  # any of them: maybe a finding
  # checkpoint functions: a finding needs an optimizer among the arguments,
  # which without flax.optim means a name such as ``opt_state``
  checkpoint_words: frozenset
  # removed ``a.W`` whose today's name keeps W after another module M
  # (``jax.tree_map``: ``tree_util.tree_map``; ``jax.partial``:
  # ``functools.partial``): W -> M. Spelled after ``M.``, W is today's.
  today_words: dict
  # ``_METHOD_WORDS``: a finding needs ``.W``
  attribute_words: frozenset = frozenset()
  # W of ``words`` that only the removals' dotted paths give -> the other
  # parts of each such path (``jax.ops.index``: ``index`` -> [{jax, ops}]):
  # a finding needs every part of one of them (``_spells_path``).
  path_parts: dict = {}
  # W of ``words`` that a finding reads only as an imported package's name:
  # spelled right after a dot it is another's (``tf.compat.v1``).
  packages: frozenset = frozenset()
  # ``words``, ``checkpoint_words``, ``today_words`` and
  # ``attribute_words`` as ``_groups`` (every text is looked through once
  # per group, not once per word: the eight ``tree_...``).
  word_groups: tuple = ()
  checkpoint_groups: tuple = ()
  today_groups: tuple = ()
  attribute_groups: tuple = ()


# The fewest letters a group's words share (``_groups``): a shorter
# prefix is in most texts and tells nothing.
_SHARED_PREFIX = 4


def _groups(words) -> tuple:
  """``words`` as ``(prefix, words)`` groups, each of the words (sorted)
  sharing one prefix of ``_SHARED_PREFIX`` letters or more (a word alone,
  its own): a text without the prefix spells none of them (the
  traversals' nine ``Travers...``, the five ``index_...``)."""
  found: list = []
  for word in sorted(words):
    if found:
      shared = os.path.commonprefix([found[-1][0], word])
      if len(shared) >= _SHARED_PREFIX:
        found[-1] = (shared, found[-1][1] + (word,))
        continue
    found.append((word, (word,)))
  return tuple(found)


def _today_modules() -> dict:
  """``Triggers.today_words`` from the tables of moved and renamed names
  (a word some removed path also spells after M stays a plain word)."""
  removed: dict = {}
  for old in (*_removals._RENAMED, *_removals._MOVED):
    removed.setdefault(_last(old), set()).add(old.rpartition('.')[0])
  today: dict = {}
  for old, new in (*_removals._RENAMED.items(), *_removals._MOVED.items()):
    module, _, word = new.rpartition('.')
    if word == _last(old) and module:
      today.setdefault(word, set()).add(_last(module))
  return {word: modules.pop() for word, modules in today.items()
          if len(modules) == 1 and not any(
              p == m or p.endswith('.' + m) for p in removed[word]
              for m in modules)}


def _parts_by_word(paths) -> dict:
  """W -> the other parts of each of ``paths`` ending in W."""
  parts: dict = {}
  for path in paths:
    *others, word = path.rstrip('()').split('.')
    parts.setdefault(word, []).append(frozenset(others))
  return parts


def triggers(checkpoint_functions) -> Triggers:
  """The words a finding outside flax.optim's imports may need (``nn``:
  ``_mentions_flax_nn``)."""
  # The removals found by resolving a name or reading an import's module.
  # scan reads a module that cannot name flax.optim (the only ones
  # ``found_words`` is asked about) without its package: relative imports
  # resolve to nothing, the others bind only absolute paths they spell,
  # and attributes spell the rest, so reaching such a path spells each of
  # its parts.
  resolved = _parts_by_word((
      *_removals._MOVED, *_removals._NO_OPS, *_removals._KV_ATTENTION,
      *_removals._MOVED_MODULES, *_removals._AT_METHODS,
      *_removals._RENAMED, _removals.LR_SCHEDULE))
  today = _today_modules()
  tables = set(resolved) - set(today)  # the words of the tables
  tables |= {_last(p) for p in _removals._REPORTED if _last(p) != 'nn'}
  tables |= set(_names.TRAVERSALS)
  attribute = frozenset(_METHOD_WORDS) - tables
  others = set(_SCAN_WORDS) | set(_names.TRAVERSALS)  # read by name alone
  for needed in MATCHER_WORDS.values():
    others |= set(needed)
  words = frozenset((tables | others) - attribute)
  checkpoint_words = frozenset(_last(p) for p in checkpoint_functions)
  return Triggers(words, checkpoint_words, today, attribute,
                  {word: resolved[word] for word in words - others
                   if word in resolved}, frozenset(_RULE_PACKAGES),
                  _groups(words), _groups(checkpoint_words), _groups(today),
                  _groups(attribute))


# ``flax.nn`` is reported through an attribute ``.nn`` on flax (``jax.nn``
# is jax's: not it, unless the module calls flax ``jax``) or an import of
# ``nn`` from flax. ``nn`` alone is in every linen module (``import
# flax.linen as nn``), so these look closer. Between tokens: spaces, a
# backslash continuation, a comment. A comment runs to its line's end and
# no shorter: two readings of one '#...' would make a run of '#'s (a banner)
# backtrack exponentially where no match follows.
_GAP = r'(?:\s|\\\n|#[^\n]*(?:\n|\Z))*'
# A pattern below that starts a word is written without the leading \b
# (sre then scans for its first letters instead of trying every position,
# ten to forty times faster here) and found through ``_word_starts``.
_ANY_ATTRIBUTE_NN = re.compile(rf'\.{_GAP}nn\b')
_FLAX_AS_JAX = re.compile(r'as\s+jax\b')
_FROM_FLAX_IMPORT = re.compile(
    rf'from{_GAP}flax{_GAP}import{_GAP}(\([^)]*\)|[^\n;]*(?:\\\n[^\n;]*)*)')
_ALIAS = re.compile(r'\bas\s+\w+')
_JAX_CONFIG = re.compile(rf'jax{_GAP}\.{_GAP}config\b')


def _is_word_character(character: str) -> bool:
  return character.isalnum() or character == '_'  # sre's \w on str


def _word_starts(pattern: re.Pattern, text: str) -> Iterator[re.Match]:
  """The matches ``findall`` gives for ``\\b`` + ``pattern`` (a pattern
  that begins with a word character): each match of ``pattern`` where no
  word character precedes it."""
  match = pattern.search(text)
  while match:
    start = match.start()
    if start and _is_word_character(text[start - 1]):
      match = pattern.search(text, start + 1)
      continue
    yield match
    match = pattern.search(text, max(match.end(), start + 1))


def _found(pattern: re.Pattern, text: str) -> bool:
  """``re.search(r'\\b' + pattern, text)``, fast (``_word_starts``)."""
  return next(_word_starts(pattern, text), None) is not None


def _after_jax(text: str, dot: int) -> bool:
  """Whether the word ``jax`` ends right before ``text[dot]``."""
  start = dot - 3
  return start >= 0 and text[start:dot] == 'jax' and not (
      start and _is_word_character(text[start - 1]))


def _mentions_flax_nn(text: str) -> bool:
  # Without flax.optim only imports bind names: one of flax spells it
  # (``tf.nn`` in a module that imports no flax is TensorFlow's).
  if 'nn' not in text or not spells(text, 'flax'):
    return False
  # ``.nn`` after anything but the word jax, or ``import flax as jax``
  dots = []
  match = _ANY_ATTRIBUTE_NN.search(text)
  while match:
    dots.append(match.start())
    match = _ANY_ATTRIBUTE_NN.search(text, match.start() + 1)
  if dots and (not all(_after_jax(text, dot) for dot in dots) or
               _found(_FLAX_AS_JAX, text)):
    return True
  for found in _word_starts(_FROM_FLAX_IMPORT, text):
    names = found.group(1)
    if '#' in names or re.search(r'\bnn\b', _ALIAS.sub('', names)):
      return True
  return False


# ``_names.OPTIMIZER_NAME`` (an identifier with ``optimizer`` in it, or
# ``opt``/``optim`` as one of its ``_``-separated parts) read on the whole
# text: a letter or digit next to the part ends it, ``_`` does not.
_OPTIMIZER_NAME_IN_TEXT = re.compile(
    r'optimizer|(?<![a-z0-9])opt(?:im)?(?![a-z0-9])', re.IGNORECASE)


def _has_optimizer_name(text: str) -> bool:
  return 'opt' in text.lower() and bool(_OPTIMIZER_NAME_IN_TEXT.search(text))


def _removed_words(text: str, given: Triggers) -> list:
  """The words of ``given.today_words`` (W -> M) that may be the removed
  name: spelled other than as ``M.W``, or M is an alias (``import jax as
  tree_util``). Without flax.optim, only imports bind names
  (``ModuleNames`` collects no assignment there), so ``M.W`` is today's
  name unless one says ``as M``."""
  found = []
  for prefix, words in given.today_groups:
    if prefix not in text:
      continue
    for word in words:
      if word != prefix and word not in text:
        continue
      module = given.today_words[word]
      if module in text and _found(_alias(module), text):
        if _found(_whole(word), text):
          found.append(word)
      elif text.count(word) != text.count(f'{module}.{word}') and sum(
          1 for _ in _word_starts(_whole(word), text)) > sum(
              1 for _ in _word_starts(_after(module, word), text)):
        found.append(word)  # (every ``word`` right after ``module.``: today's)
  return found


# Patterns that start a word, for ``_word_starts`` (no leading \b).
@functools.lru_cache(maxsize=None)
def _alias(module: str) -> re.Pattern:
  return re.compile(rf'as\s+{module}\b')


@functools.lru_cache(maxsize=None)
def _after(module: str, word: str) -> re.Pattern:
  """``module.word`` (each match spells ``word`` once)."""
  return re.compile(rf'{module}{_GAP}\.{_GAP}{word}\b')


def _identifier(word: str) -> re.Pattern:
  """``word`` as a whole identifier (for ``_word_starts``); compiled
  through ``re``'s own bounded cache: a module's names, which a run meets
  by the thousand, are asked too (``lines_spelling``)."""
  return re.compile(rf'{word}\b')


# The tables' words, each compiled once.
_whole = functools.lru_cache(maxsize=None)(_identifier)


def spells(text: str, word: str) -> bool:
  """Whether ``text`` has ``word`` as a whole identifier."""
  return word in text and _found(_whole(word), text)


def _spells_path(text: str, word: str, path_parts: dict) -> bool:
  """Whether ``text`` spells ``word`` and, where it ends dotted paths
  (``path_parts``), every other part of one of them."""
  return spells(text, word) and (word not in path_parts or any(
      all(spells(text, part) for part in parts)
      for parts in path_parts[word]))


def _spells_package(text: str, word: str) -> bool:
  """Whether ``text`` has ``word`` as a whole identifier somewhere other
  than right after a dot (spaces and continuations between; a comment
  between them counts as a place, a rare spelling read conservatively)."""
  for found in _word_starts(_whole(word), text):
    before = found.start() - 1
    while before >= 0 and text[before] in ' \t\\\n':
      before -= 1
    if before < 0 or text[before] != '.':
      return True
  return False


def _spells_word(text: str, word: str, given: 'Triggers') -> bool:
  """Whether ``text`` spells ``word`` of ``given.words`` as a finding
  needs it (``_spells_path``; a package's name not as an attribute)."""
  return _spells_path(text, word, given.path_parts) and (
      word not in given.packages or _spells_package(text, word))


@functools.lru_cache(maxsize=None)
def _attribute_backwards(word: str) -> re.Pattern:
  """``\\.{_GAP}word\\b`` read backwards, on the reversed text (a text
  matches one where its reverse matches the other): it starts with the
  word's last letter, which sre scans for, not with a dot, which it would
  try at every one (a third of scan's prefilter time: ``copy`` is in
  every licence header). The ``\\b`` is ``_word_starts``'. Backwards a comment
  ends at a ``#``: of a run of them only the one a gap or the dot follows
  goes on, so a banner is read in one pass, as forwards."""
  gap = r'(?:\s|\n\\|(?:\n|\A)[^\n]*#)*'  # _GAP backwards
  return re.compile(rf'{re.escape(word[::-1])}{gap}\.')


@functools.lru_cache(maxsize=None)
def _called_as_matched(word: str) -> re.Pattern:
  """What follows ``word`` where a matcher may find its call (any call
  where ``_CALLED_WITH`` does not say)."""
  return re.compile(_GAP + _CALLED_WITH.get(word, '').format(gap=_GAP))


def _attributes_spelled(text: str, groups) -> list:
  """The words of ``groups`` (``_groups``) that ``text`` has as an
  attribute's name (called as its matcher needs, ``_CALLED_WITH``)."""
  backwards = None
  found = []
  for prefix, words in groups:
    if prefix not in text:
      continue
    for word in words:
      if word != prefix and word not in text:
        continue
      backwards = text[::-1] if backwards is None else backwards
      after = _called_as_matched(word)
      # (the reversed word starts where the word ends)
      if any(after.match(text, len(text) - each.start()) for each in
             _word_starts(_attribute_backwards(word), backwards)):
        found.append(word)
  return found


def found_words(text: str, given: Triggers) -> frozenset:
  """The words of ``given`` (``triggers()``) that ``text`` spells as a
  finding needs them, ``nn`` where it mentions flax.nn and ``config``
  where it imports jax's config: empty only when no finding can be there.
  Only for a module that cannot name flax.optim (scan looks at every other
  one). Each finding there is at a node that spells one of them, or a
  name an import binds to a path ending in one (``from jax.ops import
  index_update as update``): ``scan`` checks only the nodes on the lines
  that do (``lines_spelling``)."""
  found = [word for prefix, words in given.word_groups if prefix in text
           for word in words if _spells_word(text, word, given)]
  found += _attributes_spelled(text, given.attribute_groups)
  if 'config' in text and _found(_JAX_CONFIG, text):
    found.append('config')
  if _mentions_flax_nn(text):
    found.append('nn')
  found += _removed_words(text, given)
  checkpoints = [word for prefix, words in given.checkpoint_groups
                 if prefix in text for word in words if spells(text, word)]
  if checkpoints and _has_optimizer_name(text):
    found += checkpoints
  return frozenset(found)


def lines_spelling(text: str, words) -> list:
  """The numbers of the lines of ``text`` (as the parser counts them,
  sorted) where one of ``words`` is a whole identifier, in code, a string
  or a comment alike."""
  if '\r' in text:  # (a line of the parser's ends at any of the three)
    text = text.replace('\r\n', '\n').replace('\r', '\n')
  starts = sorted(found.start() for word in words if word in text
                  for found in _word_starts(_identifier(word), text))
  lines: list = []
  line, at = 1, 0
  for start in starts:
    line += text.count('\n', at, start)
    at = start
    if not lines or lines[-1] != line:
      lines.append(line)
  return lines
