"""The rule table: every fact the project states about a flax.optim construct.

One row per kind of finding (``RULES``): its stable code and one-line title,
the section of migration_guide.md that explains it, what replaces it (the
text ``scan`` reports and the deprecation warnings put in a sentence), the
removed names it covers (``FOC2xx``) and the words a module must spell for
it to be found there (the prefilter's). One row per member of flax.optim's
Optimizer, OptimizerDef and OptimizerState (``MEMBERS``): its name (what
detection matches), the rule it belongs to, what replaces it where that
differs from its rule's text, and what migrate writes for a read of it or
a call of it (``read_rewrite``, ``call_rewrite``: a new member rewrite is a
row here). ``CLASS_COUNTERPARTS``: what replaces each class. ``FIXES``: the
fixes that rest on an assumption or on a proof of a narrower shape, with
their applicability (ruff's: a safe fix is proven and applied, its row says
what is proven; an unsafe one is applied only with ``--unsafe-fixes``, its
row says what it assumes; a fix no row lists is proven) and the report's
sentences for them. ``NOTES``: the texts of migrate's notes
and of the reasons it gives for what it leaves. ``TIER_REPLACEMENTS``: what
replaces a definition in each tier. ``REMOVAL_FIXES``: what replaces each
removed jax/flax API whose fix is one text.

Everything else derives from here: the codes (``compat.codemod._codes``),
the member vocabulary (``compat.codemod._members``), the replacement texts
(``catalogue.REPLACEMENTS``, read by the deprecation warnings and scan),
the prefilter's words (``compat.codemod._prefilter``) and the guide's table
of codes (scripts/guide_codes.py writes it; tests/test_scan_codes.py fails
while the committed guide differs). tests/test_codemod_members.py fails
when one of these facts is written anywhere else.

Stdlib only, and it imports nothing: the catalogue and the warnings read it
here, the codemod (no jax) through ``compat._lazy.module_without_package``.
"""

from typing import NamedTuple, Optional

# ----------------------------------------------------------------------------
# Section headings of migration_guide.md (tests check that each exists).

SECTION_INSTALL = 'Step 0: Install and run unchanged'
SECTION_FIND = 'Step 1: Read the warnings and scan the code'
SECTION_ALGORITHMS = (
    'Step 2: Swap each optimizer definition for its Optax transform')
SECTION_TRAVERSALS = 'Traversals and MultiOptimizer'
SECTION_OVERRIDES = 'Per-step hyper-parameter overrides'
SECTION_WEIGHT_NORM = 'Weight normalization'
SECTION_LOOP = 'Step 3: Move the training loop to TrainState or nnx.Optimizer'
SECTION_REPLICATION = 'Replication'
SECTION_DYNAMIC_SCALE = 'Mixed precision (DynamicScale)'
SECTION_CHECKPOINTS = 'Step 4: Convert checkpoints'
SECTION_STRICT = 'Step 5: Remove the shim and turn on strict mode'

SECTIONS = (SECTION_INSTALL, SECTION_FIND, SECTION_ALGORITHMS,
            SECTION_TRAVERSALS, SECTION_OVERRIDES, SECTION_WEIGHT_NORM,
            SECTION_LOOP, SECTION_REPLICATION, SECTION_DYNAMIC_SCALE,
            SECTION_CHECKPOINTS, SECTION_STRICT)

# ----------------------------------------------------------------------------
# The members' names: what detection matches.

# flax.optim.Optimizer (a flax struct: ``replace`` is its dataclass method,
# ``state`` a field that other objects also have: both are words too common
# to be told apart by name alone, so they are not rows of ``MEMBERS``).
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

# flax.optim's classes that detection names (its algorithms are
# legacy_optim's catalogue's, its traversals ``_names.TRAVERSALS``).
OPTIMIZER_CLASS = 'Optimizer'
DEF_CLASS = 'OptimizerDef'
MULTI_OPTIMIZER_CLASS = 'MultiOptimizer'
WEIGHT_NORM_CLASS = 'WeightNorm'
REPLICATED_OPTIMIZER_CLASS = 'ReplicatedOptimizer'
DYNAMIC_SCALE_CLASS = 'DynamicScale'
OPTIMIZER_STATE_CLASS = 'OptimizerState'

# ----------------------------------------------------------------------------
# The rules: one per kind of finding.

PREFIX = 'FOC'
IMPORT = 'import'
SHIM = 'shim'
OPTIMIZER_DEF_SUBCLASS = 'optimizer_def_subclass'
MULTI_OPTIMIZER = 'multi_optimizer'
TRAVERSAL = 'traversal'
WEIGHT_NORM = 'weight_norm'
APPLY_GRADIENT_OVERRIDES = 'apply_gradient_overrides'
CHECKPOINT = 'checkpoint'
DYNAMIC_SCALE = 'dynamic_scale'
REMOVED_API = 'removed_api'
UNUSED_NOQA = 'unused_noqa'
OPTIMIZER_ESCAPE = 'optimizer_escape'


# ----------------------------------------------------------------------------
# Removed jax/flax APIs whose fix is one text (FOC2xx): the ``Removal.old``
# texts of those rows and what replaces each (scan's replacement, migrate's
# note where it leaves one, the runtime layer's fix or refusal:
# ``compat.codemod._removals`` matches them).

OMNISTAGING = 'jax.config.enable_omnistaging()'  # (either spelling)
LR_SCHEDULE = 'flax.training.lr_schedule'
POP_UNPACKING = 'FrozenDict.pop unpacking'
FROZEN_COPY = 'FrozenDict.copy(add_or_replace)'
POSITIONAL_MASK = ('MultiHeadDotProductAttention(...)(inputs_q, inputs_kv, '
                   'mask)')
FLAX_NN = 'flax.nn'
REMOVAL_FIXES = {
    OMNISTAGING: (
        'jax.config.enable_omnistaging() was removed: omnistaging is always '
        'on (jax >= 0.2.12); delete the call'),
    # flax.training.lr_schedule went with flax.optim. The stock Optax
    # figures are measured by scripts/schedule_deviation.py
    # (tests/test_lr_schedule.py keeps this text equal to what it prints).
    LR_SCHEDULE: (
        'flax.training.lr_schedule was removed: flax_optim_rules.lr_schedule '
        'has its three helpers with flax 0.5.3\'s values bit for bit (migrate '
        'rewrites the imports). Stock Optax, measured against flax 0.5.3 on '
        'jitted int32 steps by scripts/schedule_deviation.py: constant: '
        'optax.constant_schedule(base) is bit-identical, with warmup '
        'optax.linear_schedule(0., base, warmup_steps) deviates by up to '
        '1.9e-07 relative; stepped: optax.piecewise_constant_schedule(base, '
        '{boundary_step + 1: factor / previous_factor}) deviates by up to '
        '9.3e-08 relative, with warmup optax.join_schedules(['
        'optax.linear_schedule(0., base, warmup_steps), the piecewise schedule '
        'shifted by warmup_steps], [warmup_steps]) deviates by up to 1.0e+00 '
        'relative (a drop inside the warmup is lost); cosine: '
        'optax.cosine_decay_schedule(base, halfcos_steps) is bit-identical up '
        'to halfcos_steps (after it flax\'s wave rises again, Optax stays at '
        '0), with warmup optax.warmup_cosine_decay_schedule(0., base, '
        'warmup_steps, halfcos_steps) deviates by up to 7.8e-01 relative '
        '(flax multiplies the whole cosine by the ramp)'),
    POP_UNPACKING: (
        'flax.core.pop(variables, key): init returns a plain dict today, '
        'whose pop gives only the value'),
    FROZEN_COPY: (
        'flax.core.copy(variables, add_or_replace): init returns a plain '
        'dict today, whose copy takes no argument'),
    POSITIONAL_MASK: (
        'the call now takes (inputs_q, inputs_k, inputs_v, *, mask): pass '
        'the mask as mask=...'),
    FLAX_NN: (
        'flax.nn (pre-Linen modules) is out of scope: port the model to '
        'flax.linen by hand (no mechanical rewrite exists; parameters and '
        'the module API both changed)'),
}


def removal_fix(old: str) -> str:
  """What replaces the removed API ``old`` (a key of ``REMOVAL_FIXES``)."""
  return REMOVAL_FIXES[old]


# What replaces the removed APIs of a group whose rows fill their fix in
# (``compat.codemod._removals``: a module that moved, a flax.nn activation,
# jax.ops.index_*; the reasons a row's rewrite is not written): fields in
# braces, ``{old}`` the removed name, ``{fix}`` the row's fix.
REMOVAL_MOVED = 'moved'
REMOVAL_SAME_FUNCTION = 'same_function'
REMOVAL_AT_METHOD = 'at_method'
REMOVAL_CALL_KEPT = 'call_kept'  # keywords or unpacking
REMOVAL_IMPORT_KEPT = 'import_kept'  # names that did not move alike
REMOVAL_STAR_IMPORT = 'star_import'  # lr_schedule's helpers by ``*``
REMOVAL_TEMPLATES = {
    REMOVAL_MOVED: '{old} moved to {new}',
    REMOVAL_SAME_FUNCTION: '{new} (the same function)',
    REMOVAL_AT_METHOD: (
        '{old}(x, idx, y) was removed: '
        'jax.numpy.asarray(x).at[idx].{method}(y)'),
    REMOVAL_CALL_KEPT: (
        '{fix} (a call with keywords or unpacking is not rewritten)'),
    REMOVAL_IMPORT_KEPT: (
        '{fix} (import it from there; an import that also names others is '
        'not rewritten)'),
    REMOVAL_STAR_IMPORT: (
        'import the helpers by name from {module} (`*` or a private name is '
        'not rewritten); {fix}'),
}


def removal_text(name: str, /, **fields) -> str:
  """The text ``REMOVAL_TEMPLATES[name]`` with its fields filled in."""
  return REMOVAL_TEMPLATES[name].format(**fields)


class Rule(NamedTuple):
  code: str  # FOCnnn: never changes meaning (--select, noqa comments, config)
  construct: str  # the finding's construct ('create', 'removed_api', ...)
  title: str  # one line, what the finding is
  section: str  # heading of migration_guide.md that explains it
  # What replaces it (scan reports it as is, the warnings in a sentence);
  # None where the finding says it case by case.
  replacement: Optional[str] = None
  # For FOC2xx: the ``Removal.old`` texts of the rows it covers (a prefix
  # ending in '.' or '_' covers every name that starts with it).
  removals: tuple = ()
  # Detection keys a module that cannot name flax.optim must spell for the
  # rule to find something there (the prefilter's words): ``methods`` as an
  # attribute's name (``optimizer.apply_gradient``; a call of one is the
  # finding), ``words`` anywhere, ``packages`` (a package the module
  # imports: ``import compat``, ``from compat import to_optax``) anywhere
  # but right after a dot (``tf.compat.v1`` is TensorFlow's).
  methods: tuple = ()
  words: tuple = ()
  packages: tuple = ()


RULES = (
    Rule('FOC101', IMPORT, 'flax.optim (or legacy_optim) is imported',
         SECTION_ALGORITHMS,
         'import optax and flax_optim_rules (flax-optim-compat migrate drops '
         'this import once nothing uses it; the shim serves it until step 5)'),
    Rule('FOC102', SHIM, 'a flax-optim-compat bridge or the legacy_optim '
         'shim is used', SECTION_STRICT,
         'remove once migrated: uninstall flax-optim-compat',
         packages=('compat',)),
    Rule('FOC103', OPTIMIZER_DEF, 'a flax.optim optimizer definition '
         '(optim.Adam(...))', SECTION_ALGORITHMS),
    Rule('FOC104', OPTIMIZER_DEF_SUBCLASS, 'a user subclass of '
         'flax.optim.OptimizerDef', SECTION_ALGORITHMS,
         'what flax-optim-compat migrate writes: the class unchanged on '
         'flax_optim_rules.RuleDef (OptimizerState(...) -> '
         'flax_optim_rules.RuleState(...)), Rule(...).to_optax() as its '
         'transform (same numbers, no flax.optim); then port the rule to a '
         'plain optax.GradientTransformation by hand (migrate --write puts a '
         'test beside the module that proves the port equal)'),
    Rule('FOC105', MULTI_OPTIMIZER, 'flax.optim.MultiOptimizer',
         SECTION_TRAVERSALS,
         'flax_optim_rules.multi_optimizer((traversal0, tx0), ...) with '
         'flax_optim_rules.ModelParamTraversal traversals (what migrate '
         "writes: optax.partition({'0': tx0, ..., 'frozen': "
         'optax.set_to_zero()}, labels)); same numbers: opt_def.to_optax()'),
    Rule('FOC106', TRAVERSAL, 'a flax.optim traversal (ModelParamTraversal,'
         ' focus=)', SECTION_TRAVERSALS,
         'flax_optim_rules.ModelParamTraversal(filter_fn) in '
         'flax_optim_rules.multi_optimizer pairs (what migrate writes); '
         'optax.partition labels: flax_optim_rules.traversal_labels(params, '
         'traversal) or flax.traverse_util.path_aware_map(lambda path, _: '
         '..., params)', words=('traverse_util',)),
    Rule('FOC107', WEIGHT_NORM, 'flax.optim.WeightNorm', SECTION_WEIGHT_NORM,
         'flax_optim_rules.weight_norm(tx, wn_decay=..., wn_eps=...) around '
         'the wrapped rule, what flax-optim-compat migrate writes (same '
         'numbers; stock Optax has no counterpart), or reparameterise the '
         'model with flax.linen.WeightNorm'),
    Rule('FOC108', CREATE, 'OptimizerDef.create(params)', SECTION_LOOP,
         'train_state.TrainState.create(apply_fn=None, params=params, '
         'tx=opt_def), opt_def being the transform flax-optim-compat migrate '
         'writes for the definition (it rewrites both; an '
         'existing optimizer: compat.to_train_state(optimizer, apply_fn), '
         'compat.to_optax(optimizer) or compat.to_nnx_optimizer(optimizer, '
         'model))'),
    Rule('FOC109', APPLY_GRADIENT, 'Optimizer.apply_gradient(grads)',
         SECTION_LOOP, 'state = state.apply_gradients(grads=grads)',
         methods=(APPLY_GRADIENT,)),
    Rule('FOC110', APPLY_GRADIENT_OVERRIDES, 'apply_gradient with per-step '
         'hyper-parameter overrides', SECTION_OVERRIDES,
         'what flax-optim-compat migrate writes for learning_rate=lr: '
         'state.replace(opt_state=optax.tree_utils.tree_set(state.opt_state, '
         'learning_rate=lr)).apply_gradients(grads=grads), the definition '
         'wrapped in flax_optim_rules.inject_learning_rate (stock rules: '
         'optax.inject_hyperparams); or a schedule: '
         'opt_def.to_optax(learning_rate=schedule)'),
    Rule('FOC111', COMPUTE_GRADIENT, 'Optimizer.compute_gradient(loss_fn)',
         SECTION_LOOP,
         'loss, grads = jax.value_and_grad(loss_fn)(params) (has_aux=True '
         'when loss_fn returns (loss, aux))',
         methods=(COMPUTE_GRADIENT, COMPUTE_GRADIENTS)),
    Rule('FOC112', OPTIMIZE, 'Optimizer.optimize(loss_fn)', SECTION_LOOP,
         'grads = jax.grad(loss_fn)(state.params); state = '
         'state.apply_gradients(grads=grads)', methods=(OPTIMIZE,)),
    Rule('FOC113', REPLICATE, 'Optimizer.replicate() or ReplicatedOptimizer',
         SECTION_REPLICATION,
         'flax.jax_utils.replicate(state) and jax.lax.pmean(grads, axis_name) '
         'in the pmapped step, or jax.jit with jax.sharding '
         '(compat.state_shardings)', methods=(REPLICATE,)),
    Rule('FOC114', CHECKPOINT, 'a flax.optim Optimizer saved or restored as '
         'a checkpoint', SECTION_CHECKPOINTS,
         'checkpoint the TrainState (Orbax); convert old files with '
         'flax-optim-compat convert SRC DST --to train_state '
         '(compat.convert_checkpoint)'),
    Rule('FOC115', DYNAMIC_SCALE, 'flax.optim.DynamicScale',
         SECTION_DYNAMIC_SCALE,
         'flax.training.dynamic_scale.DynamicScale({args}) (same algorithm and '
         'value_and_grad API)'),
    Rule('FOC116', 'annotation', 'a flax.optim class in a type annotation',
         SECTION_LOOP),
    Rule('FOC117', 'reference', 'another reference to a flax.optim name '
         '(OptimizerState(...), an alias, a class used as a value)',
         SECTION_LOOP),
    Rule('FOC118', OPTIMIZER_USE, 'a member of a flax.optim Optimizer read '
         '(optimizer.target, optimizer.state.step, .replace(target=...))',
         SECTION_LOOP),
    Rule('FOC119', OPTIMIZER_ESCAPE, 'a flax.optim Optimizer going on to '
         'code migrate cannot follow (stored in an attribute, passed to an '
         'unproven call): its whole flow stays', SECTION_LOOP),
    Rule('FOC200', REMOVED_API, 'another removed jax/flax API', SECTION_FIND),
    Rule('FOC201', REMOVED_API, 'jax.tree_* moved to jax.tree_util',
         SECTION_FIND, removals=('jax.tree_', 'jax.tree_util.tree_multimap')),
    Rule('FOC202', REMOVED_API, 'jax.host_* renamed to jax.process_*',
         SECTION_FIND, removals=('jax.host_',)),
    Rule('FOC203', REMOVED_API, 'jax.profiler.StepTraceContext renamed '
         'StepTraceAnnotation', SECTION_FIND,
         removals=('jax.profiler.StepTraceContext',)),
    Rule('FOC204', REMOVED_API, 'DeviceArray is jax.Array', SECTION_FIND,
         removals=('jax.numpy.DeviceArray',
                   'jax.interpreters.xla.DeviceArray')),
    Rule('FOC205', REMOVED_API, 'from jax.config import config',
         SECTION_FIND, removals=('from jax.config import config',)),
    Rule('FOC206', REMOVED_API, 'jax.config.enable_omnistaging() (a no-op '
         'today)', SECTION_FIND,
         removals=(OMNISTAGING,
                   'jax.config.config.enable_omnistaging()')),
    Rule('FOC207', REMOVED_API, 'flax.training.lr_schedule', SECTION_FIND,
         removals=(LR_SCHEDULE,)),
    Rule('FOC208', REMOVED_API, "FrozenDict.pop unpacking (rest, params = "
         "variables.pop('params'))", SECTION_FIND,
         removals=(POP_UNPACKING,)),
    Rule('FOC209', REMOVED_API, 'FrozenDict.copy(add_or_replace)',
         SECTION_FIND, removals=(FROZEN_COPY,)),
    Rule('FOC210', REMOVED_API, 'MultiHeadDotProductAttention with a '
         'positional mask', SECTION_FIND,
         removals=('MultiHeadDotProductAttention(',)),
    Rule('FOC211', 'out_of_scope', 'flax.nn (pre-Linen modules): port by '
         'hand', SECTION_FIND, removals=(FLAX_NN,)),
    Rule('FOC901', UNUSED_NOQA, 'a # noqa code that suppresses nothing',
         SECTION_FIND),
)
BY_CONSTRUCT = {rule.construct: rule for rule in RULES if not rule.removals}

# What replaces a feature no code of its own names: a checkpoint pickled
# whole (a finding of ``checkpoint``, told by its text).
PICKLE = 'pickle'
PICKLE_REPLACEMENT = (
    'a TrainState does not pickle (its tx holds functions): save it with '
    'flax.serialization.to_bytes or Orbax, or pickle '
    'flax_optim_rules.legacy_tree(state) (migrated code) and read it '
    'back with '
    'flax_optim_rules.from_legacy_tree(state, tree); a pickle written '
    'before holds a flax.optim Optimizer: load it with flax-optim-compat '
    'installed (the flax.optim import alias) and continue it with '
    'compat.to_train_state(optimizer, apply_fn)')
# What replaces a restore of a template that holds an optimizer in a
# field (a finding of ``checkpoint``, told by its text:
# ``compat.codemod._restores``).
EITHER_LAYOUT_REPLACEMENT = (
    'flax_optim_rules.from_either_layout(template, the same restore given '
    'no template): the template now holds a TrainState; migrate rewrites '
    'the restore to read checkpoints of either layout')
# What replaces a call giving an optimizer to a function of the user's
# that only saves or restores it with flax.serialization (a finding of
# ``checkpoint``: ``compat.codemod._serialization_helpers``).
THROUGH_HELPER_REPLACEMENT = (
    'flax_optim_rules.legacy_tree(opt) where the optimizer goes in, '
    'flax_optim_rules.from_legacy_tree(opt, ...) around a restore: this '
    'function of yours only saves or restores it with flax.serialization, '
    "so migrate keeps it and its files keep flax.optim's layout")
# What replaces a construction of the user's own rule class (a finding of
# ``optimizer_def``, told by its text: ``compat.codemod._user_rules``).
USER_RULE_REPLACEMENT = (
    'Rule(...).to_optax(): the class, kept on flax_optim_rules.RuleDef, '
    'gives its Optax transform')
# What replaces a flax.optim definition (FOC103) in each tier of migrate
# (``--tier``): the exact one (flax_optim_rules, what migrate writes by
# default), then the nearest stock Optax expression where one exists.
TIER_EXACT = 'exact'
TIER_STOCK = 'stock'
TIER_REPLACEMENTS = {
    TIER_EXACT: '{expression} (what migrate writes: same numbers as flax '
                '0.5.3)',
    TIER_STOCK: 'nearest stock Optax (migrate --tier stock): {expression} '
                '[{deviation}]',
}

# What replaces a rule named at run time (``getattr(flax.optim, name)(...)``,
# a finding of ``optimizer_def``).
BY_NAME_REPLACEMENT = (
    'flax_optim_rules.rule_named(name)(**hyper_params) (what migrate '
    'writes: the rule of that name, same numbers as flax 0.5.3)')

# ----------------------------------------------------------------------------
# The fixes that rest on an assumption or on a proof that only a narrower
# shape allows, and the applicability of each (ruff's ``Applicability``). A
# ``SAFE`` fix is proven (its row says what is proven): migrate applies it
# and notes it with that reason (``PROVEN_FIX_NOTE``); a fix no row lists is
# proven too. An ``UNSAFE`` fix rests on the assumption its row states:
# migrate applies it only with ``--unsafe-fixes`` and lists it with that
# assumption either way; without the option its place holds the flow, for
# ``why`` (``HIDDEN_FIX_REASON``).

SAFE = 'safe'
UNSAFE = 'unsafe'


class Fix(NamedTuple):
  name: str
  construct: str  # the rule whose finding it answers (a construct of RULES)
  applicability: str  # SAFE or UNSAFE
  # Why the place holds the flow where the fix is not applied (fields in
  # braces: the finding's own); None for a SAFE fix, applied wherever its
  # flow migrates.
  why: Optional[str]
  # What the fix rests on (the report's sentence; fields in braces): for an
  # UNSAFE fix what it assumes, for a SAFE fix what is proven.
  grounds: str


GENERIC_TREE_WALKER = 'generic_tree_walker'
GENERIC_TREE_WALKER_STATE_DICT = 'generic_tree_walker_state_dict'
DECORATED_FACTORY = 'decorated_factory'
FIXES = (
    # An optimizer in a dict a function of the user's takes apart as a tree
    # (``compat.codemod._tree_walkers``): the shape of the function is read,
    # what it does with a TrainState's tree is not proven.
    Fix(GENERIC_TREE_WALKER, OPTIMIZER_ESCAPE, UNSAFE,
        'the optimizer `{text}` goes into a dict saved or loaded as a tree '
        'through a function migrate does not prove takes it only as a tree '
        '(it would keep flax.optim\'s layout with '
        'flax_optim_rules.legacy_tree({text}))',
        '{name}() ({where}) is taken for a generic tree walker: it tests a '
        'node only for its kind (isinstance, dataclasses.is_dataclass), '
        'recurses into its entries and gives the others back as leaves, '
        'reading no member of the Optimizer. Assumed: it meets '
        'flax_optim_rules.legacy_tree(...) (a dataclass with the '
        'Optimizer\'s leaves, order and state dict) as it met the Optimizer, '
        'so what it writes or gives back keeps flax.optim\'s names and '
        'order: files the original program wrote through it still load, and '
        'it loads the new ones'),
    # The same, where the walker first replaces a dataclass node by its
    # state dict (``_tree_walkers``): the Optimizer and the tree standing
    # for it are dataclasses with equal state dicts
    # (tests/test_legacy_tree.py), so nothing after that meets either.
    Fix(GENERIC_TREE_WALKER_STATE_DICT, OPTIMIZER_ESCAPE, SAFE, None,
        '{name}() ({where}) replaces a dataclass node by '
        'flax.serialization.to_state_dict(node) before anything else reads '
        'it, and flax_optim_rules.legacy_tree(...) is a dataclass whose '
        'state dict equals the Optimizer\'s: proven to give back the same '
        'names and leaves for both, so files the original program wrote '
        'through it still load and it loads the new ones'),
    # A factory the project calls, wrapped by decorators (gin's
    # ``configurable``): its body is proven, its decorators and their
    # registry are not read.
    Fix(DECORATED_FACTORY, OPTIMIZER_ESCAPE, UNSAFE,
        '{name}() is decorated with `{decorator}`: its callers are not in '
        'the scanned code',
        '{decorators} of {name}() hands each call to its body and gives back '
        'what the body returns (a flax.optim definition, now an Optax '
        'transform), and nothing outside the scanned code calls it (a config '
        'file binding it, another package): such a caller would get the '
        'Optax transform'),
)
FIXES_BY_NAME = {fix.name: fix for fix in FIXES}
HIDDEN_FIX_REASON = ('{why}; an unsafe fix is available, hidden without '
                     '--unsafe-fixes: {assumption}')


# The note of a SAFE fix of ``FIXES`` where it is applied.
PROVEN_FIX_NOTE = 'proven fix applied: {grounds}'

# How migrate's report speaks of the unsafe fixes (ruff's wording): the
# terminal's line for each one applied and for those hidden (``{fixes}``:
# 'fix' or 'fixes'), the Markdown report's heading of each group.
UNSAFE_FIX_APPLIED_LINE = '{where}: unsafe fix applied: {assumption}'
UNSAFE_FIXES_HIDDEN_LINE = (
    '{count} hidden {fixes} can be enabled with the `--unsafe-fixes` option '
    '(each rests on the assumption named above)')
UNSAFE_FIXES_APPLIED_HEADING = (
    'Applied (--unsafe-fixes), each resting on the assumption stated: '
    'check it (e.g. `--prove`):')
UNSAFE_FIXES_HELD_HEADING = (
    'Enabled, not applied: the flow each is in stays as it was for its '
    'other links (listed under its file):')
UNSAFE_FIXES_HIDDEN_HEADING = (
    'Available, not applied: {count} hidden fix(es) can be enabled with the '
    '`--unsafe-fixes` option; each flow they would release stays on the '
    'shim until then:')


def unsafe_assumption(fix_name: str, **fields) -> str:
  """What the fix ``fix_name`` assumes, filled in with ``fields``; its row
  must be ``UNSAFE`` (a proven fix states no assumption)."""
  return _grounds(fix_name, UNSAFE, 'it states no assumption', fields)


def proven_grounds(fix_name: str, **fields) -> str:
  """What is proven of the fix ``fix_name``, filled in with ``fields``; its
  row must be ``SAFE`` (an unsafe fix proves nothing)."""
  return _grounds(fix_name, SAFE, 'it proves nothing', fields)


def _grounds(fix_name: str, applicability: str, otherwise: str,
             fields) -> str:
  fix = FIXES_BY_NAME[fix_name]
  if fix.applicability != applicability:
    raise ValueError(f'fix {fix_name!r} is {fix.applicability}: {otherwise}')
  return fix.grounds.format(**fields)


def fix_why(fix_name: str, **fields) -> str:
  """Why the place of the fix ``fix_name`` holds its flow where it is not
  applied, filled in with ``fields``."""
  return FIXES_BY_NAME[fix_name].why.format(**fields)


# ----------------------------------------------------------------------------
# The texts of migrate's notes and of the reasons it gives for what it
# leaves: one row each, with the rule (a construct of ``RULES``) whose
# finding it is said of, None where it is said of any. Fields in braces are
# filled where it is said.


class Note(NamedTuple):
  name: str
  construct: Optional[str]
  text: str


HELD = 'held'  # a finding a # noqa or the selected codes hold
HELD_BY_ANOTHER_LINK = 'held_by_another_link'  # its flow held elsewhere
KEPT_WITH_FLOW = 'kept_with_flow'  # how a link's reason starts
CALLED_NOWHERE = 'called_nowhere'  # a factory migrated as dead code
CHECKPOINT_LAYOUT = 'checkpoint_layout'  # a checkpoint now of a TrainState
PICKLE_UNPROVEN = 'pickle_unproven'  # a pickle of what may be the optimizer
LAYOUT_KEY = 'layout_key'  # a read of flax.optim's checkpoint keys
HAND_BUILT = 'hand_built'  # Optimizer(definition, state, target)
# Reasons several planners give for a link they leave.
STARRED_ARGUMENTS = 'starred_arguments'  # f(*args, **kwargs)
NO_LEARNING_RATE = 'no_learning_rate'  # a definition without its rate
JAX_TAKEN = 'jax_taken'  # a rewrite writing ``jax.`` where that is not jax
# Why ``.replicate()`` stays (``{problem}``: one of the four after it).
REPLICATE_LEFT = 'replicate_left'
REPLICATE_ARGUMENTS = 'replicate_arguments'  # not (devices, axis_name)
REPLICATE_AXIS_NOT_LITERAL = 'replicate_axis_not_literal'
REPLICATE_AXES_DIFFER = 'replicate_axes_differ'
REPLICATE_CHECKPOINTED = 'replicate_checkpointed'  # a checkpoint sees it
# Why ``.create(...)`` stays.
CREATE_ARGUMENTS = 'create_arguments'  # not create(target, focus=None)
CREATE_FOCUS = 'create_focus'  # a focus selecting parameters
# A read of a definition's attribute (``{attr}``) the transform lacks.
DEFINITION_MEMBER = 'definition_member'
# A finding of the flow no edit covers (``{callers}``: ': ' and the calls
# that leave it unproven, or nothing).
NOT_PROVABLY_OPTIMIZER = 'not_provably_optimizer'
# Why a definition's call stays (``_plan_rules``).
NOT_BUILT_IN = 'not_built_in'  # a rule name flax.optim does not have
RATE_SET_TWICE = 'rate_set_twice'  # two ``**`` spreads
POSITIONAL_STARRED = 'positional_starred'
STOCK_SPREAD = 'stock_spread'  # ``**`` in the stock tier
# Why MultiOptimizer(...) stays (``_multi``; ``{index}`` counts from 1).
MULTI_KEYWORDS = 'multi_keywords'
MULTI_NOT_PAIR = 'multi_not_pair'
MULTI_TRAVERSAL_UNPROVEN = 'multi_traversal_unproven'
MULTI_DEFINITION_UNPROVEN = 'multi_definition_unproven'
# Why a wrapper's definition (``{name}``: WeightNorm) stays.
WRAPPED_UNPROVEN = 'wrapped_unproven'
# Why Optimizer(definition, state, target) stays.
HAND_BUILT_DEF_UNPROVEN = 'hand_built_def_unproven'
# Why a function's parameter is not an optimizer (``{where}``: path:line).
PARAMETER_PASSED_UNPROVEN = 'parameter_passed_unproven'
# Why ``self.<attr>`` is not an optimizer (``{because}``: ': ' and the
# flow's reason, or nothing).
SELF_ATTRIBUTE_ALSO_TAKES = 'self_attribute_also_takes'
SELF_ATTRIBUTE_UNPROVEN = 'self_attribute_unproven'
# A flax.optim name imported from a module that re-exports it.
REEXPORTED = 'reexported'
# Why an optimizer's flow stays where the optimizer goes on to code migrate
# cannot follow (``compat.codemod._escape_analysis``, ``_legacy_trees``):
# ``{text}`` is the optimizer's source, the other fields the sources and
# names of the places it reaches. A reason that may follow (``{read}`` of
# ESCAPE_NAME_ALSO_HOLDS, ``{why}`` of ESCAPE_STORED and
# ESCAPE_UNPACKED_UNPROVEN) is filled with ' (', the reason and ')', or
# with nothing.
ESCAPE_STEP_STARRED = 'escape_step_starred'
ESCAPE_STEP_UNPROVEN = 'escape_step_unproven'
ESCAPE_TUPLE_ATTRIBUTE = 'escape_tuple_attribute'
ESCAPE_TUPLE_GOES_INTO = 'escape_tuple_goes_into'
ESCAPE_TUPLE_INDEXED = 'escape_tuple_indexed'
ESCAPE_REPLICATED_TREE = 'escape_replicated_tree'
ESCAPE_TREE_UNPROVEN = 'escape_tree_unproven'
ESCAPE_TREE_READ_BACK = 'escape_tree_read_back'
ESCAPE_GOES_INTO = 'escape_goes_into'
ESCAPE_NAME_ALSO_HOLDS = 'escape_name_also_holds'
ESCAPE_NAME_HOLDS_TUPLE = 'escape_name_holds_tuple'
ESCAPE_STORED = 'escape_stored'
ESCAPE_UNPACKED_COUNT = 'escape_unpacked_count'
ESCAPE_UNPACKED_NESTED = 'escape_unpacked_nested'
ESCAPE_UNPACKED_UNPROVEN = 'escape_unpacked_unproven'
ESCAPE_PICKLED = 'escape_pickled'
ESCAPE_TUPLE_ELEMENT = 'escape_tuple_element'
# (``{where}``: RETURNER_METHOD or RETURNER_NESTED)
ESCAPE_RETURNED_UNFOLLOWED = 'escape_returned_unfollowed'
ESCAPE_RETURNER_USED = 'escape_returner_used'
ESCAPE_RETURNER_USED_ELSEWHERE = 'escape_returner_used_elsewhere'
ESCAPE_RETURNS_MIXED = 'escape_returns_mixed'
ESCAPE_RETURNS_TUPLE = 'escape_returns_tuple'
ESCAPE_PASSED = 'escape_passed'
ESCAPE_TUPLE_ARGUMENTS = 'escape_tuple_arguments'  # not a pool's apply_async
# What a factory or rule class called nowhere is now (``{now}`` of
# CALLED_NOWHERE; ``{rule_base}``: the class it is kept on).
CALLED_NOWHERE_FACTORY = 'called_nowhere_factory'
CALLED_NOWHERE_RULE = 'called_nowhere_rule'
# Why a use of an optimizer stays (``_plan_uses``).
CREATE_NAME_ALSO_HOLDS = 'create_name_also_holds'
REPLICA_STEP_UNPROVEN = 'replica_step_unproven'  # .replicate()/.unreplicate()
# (``{why}``: ': ' and the member's note, or nothing)
NO_TRAIN_STATE_COUNTERPART = 'no_train_state_counterpart'
CALL_ARGUMENTS_UNMAPPED = 'call_arguments_unmapped'
CALL_RESULT_NOT_UNPACKED = 'call_result_not_unpacked'
RESTORE_TEMPLATE_AGAIN = 'restore_template_again'
LEGACY_TREE_REPLICATED = 'legacy_tree_replicated'
APPLY_GRADIENT_ARGUMENTS = 'apply_gradient_arguments'
REPLICATE_PROBLEM = 'replicate_problem'  # (``{problem}``: REPLICATE_*'s)
REPLICATED_UNPROVEN = 'replicated_unproven'
RATE_SET_ELSEWHERE = 'rate_set_elsewhere'
OVERRIDES_NOT_RATE = 'overrides_not_rate'
EVALUATED_TWICE = 'evaluated_twice'
# Why a restore is not rewritten to read both layouts (``_restores``;
# ``{stock}``: ' --stock' in the stock tier, or nothing).
RESTORE_ONE_LAYOUT = 'restore_one_layout'
RESTORE_REFUSES = 'restore_refuses'  # rewritten, refusing some old files
NOT_A_RESTORE = 'not_a_restore'
RESTORE_TARGET_UNKNOWN = 'restore_target_unknown'
RESTORE_KEYWORDS = 'restore_keywords'
FROM_BYTES_BARE = 'from_bytes_bare'
RESTORE_UNBOUND = 'restore_unbound'
# Why flax.optim's layout of a state is not read or written
# (``_state_layout``).
STOCK_TIER_LAYOUT = 'stock_tier_layout'
DEFINITIONS_NOT_LAID_OUT = 'definitions_not_laid_out'
STATE_ASSIGNED = 'state_assigned'
LAYOUT_MEMBER_NOT_CALLED = 'layout_member_not_called'
LAYOUT_MEMBER_ARGUMENTS = 'layout_member_arguments'
REPLACE_UNMAPPED = 'replace_unmapped'
# Why a value stored in an optimizer field is not one (``_plan_records``;
# ``{cause}``: ' (', why and ')', or nothing).
FIELD_STORE_UNPROVEN = 'field_store_unproven'
CREATED_FROM_PARAMETER = 'created_from_parameter'
# Why a read of a dict saved as a tree is not followed (``_flow_queries``).
TREE_READ_NOT_BACK = 'tree_read_not_back'
# Why the optimizers a function returns in a dict are not followed
# (``_dict_returns``).
DICT_RETURNED_UNFOLLOWED = 'dict_returned_unfollowed'
DICT_KEY_CLASH = 'dict_key_clash'
DICT_GIVER_USED_OTHERWISE = 'dict_giver_used_otherwise'
DICT_GIVER_ALIASED = 'dict_giver_aliased'
DICT_GIVER_MODULE_ALONE = 'dict_giver_module_alone'
DICT_GIVER_ELSEWHERE = 'dict_giver_elsewhere'
DICT_READ_UNTESTED = 'dict_read_untested'
DICT_NAME_USED = 'dict_name_used'
DICT_SPREAD = 'dict_spread'  # (also of a dict saved as a tree)
DICT_GIVER_NOT_CALLED = 'dict_giver_not_called'
DICT_CALL_UNBOUND = 'dict_call_unbound'
DICT_NAME_REBOUND = 'dict_name_rebound'
# (of the name bound to the dict, which the reason follows)
DICT_NAME_GOES_INTO = 'dict_name_goes_into'
DICT_READ_BY_UNKNOWN_KEY = 'dict_read_by_unknown_key'
# Why a dict holding an optimizer is not only saved or loaded as a tree
# (``_legacy_trees``; ``{entry}``: a read of one of its entries).
TREE_NAME_READ_NESTED = 'tree_name_read_nested'
TREE_NAME_USED = 'tree_name_used'
TREE_ENTRY_KEY = 'tree_entry_key'
TREE_ENTRY_REPLACED = 'tree_entry_replaced'
TREE_ENTRY_DELETED = 'tree_entry_deleted'
TREE_ENTRY_READ_BACK = 'tree_entry_read_back'
TREE_PASSED_UNSEEN = 'tree_passed_unseen'
TREE_NO_PARAMETER = 'tree_no_parameter'
TREE_PASSED_TOO_DEEP = 'tree_passed_too_deep'
TREE_IN_FUNCTION = 'tree_in_function'  # a callee's reason, where it is
TREE_VALUE_NOT_NAME = 'tree_value_not_name'
TREE_DICT_OUTSIDE_FUNCTION = 'tree_dict_outside_function'
TREE_READ_ROOT_OTHER = 'tree_read_root_other'
TREE_ROOT_ASSIGNED_BETWEEN = 'tree_root_assigned_between'
# Why a flow stays across modules (``_project_links``: a link's reason).
RULE_CLASS_GOES_INTO = 'rule_class_goes_into'
CALLS_OPTIMIZER_FUNCTION = 'calls_optimizer_function'
OVERRIDE_NOT_DEFINITION = 'override_not_definition'
METHOD_CALLED_NOWHERE = 'method_called_nowhere'
CALLED_NOWHERE_BUT = 'called_nowhere_but'  # (``{where}``: how it is named)
FIELD_USED_UNTYPED = 'field_used_untyped'
FIELD_HOLDER_TOUCHED = 'field_holder_touched'
FIELD_READ_BY_POSITION = 'field_read_by_position'
FIELD_HELD = 'field_held'  # (``{why}``: one of the two before it)
DEFINITION_GOES_INTO = 'definition_goes_into'
DEFINITION_RETURNED = 'definition_returned'
DEFINITION_NAME_GOES_ON = 'definition_name_goes_on'
DEFINITION_NEVER_CREATED = 'definition_never_created'
# Why migrate does not follow ``self.<attr>`` (``_self_holders``), into
# another module first.
SELF_ACROSS_MODULES = 'self_across_modules'
SELF_ONE_MODULE = 'self_one_module'
SELF_PROTOCOL = 'self_protocol'  # __getattr__, __dict__, ... defined
SELF_PROPERTY_PATHS = 'self_property_paths'
SELF_REBOUND = 'self_rebound'
SELF_PROTOCOL_REACHED = 'self_protocol_reached'
SELF_INSTANCE_GOES_INTO = 'self_instance_goes_into'
SELF_STORE_NOT_ASSIGNED = 'self_store_not_assigned'
SELF_TAKES_PART = 'self_takes_part'
SELF_ANY_NAME = 'self_any_name'
SELF_SHARED_WITH = 'self_shared_with'
# (``{why}``: SELF_ACROSS_MODULES or SELF_NOT_FOLLOWED_IN)
SELF_SHARED_ELSEWHERE = 'self_shared_elsewhere'
SELF_NOT_FOLLOWED_IN = 'self_not_followed_in'
SELF_NAMED_OUTSIDE = 'self_named_outside'
SELF_NAMED_ELSEWHERE = 'self_named_elsewhere'
SELF_ONE_HOLDER = 'self_one_holder'
SELF_FOREIGN_BASE = 'self_foreign_base'  # (``{origin}``: ' (from x)' or '')
SELF_MADE_BY_DECORATOR = 'self_made_by_decorator'
SELF_NO_METHOD_KEEPS = 'self_no_method_keeps'
# How code outside the scanned modules may reach a function
# (``_mentions``: ``{where}`` of CALLED_NOWHERE_BUT).
SINGLE_FILES = 'single_files'
CALLED_FROM_ANOTHER_MODULE = 'called_from_another_module'
NO_FLOW_THERE = 'no_flow_there'  # a module of the project not read
# Where a function returning an optimizer is (``{where}`` of
# ESCAPE_RETURNED_UNFOLLOWED).
RETURNER_METHOD = 'returner_method'
RETURNER_NESTED = 'returner_nested'
PARAMETER_FUNCTION_USED = 'parameter_function_used'  # (``_params``)
# Why an import or annotation of flax.optim stays (``_plan_imports``).
REEXPORT_KEPT = 'reexport_kept'
ANNOTATION_KEPT = 'annotation_kept'
# What scan says of a statement migrate rewrites, and of what it leaves
# (``_plan_findings``).
MIGRATE_REWRITES = 'migrate_rewrites'
LEFT_BY_MIGRATE = 'left_by_migrate'
# What a factory's result meets where migrate follows it (``_links``,
# ``_multi``).
CREATED_HERE = 'created_here'
RULE_USED_HERE = 'rule_used_here'  # a user rule class called or subclassed
IN_MULTI_OPTIMIZER = 'in_multi_optimizer'
# Why a traversal or a MultiOptimizer's rates stay (``_multi``).
TRAVERSAL_ARGUMENTS = 'traversal_arguments'
TRAVERSAL_BOUND_TWICE = 'traversal_bound_twice'
TRAVERSAL_UNUSED = 'traversal_unused'
TRAVERSAL_REACHES = 'traversal_reaches'
HYPER_PARAMS_LIST = 'hyper_params_list'
# Why a rule chosen by name, or a stock alias, stays (``_plan_rules``).
BY_NAME_STOCK = 'by_name_stock'
BY_NAME_POSITIONAL = 'by_name_positional'
STOCK_NO_INJECT = 'stock_no_inject'
# A user's OptimizerDef subclass kept on flax_optim_rules (``{module}``,
# ``{base}``: where), and why one is not (``_user_rules``; ``{by_hand}``:
# USER_MULTI_BY_HAND, ``{but}``: ' but ' and how it is named, or nothing).
PORT_KEPT_RULE = 'port_kept_rule'
USER_MULTI_BY_HAND = 'user_multi_by_hand'
USER_MULTI_OVERRIDES = 'user_multi_overrides'
USER_MULTI_TRAVERSAL = 'user_multi_traversal'
USER_MULTI_INIT_STATE = 'user_multi_init_state'
USER_RULE_BASES = 'user_rule_bases'
USER_RULE_MISSING = 'user_rule_missing'
USER_RULE_CALLED_NOWHERE = 'user_rule_called_nowhere'
USER_MULTI_OTHER_MODULE = 'user_multi_other_module'
# What migrate's report says of a file's rewrite as a whole, and of what
# is left in its output (``migrate``).
OVERLAPS_REWRITE = 'overlaps_rewrite'
REWRITE_OVERLAPS = 'rewrite_overlaps'  # a flow's link among them
KERNEL_NOT_IMPORT = 'kernel_not_import'
KERNEL_UNDECIDED = 'kernel_undecided'  # a notebook's name bound elsewhere
ROLLED_BACK_BECAUSE = 'rolled_back_because'
ROLLED_BACK = 'rolled_back'
RESCAN_FAILED = 'rescan_failed'
BY_HAND = 'by_hand'  # (``{replacement}``: a finding's)
STILL_NAMED = 'still_named'
NOT_REWRITTEN_FALLBACK = 'not_rewritten_fallback'
IMPORT_STILL_NEEDED = 'import_still_needed'
ESCAPE_RELEASED = 'escape_released'  # what releases an escape's link
# Why a rewrite is rolled back (``_self_check``: ``{reason}`` of
# ROLLED_BACK_BECAUSE).
IMPORT_STILL_USED = 'import_still_used'
REWRITE_UNPARSED = 'rewrite_unparsed'
# Why migrate keeps a flow or adds an import across modules (``migrate``).
ACROSS_MODULES_FAILED = 'across_modules_failed'
KERNEL_IMPORT = 'kernel_import'  # a notebook's name its kernel bound
# Words two notes share (each written once).
_NAME_ALSO_HOLDS = (
    '`{name}` also holds values not provably a flax.optim Optimizer '
    '(another assignment), so its uses stay as they are; the optimizer ')
_REPLICA_AVERAGES = (
    'a ReplicatedOptimizer averages the gradients over the pmap axis inside '
    'apply_gradient (psum(g) / psum(1))')
_TREE_NOT_REPLICATED = (
    "migrate writes flax.optim's tree of an optimizer only where it is not "
    'replicated')
_MODULE_REPLICATES = 'this module replicates its optimizer'
_MADE_FROM_DICT = '(made from the dict holding the optimizer)'
_FOLLOWS_SELF = 'migrate follows an attribute through `self` '
_ANY_ATTRIBUTE = 'which reads or writes any attribute by name'
_SHARED_WITH = (
    '`self.{attr}` is also an attribute of {other}, which shares instances '
    'with {owner}')
_READS_ITS_ATTRIBUTES = 'whose code may read its attributes'
_CALLERS_NOT_KNOWN = (
    'otherwise than by calling it, so its callers are not known')
_ROLLED_BACK = 'the rewrite of this file was rolled back'
_CONVERT_FIRST = (
    'convert such files first with `flax-optim-compat convert SRC DST '
    '--to train_state{stock}`')
NOTES = (
    Note(HELD, None, (
        'kept as it is: a # noqa on the line or the selected codes '
        '(--select/--ignore) hold it')),
    Note(HELD_BY_ANOTHER_LINK, None, (
        'not rewritten: another link of this optimizer flow could not '
        'be (see above); a flow is migrated as a whole or not at all')),
    Note(KEPT_WITH_FLOW, None, (
        'kept as it was with its whole flow across modules (a '
        'definition, its optimizer and every use are rewritten together'
        ' or not at all): ')),
    Note(CALLED_NOWHERE, None, (
        '`{name}` is called and named nowhere in the scanned code, so '
        'it was migrated with its flow as dead code of this program: '
        '{now}, not a flax.optim OptimizerDef. Code outside the scanned'
        ' tree that calls it must be migrated with it (scan them '
        'together)')),
    Note(CHECKPOINT_LAYOUT, CHECKPOINT, (
        'the checkpoint now holds a TrainState (step, params, '
        'opt_state); convert files written by the old code with '
        '`flax-optim-compat convert SRC DST --to train_state`')),
    Note(PICKLE_UNPROVEN, CHECKPOINT, (
        'not proven to pickle the optimizer; if it does, it would now '
        'pickle a TrainState, which fails (its tx holds functions): '
        'pickle `flax_optim_rules.legacy_tree(state)` instead (read '
        'back with `flax_optim_rules.from_legacy_tree(state, tree)`); '
        'one written by the old code holds a flax.optim Optimizer: load'
        ' it with flax-optim-compat installed and continue it with '
        '`compat.to_train_state(optimizer, apply_fn)`')),
    Note(LAYOUT_KEY, CHECKPOINT, (
        "reads flax.optim's checkpoint layout by key ({key!r}): "
        'checkpoints written before migrating hold it, ones the '
        "migrated code writes hold a TrainState's (step, params, "
        'opt_state); convert the old ones with `flax-optim-compat '
        "convert SRC DST --to train_state` and read 'params', or keep "
        "writing flax.optim's layout with `{rules}.state_dict(state)`")),
    Note(HAND_BUILT, CREATE, (
        'an Optimizer built by hand from a definition, a state and a '
        'target: flax_optim_rules.replace_optimizer_state('
        "TrainState.create(apply_fn=..., params=target, tx=the definition's "
        'transform), state) (migrate writes it where the definition is '
        'provably a flax.optim OptimizerDef)')),
    Note(STARRED_ARGUMENTS, None, (
        'arguments passed with * or ** cannot be mapped with certainty')),
    Note(NO_LEARNING_RATE, None, (
        'no learning rate in the definition and none passed to '
        'apply_gradient in this file')),
    Note(JAX_TAKEN, None, '`jax` names something else in this module'),
    Note(REPLICATE_LEFT, REPLICATE, (
        '.replicate(): {problem}; ' + _REPLICA_AVERAGES +
        ', by hand: {replacement}')),
    Note(REPLICATE_ARGUMENTS, REPLICATE, (
        'replicate() arguments cannot be mapped with certainty')),
    Note(REPLICATE_AXIS_NOT_LITERAL, REPLICATE, (
        'the axis_name is not a literal string')),
    Note(REPLICATE_AXES_DIFFER, REPLICATE, (
        'replicate() calls with different axis names')),
    Note(REPLICATE_CHECKPOINTED, REPLICATE, (
        "a ReplicatedOptimizer's checkpoint keeps one replica's copy; the "
        "replicated TrainState's would keep them all")),
    Note(CREATE_ARGUMENTS, CREATE, (
        'create() arguments passed with * or **, or not as '
        'create(target, focus=None), cannot be mapped with certainty')),
    Note(CREATE_FOCUS, CREATE, (
        'create(..., focus=...) selects parameters: use optax.partition '
        'with compat.traversal_labels (not rewritten automatically)')),
    Note(DEFINITION_MEMBER, OPTIMIZER_DEF, (
        '.{attr} of a flax.optim definition has no counterpart on the Optax '
        "transform migrate writes for it (its hyper-parameters live in the "
        "transform's state once injected: "
        'optax.tree_utils.tree_get(state.opt_state, name))')),
    Note(NOT_PROVABLY_OPTIMIZER, None, (
        'not rewritten: the object is not provably a flax.optim '
        'Optimizer/OptimizerDef here (its flow leaves what this file '
        'shows{callers}); {replacement}')),
    Note(NOT_BUILT_IN, OPTIMIZER_DEF, '{name} is not a built-in rule'),
    Note(RATE_SET_TWICE, None, (
        '`**{first}` and `**{second}` may each set learning_rate, which a '
        'rate set per step starts at 0.0 where none does: it cannot be '
        'mapped with certainty')),
    Note(POSITIONAL_STARRED, None, (
        'arguments passed with * cannot be mapped with certainty')),
    Note(STOCK_SPREAD, OPTIMIZER_DEF, (
        "arguments passed with ** cannot be mapped to a stock alias's "
        'keywords (the exact tier passes them on)')),
    Note(MULTI_KEYWORDS, MULTI_OPTIMIZER, (
        'MultiOptimizer takes (traversal, definition) pairs positionally')),
    Note(MULTI_NOT_PAIR, MULTI_OPTIMIZER, (
        'argument {index} is not a literal (traversal, definition) pair')),
    Note(MULTI_TRAVERSAL_UNPROVEN, MULTI_OPTIMIZER, (
        'pair {index}: `{traversal}` is not provably a ModelParamTraversal '
        'made in this module')),
    Note(MULTI_DEFINITION_UNPROVEN, MULTI_OPTIMIZER, (
        'pair {index}: `{definition}` is not provably a flax.optim '
        'OptimizerDef')),
    Note(WRAPPED_UNPROVEN, None, (
        '{name}: the wrapped optimizer is not provably a flax.optim '
        'definition migrate rewrites here')),
    Note(HAND_BUILT_DEF_UNPROVEN, CREATE, (
        'its definition is not provably a flax.optim OptimizerDef here, so '
        'it is not rewritten to a transform')),
    Note(PARAMETER_PASSED_UNPROVEN, None, (
        '{where} passes {passed} as `{parameter}` of {function}(), not '
        'provably an optimizer')),
    Note(SELF_ATTRIBUTE_ALSO_TAKES, None, (
        '`self.{attr}` also takes `{value}` (line {line}), not provably an '
        'optimizer{because}')),
    Note(SELF_ATTRIBUTE_UNPROVEN, None, (
        '`self.{attr}` is not provably an optimizer in {owner}')),
    Note(REEXPORTED, IMPORT, (
        '{local} is flax.optim re-exported by {raw}: import it from flax '
        'directly (`from flax import optim as {local}`) and run migrate '
        'again; this file is not rewritten until then')),
    Note(ESCAPE_STEP_STARRED, OPTIMIZER_ESCAPE, (
        '`{call}` passes arguments with * or ** to the step {step}(), whose '
        'optimizer parameters migrate')),
    Note(ESCAPE_STEP_UNPROVEN, OPTIMIZER_ESCAPE, (
        '`{value}` is not provably an optimizer and goes in as `{name}` of '
        'the step {step}(), whose module migrates that parameter')),
    Note(ESCAPE_TUPLE_ATTRIBUTE, OPTIMIZER_ESCAPE, (
        '`{text}` gives a tuple holding an optimizer, read here by '
        'attribute')),
    Note(ESCAPE_TUPLE_GOES_INTO, OPTIMIZER_ESCAPE, (
        '`{text}` gives a tuple holding an optimizer, which goes into '
        '`{parent}`, where migrate cannot follow it')),
    Note(ESCAPE_TUPLE_INDEXED, OPTIMIZER_ESCAPE, (
        '`{text}` gives a tuple holding an optimizer, read here by index '
        '(`{subscript}`), where migrate cannot follow it')),
    Note(ESCAPE_REPLICATED_TREE, OPTIMIZER_ESCAPE, (
        'the replicated optimizer `{text}` goes into a dict saved or loaded '
        'as a tree: ' + _TREE_NOT_REPLICATED)),
    Note(ESCAPE_TREE_UNPROVEN, OPTIMIZER_ESCAPE, (
        'the optimizer `{text}` goes into a dict that migrate does not see '
        'only saved or loaded as a tree: {why} (where it is, '
        "flax_optim_rules.legacy_tree({text}) keeps flax.optim's layout in "
        'it, and flax_optim_rules.from_legacy_tree reads it back)')),
    Note(ESCAPE_TREE_READ_BACK, OPTIMIZER_ESCAPE, (
        '`{target}` takes the optimizer read back as `{read}` and is not '
        'provably one where it is read')),
    Note(ESCAPE_GOES_INTO, OPTIMIZER_ESCAPE, (
        'the optimizer `{text}` goes into `{parent}`, where migrate cannot '
        'follow it: code reading it there would meet a TrainState')),
    Note(ESCAPE_NAME_ALSO_HOLDS, OPTIMIZER_ESCAPE,
         _NAME_ALSO_HOLDS + '`{text}` would reach them{read}'),
    Note(ESCAPE_NAME_HOLDS_TUPLE, OPTIMIZER_ESCAPE, (
        '`{name}` holds the tuple `{text}` gives, which migrate does not '
        'follow into its uses')),
    Note(ESCAPE_STORED, OPTIMIZER_ESCAPE, (
        'the optimizer `{text}` is stored in `{target}`, where migrate '
        'cannot follow it: code reading it there would meet a '
        'TrainState{why}')),
    Note(ESCAPE_UNPACKED_COUNT, OPTIMIZER_ESCAPE, (
        'the tuple `{text}` gives is unpacked into another number of names')),
    Note(ESCAPE_UNPACKED_NESTED, OPTIMIZER_ESCAPE, (
        '`{element}` takes a tuple holding an optimizer out of the tuple '
        '`{text}` gives, which migrate does not follow into its uses')),
    Note(ESCAPE_UNPACKED_UNPROVEN, OPTIMIZER_ESCAPE, (
        '`{element}` takes the optimizer of the tuple `{text}` gives and is '
        'not provably one where it is read{why}')),
    Note(ESCAPE_PICKLED, OPTIMIZER_ESCAPE, (
        'the optimizer `{text}` is pickled by `{call}(...)`: a TrainState '
        'does not pickle (its tx holds functions), so the migrated program '
        'would fail there; write it with flax.serialization.to_bytes (which '
        'migrate follows) and run migrate again, or, once migrated, pickle '
        'flax_optim_rules.legacy_tree(state) (read back with '
        'flax_optim_rules.from_legacy_tree(state, tree))')),
    Note(ESCAPE_TUPLE_ELEMENT, OPTIMIZER_ESCAPE, (
        '`{element}` takes the optimizer `{text}` and is not provably one '
        'where it is read')),
    Note(ESCAPE_RETURNED_UNFOLLOWED, OPTIMIZER_ESCAPE, (
        '`{text}` is returned by {where}, whose callers migrate does not '
        'follow')),
    Note(ESCAPE_RETURNER_USED, OPTIMIZER_ESCAPE, (
        '`{text}` is returned by {function}(), which is used otherwise than '
        'by calling it here, so its callers are not known')),
    Note(ESCAPE_RETURNER_USED_ELSEWHERE, OPTIMIZER_ESCAPE, (
        '`{text}` is returned by {function}(), which {where} uses ' +
        _CALLERS_NOT_KNOWN)),
    Note(ESCAPE_RETURNS_MIXED, OPTIMIZER_ESCAPE, (
        '{function}() returns `{text}` on one path and something not '
        'provably an optimizer on another: its callers cannot tell')),
    Note(ESCAPE_RETURNS_TUPLE, OPTIMIZER_ESCAPE, (
        '{function}() returns a tuple holding the optimizer `{text}` and is '
        '{where}: callers there are not followed into the tuple')),
    Note(ESCAPE_PASSED, OPTIMIZER_ESCAPE, (
        'the optimizer `{text}` is passed to `{call}(...)`, whose use of it '
        'migrate does not prove: code there would meet a TrainState')),
    Note(ESCAPE_TUPLE_ARGUMENTS, OPTIMIZER_ESCAPE, (
        '`{text}` goes into the tuple `{arguments}`, where migrate cannot '
        'follow it')),
    Note(CALLED_NOWHERE_FACTORY, None, 'it now returns an Optax transform'),
    Note(CALLED_NOWHERE_RULE, OPTIMIZER_DEF_SUBCLASS,
         'it is now a {rule_base}'),
    Note(CREATE_NAME_ALSO_HOLDS, CREATE,
         _NAME_ALSO_HOLDS + 'this makes would reach them'),
    Note(REPLICA_STEP_UNPROVEN, REPLICATE, (
        '.{attr}(): ' + _REPLICA_AVERAGES + ', so the step that receives it '
        'needs a pmean the rewrite would have to insert; which steps do is '
        'not proven here (by hand: {replacement})')),
    Note(NO_TRAIN_STATE_COUNTERPART, OPTIMIZER_USE, (
        '.{attr} of a flax.optim Optimizer has no mechanical TrainState '
        'counterpart here{why}')),
    Note(CALL_ARGUMENTS_UNMAPPED, OPTIMIZER_USE, (
        '.{name}({parameters}): arguments passed with * or **, or not one '
        'for each parameter, cannot be mapped with certainty')),
    Note(CALL_RESULT_NOT_UNPACKED, OPTIMIZER_USE, (
        '.{name}() is rewritten where its result is unpacked into {count} '
        'names, the values what replaces it gives back; here its result is '
        'used otherwise')),
    Note(RESTORE_TEMPLATE_AGAIN, CHECKPOINT, (
        'the optimizer given to this restore is evaluated again to turn what '
        'it restores into a TrainState; bind it to a name first')),
    Note(LEGACY_TREE_REPLICATED, CHECKPOINT, _TREE_NOT_REPLICATED),
    Note(APPLY_GRADIENT_ARGUMENTS, APPLY_GRADIENT, (
        'apply_gradient takes the gradients as its one positional argument')),
    Note(REPLICATE_PROBLEM, APPLY_GRADIENT, _MODULE_REPLICATES + ': {problem}'),
    Note(REPLICATED_UNPROVEN, APPLY_GRADIENT, (
        _MODULE_REPLICATES + ', and this one is not provably the replicated '
        'one (which averages its gradients) nor provably another')),
    Note(RATE_SET_ELSEWHERE, APPLY_GRADIENT_OVERRIDES, (
        'other steps of this flow set the learning rate '
        '(apply_gradient(g, learning_rate=...)): in the injected state a '
        "rate set so stays, while flax.optim took the definition's own rate "
        'for this step')),
    Note(OVERRIDES_NOT_RATE, APPLY_GRADIENT_OVERRIDES, (
        'overrides {names}: only learning_rate is injected mechanically')),
    Note(EVALUATED_TWICE, None, (
        'the optimizer expression is evaluated twice by the rewrite; bind it '
        'to a name first')),
    Note(RESTORE_ONE_LAYOUT, CHECKPOINT, (
        'this restore is not rewritten to read both checkpoint layouts: '
        "{why}. A checkpoint written before migrating holds flax.optim's "
        'layout, which it does not read (flax gives the template back '
        'unchanged: step 0, zero moments): ' + _CONVERT_FIRST)),
    Note(RESTORE_REFUSES, CHECKPOINT, (
        'this restore is rewritten to read both checkpoint layouts, but '
        "{why}: a checkpoint of flax.optim's layout written by such an "
        'optimizer is refused with an error naming its path: ' +
        _CONVERT_FIRST)),
    Note(NOT_A_RESTORE, CHECKPOINT, (
        '`{call}` is not a restore migrate rewrites '
        '(flax.training.checkpoints.restore_checkpoint, '
        'flax.serialization.from_bytes and from_state_dict are)')),
    Note(RESTORE_TARGET_UNKNOWN, CHECKPOINT, (
        'migrate cannot tell whether `{target}` holds an optimizer it '
        'migrates')),
    Note(RESTORE_KEYWORDS, CHECKPOINT, (
        'it is given {names}, which the raw restore of both layouts does not '
        'take')),
    Note(FROM_BYTES_BARE, CHECKPOINT, (
        "from_bytes is called by its bare name: its module's msgpack_restore "
        'has no spelling here')),
    Note(RESTORE_UNBOUND, CHECKPOINT, (
        "its arguments do not bind as flax's signature has them")),
    Note(STOCK_TIER_LAYOUT, OPTIMIZER_USE, (
        "--tier stock writes stock Optax rules, whose states flax_optim_rules' "
        "view of flax.optim's layout does not cover (the exact tier keeps the "
        'layout)')),
    Note(DEFINITIONS_NOT_LAID_OUT, OPTIMIZER_USE, (
        'this module builds {kinds} definitions, whose Optax state '
        "flax_optim_rules' view of flax.optim's layout does not cover (one "
        "rule's transform only)")),
    Note(STATE_ASSIGNED, OPTIMIZER_USE, 'the state is assigned, not read'),
    Note(LAYOUT_MEMBER_NOT_CALLED, OPTIMIZER_USE, (
        '.{attr} is not called here: only its calls map to {rules} '
        'functions')),
    Note(LAYOUT_MEMBER_ARGUMENTS, OPTIMIZER_USE, (
        '.{attr} takes no such arguments in flax.optim (state_dict(), '
        'restore_state(state_dict))')),
    Note(REPLACE_UNMAPPED, OPTIMIZER_USE, (
        'only replace(target=...) and replace(state=...) map (to '
        'replace(params=...) and flax_optim_rules.replace_optimizer_state); '
        'a TrainState holds `tx`, an Optax transform, no optimizer_def')),
    Note(FIELD_STORE_UNPROVEN, None, (
        '`{text}` goes into the field `{field}` of {holder}, annotated '
        'flax.optim.Optimizer, and is not provably a flax.optim Optimizer '
        'here{cause}: the modules that read the field stay with it')),
    Note(CREATED_FROM_PARAMETER, CREATE, (
        f'it is made by `{{definition}}.{CREATE}(...)` of the parameter '
        '`{definition}` of {function}(), and migrate does not follow a '
        'definition passed as an argument')),
    Note(TREE_READ_NOT_BACK, OPTIMIZER_ESCAPE, (
        '`{read}` is not read back from a dict saved as a tree: {why}')),
    Note(DICT_RETURNED_UNFOLLOWED, OPTIMIZER_ESCAPE, (
        '{function}() returns optimizers in a dict, and migrate does not '
        'follow that dict where it goes: {why}')),
    Note(DICT_KEY_CLASH, OPTIMIZER_ESCAPE, (
        '`{key}` may be the key of an optimizer')),
    Note(DICT_GIVER_USED_OTHERWISE, OPTIMIZER_ESCAPE, (
        '{function}() is used otherwise than by calling it here, so its '
        'callers are not known')),
    Note(DICT_GIVER_ALIASED, OPTIMIZER_ESCAPE, (
        '{function}() is also called as `{alias}`')),
    Note(DICT_GIVER_MODULE_ALONE, OPTIMIZER_ESCAPE, (
        'migrate reads this module alone, so the callers of {function}() '
        'elsewhere are not known')),
    Note(DICT_GIVER_ELSEWHERE, OPTIMIZER_ESCAPE, (
        '{function}() is also reached from another module ({where})')),
    Note(DICT_READ_UNTESTED, OPTIMIZER_ESCAPE, (
        "`{read}` (line {line}) may read an optimizer's entry: no test of "
        "the loop's key leaves out the optimizers' keys there")),
    Note(DICT_NAME_USED, OPTIMIZER_ESCAPE, (
        '`{name}` is used in {function}() as `{use}`')),
    Note(DICT_SPREAD, OPTIMIZER_ESCAPE, 'the dict also takes entries with **'),
    Note(DICT_GIVER_NOT_CALLED, OPTIMIZER_ESCAPE, (
        '{function}() is not called in its module, so where its dict goes is '
        'not seen')),
    Note(DICT_CALL_UNBOUND, OPTIMIZER_ESCAPE, (
        '`{call}` (line {line}) is not bound to a name or read by a constant '
        'key')),
    Note(DICT_NAME_REBOUND, OPTIMIZER_ESCAPE, (
        '`{name}` (line {line}) is also bound to another value')),
    Note(DICT_NAME_GOES_INTO, OPTIMIZER_ESCAPE, (
        '(line {line}) goes into `{parent}`')),
    Note(DICT_READ_BY_UNKNOWN_KEY, OPTIMIZER_ESCAPE, (
        'is read by `{read}` (line {line}), by a key that is neither a '
        'constant nor the key of a loop over it')),
    Note(TREE_NAME_READ_NESTED, OPTIMIZER_ESCAPE, (
        '`{name}` ' + _MADE_FROM_DICT + ' is read inside `{scope}`, nested '
        'here, where migrate does not follow it')),
    Note(TREE_NAME_USED, OPTIMIZER_ESCAPE, (
        '`{text}` ' + _MADE_FROM_DICT + ' is used here as `{use}`, not only '
        'as a tree')),
    Note(TREE_ENTRY_KEY, OPTIMIZER_ESCAPE, (
        '`{entry}` reads an entry by a key that is not a constant')),
    Note(TREE_ENTRY_REPLACED, OPTIMIZER_ESCAPE, (
        "`{entry}` replaces the optimizer's entry")),
    Note(TREE_ENTRY_DELETED, OPTIMIZER_ESCAPE, '`{entry}` deletes an entry'),
    Note(TREE_ENTRY_READ_BACK, OPTIMIZER_ESCAPE, (
        '`{entry}` reads the optimizer back out of `{text}` and uses it '
        f'otherwise than as `.{TARGET}` or `.{STATE}`, or by assigning it to '
        'a name')),
    Note(TREE_PASSED_UNSEEN, OPTIMIZER_ESCAPE, (
        '`{text}` is passed to `{call}(...)`, which migrate does not see '
        'take it only as a tree')),
    Note(TREE_NO_PARAMETER, OPTIMIZER_ESCAPE, (
        '`{text}` goes to `{call}(...)` where no parameter takes it')),
    Note(TREE_PASSED_TOO_DEEP, OPTIMIZER_ESCAPE, (
        '`{text}` is passed on through more than {depth} functions; migrate '
        'stops following it there')),
    Note(TREE_IN_FUNCTION, OPTIMIZER_ESCAPE, 'in {function}(): {why}'),
    Note(TREE_VALUE_NOT_NAME, OPTIMIZER_ESCAPE, (
        'the optimizer in it is not a name or a field')),
    Note(TREE_DICT_OUTSIDE_FUNCTION, OPTIMIZER_ESCAPE, (
        'the dict is built outside a function')),
    Note(TREE_READ_ROOT_OTHER, OPTIMIZER_ESCAPE, (
        '`{read}` is read back where `{root}` may name another value than '
        'the one put into the dict')),
    Note(TREE_ROOT_ASSIGNED_BETWEEN, OPTIMIZER_ESCAPE, (
        '`{root}` is assigned between the dict and `{read}`')),
    Note(RULE_CLASS_GOES_INTO, OPTIMIZER_DEF_SUBCLASS, (
        'the rule class goes into `{code}`, which migrate cannot follow')),
    Note(CALLS_OPTIMIZER_FUNCTION, None, (
        'calls {function}() ({where}), which gives or takes a flax.optim '
        'Optimizer (or a step that does)')),
    Note(OVERRIDE_NOT_DEFINITION, OPTIMIZER_DEF, (
        '{method}() may run the override at {where}, which does not return '
        'a flax.optim definition: what the call gives is not known')),
    Note(METHOD_CALLED_NOWHERE, OPTIMIZER_DEF, (
        '{name}() is a method called nowhere in the scanned code: a base '
        'class outside it may call it (a hook), or code holding an '
        'instance: they cannot be rewritten with it')),
    Note(CALLED_NOWHERE_BUT, OPTIMIZER_DEF, (
        '{name}() is called nowhere in the scanned code but {where}: its '
        'callers (a registry, another package, a config system) cannot be '
        'rewritten with it')),
    Note(FIELD_USED_UNTYPED, None, (
        '{path}:{line} declares `{name}.{field}` otherwise: `{code}` at '
        '{used_at}:{used_line} uses `.{field}` of a value not typed as '
        '{holder} (annotated, or made as one), which cannot be told to be '
        'the optimizer')),
    Note(FIELD_HOLDER_TOUCHED, None, (
        'makes, stores or reads the optimizer that `{holder}.{field}` holds '
        '(declared at {path}:{line})')),
    Note(FIELD_READ_BY_POSITION, None, (
        '{path}:{line} takes element {index} of a tuple of {count} and uses '
        'it as one (`{code}`): a {holder} read by position cannot be told '
        'from another tuple there')),
    Note(FIELD_HELD, None, (
        'declares `{holder}.{field}` a flax.optim Optimizer, and {why}, so '
        'what the field holds stays as it is')),
    Note(DEFINITION_GOES_INTO, OPTIMIZER_DEF, (
        'the definition goes into `{code}`, which migrate cannot follow')),
    Note(DEFINITION_RETURNED, OPTIMIZER_DEF, (
        'returned by another definition factory')),
    Note(DEFINITION_NAME_GOES_ON, OPTIMIZER_DEF, (
        '`{name}` goes on into `{holder}`, which migrate cannot follow')),
    Note(DEFINITION_NEVER_CREATED, OPTIMIZER_DEF, '`{name}` is never created'),
    Note(SELF_ACROSS_MODULES, None, (
        _FOLLOWS_SELF + 'across modules only where each module proves it an '
        'optimizer')),
    Note(SELF_ONE_MODULE, None, _FOLLOWS_SELF + 'within one module'),
    Note(SELF_PROTOCOL, None, '{owner} defines {name}, ' + _ANY_ATTRIBUTE),
    Note(SELF_PROPERTY_PATHS, None, (
        'the property {owner}.{method} does not return a value on every '
        'path')),
    Note(SELF_REBOUND, None, (
        '`{receiver}` is bound again in {method}() (line {line}), so '
        '`{receiver}.<attr>` there may be another object')),
    Note(SELF_PROTOCOL_REACHED, None, (
        '{method}() reaches `{code}` (line {line}), ' + _ANY_ATTRIBUTE)),
    Note(SELF_INSTANCE_GOES_INTO, None, (
        'the instance `{receiver}` itself goes into `{code}` in {method}() '
        '(line {line}), where its attributes may be read')),
    Note(SELF_STORE_NOT_ASSIGNED, None, (
        '`{statement}` (line {line}) stores into `{target}` otherwise than '
        'by an assignment')),
    Note(SELF_TAKES_PART, None, (
        '`{target}` takes a part of `{value}` (line {line}) that migrate '
        'does not follow')),
    Note(SELF_ANY_NAME, None, (
        '`{code}` (line {line}) reaches attributes by a name migrate cannot '
        'read')),
    Note(SELF_SHARED_WITH, None, _SHARED_WITH),
    Note(SELF_SHARED_ELSEWHERE, None, (
        _SHARED_WITH + ', in another module ({where}): {why}')),
    Note(SELF_NOT_FOLLOWED_IN, None, 'not followed in {path}: {why}'),
    Note(SELF_NAMED_OUTSIDE, None, (
        '`.{attr}` is also named at line {line} (`{code}`), outside the '
        'methods of {owner}')),
    Note(SELF_NAMED_ELSEWHERE, None, (
        '`.{attr}` is also named at {where}, outside the methods of '
        '{owner}')),
    Note(SELF_ONE_HOLDER, None, (
        'stores or reads `self.{attr}`, which {owner} (declared at {where}) '
        'keeps too: one holder with {family}, migrated together or not at '
        'all')),
    Note(SELF_FOREIGN_BASE, None, (
        '{owner} derives from `{base}`{origin}, not a class of the project, '
        + _READS_ITS_ATTRIBUTES)),
    Note(SELF_MADE_BY_DECORATOR, None, (
        '{owner} is made by a decorator or metaclass, ' +
        _READS_ITS_ATTRIBUTES)),
    Note(SELF_NO_METHOD_KEEPS, None, 'no method keeps `self.{attr}` itself'),
    Note(SINGLE_FILES, None, 'passed as single files, not their directory'),
    Note(CALLED_FROM_ANOTHER_MODULE, None, 'called from another module'),
    Note(NO_FLOW_THERE, None, 'migrate reads no optimizer flow there'),
    Note(RETURNER_METHOD, OPTIMIZER_ESCAPE, 'a method'),
    Note(RETURNER_NESTED, OPTIMIZER_ESCAPE, 'a nested function or lambda'),
    Note(PARAMETER_FUNCTION_USED, None, (
        '{where} uses {function}() ' + _CALLERS_NOT_KNOWN)),
    Note(REEXPORT_KEPT, IMPORT, (
        'other scanned modules import flax.optim through this name: kept '
        'until they import it directly (then delete it here)')),
    Note(ANNOTATION_KEPT, 'annotation', (
        'flax.optim.Optimizer stays while the file keeps legacy optimizers')),
    Note(MIGRATE_REWRITES, None, (
        'migrate rewrites this statement (migrate --diff shows how)')),
    Note(LEFT_BY_MIGRATE, None, 'left by migrate: {reason}'),
    Note(CREATED_HERE, CREATE, f'its `.{CREATE}(...)` is here'),
    Note(RULE_USED_HERE, OPTIMIZER_DEF_SUBCLASS, (
        'the rule class is called or subclassed here')),
    Note(IN_MULTI_OPTIMIZER, MULTI_OPTIMIZER, (
        'it goes into the MultiOptimizer here')),
    Note(TRAVERSAL_ARGUMENTS, TRAVERSAL, (
        'ModelParamTraversal takes its filter as its one argument')),
    Note(TRAVERSAL_BOUND_TWICE, TRAVERSAL, '`{name}` is bound more than once'),
    Note(TRAVERSAL_UNUSED, TRAVERSAL, '`{name}` is never used'),
    Note(TRAVERSAL_REACHES, TRAVERSAL, (
        'the traversal reaches `{where}`, not only the first element of a '
        'MultiOptimizer pair (flax_optim_rules.ModelParamTraversal selects '
        'leaves for multi_optimizer; it does not iterate or update trees)')),
    Note(HYPER_PARAMS_LIST, MULTI_OPTIMIZER, (
        'hyper_params=[...] maps only as a list of the names unpacked from '
        "this optimizer's `.optimizer_def.hyper_params` (or of `hps[0]`, "
        '`hps[1]`, ... of that list), in their order, each as '
        '`.replace(learning_rate=...)`')),
    Note(BY_NAME_STOCK, OPTIMIZER_DEF, (
        'the rule is chosen by name when the program runs, so no stock alias '
        'can be named for it (the exact tier writes '
        '{rules}.rule_named(name)(...))')),
    Note(BY_NAME_POSITIONAL, OPTIMIZER_DEF, (
        'hyper-parameters of a rule chosen by name are mapped only by '
        'keyword (after the rate, each rule orders them its own way)')),
    Note(PORT_KEPT_RULE, OPTIMIZER_DEF_SUBCLASS, (
        'kept as your own rule on {module}.{base} (same numbers, no '
        'flax.optim): port it to a plain optax.GradientTransformation by '
        'hand when you can; `migrate --write` puts <module>_port_test.py '
        'beside this module (never over an existing file): fill in its '
        'port() and it proves the port equal to the kept rule')),
    Note(USER_MULTI_BY_HAND, OPTIMIZER_DEF_SUBCLASS, (
        'by hand: build it with flax_optim_rules.multi_optimizer and run '
        'what {name} adds where the TrainState is created')),
    Note(USER_MULTI_OVERRIDES, OPTIMIZER_DEF_SUBCLASS, (
        "{name} overrides or uses {members} of flax.optim's MultiOptimizer, "
        'which flax_optim_rules.{base} neither has nor runs ({by_hand})')),
    Note(USER_MULTI_TRAVERSAL, OPTIMIZER_DEF_SUBCLASS, (
        '{name} reads .{reads}, which a flax_optim_rules.ModelParamTraversal '
        'does not have (it selects leaves only; {by_hand})')),
    Note(USER_MULTI_INIT_STATE, OPTIMIZER_DEF_SUBCLASS, (
        f'{{name}}.{INIT_STATE} builds or reads a state itself: flax.optim\'s '
        "OptimizerState and the {base} state (Optax's) differ ({by_hand})")),
    Note(USER_RULE_BASES, OPTIMIZER_DEF_SUBCLASS, (
        '{name} derives from {bases}: only a direct subclass of '
        'flax.optim.OptimizerDef moves onto flax_optim_rules.RuleDef (a '
        "built-in rule's subclass keeps its base)")),
    Note(USER_RULE_MISSING, OPTIMIZER_DEF_SUBCLASS, (
        "{name} uses {members} of flax.optim's OptimizerDef, which "
        'flax_optim_rules.RuleDef does not have')),
    Note(USER_RULE_CALLED_NOWHERE, OPTIMIZER_DEF_SUBCLASS, (
        '{name} is called nowhere in the scanned code{but}: its callers (a '
        'config system such as gin, another package) would still expect a '
        'flax.optim OptimizerDef')),
    Note(USER_MULTI_OTHER_MODULE, MULTI_OPTIMIZER, (
        '{call} is a MultiOptimizer subclass of another module: its '
        '(traversal, definition) pairs are followed only where the class is '
        'defined')),
    Note(OVERLAPS_REWRITE, None, 'overlaps another rewrite; left as is'),
    Note(REWRITE_OVERLAPS, None, (
        'its {construct} rewrite here overlaps another one, so the flow '
        'could not be rewritten whole')),
    Note(KERNEL_NOT_IMPORT, None, 'something other than an import'),
    Note(KERNEL_UNDECIDED, None, (
        '{name!r} is bound nowhere in this notebook, and the notebooks of '
        'the project bind it to {bound}: what it means in the kernel this '
        'notebook runs in is not known, so nothing reached through it here '
        'is rewritten')),
    Note(ROLLED_BACK_BECAUSE, None, _ROLLED_BACK + ': {reason}'),
    Note(ROLLED_BACK, None, 'left as it was: ' + _ROLLED_BACK),
    Note(RESCAN_FAILED, None, (
        'not migrated: re-scanning the result failed: {message}')),
    Note(BY_HAND, None, 'by hand: {replacement}'),
    Note(STILL_NAMED, IMPORT, '{path} is still named here'),
    Note(NOT_REWRITTEN_FALLBACK, None, 'not rewritten; {fallback}'),
    Note(IMPORT_STILL_NEEDED, IMPORT, (
        'kept: the usages and references of flax.optim left in this file '
        '(the other entries) still need it')),
    Note(ESCAPE_RELEASED, OPTIMIZER_ESCAPE, (
        'released when the code it goes to is migrated in the same run '
        '(give its path too) or is handed what it reads (e.g. '
        f'`optimizer.{TARGET}`) instead of the optimizer')),
    Note(IMPORT_STILL_USED, None, (
        'the rewrite removes the import of {name!r} but its line {line} '
        'still uses {name!r}')),
    Note(REWRITE_UNPARSED, None, (
        'the rewritten file does not parse (its line {line}: {error})')),
    Note(STOCK_NO_INJECT, OPTIMIZER_DEF, (
        '--tier stock does not inject a per-step learning rate; give the '
        'alias a schedule instead, or use the exact tier')),
    Note(ACROSS_MODULES_FAILED, None, (
        'kept as it was: the analysis across modules failed (see the '
        'errors), so whether this flow goes on in another module cannot be '
        'checked')),
    Note(KERNEL_IMPORT, IMPORT, (
        'added: this notebook binds {local!r} nowhere (it runs in a kernel '
        'another notebook of the project prepared) and still uses it, but '
        'the migrated {preparers} no longer import it')),
)
NOTES_BY_NAME = {note.name: note for note in NOTES}


def note(name: str) -> str:
  """The text of the note ``name`` (its fields unfilled)."""
  return NOTES_BY_NAME[name].text


def filled_note(name: str, /, **fields) -> str:
  """The text of the note ``name`` with its fields filled from ``fields``
  (``name`` is positional only: a note may have a field of that name)."""
  return NOTES_BY_NAME[name].text.format(**fields)


# ----------------------------------------------------------------------------
# The members: one row each.


class Member(NamedTuple):
  name: str
  owner: str  # the flax.optim class that has it
  kind: str  # 'method' or 'attribute'
  # The rule it belongs to (a construct of ``RULES``), where it has one:
  # a call of a step method is that rule's finding, and a member without a
  # ``replacement`` of its own is replaced as that rule says.
  construct: Optional[str] = None
  # What replaces it once the optimizer is a TrainState (``state``) and its
  # definition an Optax transform (``tx``), the same in both tiers; None:
  # its construct's replacement.
  replacement: Optional[str] = None
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
  # Its parameters, as flax.optim's signature names them (a method's).
  parameters: tuple = ()
  # What migrate writes for a call of it (a method), where that is
  # mechanical: ``{receiver}`` (the optimizer's own rewritten expression),
  # ``{jax}`` (the module's name for jax) and ``{<parameter>}`` (the
  # argument given for it). ``call_targets``: where set, only a call whose
  # result is unpacked into that many names is rewritten (the shape the
  # rewrite gives back).
  call_rewrite: Optional[str] = None
  call_targets: Optional[int] = None


DEFINITION = 'definition'  # (a Member's ``holds``)

_RULE_DEF = 'flax_optim_rules.RuleDef'  # what a user's OptimizerDef becomes
MEMBERS = (
    Member(TARGET, OPTIMIZER_CLASS, 'attribute', replacement='state.params',
           read_rewrite='{receiver}.params'),
    Member(OPTIMIZER_DEF, OPTIMIZER_CLASS, 'attribute', replacement='state.tx',
           no_counterpart='a TrainState holds `tx`, an Optax transform: no '
           'hyper_params to read or override, no OptimizerDef class to name',
           read_rewrite='{receiver}.tx', holds=DEFINITION),
    Member(APPLY_GRADIENT, OPTIMIZER_CLASS, 'method', APPLY_GRADIENT),
    # ``loss, grad = optimizer.compute_gradient(loss_fn)``: two names
    # prove a loss_fn returning the loss alone (flax.optim gives (loss, aux,
    # grad) for a tuple, which two names cannot unpack).
    Member(COMPUTE_GRADIENT, OPTIMIZER_CLASS, 'method', COMPUTE_GRADIENT,
           parameters=('loss_fn',),
           call_rewrite='{jax}.value_and_grad({loss_fn})({receiver}.params)',
           call_targets=2),
    Member(COMPUTE_GRADIENTS, OPTIMIZER_CLASS, 'method', COMPUTE_GRADIENT),
    Member(OPTIMIZE, OPTIMIZER_CLASS, 'method', OPTIMIZE),
    Member(REPLICATE, OPTIMIZER_CLASS, 'method', REPLICATE),
    Member(UNREPLICATE, OPTIMIZER_CLASS, 'method', REPLICATE,
           'jax_utils.unreplicate(state)'),
    Member(RESTORE_STATE, OPTIMIZER_CLASS, 'method', replacement=(
        'flax_optim_rules.replace_optimizer_state(state, s)')),
    Member(STATE_DICT, OPTIMIZER_CLASS, 'method', replacement=(
        'flax_optim_rules.optimizer_state_dict(state.params, '
        'flax_optim_rules.optimizer_state(state))')),
    Member(CREATE, DEF_CLASS, 'method', CREATE),
    Member(HYPER_PARAMS, DEF_CLASS, 'attribute', replacement=(
        "the rule's keyword arguments (a rate set per step: "
        'flax_optim_rules.inject_learning_rate)')),
    Member(INIT_STATE, DEF_CLASS, 'method', OPTIMIZER_DEF_SUBCLASS,
           f'{_RULE_DEF}.init_state'),
    Member(INIT_PARAM_STATE, DEF_CLASS, 'method', OPTIMIZER_DEF_SUBCLASS,
           f'{_RULE_DEF}.init_param_state'),
    Member(APPLY_PARAM_GRADIENT, DEF_CLASS, 'method', OPTIMIZER_DEF_SUBCLASS,
           f'{_RULE_DEF}.apply_param_gradient'),
    Member(UPDATE_HYPER_PARAMS, DEF_CLASS, 'method', OPTIMIZER_DEF_SUBCLASS,
           f'{_RULE_DEF}.update_hyper_params'),
    Member(PARAM_STATES, OPTIMIZER_STATE_CLASS, 'attribute', replacement=(
        'flax_optim_rules.optimizer_state(state).param_states')),
)

# What replaces the Optimizer's two common-word members.
COMMON_WORD_REPLACEMENTS = {
    STATE: 'state.step and state.opt_state (flax.optim\'s layout: '
           'flax_optim_rules.optimizer_state(state))',
    REPLACE: 'state.replace(params=...)',
}

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


def member_replacement(member: Member) -> str:
  """What replaces ``member``: its own text, else its construct's."""
  if member.replacement is not None:
    return member.replacement
  return BY_CONSTRUCT[member.construct].replacement


def step_methods() -> tuple:
  """The Optimizer's methods whose call is a finding of its own, in the
  order of ``RULES``."""
  return tuple(method for rule in RULES for method in rule.methods)
