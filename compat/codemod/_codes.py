"""The stable code of every kind of finding: one table for scan and migrate.

A code names a kind of finding the way a linter's rule code does (ruff's
``F401``, TorchFix's ``TOR101``): it never changes meaning, so users can
``--select``/``--ignore`` it, write ``# noqa: FOC108`` and keep it in
``[tool.flax-optim-compat]``. ``FOC1xx``: flax.optim constructs (one per
``scan`` construct); ``FOC2xx``: the removed jax/flax APIs next to it (one
per group of ``_removals`` rows); ``FOC9xx``: findings about the scan itself.
``--list-codes``, the formats (SARIF rules, GitHub titles) and the guide's
table (kept equal by tests/test_scan_codes.py) all read ``CODES``.

Stdlib only (the codemod never imports jax).
"""

import pathlib
import re
from typing import NamedTuple, Optional

from compat import _lazy
from compat.codemod import _members

_catalogue = _lazy.module_without_package('legacy_optim', 'catalogue')

PREFIX = 'FOC'
GUIDE_FILE = 'migration_guide.md'
# A wheel carries the guide as compat/migration_guide.md (setup.py copies it
# in); a checkout or an editable install has it at the repository's root.
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent  # compat/
GUIDE_CANDIDATES = (_PACKAGE_DIR / GUIDE_FILE,
                    _PACKAGE_DIR.parent / GUIDE_FILE)


class Code(NamedTuple):
  code: str  # FOCnnn
  construct: str  # the finding's construct ('create', 'removed_api', ...)
  title: str  # one line, what the finding is
  section: str  # heading of migration_guide.md that explains it
  # For FOC2xx: the ``Removal.old`` texts of the rows it covers (a prefix
  # ending in '.' or '_' covers every name that starts with it).
  removals: tuple = ()


_C = _catalogue
CODES = (
    Code('FOC101', 'import', 'flax.optim (or legacy_optim) is imported',
         _C.SECTION_ALGORITHMS),
    Code('FOC102', 'shim', 'a flax-optim-compat bridge or the legacy_optim '
         'shim is used', _C.SECTION_STRICT),
    Code('FOC103', _members.OPTIMIZER_DEF, 'a flax.optim optimizer definition '
         '(optim.Adam(...))', _C.SECTION_ALGORITHMS),
    Code('FOC104', 'optimizer_def_subclass', 'a user subclass of '
         'flax.optim.OptimizerDef', _C.SECTION_ALGORITHMS),
    Code('FOC105', 'multi_optimizer', 'flax.optim.MultiOptimizer',
         _C.SECTION_TRAVERSALS),
    Code('FOC106', 'traversal', 'a flax.optim traversal (ModelParamTraversal,'
         ' focus=)', _C.SECTION_TRAVERSALS),
    Code('FOC107', 'weight_norm', 'flax.optim.WeightNorm',
         _C.SECTION_WEIGHT_NORM),
    Code('FOC108', _members.CREATE, 'OptimizerDef.create(params)',
         _C.SECTION_LOOP),
    Code('FOC109', _members.APPLY_GRADIENT, 'Optimizer.apply_gradient(grads)',
         _C.SECTION_LOOP),
    Code('FOC110', 'apply_gradient_overrides', 'apply_gradient with per-step '
         'hyper-parameter overrides', _C.SECTION_OVERRIDES),
    Code('FOC111', _members.COMPUTE_GRADIENT,
         'Optimizer.compute_gradient(loss_fn)', _C.SECTION_LOOP),
    Code('FOC112', _members.OPTIMIZE, 'Optimizer.optimize(loss_fn)',
         _C.SECTION_LOOP),
    Code('FOC113', _members.REPLICATE, 'Optimizer.replicate() or '
         'ReplicatedOptimizer', _C.SECTION_REPLICATION),
    Code('FOC114', 'checkpoint', 'a flax.optim Optimizer saved or restored '
         'as a checkpoint', _C.SECTION_CHECKPOINTS),
    Code('FOC115', 'dynamic_scale', 'flax.optim.DynamicScale',
         _C.SECTION_DYNAMIC_SCALE),
    Code('FOC116', 'annotation', 'a flax.optim class in a type annotation',
         _C.SECTION_LOOP),
    Code('FOC117', 'reference', 'another reference to a flax.optim name '
         '(OptimizerState(...), an alias, a class used as a value)',
         _C.SECTION_LOOP),
    Code('FOC118', _members.OPTIMIZER_USE, 'a member of a flax.optim '
         'Optimizer read (optimizer.target, optimizer.state.step, '
         '.replace(target=...))', _C.SECTION_LOOP),
    Code('FOC119', 'optimizer_escape', 'a flax.optim Optimizer going on to '
         'code migrate cannot follow (stored in an attribute, passed to an '
         'unproven call): its whole flow stays', _C.SECTION_LOOP),
    Code('FOC200', 'removed_api', 'another removed jax/flax API',
         _C.SECTION_FIND),
    Code('FOC201', 'removed_api', 'jax.tree_* moved to jax.tree_util',
         _C.SECTION_FIND, ('jax.tree_', 'jax.tree_util.tree_multimap')),
    Code('FOC202', 'removed_api', 'jax.host_* renamed to jax.process_*',
         _C.SECTION_FIND, ('jax.host_',)),
    Code('FOC203', 'removed_api', 'jax.profiler.StepTraceContext renamed '
         'StepTraceAnnotation', _C.SECTION_FIND,
         ('jax.profiler.StepTraceContext',)),
    Code('FOC204', 'removed_api', 'DeviceArray is jax.Array',
         _C.SECTION_FIND, ('jax.numpy.DeviceArray',
                           'jax.interpreters.xla.DeviceArray')),
    Code('FOC205', 'removed_api', 'from jax.config import config',
         _C.SECTION_FIND, ('from jax.config import config',)),
    Code('FOC206', 'removed_api', 'jax.config.enable_omnistaging() (a no-op '
         'today)', _C.SECTION_FIND, ('jax.config.enable_omnistaging()',
                                     'jax.config.config.enable_omnistaging()')),
    Code('FOC207', 'removed_api', 'flax.training.lr_schedule',
         _C.SECTION_FIND, ('flax.training.lr_schedule',)),
    Code('FOC208', 'removed_api', "FrozenDict.pop unpacking (rest, params = "
         "variables.pop('params'))", _C.SECTION_FIND,
         ('FrozenDict.pop unpacking',)),
    Code('FOC209', 'removed_api', 'FrozenDict.copy(add_or_replace)',
         _C.SECTION_FIND, ('FrozenDict.copy(add_or_replace)',)),
    Code('FOC210', 'removed_api', 'MultiHeadDotProductAttention with a '
         'positional mask', _C.SECTION_FIND,
         ('MultiHeadDotProductAttention(',)),
    Code('FOC211', 'out_of_scope', 'flax.nn (pre-Linen modules): port by '
         'hand', _C.SECTION_FIND, ('flax.nn',)),
    Code('FOC901', 'unused_noqa', 'a # noqa code that suppresses nothing',
         _C.SECTION_FIND),
)
BY_CODE = {c.code: c for c in CODES}
_BY_CONSTRUCT = {c.construct: c for c in CODES if not c.removals}
UNUSED_NOQA = 'FOC901'
FLAX_OPTIM = 'FOC1'  # the prefix of the flax.optim constructs' codes
REMOVED_APIS = 'FOC2'  # the prefix of the other removed APIs' codes
_OTHER_REMOVAL = 'FOC200'
_CODE = re.compile(rf'^{PREFIX}\d*$')


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


def listing() -> str:
  """``--list-codes``: one line per code."""
  return '\n'.join(f'{c.code}  {c.title}  [{c.section}]' for c in CODES)
