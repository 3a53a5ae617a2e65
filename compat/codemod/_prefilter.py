"""Which files ``scan`` can skip without looking: the words every finding
needs.

Most modules of a research tree use neither flax.optim nor a removed API,
and walking their syntax trees costs more than parsing them. Each kind of
finding needs some word in the source: a name it resolves ends in an
identifier the source spells (``jax.tree_map`` needs ``tree_map``, as an
attribute or an imported name), a method finding needs the method's name,
a flax.optim construct needs an import that spells ``optim`` (or a name
another scanned module re-exports). A module without any of them has no
finding; ``may_find`` says False only then. The words come from the tables
the rules read (``_removals``' rows, scan's checkpoint functions), so a new
row brings its word; a new kind of matcher must add its own here
(tests/test_scan_codes.py lists the matchers it knows). Stdlib only.
"""

import re

from compat.codemod import _names
from compat.codemod import _removals

# The ``_removals.match`` helpers and the words each needs; a test fails
# when ``_removals`` grows a matcher not listed here.
MATCHER_WORDS = {
    # from jax.config import config: _JAX_CONFIG; flax.nn: _mentions_flax_nn
    '_match_import': ('lr_schedule',),
    '_match_lr_schedule_from': ('lr_schedule',),
    '_match_lr_schedule_import': ('lr_schedule',),
    '_match_pop_unpacking': ('pop',),
    '_match_positional_mask': (),  # by _KV_ATTENTION's names
    '_match_frozen_copy': ('copy',),
}
_SCAN_WORDS = (
    'traverse_util',  # flax.traverse_util traversals
    'compat',  # the bridges
    'apply_gradient', 'compute_gradient', 'optimize', 'replicate',
)


def _last(path: str) -> str:
  return path.rpartition('.')[2]


def words(checkpoint_functions) -> frozenset:
  """Every word a finding outside flax.optim's imports may need, except
  ``nn`` (see ``_mentions_flax_nn``)."""
  found = set(_SCAN_WORDS)
  found |= {_last(p) for p in checkpoint_functions}
  for table in (_removals._RENAMED, _removals._MOVED, _removals._NO_OPS,
                _removals._KV_ATTENTION):
    found |= {_last(p).rstrip('()') for p in table}
  found |= {_last(p) for p in _removals._REPORTED if _last(p) != 'nn'}
  found.add(_last(_removals.LR_SCHEDULE))
  for needed in MATCHER_WORDS.values():
    found |= set(needed)
  found |= set(_names.TRAVERSALS)
  return frozenset(found)


# ``flax.nn`` is reported through an attribute ``.nn`` on flax (``jax.nn``
# is jax's: not it, unless the module calls flax ``jax``) or an import of
# ``nn`` from flax. ``nn`` alone is in every linen module (``import
# flax.linen as nn``), so these look closer. Between tokens: spaces, a
# backslash continuation, a comment.
_GAP = r'(?:\s|\\\n|#[^\n]*)*'
_ATTRIBUTE_NN = re.compile(rf'(?<!\bjax)\.{_GAP}nn\b')
_ANY_ATTRIBUTE_NN = re.compile(rf'\.{_GAP}nn\b')
_FLAX_AS_JAX = re.compile(r'\bas\s+jax\b')
_FROM_FLAX_IMPORT = re.compile(
    rf'\bfrom{_GAP}flax{_GAP}import{_GAP}(\([^)]*\)|[^\n;]*(?:\\\n[^\n;]*)*)')
_ALIAS = re.compile(r'\bas\s+\w+')
_JAX_CONFIG = re.compile(rf'\bjax{_GAP}\.{_GAP}config\b')


def _mentions_flax_nn(text: str) -> bool:
  if 'nn' not in text:
    return False
  attribute = _ANY_ATTRIBUTE_NN if _FLAX_AS_JAX.search(text) else (
      _ATTRIBUTE_NN)
  if attribute.search(text):
    return True
  for names in _FROM_FLAX_IMPORT.findall(text):
    if '#' in names or re.search(r'\bnn\b', _ALIAS.sub('', names)):
      return True
  return False


def may_find(text: str, trigger_words: frozenset) -> bool:
  """False only when ``text`` has none of ``trigger_words`` (``words()``
  plus flax.optim's and the re-exports') and no flax.nn."""
  return (any(w in text for w in trigger_words) or
          bool(_JAX_CONFIG.search(text)) or _mentions_flax_nn(text))
