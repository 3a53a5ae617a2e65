"""The stable code of every kind of finding: one table for scan and migrate.

A code names a kind of finding the way a linter's rule code does (ruff's
``F401``, TorchFix's ``TOR101``): it never changes meaning, so users can
``--select``/``--ignore`` it, write ``# noqa: FOC108`` and keep it in
``[tool.flax-optim-compat]``. ``FOC1xx``: flax.optim constructs (one per
``scan`` construct); ``FOC2xx``: the removed jax/flax APIs next to it (one
per group of ``_removals`` rows); ``FOC9xx``: findings about the scan itself.
The codes, titles and sections are the rule table's
(``legacy_optim._rule_table.RULES``); ``--list-codes``, the formats (SARIF
rules, GitHub titles) and the guide's table (scripts/guide_codes.py) all
read ``CODES``.

Stdlib only (the codemod never imports jax).
"""

import pathlib
import re
from typing import Optional

from compat import _lazy

# (read without running legacy_optim/__init__, which imports jax)
_rule_table = _lazy.module_without_package('legacy_optim', '_rule_table')

PREFIX = _rule_table.PREFIX
GUIDE_FILE = 'migration_guide.md'
# A wheel carries the guide as compat/migration_guide.md (setup.py copies it
# in); a checkout or an editable install has it at the repository's root.
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent  # compat/
GUIDE_CANDIDATES = (_PACKAGE_DIR / GUIDE_FILE,
                    _PACKAGE_DIR.parent / GUIDE_FILE)

# One row per code: ``code``, ``construct``, ``title``, ``section`` and, for
# FOC2xx, ``removals`` (the ``Removal.old`` texts of the rows it covers).
Code = _rule_table.Rule
CODES = _rule_table.RULES
BY_CODE = {c.code: c for c in CODES}
_BY_CONSTRUCT = _rule_table.BY_CONSTRUCT
UNUSED_NOQA = _BY_CONSTRUCT[_rule_table.UNUSED_NOQA].code
FLAX_OPTIM = PREFIX + '1'  # the prefix of the flax.optim constructs' codes
REMOVED_APIS = PREFIX + '2'  # the prefix of the other removed APIs' codes
_OTHER_REMOVAL = _BY_CONSTRUCT[_rule_table.REMOVED_API].code
_CODE = re.compile(rf'^{PREFIX}\d*$')

# The fixes resting on an assumption or a proof (the table's ``FIXES``:
# applicability, why the place holds the flow without the fix, what the fix
# assumes or what is proven).
GENERIC_TREE_WALKER = _rule_table.GENERIC_TREE_WALKER
GENERIC_TREE_WALKER_STATE_DICT = _rule_table.GENERIC_TREE_WALKER_STATE_DICT
DECORATED_FACTORY = _rule_table.DECORATED_FACTORY
HIDDEN_FIX_REASON = _rule_table.HIDDEN_FIX_REASON
unsafe_assumption = _rule_table.unsafe_assumption
proven_grounds = _rule_table.proven_grounds
PROVEN_FIX_NOTE = _rule_table.PROVEN_FIX_NOTE
fix_why = _rule_table.fix_why
UNSAFE_FIX_APPLIED_LINE = _rule_table.UNSAFE_FIX_APPLIED_LINE
UNSAFE_FIXES_HIDDEN_LINE = _rule_table.UNSAFE_FIXES_HIDDEN_LINE
UNSAFE_FIXES_APPLIED_HEADING = _rule_table.UNSAFE_FIXES_APPLIED_HEADING
UNSAFE_FIXES_HELD_HEADING = _rule_table.UNSAFE_FIXES_HELD_HEADING
UNSAFE_FIXES_HIDDEN_HEADING = _rule_table.UNSAFE_FIXES_HIDDEN_HEADING

# The texts of migrate's notes (the table's ``NOTES``), by name.
note = _rule_table.note
filled_note = _rule_table.filled_note
HELD = _rule_table.HELD
HELD_BY_ANOTHER_LINK = _rule_table.HELD_BY_ANOTHER_LINK
KEPT_WITH_FLOW = _rule_table.KEPT_WITH_FLOW
CALLED_NOWHERE = _rule_table.CALLED_NOWHERE
CHECKPOINT_LAYOUT = _rule_table.CHECKPOINT_LAYOUT
PICKLE_UNPROVEN = _rule_table.PICKLE_UNPROVEN
LAYOUT_KEY = _rule_table.LAYOUT_KEY
HAND_BUILT = _rule_table.HAND_BUILT
STARRED_ARGUMENTS = _rule_table.STARRED_ARGUMENTS
NO_LEARNING_RATE = _rule_table.NO_LEARNING_RATE
JAX_TAKEN = _rule_table.JAX_TAKEN
REPLICATE_LEFT = _rule_table.REPLICATE_LEFT
REPLICATE_ARGUMENTS = _rule_table.REPLICATE_ARGUMENTS
REPLICATE_AXIS_NOT_LITERAL = _rule_table.REPLICATE_AXIS_NOT_LITERAL
REPLICATE_AXES_DIFFER = _rule_table.REPLICATE_AXES_DIFFER
REPLICATE_CHECKPOINTED = _rule_table.REPLICATE_CHECKPOINTED
CREATE_ARGUMENTS = _rule_table.CREATE_ARGUMENTS
CREATE_FOCUS = _rule_table.CREATE_FOCUS
DEFINITION_MEMBER = _rule_table.DEFINITION_MEMBER
NOT_PROVABLY_OPTIMIZER = _rule_table.NOT_PROVABLY_OPTIMIZER
NOT_BUILT_IN = _rule_table.NOT_BUILT_IN
RATE_SET_TWICE = _rule_table.RATE_SET_TWICE
POSITIONAL_STARRED = _rule_table.POSITIONAL_STARRED
STOCK_SPREAD = _rule_table.STOCK_SPREAD
MULTI_KEYWORDS = _rule_table.MULTI_KEYWORDS
MULTI_NOT_PAIR = _rule_table.MULTI_NOT_PAIR
MULTI_TRAVERSAL_UNPROVEN = _rule_table.MULTI_TRAVERSAL_UNPROVEN
MULTI_DEFINITION_UNPROVEN = _rule_table.MULTI_DEFINITION_UNPROVEN
WRAPPED_UNPROVEN = _rule_table.WRAPPED_UNPROVEN
HAND_BUILT_DEF_UNPROVEN = _rule_table.HAND_BUILT_DEF_UNPROVEN
PARAMETER_PASSED_UNPROVEN = _rule_table.PARAMETER_PASSED_UNPROVEN
SELF_ATTRIBUTE_ALSO_TAKES = _rule_table.SELF_ATTRIBUTE_ALSO_TAKES
SELF_ATTRIBUTE_UNPROVEN = _rule_table.SELF_ATTRIBUTE_UNPROVEN
REEXPORTED = _rule_table.REEXPORTED
ESCAPE_STEP_STARRED = _rule_table.ESCAPE_STEP_STARRED
ESCAPE_STEP_UNPROVEN = _rule_table.ESCAPE_STEP_UNPROVEN
ESCAPE_TUPLE_ATTRIBUTE = _rule_table.ESCAPE_TUPLE_ATTRIBUTE
ESCAPE_TUPLE_GOES_INTO = _rule_table.ESCAPE_TUPLE_GOES_INTO
ESCAPE_TUPLE_INDEXED = _rule_table.ESCAPE_TUPLE_INDEXED
ESCAPE_REPLICATED_TREE = _rule_table.ESCAPE_REPLICATED_TREE
ESCAPE_TREE_UNPROVEN = _rule_table.ESCAPE_TREE_UNPROVEN
ESCAPE_TREE_READ_BACK = _rule_table.ESCAPE_TREE_READ_BACK
ESCAPE_GOES_INTO = _rule_table.ESCAPE_GOES_INTO
ESCAPE_NAME_ALSO_HOLDS = _rule_table.ESCAPE_NAME_ALSO_HOLDS
ESCAPE_NAME_HOLDS_TUPLE = _rule_table.ESCAPE_NAME_HOLDS_TUPLE
ESCAPE_STORED = _rule_table.ESCAPE_STORED
ESCAPE_UNPACKED_COUNT = _rule_table.ESCAPE_UNPACKED_COUNT
ESCAPE_UNPACKED_NESTED = _rule_table.ESCAPE_UNPACKED_NESTED
ESCAPE_UNPACKED_UNPROVEN = _rule_table.ESCAPE_UNPACKED_UNPROVEN
ESCAPE_PICKLED = _rule_table.ESCAPE_PICKLED
ESCAPE_TUPLE_ELEMENT = _rule_table.ESCAPE_TUPLE_ELEMENT
ESCAPE_RETURNED_UNFOLLOWED = _rule_table.ESCAPE_RETURNED_UNFOLLOWED
ESCAPE_RETURNER_USED = _rule_table.ESCAPE_RETURNER_USED
ESCAPE_RETURNER_USED_ELSEWHERE = _rule_table.ESCAPE_RETURNER_USED_ELSEWHERE
ESCAPE_RETURNS_MIXED = _rule_table.ESCAPE_RETURNS_MIXED
ESCAPE_RETURNS_TUPLE = _rule_table.ESCAPE_RETURNS_TUPLE
ESCAPE_PASSED = _rule_table.ESCAPE_PASSED
ESCAPE_TUPLE_ARGUMENTS = _rule_table.ESCAPE_TUPLE_ARGUMENTS
CALLED_NOWHERE_FACTORY = _rule_table.CALLED_NOWHERE_FACTORY
CALLED_NOWHERE_RULE = _rule_table.CALLED_NOWHERE_RULE
CREATE_NAME_ALSO_HOLDS = _rule_table.CREATE_NAME_ALSO_HOLDS
REPLICA_STEP_UNPROVEN = _rule_table.REPLICA_STEP_UNPROVEN
NO_TRAIN_STATE_COUNTERPART = _rule_table.NO_TRAIN_STATE_COUNTERPART
CALL_ARGUMENTS_UNMAPPED = _rule_table.CALL_ARGUMENTS_UNMAPPED
CALL_RESULT_NOT_UNPACKED = _rule_table.CALL_RESULT_NOT_UNPACKED
RESTORE_TEMPLATE_AGAIN = _rule_table.RESTORE_TEMPLATE_AGAIN
LEGACY_TREE_REPLICATED = _rule_table.LEGACY_TREE_REPLICATED
APPLY_GRADIENT_ARGUMENTS = _rule_table.APPLY_GRADIENT_ARGUMENTS
REPLICATE_PROBLEM = _rule_table.REPLICATE_PROBLEM
REPLICATED_UNPROVEN = _rule_table.REPLICATED_UNPROVEN
RATE_SET_ELSEWHERE = _rule_table.RATE_SET_ELSEWHERE
OVERRIDES_NOT_RATE = _rule_table.OVERRIDES_NOT_RATE
EVALUATED_TWICE = _rule_table.EVALUATED_TWICE
RESTORE_ONE_LAYOUT = _rule_table.RESTORE_ONE_LAYOUT
RESTORE_REFUSES = _rule_table.RESTORE_REFUSES
NOT_A_RESTORE = _rule_table.NOT_A_RESTORE
RESTORE_TARGET_UNKNOWN = _rule_table.RESTORE_TARGET_UNKNOWN
RESTORE_KEYWORDS = _rule_table.RESTORE_KEYWORDS
FROM_BYTES_BARE = _rule_table.FROM_BYTES_BARE
RESTORE_UNBOUND = _rule_table.RESTORE_UNBOUND
STOCK_TIER_LAYOUT = _rule_table.STOCK_TIER_LAYOUT
DEFINITIONS_NOT_LAID_OUT = _rule_table.DEFINITIONS_NOT_LAID_OUT
STATE_ASSIGNED = _rule_table.STATE_ASSIGNED
LAYOUT_MEMBER_NOT_CALLED = _rule_table.LAYOUT_MEMBER_NOT_CALLED
LAYOUT_MEMBER_ARGUMENTS = _rule_table.LAYOUT_MEMBER_ARGUMENTS
REPLACE_UNMAPPED = _rule_table.REPLACE_UNMAPPED
FIELD_STORE_UNPROVEN = _rule_table.FIELD_STORE_UNPROVEN
CREATED_FROM_PARAMETER = _rule_table.CREATED_FROM_PARAMETER
TREE_READ_NOT_BACK = _rule_table.TREE_READ_NOT_BACK
DICT_RETURNED_UNFOLLOWED = _rule_table.DICT_RETURNED_UNFOLLOWED
DICT_KEY_CLASH = _rule_table.DICT_KEY_CLASH
DICT_GIVER_USED_OTHERWISE = _rule_table.DICT_GIVER_USED_OTHERWISE
DICT_GIVER_ALIASED = _rule_table.DICT_GIVER_ALIASED
DICT_GIVER_MODULE_ALONE = _rule_table.DICT_GIVER_MODULE_ALONE
DICT_GIVER_ELSEWHERE = _rule_table.DICT_GIVER_ELSEWHERE
DICT_READ_UNTESTED = _rule_table.DICT_READ_UNTESTED
DICT_NAME_USED = _rule_table.DICT_NAME_USED
DICT_SPREAD = _rule_table.DICT_SPREAD
DICT_GIVER_NOT_CALLED = _rule_table.DICT_GIVER_NOT_CALLED
DICT_CALL_UNBOUND = _rule_table.DICT_CALL_UNBOUND
DICT_NAME_REBOUND = _rule_table.DICT_NAME_REBOUND
DICT_NAME_GOES_INTO = _rule_table.DICT_NAME_GOES_INTO
DICT_READ_BY_UNKNOWN_KEY = _rule_table.DICT_READ_BY_UNKNOWN_KEY
TREE_NAME_READ_NESTED = _rule_table.TREE_NAME_READ_NESTED
TREE_NAME_USED = _rule_table.TREE_NAME_USED
TREE_ENTRY_KEY = _rule_table.TREE_ENTRY_KEY
TREE_ENTRY_REPLACED = _rule_table.TREE_ENTRY_REPLACED
TREE_ENTRY_DELETED = _rule_table.TREE_ENTRY_DELETED
TREE_ENTRY_READ_BACK = _rule_table.TREE_ENTRY_READ_BACK
TREE_PASSED_UNSEEN = _rule_table.TREE_PASSED_UNSEEN
TREE_NO_PARAMETER = _rule_table.TREE_NO_PARAMETER
TREE_PASSED_TOO_DEEP = _rule_table.TREE_PASSED_TOO_DEEP
TREE_IN_FUNCTION = _rule_table.TREE_IN_FUNCTION
TREE_VALUE_NOT_NAME = _rule_table.TREE_VALUE_NOT_NAME
TREE_DICT_OUTSIDE_FUNCTION = _rule_table.TREE_DICT_OUTSIDE_FUNCTION
TREE_READ_ROOT_OTHER = _rule_table.TREE_READ_ROOT_OTHER
TREE_ROOT_ASSIGNED_BETWEEN = _rule_table.TREE_ROOT_ASSIGNED_BETWEEN
RULE_CLASS_GOES_INTO = _rule_table.RULE_CLASS_GOES_INTO
CALLS_OPTIMIZER_FUNCTION = _rule_table.CALLS_OPTIMIZER_FUNCTION
OVERRIDE_NOT_DEFINITION = _rule_table.OVERRIDE_NOT_DEFINITION
METHOD_CALLED_NOWHERE = _rule_table.METHOD_CALLED_NOWHERE
CALLED_NOWHERE_BUT = _rule_table.CALLED_NOWHERE_BUT
FIELD_USED_UNTYPED = _rule_table.FIELD_USED_UNTYPED
FIELD_HOLDER_TOUCHED = _rule_table.FIELD_HOLDER_TOUCHED
FIELD_READ_BY_POSITION = _rule_table.FIELD_READ_BY_POSITION
FIELD_HELD = _rule_table.FIELD_HELD
DEFINITION_GOES_INTO = _rule_table.DEFINITION_GOES_INTO
DEFINITION_RETURNED = _rule_table.DEFINITION_RETURNED
DEFINITION_NAME_GOES_ON = _rule_table.DEFINITION_NAME_GOES_ON
DEFINITION_NEVER_CREATED = _rule_table.DEFINITION_NEVER_CREATED
SELF_ACROSS_MODULES = _rule_table.SELF_ACROSS_MODULES
SELF_ONE_MODULE = _rule_table.SELF_ONE_MODULE
SELF_PROTOCOL = _rule_table.SELF_PROTOCOL
SELF_PROPERTY_PATHS = _rule_table.SELF_PROPERTY_PATHS
SELF_REBOUND = _rule_table.SELF_REBOUND
SELF_PROTOCOL_REACHED = _rule_table.SELF_PROTOCOL_REACHED
SELF_INSTANCE_GOES_INTO = _rule_table.SELF_INSTANCE_GOES_INTO
SELF_STORE_NOT_ASSIGNED = _rule_table.SELF_STORE_NOT_ASSIGNED
SELF_TAKES_PART = _rule_table.SELF_TAKES_PART
SELF_ANY_NAME = _rule_table.SELF_ANY_NAME
SELF_SHARED_WITH = _rule_table.SELF_SHARED_WITH
SELF_SHARED_ELSEWHERE = _rule_table.SELF_SHARED_ELSEWHERE
SELF_NOT_FOLLOWED_IN = _rule_table.SELF_NOT_FOLLOWED_IN
SELF_NAMED_OUTSIDE = _rule_table.SELF_NAMED_OUTSIDE
SELF_NAMED_ELSEWHERE = _rule_table.SELF_NAMED_ELSEWHERE
SELF_ONE_HOLDER = _rule_table.SELF_ONE_HOLDER
SELF_FOREIGN_BASE = _rule_table.SELF_FOREIGN_BASE
SELF_MADE_BY_DECORATOR = _rule_table.SELF_MADE_BY_DECORATOR
SELF_NO_METHOD_KEEPS = _rule_table.SELF_NO_METHOD_KEEPS
SINGLE_FILES = _rule_table.SINGLE_FILES
CALLED_FROM_ANOTHER_MODULE = _rule_table.CALLED_FROM_ANOTHER_MODULE
NO_FLOW_THERE = _rule_table.NO_FLOW_THERE
RETURNER_METHOD = _rule_table.RETURNER_METHOD
RETURNER_NESTED = _rule_table.RETURNER_NESTED
PARAMETER_FUNCTION_USED = _rule_table.PARAMETER_FUNCTION_USED
REEXPORT_KEPT = _rule_table.REEXPORT_KEPT
ANNOTATION_KEPT = _rule_table.ANNOTATION_KEPT
MIGRATE_REWRITES = _rule_table.MIGRATE_REWRITES
LEFT_BY_MIGRATE = _rule_table.LEFT_BY_MIGRATE
CREATED_HERE = _rule_table.CREATED_HERE
RULE_USED_HERE = _rule_table.RULE_USED_HERE
IN_MULTI_OPTIMIZER = _rule_table.IN_MULTI_OPTIMIZER
TRAVERSAL_ARGUMENTS = _rule_table.TRAVERSAL_ARGUMENTS
TRAVERSAL_BOUND_TWICE = _rule_table.TRAVERSAL_BOUND_TWICE
TRAVERSAL_UNUSED = _rule_table.TRAVERSAL_UNUSED
TRAVERSAL_REACHES = _rule_table.TRAVERSAL_REACHES
HYPER_PARAMS_LIST = _rule_table.HYPER_PARAMS_LIST
BY_NAME_STOCK = _rule_table.BY_NAME_STOCK
BY_NAME_POSITIONAL = _rule_table.BY_NAME_POSITIONAL
STOCK_NO_INJECT = _rule_table.STOCK_NO_INJECT
PORT_KEPT_RULE = _rule_table.PORT_KEPT_RULE
USER_MULTI_BY_HAND = _rule_table.USER_MULTI_BY_HAND
USER_MULTI_OVERRIDES = _rule_table.USER_MULTI_OVERRIDES
USER_MULTI_TRAVERSAL = _rule_table.USER_MULTI_TRAVERSAL
USER_MULTI_INIT_STATE = _rule_table.USER_MULTI_INIT_STATE
USER_RULE_BASES = _rule_table.USER_RULE_BASES
USER_RULE_MISSING = _rule_table.USER_RULE_MISSING
USER_RULE_CALLED_NOWHERE = _rule_table.USER_RULE_CALLED_NOWHERE
USER_MULTI_OTHER_MODULE = _rule_table.USER_MULTI_OTHER_MODULE
OVERLAPS_REWRITE = _rule_table.OVERLAPS_REWRITE
REWRITE_OVERLAPS = _rule_table.REWRITE_OVERLAPS
KERNEL_NOT_IMPORT = _rule_table.KERNEL_NOT_IMPORT
KERNEL_UNDECIDED = _rule_table.KERNEL_UNDECIDED
ROLLED_BACK_BECAUSE = _rule_table.ROLLED_BACK_BECAUSE
ROLLED_BACK = _rule_table.ROLLED_BACK
RESCAN_FAILED = _rule_table.RESCAN_FAILED
BY_HAND = _rule_table.BY_HAND
STILL_NAMED = _rule_table.STILL_NAMED
NOT_REWRITTEN_FALLBACK = _rule_table.NOT_REWRITTEN_FALLBACK
IMPORT_STILL_NEEDED = _rule_table.IMPORT_STILL_NEEDED
ESCAPE_RELEASED = _rule_table.ESCAPE_RELEASED
IMPORT_STILL_USED = _rule_table.IMPORT_STILL_USED
REWRITE_UNPARSED = _rule_table.REWRITE_UNPARSED
ACROSS_MODULES_FAILED = _rule_table.ACROSS_MODULES_FAILED
KERNEL_IMPORT = _rule_table.KERNEL_IMPORT
BY_NAME_REPLACEMENT = _rule_table.BY_NAME_REPLACEMENT
EITHER_LAYOUT_REPLACEMENT = _rule_table.EITHER_LAYOUT_REPLACEMENT
THROUGH_HELPER_REPLACEMENT = _rule_table.THROUGH_HELPER_REPLACEMENT
USER_RULE_REPLACEMENT = _rule_table.USER_RULE_REPLACEMENT
# Removed jax/flax APIs whose fix is one text: their ``Removal.old`` texts
# and what replaces each (``_removals``).
removal_fix = _rule_table.removal_fix
removal_text = _rule_table.removal_text
REMOVAL_MOVED = _rule_table.REMOVAL_MOVED
REMOVAL_SAME_FUNCTION = _rule_table.REMOVAL_SAME_FUNCTION
REMOVAL_AT_METHOD = _rule_table.REMOVAL_AT_METHOD
REMOVAL_CALL_KEPT = _rule_table.REMOVAL_CALL_KEPT
REMOVAL_IMPORT_KEPT = _rule_table.REMOVAL_IMPORT_KEPT
REMOVAL_STAR_IMPORT = _rule_table.REMOVAL_STAR_IMPORT
OMNISTAGING = _rule_table.OMNISTAGING
LR_SCHEDULE = _rule_table.LR_SCHEDULE
POP_UNPACKING = _rule_table.POP_UNPACKING
FROZEN_COPY = _rule_table.FROZEN_COPY
POSITIONAL_MASK = _rule_table.POSITIONAL_MASK
FLAX_NN = _rule_table.FLAX_NN
# What replaces a definition in each tier (``{expression}``...).
TIER_EXACT = _rule_table.TIER_EXACT
TIER_STOCK = _rule_table.TIER_STOCK
TIER_REPLACEMENTS = _rule_table.TIER_REPLACEMENTS


def code_of(construct: str, old: Optional[str] = None) -> str:
  """The code of a finding: its construct, or for a removal its row's
  ``old`` text (a row no group lists gets FOC200, never no code)."""
  if old is not None:
    for code in CODES:
      if any(old == r or (r.endswith(('.', '_', '(')) and old.startswith(r))
             for r in code.removals):
        return code.code
    return _OTHER_REMOVAL
  return _BY_CONSTRUCT[construct].code


class SelectionError(ValueError):
  """A code or prefix that names no code (the message names it)."""


def expand(selectors, source: str) -> set:
  """The codes ``selectors`` name: a whole code (FOC108), a prefix (FOC1,
  FOC) or ``ALL``. ``source`` names where they came from, for errors."""
  chosen = set()
  for selector in selectors:
    selector = selector.strip().upper()
    if selector == 'ALL':
      selector = PREFIX
    matched = {c for c in BY_CODE if c.startswith(selector)}
    if not _CODE.match(selector) or not matched:
      raise SelectionError(
          f'{source}: unknown code {selector!r}; expected a code or prefix '
          f'of one ({PREFIX}1xx flax.optim, {PREFIX}2xx removed jax/flax '
          f'APIs, {PREFIX}9xx the scan itself; see --list-codes) or ALL')
    chosen |= matched
  return chosen


def selected(select=None, ignore=(), source: str = 'command line') -> set:
  """Every code ``select`` names (default all) but those ``ignore`` does."""
  chosen = set(BY_CODE) if select is None else expand(select, source)
  return chosen - expand(ignore, source)


def guide_anchor(section: str) -> str:
  """GitHub's anchor of a Markdown heading (lower case, punctuation out,
  spaces to dashes)."""
  text = re.sub(r'[^\w\- ]', '', section.lower())
  return '#' + text.replace(' ', '-')


def help_uri(code: str) -> str:
  """The absolute URI of the code's section in the guide installed here
  (SARIF's helpUri must be absolute; no project page is assumed)."""
  guide = next((c for c in GUIDE_CANDIDATES if c.is_file()),
               GUIDE_CANDIDATES[0])
  return guide.as_uri() + guide_anchor(BY_CODE[code].section)


def guide_table() -> str:
  """The guide's table of codes (Markdown, one row per code: its title and
  a link to its section); scripts/guide_codes.py writes it into
  migration_guide.md."""
  rows = ['| code | finding | guide section |', '| --- | --- | --- |']
  rows += [f'| `{c.code}` | {c.title.replace("|", chr(92) + "|")} | '
           f'[{c.section}]({guide_anchor(c.section)}) |' for c in CODES]
  return '\n'.join(rows) + '\n'


def listing() -> str:
  """``--list-codes``: one line per code."""
  return '\n'.join(f'{c.code}  {c.title}  [{c.section}]' for c in CODES)
