"""The values an optimizer flow is made of: the calls that make, keep or
pass on an optimizer, the records of scopes, call sites and bound functions
(``_flow``'s parts share them). Stdlib only."""

import ast
from typing import NamedTuple, Optional

from compat.codemod import _members
from compat.codemod import _names
from compat.codemod import _removals

ANY = object()  # an element of a returned tuple that is not an optimizer
# Statements binding a name no stored ``ast.Name`` shows (a def, class or
# handler binds its ``name``).
OTHER_BINDINGS = (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)
# Wrappers (also as decorators, also through functools.partial) whose
# result takes the function's arguments and returns its values, pytree
# classes kept.
WRAPPERS = ('jax.jit', 'jax.pmap', 'jax.named_call')
PARTIAL = 'functools.partial'
OPTIMIZER_CLASSES = _names.OPTIMIZER_CLASSES
# Calls that return one argument's kind (a pytree moved or replicated across
# devices, a checkpoint restored into the target's classes): an optimizer in,
# an optimizer out; a tuple of them in, the same tuple out. The argument's
# position and keyword.
SAME_KIND = {
    'jax.device_put': (0, 'x'),
    'flax.jax_utils.replicate': (0, 'tree'),
    'flax.jax_utils.unreplicate': (0, 'tree'),
    'flax.training.checkpoints.restore_checkpoint': (
        1, _members.CHECKPOINT_TARGET),
    'flax.serialization.from_state_dict': (0, _members.CHECKPOINT_TARGET),
    # A leaf-wise map keeps its first tree's structure and classes
    # (``jnp.where(is_finite, new, old)`` over two optimizers).
    'jax.tree_util.tree_map': (1, 'tree'),
    # Its alias in jax's newer ``jax.tree`` namespace, the same signature.
    'jax.tree.map': (1, 'tree'),
    # Every leaf fetched to the host, the tree's classes kept.
    'jax.device_get': (0, 'x'),
    # A copy is of the original's class.
    'copy.copy': (0, 'x'),
    'copy.deepcopy': (0, 'x'),
}
# Removed spellings (``jax.tree_map``, ``jax.tree_multimap``...) call what
# replaced them: the removals table says which.
SAME_KIND.update({old: SAME_KIND[name] for name in tuple(SAME_KIND)
                   for old in _removals.removed_spellings(name)})
# Of those, the calls whose later positional arguments are trees of the
# first one's structure (``tree_map(f, new, old)``): of its kind too.
SAME_KIND_REST = frozenset(
    ('jax.tree_util.tree_map', 'jax.tree.map',
     *_removals.removed_spellings('jax.tree_util.tree_map')))


# What ``jax.jit`` may be given besides the function where a jitted
# ``.create`` is followed: where the computation runs (the created arrays'
# device), nothing that changes which values it makes.
JIT_PLACEMENT = ('backend', 'device')


def jitted_create(call, names) -> Optional[ast.Attribute]:
  """``d.create`` where ``call`` is ``jax.jit(d.create, backend=...)(p)``.

  jit keeps a pytree's classes, so this makes what ``d.create(p)`` makes
  (on the device named); whether ``d`` is a definition is the caller's
  question. None for any other call (more arguments to either call, other
  jit options, another wrapper).
  """
  jit = call.func
  if not isinstance(jit, ast.Call) or names.resolve(jit.func) != 'jax.jit':
    return None
  if len(jit.args) != 1 or any(k.arg not in JIT_PLACEMENT
                               for k in jit.keywords):
    return None
  create = jit.args[0]
  if not (isinstance(create, ast.Attribute) and create.attr == _members.CREATE):
    return None
  if call.keywords or len(call.args) != 1 or isinstance(call.args[0],
                                                         ast.Starred):
    return None
  return create


def create_arguments(call) -> Optional[dict]:
  """``{'target': node[, 'focus': node]}`` that ``definition.create(...)``
  passes to flax.optim's ``create(target, focus=None)``; None where ``*`` or
  ``**`` hide them, or they do not bind."""
  if any(isinstance(a, ast.Starred) for a in call.args) or len(
      call.args) > 2:
    return None
  given = dict(zip((_members.TARGET, 'focus'), call.args))
  for keyword in call.keywords:
    if keyword.arg not in (_members.TARGET, 'focus') or keyword.arg in given:
      return None
    given[keyword.arg] = keyword.value
  return given if _members.TARGET in given else None


def is_none(value) -> bool:
  """``value`` (a node, a source text, or None for an argument not
  passed) is None."""
  if isinstance(value, ast.Constant):
    return value.value is None
  return value in (None, 'None')


def creates_whole(call) -> bool:
  """``definition.create(...)`` optimizes every parameter: its target
  binds and it selects none (no ``focus``)."""
  given = create_arguments(call)
  return given is not None and is_none(given.get('focus'))


def parameter_of(function, call, argument, bound=0) -> Optional[str]:
  """The parameter of ``function`` that ``call`` passes ``argument`` to
  (``bound``: positional arguments an alias bound first); None where
  ``*``/``**`` hide it or it binds none."""
  if any(isinstance(a, ast.Starred) for a in call.args):
    return None
  for keyword in call.keywords:
    if keyword.value is argument:
      return keyword.arg
  positions = [i for i, a in enumerate(call.args) if a is argument]
  named = function.args.posonlyargs + function.args.args
  if not positions or positions[0] + bound >= len(named):
    return None
  return named[positions[0] + bound].arg


def sets_hyper_params(node) -> bool:
  """``node`` is a step overriding hyper-parameters
  (``opt.apply_gradient(g, learning_rate=lr)``)."""
  return isinstance(node, ast.Call) and isinstance(
      node.func, ast.Attribute) and (
          node.func.attr == _members.APPLY_GRADIENT) and bool(node.keywords)


def simple_name_bindings(target, value, out):
  """(name, value-or-element-path) pairs of one assignment target."""
  if isinstance(target, ast.Name):
    out.append((target.id, value))
  elif isinstance(target, (ast.Tuple, ast.List)):
    for index, element in enumerate(target.elts):
      if isinstance(element, ast.Starred):
        out.append((None, None))
        continue
      simple_name_bindings(element, ('item', value, index), out)


def holds_optimizer(kind) -> bool:
  """``kind`` (True, a tuple of element kinds, or None) is an optimizer
  or a tuple holding one, also in a tuple nested in it."""
  return kind is True or isinstance(kind, tuple) and any(
      holds_optimizer(element) for element in kind)


def element_kind(kind, index):
  """The kind of element ``index`` of a tuple of kind ``kind``: True, the
  kind of a tuple nested there holding an optimizer, or None."""
  element = kind[index] if isinstance(kind, tuple) and index < len(
      kind) else None
  return element if element is True or isinstance(element, tuple) else None


class Bound(NamedTuple):
  """A function reached through partials/wrappers, with its bound arguments."""
  name: str  # the module-level function
  reference: ast.Name  # where the expression names it
  args: tuple  # ((value node, scope), ...) bound positionally first
  keywords: dict  # parameter -> (value node, scope)


class StepSignature(NamedTuple):
  """What a step a module factory returns takes and gives (its module's
  flow proves it): seen from another module that calls the factory."""
  node: ast.AST  # the step's FunctionDef (in its own module's tree)
  kind: object  # what it returns: True, a tuple of kinds, or None
  proven: tuple  # those its module proves optimizers
  # It overrides hyper-parameters per step (``apply_gradient(g,
  # learning_rate=lr)``): the definitions of what it is given take the rate
  # as an injected hyper-parameter, wherever they are made.
  overrides: bool = False
  # A call through a module alias (``_module_aliases``): every step it may
  # run (``merged_step``); empty for one step.
  nodes: tuple = ()
  # ``(step node, parameter)`` that only some of ``nodes`` prove: a caller
  # must pass an optimizer there too (``required``).
  unshared: tuple = ()


def merged_step(steps) -> Optional[StepSignature]:
  """The signature of a call that runs one of ``steps`` (a module alias
  chose the factory), where they give alike (else None): it proves the
  parameters every step proves at the same position under the same name,
  and requires an optimizer where any step proves one (``required``)."""
  first = steps[0]
  if any(step.kind != first.kind for step in steps):
    return None
  proven = [set(_proven_positions(step)) for step in steps]
  every = set.intersection(*proven)
  shared = {name for _, name in every}
  return StepSignature(first.node, first.kind,
                       tuple(name for _, name in sorted(every)),
                       any(s.overrides for s in steps),
                       tuple(s.node for s in steps),
                       tuple((s.node, name) for s in steps
                             for name in s.proven if name not in shared))


def _proven_positions(step) -> list:
  """``[(position, name)]`` of the parameters ``step`` proves (-1: a
  keyword-only one)."""
  named = [a.arg for a in step.node.args.posonlyargs + step.node.args.args]
  return [(named.index(p) if p in named else -1, p) for p in step.proven]


def required(signature, call, argument) -> Optional[str]:
  """The parameter ``call`` passes ``argument`` to where a step it may run
  takes an optimizer (``signature.proven``; through a module alias, also
  where only some of its steps prove one); None where none does."""
  for node in signature.nodes or (signature.node,):
    name = parameter_of(node, call, argument)
    if name is not None and (name in signature.proven or any(
        other is node and name == unshared
        for other, unshared in signature.unshared)):
      return name
  return None


def runs(signature, step) -> bool:
  """A call of ``signature`` may run the step FunctionDef ``step``."""
  return signature.node is step or any(n is step for n in signature.nodes)


class Site(NamedTuple):
  """One call of a module function: directly or through an alias."""
  args: tuple  # ((value node, scope), ...)
  keywords: dict  # parameter -> (value node, scope)


class Scope:

  def __init__(self, node, parent):
    self.node, self.parent = node, parent
    self.bindings: dict[str, list] = {}  # name -> [value or 'unknown']
    self.params: dict[str, int] = {}  # parameter name -> position
    self.annotated: dict[str, ast.AST] = {}


def every_site_passes(sites, function, name: str, position: int,
                       holds) -> bool:
  """Each call in ``sites`` passes ``function``'s parameter ``name`` (at
  ``position``), by keyword or by position, a value ``holds(value, scope)``
  accepts."""
  positional = len(function.args.posonlyargs) + len(function.args.args)
  for site in sites:
    passed = site.keywords.get(name)
    if passed is None and position < positional and position < len(
        site.args):
      passed = site.args[position]
    if passed is None or not holds(*passed):
      return False
  return True
