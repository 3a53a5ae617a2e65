"""flax.optim's member names and class mappings, as the codemod reads them.

``scan``, ``migrate`` and their analyses recognise a legacy optimizer by the
names of its members (``optimizer.target``, ``optimizer.apply_gradient(g)``,
``definition.create(params)``). Every module of the codemod reads those
names from here (the constants below, or ``MEMBERS``); they and their rows
are written once, in the rule table (``compat._rule_table``), so adding a
member rewrite starts there; tests/test_codemod_members.py fails when a
member name is written as a string anywhere else in compat/codemod.

Stdlib only (the codemod never imports jax).
"""

from typing import Optional

from compat import _rule_table

# The names the codemod reads here (``_members.TARGET``): the rule table's.
from compat._rule_table import APPLY_GRADIENT  # noqa: F401
from compat._rule_table import APPLY_PARAM_GRADIENT  # noqa: F401
from compat._rule_table import CHECKPOINT_TARGET  # noqa: F401
from compat._rule_table import CLASS_COUNTERPARTS  # noqa: F401
from compat._rule_table import COMPUTE_GRADIENT  # noqa: F401
from compat._rule_table import COMPUTE_GRADIENTS  # noqa: F401
from compat._rule_table import COPY_METHODS  # noqa: F401
from compat._rule_table import CREATE  # noqa: F401
from compat._rule_table import DEF_CLASS  # noqa: F401
from compat._rule_table import DEFINITION  # noqa: F401
from compat._rule_table import DYNAMIC_SCALE_CLASS  # noqa: F401
from compat._rule_table import HYPER_PARAMS  # noqa: F401
from compat._rule_table import INIT_PARAM_STATE  # noqa: F401
from compat._rule_table import INIT_STATE  # noqa: F401
from compat._rule_table import MEMBERS  # noqa: F401
from compat._rule_table import MULTI_OPTIMIZER_CLASS  # noqa: F401
from compat._rule_table import OPTIMIZE  # noqa: F401
from compat._rule_table import OPTIMIZER_CLASS  # noqa: F401
from compat._rule_table import OPTIMIZER_DEF  # noqa: F401
from compat._rule_table import OPTIMIZER_STATE_CLASS  # noqa: F401
from compat._rule_table import OPTIMIZER_USE  # noqa: F401
from compat._rule_table import PARAM_STATES  # noqa: F401
from compat._rule_table import REPLACE  # noqa: F401
from compat._rule_table import REPLICATE  # noqa: F401
from compat._rule_table import REPLICATED_OPTIMIZER_CLASS  # noqa: F401
from compat._rule_table import RESTORE_STATE  # noqa: F401
from compat._rule_table import STATE  # noqa: F401
from compat._rule_table import STATE_DICT  # noqa: F401
from compat._rule_table import STEP  # noqa: F401
from compat._rule_table import TARGET  # noqa: F401
from compat._rule_table import UNREPLICATE  # noqa: F401
from compat._rule_table import UPDATE_HYPER_PARAMS  # noqa: F401
from compat._rule_table import WEIGHT_NORM_CLASS  # noqa: F401
from compat._rule_table import Member  # noqa: F401

NAMES = frozenset(member.name for member in MEMBERS)

# The paths under which flax.optim exported DynamicScale.
DYNAMIC_SCALE_PATHS = ('flax.optim.DynamicScale',
                       'flax.optim.dynamic_scale.DynamicScale')


def counterpart_path(class_name: str) -> str:
  """The dotted name that replaces ``class_name`` (its mapping's first
  word: ``flax.training.dynamic_scale.DynamicScale``)."""
  return CLASS_COUNTERPARTS[class_name].split(' ', 1)[0]


# The Optimizer's methods that step or spread it: a call of one is a finding
# of its own (scan) and a word the prefilter looks for.
STEP_METHODS = _rule_table.step_methods()
# The hooks an OptimizerDef subclass overrides (flax.optim.base's names).
DEF_HOOKS = (HYPER_PARAMS, INIT_PARAM_STATE, APPLY_PARAM_GRADIENT, INIT_STATE,
             APPLY_GRADIENT, UPDATE_HYPER_PARAMS)

# The attribute names whose read scan asks the optimizer flow about.
READS = NAMES | set(_rule_table.COMMON_WORD_REPLACEMENTS)


def _row(name: str) -> Optional[Member]:
  return next((m for m in MEMBERS if m.name == name), None)


def replacement(name: str) -> str:
  """What replaces the member ``name`` of an Optimizer or definition."""
  member = _row(name)
  if member is not None:
    return _rule_table.member_replacement(member)
  return _rule_table.COMMON_WORD_REPLACEMENTS.get(
      name, f'the TrainState counterpart of .{name}')


def construct_of(name: str) -> Optional[str]:
  """The construct of the rule the member ``name`` belongs to (a step
  method's call is that rule's finding: ``compute_gradients``, a
  misspelling, is ``compute_gradient``'s)."""
  member = _row(name)
  return member.construct if member is not None else None


def no_counterpart(name: str) -> Optional[str]:
  """Why a read of the member ``name`` stays as it is, if the table says."""
  member = _row(name)
  return member.no_counterpart if member is not None else None


def read_rewrite(name: str) -> Optional[Member]:
  """The row of the member ``name`` where the table rewrites its reads."""
  member = _row(name)
  return member if member is not None and member.read_rewrite else None


# The members whose read is a definition (the flow follows it as one).
DEFINITION_READS = frozenset(m.name for m in MEMBERS
                             if m.holds == DEFINITION)
