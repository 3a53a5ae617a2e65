"""Each flax.optim member name, class mapping, code and replacement text is
written in one place: the rule table, legacy_optim/_rule_table.py.

compat/codemod reads the member names through ``_members``' constants; a
member name written as a string in compat/codemod (``'target'``,
``b'apply_gradient'``) is a second copy of the fact, so this test names it.
Only whole strings count: prose that mentions a member (a docstring, a note)
is not a copy of the name. The same holds for the table's codes, titles,
guide sections and replacement texts across the packages and scripts.
"""

import ast
import pathlib
import re

import pytest

from compat.codemod import _members
from compat.codemod import _prefilter
from legacy_optim import _rule_table

CODEMOD = pathlib.Path(_members.__file__).resolve().parent
# The table lives outside compat/codemod: every module there only reads it.
TABLE = pathlib.Path(_rule_table.__file__).resolve()


def _member_literals(path: pathlib.Path) -> list:
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if not isinstance(node, ast.Constant):
      continue
    value = node.value
    if isinstance(value, bytes):
      value = value.decode('latin-1')
    if isinstance(value, str) and value in _member_names():
      found.append(f'{path.name}:{node.lineno}: {value!r}')
  return found


def _member_names() -> frozenset:
  return _members.NAMES | {_members.CHECKPOINT_TARGET}


def _counterpart_texts() -> set:
  """Each mapping's text and the dotted name it starts with."""
  return set(_members.CLASS_COUNTERPARTS.values()) | {
      _members.counterpart_path(name) for name in _members.CLASS_COUNTERPARTS}


def test_member_names_are_written_only_in_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path != TABLE:
      found += _member_literals(path)
  assert not found, ('flax.optim member names written in compat/codemod '
                     '(use _members\' constants, the rule table\'s): '
                     f'{found}')


# Members named by words other code uses too (``decode(..., 'replace')``,
# restore_checkpoint's ``step`` parameter): a literal of one counts where it
# is compared with an attribute's or keyword's name (``node.attr ==
# 'state'``) or listed with the table's names (``(_members.TARGET,
# 'state')``).
_NAME_READS = ('attr', 'arg')


def _common_word_literals(path: pathlib.Path) -> list:
  words = {_members.STATE, _members.REPLACE, _members.STEP}
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Compare) and any(
        isinstance(side, ast.Attribute) and side.attr in _NAME_READS
        for side in (node.left, *node.comparators)):
      candidates = list(ast.walk(node))
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(
        isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and
        e.value.id == '_members' for e in node.elts):
      candidates = node.elts
    else:
      continue
    found += [f'{path.name}:{c.lineno}: {c.value!r}' for c in candidates
              if isinstance(c, ast.Constant) and c.value in words]
  return found


def test_common_word_members_are_compared_only_through_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path != TABLE:
      found += _common_word_literals(path)
  assert not found, ('Optimizer members compared by a literal in '
                     'compat/codemod (use _members.STATE, REPLACE, '
                     f'STEP): {found}')


def test_class_mappings_are_written_only_in_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path == TABLE:
      continue
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
          node.value in _counterpart_texts()):
        found.append(f'{path.name}:{node.lineno}: {node.value!r}')
  assert not found, f'class mappings written outside the table: {found}'


def test_class_names_are_written_only_in_the_table():
  # The classes the mapping maps and the two more detection names.
  classes = set(_members.CLASS_COUNTERPARTS) | {
      _members.WEIGHT_NORM_CLASS, _members.REPLICATED_OPTIMIZER_CLASS}
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path == TABLE:
      continue
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Constant) and node.value in classes:
        found.append(f'{path.name}:{node.lineno}: {node.value!r}')
  assert not found, f'flax.optim class names written outside the table: {found}'


def test_every_member_has_one_row():
  names = [member.name for member in _members.MEMBERS]
  assert len(names) == len(set(names))
  assert {member.kind for member in _members.MEMBERS} <= {'method',
                                                          'attribute'}


# ---------------------------------------------------------------------------
# The rule table (legacy_optim/_rule_table.py): every code, title, guide section
# and replacement text is written there once; the codes table, the
# catalogue's REPLACEMENTS (the warnings' texts), the member vocabulary and
# the prefilter's words read it.

ROOT = TABLE.parent.parent
# Where a second copy would be one: the packages and the scripts (tests
# state expected values; prose in the guide and README is checked by
# tests/test_scan_codes.py).
_SOURCES = ('compat', 'legacy_optim', 'flax_optim_rules', 'scripts')
# A sentence of the table at least this long counts also inside a longer
# string (a message built around it); anything else only as a whole string.
_LONG = 30
_RULES_MODULE = 'flax_optim_rules'


def _table_texts() -> dict:
  """Each text the table holds -> what it is. A title that is one dotted
  name (``flax.optim.DynamicScale``) or a removal's old text (``from
  jax.config import config``, a ``_removals`` row's) is what detection
  matches too: only the other titles count."""
  texts = {}
  for rule in _rule_table.RULES:
    texts[rule.code] = f'{rule.code} (code)'
    if ' ' in rule.title and rule.title not in rule.removals:
      texts[rule.title] = f'{rule.code} (title)'
    if rule.replacement:
      texts[rule.replacement] = f'{rule.code} (replacement)'
  for member in _rule_table.MEMBERS:
    if member.replacement:
      texts[member.replacement] = f'.{member.name} (replacement)'
    if member.no_counterpart:
      texts[member.no_counterpart] = f'.{member.name} (note)'
  for name, text in {**_rule_table.COMMON_WORD_REPLACEMENTS,
                     **_rule_table.CLASS_COUNTERPARTS}.items():
    texts[text] = f'{name} (replacement)'
  texts[_rule_table.PICKLE_REPLACEMENT] = 'pickle (replacement)'
  texts[_rule_table.EITHER_LAYOUT_REPLACEMENT] = (
      'restore of a template (replacement)')
  texts[_rule_table.THROUGH_HELPER_REPLACEMENT] = (
      'through a helper (replacement)')
  texts[_rule_table.USER_RULE_REPLACEMENT] = 'user rule (replacement)'
  for fix in _rule_table.FIXES:
    texts.update(_template_pieces(fix.why or '', f'{fix.name} (why)'))
    texts.update(_template_pieces(fix.grounds, f'{fix.name} (grounds)'))
  texts.update(_template_pieces(_rule_table.HIDDEN_FIX_REASON,
                                'hidden fix (reason)'))
  for name in ('PROVEN_FIX_NOTE', 'UNSAFE_FIX_APPLIED_LINE',
               'UNSAFE_FIXES_HIDDEN_LINE',
               'UNSAFE_FIXES_APPLIED_HEADING', 'UNSAFE_FIXES_HELD_HEADING',
               'UNSAFE_FIXES_HIDDEN_HEADING'):
    texts.update(_template_pieces(getattr(_rule_table, name), name))
  for note in _rule_table.NOTES:
    texts.update(_template_pieces(note.text, f'{note.name} (note)'))
  for old, text in _rule_table.REMOVAL_FIXES.items():
    texts.update(_template_pieces(text, f'{old} (removal fix)'))
    if ' ' in old:  # (a dotted name is what detection matches too)
      texts[old] = f'{old} (removal)'
  for name, text in _rule_table.REMOVAL_TEMPLATES.items():
    texts.update(_template_pieces(text, f'{name} (removal template)'))
  for tier, text in _rule_table.TIER_REPLACEMENTS.items():
    texts.update(_template_pieces(text, f'{tier} tier (replacement)'))
  # (a copy may spell the module migrated code imports as a field)
  texts.update(_template_pieces(
      _rule_table.BY_NAME_REPLACEMENT.replace(_RULES_MODULE, '{rules}'),
      'rule by name (replacement)'))
  for section in _rule_table.SECTIONS:
    texts[section] = 'guide section'
  return texts


def _template_pieces(template: str, what: str) -> dict:
  """The long literal pieces of a text with fields (``{name}``): what an
  f-string copying it would hold between its fields."""
  return {piece: what for piece in re.split(r'\{\w+\}', template)
          if len(piece) >= _LONG}


def _copies(path: pathlib.Path, texts: dict) -> list:
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
      continue
    for text, what in texts.items():
      if node.value == text or (' ' in text and len(text) >= _LONG and
                                text in node.value):
        found.append(f'{path.relative_to(ROOT)}:{node.lineno}: {what}')
  return found


def test_codes_sections_and_replacement_texts_are_written_only_in_the_table():
  texts = _table_texts()
  found = []
  for package in _SOURCES:
    for path in sorted((ROOT / package).rglob('*.py')):
      if path.resolve() != TABLE:
        found += _copies(path, texts)
  assert not found, ('rule table facts written outside '
                     'legacy_optim/_rule_table.py (read them from it): '
                     f'{found}')


def test_the_prefilter_spells_no_detection_key_of_its_own():
  # Its flax.optim words are the table's detection keys and member names.
  keys = {key for rule in _rule_table.RULES
          for key in (*rule.words, *rule.methods, *rule.packages)
          } | _members.NAMES
  path = CODEMOD / '_prefilter.py'
  found = [f'{path.name}:{node.lineno}: {node.value!r}'
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Constant) and node.value in keys]
  assert not found, f'prefilter words written outside the table: {found}'
  assert set(keys) - _members.NAMES <= _prefilter.triggers(()).words


def test_every_member_names_a_rule_or_says_its_own_replacement():
  for member in _rule_table.MEMBERS:
    assert member.construct in _rule_table.BY_CONSTRUCT or (
        member.construct is None), member
    assert _rule_table.member_replacement(member), member
  # A rule's step methods are members of that rule (scan reports their
  # calls under the member's construct).
  for rule in _rule_table.RULES:
    for method in rule.methods:
      assert _members.construct_of(method) == rule.construct, method


def test_each_fix_names_a_rule_and_an_applicability():
  for fix in _rule_table.FIXES:
    assert fix.construct in _rule_table.BY_CONSTRUCT, fix
    assert fix.applicability in (_rule_table.SAFE, _rule_table.UNSAFE), fix
    assert fix.grounds, fix
    # Only a fix that is not always applied says why its place holds.
    assert bool(fix.why) == (fix.applicability == _rule_table.UNSAFE), fix


def test_only_an_unsafe_fix_states_an_assumption(monkeypatch):
  fix = _rule_table.FIXES_BY_NAME[_rule_table.GENERIC_TREE_WALKER]
  assert _rule_table.unsafe_assumption(
      fix.name, name='walk', where='m.py:3').startswith('walk() (m.py:3) ')
  monkeypatch.setitem(_rule_table.FIXES_BY_NAME, fix.name,
                      fix._replace(applicability=_rule_table.SAFE))
  with pytest.raises(ValueError, match='generic_tree_walker.*safe'):
    _rule_table.unsafe_assumption(fix.name, name='walk', where='m.py:3')


def test_a_safe_fix_states_what_is_proven_and_no_assumption():
  # A SAFE row is no wart: its grounds are what is proven, read by
  # proven_grounds; asking it for an assumption (or an unsafe row for a
  # proof) is refused.
  safe = _rule_table.FIXES_BY_NAME[_rule_table.GENERIC_TREE_WALKER_STATE_DICT]
  assert safe.applicability == _rule_table.SAFE
  proven = _rule_table.proven_grounds(safe.name, name='walk', where='m.py:3')
  assert proven.startswith('walk() (m.py:3) ') and 'proven' in proven
  with pytest.raises(ValueError, match='state_dict.*safe.*no assumption'):
    _rule_table.unsafe_assumption(safe.name, name='walk', where='m.py:3')
  with pytest.raises(ValueError, match='generic_tree_walker.*unsafe.*'
                     'proves nothing'):
    _rule_table.proven_grounds(_rule_table.GENERIC_TREE_WALKER, name='walk',
                               where='m.py:3')


def test_a_note_fills_a_field_called_name():
  # A note's fields are its own words (this one names the step's parameter
  # ``{name}``): filling one never collides with the note's name.
  assert _rule_table.filled_note(
      _rule_table.ESCAPE_STEP_UNPROVEN, value='tx', name='optimizer',
      step='train_step') == (
          '`tx` is not provably an optimizer and goes in as `optimizer` of '
          'the step train_step(), whose module migrates that parameter')


# ---------------------------------------------------------------------------
# A report's sentences (a note, a reason a flow is kept, a finding's
# replacement) are the table's NOTES and templates: a module of
# compat/codemod fills them in (``_codes.filled_note``) and writes no
# sentence of its own. A sentence is a string literal, or the literal part
# of an f-string, of at least this many plain lower-case words (a code
# template, ``'{x} if {y} is not None else {z}'``, has fewer).
_SENTENCE_WORDS = 5
_PLAIN_WORD = re.compile(r'[a-z]+[,:;.]?')
# The modules that still write sentences: their command line's help,
# errors, the report's layout and a file template (no reason of the
# table's).
_OWN_SENTENCES = {
    'migrate.py': 'command line, its errors, --prove\'s and the report\'s '
                  'layout',
    'scan.py': 'command line and its errors',
    '_config.py': 'configuration errors',
    '_notebook.py': 'errors reading a notebook',
    '_source.py': 'errors reading a source file',
    '_codes.py': 'selection errors, the guide table\'s header',
    '_user_rules.py': 'the template of the port test it writes',
}


def _docstrings(tree) -> set:
  return {id(node.body[0].value) for node in ast.walk(tree)
          if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                               ast.AsyncFunctionDef)) and node.body and
          isinstance(node.body[0], ast.Expr) and
          isinstance(node.body[0].value, ast.Constant)}


def _sentences(path: pathlib.Path) -> list:
  tree = ast.parse(path.read_text(), str(path))
  docstrings = _docstrings(tree)
  return [f'{path.name}:{node.lineno}: {node.value[:60]!r}'
          for node in ast.walk(tree)
          if isinstance(node, ast.Constant) and isinstance(node.value, str)
          and id(node) not in docstrings and
          sum(bool(_PLAIN_WORD.fullmatch(word))
              for word in node.value.split()) >= _SENTENCE_WORDS]


def test_report_sentences_are_written_only_in_the_table():
  found = []
  for path in sorted(CODEMOD.glob('*.py')):
    if path.name not in _OWN_SENTENCES:
      found += _sentences(path)
  assert not found, ('sentences written in compat/codemod (a note or '
                     'reason: write it in the rule table\'s NOTES and fill '
                     f'it with _codes.filled_note): {found}')
  # (a module whose sentences all moved comes off the list)
  assert not [name for name in _OWN_SENTENCES
              if not _sentences(CODEMOD / name)]
