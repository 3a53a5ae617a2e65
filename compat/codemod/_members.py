"""flax.optim's member names and class mappings, as the codemod reads them.

``scan``, ``migrate`` and their analyses recognise a legacy optimizer by the
names of its members (``optimizer.target``, ``optimizer.apply_gradient(g)``,
``definition.create(params)``). Every module of the codemod reads those
names from here (the constants below, or ``MEMBERS``); they and their rows
are written once, in the rule table (``legacy_optim._rule_table``), so
adding a member rewrite starts there; tests/test_codemod_members.py fails when a
member name is written as a string anywhere else in compat/codemod.

Stdlib only (the codemod never imports jax).
"""

from typing import Optional

from compat import _lazy

# The rule table, read without running legacy_optim/__init__ (it imports
# jax); the names the codemod reads here (``_members.TARGET``) are its.
_rule_table = _lazy.module_without_package('legacy_optim', '_rule_table')
APPLY_GRADIENT = _rule_table.APPLY_GRADIENT
APPLY_PARAM_GRADIENT = _rule_table.APPLY_PARAM_GRADIENT
CHECKPOINT_TARGET = _rule_table.CHECKPOINT_TARGET
CLASS_COUNTERPARTS = _rule_table.CLASS_COUNTERPARTS
COMPUTE_GRADIENT = _rule_table.COMPUTE_GRADIENT
COMPUTE_GRADIENTS = _rule_table.COMPUTE_GRADIENTS
COPY_METHODS = _rule_table.COPY_METHODS
CREATE = _rule_table.CREATE
DEF_CLASS = _rule_table.DEF_CLASS
DEFINITION = _rule_table.DEFINITION
DYNAMIC_SCALE_CLASS = _rule_table.DYNAMIC_SCALE_CLASS
HYPER_PARAMS = _rule_table.HYPER_PARAMS
INIT_PARAM_STATE = _rule_table.INIT_PARAM_STATE
INIT_STATE = _rule_table.INIT_STATE
MEMBERS = _rule_table.MEMBERS
MULTI_OPTIMIZER_CLASS = _rule_table.MULTI_OPTIMIZER_CLASS
OPTIMIZE = _rule_table.OPTIMIZE
OPTIMIZER_CLASS = _rule_table.OPTIMIZER_CLASS
OPTIMIZER_DEF = _rule_table.OPTIMIZER_DEF
OPTIMIZER_STATE_CLASS = _rule_table.OPTIMIZER_STATE_CLASS
OPTIMIZER_USE = _rule_table.OPTIMIZER_USE
PARAM_STATES = _rule_table.PARAM_STATES
REPLACE = _rule_table.REPLACE
REPLICATE = _rule_table.REPLICATE
REPLICATED_OPTIMIZER_CLASS = _rule_table.REPLICATED_OPTIMIZER_CLASS
RESTORE_STATE = _rule_table.RESTORE_STATE
STATE = _rule_table.STATE
STATE_DICT = _rule_table.STATE_DICT
STEP = _rule_table.STEP
TARGET = _rule_table.TARGET
UNREPLICATE = _rule_table.UNREPLICATE
UPDATE_HYPER_PARAMS = _rule_table.UPDATE_HYPER_PARAMS
WEIGHT_NORM_CLASS = _rule_table.WEIGHT_NORM_CLASS
Member = _rule_table.Member

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


def call_rewrite(name: str) -> Optional[Member]:
  """The row of the method ``name`` where the table rewrites its calls."""
  member = _row(name)
  return member if member is not None and member.call_rewrite else None


# The members whose read is a definition (the flow follows it as one).
DEFINITION_READS = frozenset(m.name for m in MEMBERS
                             if m.holds == DEFINITION)
