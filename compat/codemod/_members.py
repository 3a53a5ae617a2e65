"""flax.optim's member names and class mappings, each written once.

``scan``, ``migrate`` and their analyses recognise a legacy optimizer by the
names of its members (``optimizer.target``, ``optimizer.apply_gradient(g)``,
``definition.create(params)``). Every module of the codemod reads those
names from here (the constants below, or ``MEMBERS``), so adding a member
rewrite starts in one place; tests/test_codemod_members.py fails when a
member name is written as a string anywhere else in compat/codemod.

``MEMBERS`` says, per member, its owner, whether it is a method or an
attribute, what replaces it, the code of the finding that names it, and,
where migrate has no mechanical counterpart for a read of it, why.
``CLASS_COUNTERPARTS`` maps each flax.optim class to what replaces it.

Stdlib only (the codemod never imports jax).
"""

from typing import NamedTuple, Optional

# flax.optim.Optimizer (a flax struct: ``replace`` is its dataclass method,
# ``state`` a field that other objects also have: both are words too common
# to be told apart by name alone, so they are not constants here).
TARGET = 'target'
OPTIMIZER_DEF = 'optimizer_def'
APPLY_GRADIENT = 'apply_gradient'
COMPUTE_GRADIENT = 'compute_gradient'
COMPUTE_GRADIENTS = 'compute_gradients'  # a misspelling some code calls
OPTIMIZE = 'optimize'
REPLICATE = 'replicate'
UNREPLICATE = 'unreplicate'
RESTORE_STATE = 'restore_state'
STATE_DICT = 'state_dict'
# Its struct's field and method shared with many other objects (told apart
# by the optimizer flow alone, never by name). ``replace`` is every flax
# struct's copy with fields replaced (an OptimizerState's, a definition's
# hyper_params'); ``_replace`` a namedtuple's, which a holder may be.
STATE = 'state'
REPLACE = 'replace'
COPY_METHODS = (REPLACE, '_replace')
# A read of a member of an optimizer the flow proves: the construct of
# scan's finding and of migrate's edit or leftover.
OPTIMIZER_USE = 'optimizer_use'
# flax.training.checkpoints' and flax.serialization's parameter for the tree
# a checkpoint is read into or written from: where that tree is an
# Optimizer, its ``target`` keyword names it.
CHECKPOINT_TARGET = 'target'
# flax.optim.OptimizerDef
CREATE = 'create'
HYPER_PARAMS = 'hyper_params'
INIT_STATE = 'init_state'
INIT_PARAM_STATE = 'init_param_state'
APPLY_PARAM_GRADIENT = 'apply_param_gradient'
UPDATE_HYPER_PARAMS = 'update_hyper_params'
# flax.optim.OptimizerState (``step``, like ``state``, a common word)
STEP = 'step'
PARAM_STATES = 'param_states'


class Member(NamedTuple):
  name: str
  owner: str  # the flax.optim class that has it
  kind: str  # 'method' or 'attribute'
  # What replaces it once the optimizer is a TrainState (``state``) and its
  # definition an Optax transform (``tx``); the same in both tiers.
  replacement: str
  code: Optional[str] = None  # the FOC code of the finding naming it
  # Why migrate leaves a read of it (its note), where it has no mechanical
  # counterpart.
  no_counterpart: Optional[str] = None
  # What migrate writes for a read of it (``{receiver}``: the optimizer's
  # own rewritten expression), where that is mechanical.
  read_rewrite: Optional[str] = None
  # What a read of it holds where that is another flax.optim object
  # (``DEFINITION``): the flow follows it as one, and ``read_rewrite``
  # applies only where the read is used as a whole (``.create(...)`` on it).
  holds: Optional[str] = None


DEFINITION = 'definition'  # (a Member's ``holds``)


_RULE_DEF = 'flax_optim_rules.RuleDef'  # what a user's OptimizerDef becomes
MEMBERS = (
    Member(TARGET, 'Optimizer', 'attribute', 'state.params',
           read_rewrite='{receiver}.params'),
    Member(OPTIMIZER_DEF, 'Optimizer', 'attribute', 'state.tx',
           no_counterpart='a TrainState holds `tx`, an Optax transform: no '
           'hyper_params to read or override, no OptimizerDef class to name',
           read_rewrite='{receiver}.tx', holds=DEFINITION),
    Member(APPLY_GRADIENT, 'Optimizer', 'method',
           'state.apply_gradients(grads=grads)', 'FOC109'),
    Member(COMPUTE_GRADIENT, 'Optimizer', 'method',
           'jax.value_and_grad(loss_fn)(state.params)', 'FOC111'),
    Member(COMPUTE_GRADIENTS, 'Optimizer', 'method',
           'jax.value_and_grad(loss_fn)(state.params)', 'FOC111'),
    Member(OPTIMIZE, 'Optimizer', 'method',
           'state.apply_gradients(grads=jax.grad(loss_fn)(state.params))',
           'FOC112'),
    Member(REPLICATE, 'Optimizer', 'method', 'jax_utils.replicate(state)',
           'FOC113'),
    Member(UNREPLICATE, 'Optimizer', 'method',
           'jax_utils.unreplicate(state)', 'FOC113'),
    Member(RESTORE_STATE, 'Optimizer', 'method',
           'flax_optim_rules.replace_optimizer_state(state, s)'),
    Member(STATE_DICT, 'Optimizer', 'method',
           'flax_optim_rules.optimizer_state_dict(state.params, '
           'flax_optim_rules.optimizer_state(state))'),
    Member(CREATE, 'OptimizerDef', 'method',
           'TrainState.create(apply_fn=None, params=params, tx=tx)', 'FOC108'),
    Member(HYPER_PARAMS, 'OptimizerDef', 'attribute',
           "the rule's keyword arguments (a rate set per step: "
           'flax_optim_rules.inject_learning_rate)'),
    Member(INIT_STATE, 'OptimizerDef', 'method', f'{_RULE_DEF}.init_state',
           'FOC104'),
    Member(INIT_PARAM_STATE, 'OptimizerDef', 'method',
           f'{_RULE_DEF}.init_param_state', 'FOC104'),
    Member(APPLY_PARAM_GRADIENT, 'OptimizerDef', 'method',
           f'{_RULE_DEF}.apply_param_gradient', 'FOC104'),
    Member(UPDATE_HYPER_PARAMS, 'OptimizerDef', 'method',
           f'{_RULE_DEF}.update_hyper_params', 'FOC104'),
    Member(PARAM_STATES, 'OptimizerState', 'attribute',
           'flax_optim_rules.optimizer_state(state).param_states'),
)
NAMES = frozenset(member.name for member in MEMBERS)

# flax.optim's classes that detection names (its algorithms are
# legacy_optim's catalogue's, its traversals ``_names.TRAVERSALS``).
OPTIMIZER_CLASS = 'Optimizer'
DEF_CLASS = 'OptimizerDef'
MULTI_OPTIMIZER_CLASS = 'MultiOptimizer'
WEIGHT_NORM_CLASS = 'WeightNorm'
REPLICATED_OPTIMIZER_CLASS = 'ReplicatedOptimizer'
DYNAMIC_SCALE_CLASS = 'DynamicScale'
OPTIMIZER_STATE_CLASS = 'OptimizerState'

# A flax.optim class -> what replaces it (scan's replacement text; migrate
# writes the first word where the rewrite is mechanical).
CLASS_COUNTERPARTS = {
    OPTIMIZER_CLASS: 'flax.training.train_state.TrainState',
    DYNAMIC_SCALE_CLASS: 'flax.training.dynamic_scale.DynamicScale',
    DEF_CLASS: 'optax.GradientTransformation',
    MULTI_OPTIMIZER_CLASS: 'optax.GradientTransformation (optax.partition '
                           'of one transform per traversal)',
    OPTIMIZER_STATE_CLASS: 'flax_optim_rules.OptimizerState: flax.optim\'s '
                           'layout of a TrainState\'s step and Optax state '
                           '(flax_optim_rules.optimizer_state(state), '
                           'replace_optimizer_state(state, s))',
}
# The paths under which flax.optim exported DynamicScale.
DYNAMIC_SCALE_PATHS = ('flax.optim.DynamicScale',
                       'flax.optim.dynamic_scale.DynamicScale')


def counterpart_path(class_name: str) -> str:
  """The dotted name that replaces ``class_name`` (its mapping's first
  word: ``flax.training.dynamic_scale.DynamicScale``)."""
  return CLASS_COUNTERPARTS[class_name].split(' ', 1)[0]


# The Optimizer's methods that step or spread it: a call of one is a finding
# of its own (scan) and a word the prefilter looks for.
STEP_METHODS = (APPLY_GRADIENT, COMPUTE_GRADIENT, COMPUTE_GRADIENTS, OPTIMIZE,
                REPLICATE)
# The hooks an OptimizerDef subclass overrides (flax.optim.base's names).
DEF_HOOKS = (HYPER_PARAMS, INIT_PARAM_STATE, APPLY_PARAM_GRADIENT, INIT_STATE,
             APPLY_GRADIENT, UPDATE_HYPER_PARAMS)

# What replaces the Optimizer's two common-word members.
_COMMON_WORD_REPLACEMENTS = {
    STATE: 'state.step and state.opt_state (flax.optim\'s layout: '
           'flax_optim_rules.optimizer_state(state))',
    REPLACE: 'state.replace(params=...)',
}
# The attribute names whose read scan asks the optimizer flow about.
READS = NAMES | set(_COMMON_WORD_REPLACEMENTS)


def replacement(name: str) -> str:
  """What replaces the member ``name`` of an Optimizer or definition."""
  return next((m.replacement for m in MEMBERS if m.name == name),
              _COMMON_WORD_REPLACEMENTS.get(
                  name, f'the TrainState counterpart of .{name}'))


def no_counterpart(name: str) -> Optional[str]:
  """Why a read of the member ``name`` stays as it is, if the table says."""
  for member in MEMBERS:
    if member.name == name:
      return member.no_counterpart
  return None


def read_rewrite(name: str) -> Optional[Member]:
  """The row of the member ``name`` where the table rewrites its reads."""
  return next((m for m in MEMBERS if m.name == name and m.read_rewrite),
              None)


# The members whose read is a definition (the flow follows it as one).
DEFINITION_READS = frozenset(m.name for m in MEMBERS
                             if m.holds == DEFINITION)
