"""How an optimizer's uses are rewritten: ``.create``, ``.target``,
``.apply_gradient``, ``.replicate()``, its entries in dicts saved as
trees. Stdlib only."""

import ast
import functools
from typing import Optional

from compat.codemod import _array_targets
from compat.codemod import _codes
from compat.codemod import _flow
from compat.codemod import _legacy_trees
from compat.codemod import _members
from compat.codemod import _multi
from compat.codemod import _plan_records
from compat.codemod import _plan_rules
from compat.codemod import _serialization_helpers
from compat.codemod import _state_layout
from compat.codemod import _walk

_RULES = _plan_records.RULES_MODULE  # the module migrated code imports
_CATALOGUE = _plan_records.CATALOGUE
# The parents of a dict's entries: a dict display's values, ``dict(k=v)``'s
# keywords (``_legacy_trees.entry_of``).
_ENTRY_HOLDERS = (ast.Dict, ast.keyword)
# (each kind filtered once per tree: ``_walk.nodes_of``)
_CALLS = (ast.Call,)


class PlanUses(_plan_rules.PlanRules):
  """Plans each use of an object the flow proves an optimizer. Part of
  ``_rewrite_plan.Planner``, whose ``__init__`` sets the state."""

  def _replicate_calls(self):
    return [n for n in _walk.nodes_of(self.tree, _CALLS) if
            isinstance(n.func, ast.Attribute) and
            n.func.attr == _members.REPLICATE and
            self.flow.is_optimizer(n.func.value)]

  def _replica_axis(self):
    """(axis name of this module's ``.replicate()`` calls, or None; why not).

    ``.replicate()`` is rewritten only when every call names the same
    literal axis and no checkpoint sees the optimizer (a
    ReplicatedOptimizer's checkpoint keeps one replica's copy).
    """
    calls = self._replicate_calls()
    if not calls:
      return None, None
    axes = set()
    for call in calls:
      if any(isinstance(a, ast.Starred) for a in call.args) or any(
          k.arg not in ('devices', 'axis_name') for k in call.keywords):
        return None, _codes.note(_codes.REPLICATE_ARGUMENTS)
      given = dict(zip(('devices', 'axis_name'), call.args))
      given.update({k.arg: k.value for k in call.keywords})
      axis = given.get('axis_name')
      if axis is None:
        axes.add('batch')  # the legacy default
      elif isinstance(axis, ast.Constant) and isinstance(axis.value, str):
        axes.add(axis.value)
      else:
        return None, _codes.note(_codes.REPLICATE_AXIS_NOT_LITERAL)
    if len(axes) != 1:
      return None, _codes.note(_codes.REPLICATE_AXES_DIFFER)
    if any(f.construct in _plan_records.NOTE_CONSTRUCTS for f in self.findings):
      return None, _codes.note(_codes.REPLICATE_CHECKPOINTED)
    return axes.pop(), None

  def _plan_replicate(self, node, call, receiver) -> Optional[str]:
    """``opt.replicate(...)`` -> ``jax_utils.replicate(state[, devices])``."""
    if self.replica_axis is None:
      return _codes.filled_note(
          _codes.REPLICATE_LEFT, problem=self.replicate_problem,
          replacement=_CATALOGUE.REPLACEMENTS[_members.REPLICATE].text)
    given = dict(zip(('devices', 'axis_name'), call.args))
    given.update({k.arg: k.value for k in call.keywords})
    name = self._jax_utils_name()
    if given.get('devices') is not None:
      self.edit(call, f'{name}.replicate({{receiver}}, devices={{devices}})',
                _members.REPLICATE, receiver=receiver, devices=given['devices'])
    else:
      self.edit(call, f'{name}.replicate({{receiver}})', _members.REPLICATE,
                receiver=receiver)
    return None

  def _plan_create(self, node) -> Optional[str]:
    given = _flow.create_arguments(node)
    if given is None:
      return _codes.note(_codes.CREATE_ARGUMENTS)
    if not _flow.is_none(given.get('focus')):
      return _codes.note(_codes.CREATE_FOCUS)
    held = self._unproven_holder(node)
    if held:
      return held
    name = self._created_train_state_name()
    self.edit(node, f'{name}.TrainState.create(apply_fn=None, '
              'params={params}, tx={tx})', _members.CREATE,
              params=given[_members.TARGET], tx=node.func.value)
    return None

  def _jitted_def_create(self, node) -> Optional[ast.Attribute]:
    """``d.create`` of ``jax.jit(d.create, backend=...)(params)`` where
    ``d`` is certainly a definition."""
    create = _flow.jitted_create(node, self.names)
    if create is None or not self.flow.is_def(create.value):
      return None
    return create

  def _plan_jitted_create(self, node) -> Optional[str]:
    """``jax.jit(d.create, ...)(params)``: jit is given a function of the
    parameters alone (``TrainState.create`` takes keywords only); the
    definition stays a default argument, so it is evaluated where it was,
    once, before jit traces."""
    held = self._unproven_holder(node)
    if held:
      return held
    create = self._jitted_def_create(node)
    name = self._created_train_state_name()
    self.edit(create, 'lambda params, tx={tx}: '
              f'{name}.TrainState.create(apply_fn=None, params=params, '
              'tx=tx)', _members.CREATE, tx=create.value)
    return None

  def _created_train_state_name(self) -> str:
    """The module whose ``TrainState`` this flow's creates make: flax's,
    or, where one of them is provably given a bare array or number,
    ``flax_optim_rules``' (which steps one as flax.optim did, and any
    other tree as flax's does). All the flow's creates make the same:
    the others may be given an array too (one restored from a
    checkpoint), and the optimizers they make meet the same steps; so do
    those of modules whose optimizers may meet these (``array_states``:
    ``migrate._migrate_paths``)."""
    if self.array_states or self._steps_an_array:
      return self._rules_train_state_name()
    return self._train_state_name()

  @functools.cached_property
  def _steps_an_array(self) -> bool:
    return any(_array_targets.is_bare_array(target, self.names, self.flow)
               for target in self._create_targets())

  def _create_targets(self):
    """The target each ``create`` of this module's flow is given (those
    passed with * or ** are not planned: they hold the flow)."""
    for node in _walk.nodes_of(self.tree, _CALLS):
      if self._def_create(node):
        given = _flow.create_arguments(node)
        if given is not None:
          yield given[_members.TARGET]
      elif node.args and self._jitted_def_create(node) is not None:
        yield node.args[0]

  def _def_create(self, call) -> bool:
    """``d.create(...)`` with ``d`` a definition of this flow."""
    return isinstance(call.func, ast.Attribute) and (
        call.func.attr == _members.CREATE) and self.flow.is_def(
            call.func.value)

  def _unproven_holder(self, create) -> Optional[str]:
    """Why the TrainState ``create`` would make could reach code left as it
    is: a name it is assigned to that also holds other values (``opt =
    opt.restore_state(d)``), so its reads are not provably this optimizer
    and are not rewritten with it."""
    parent = self.parents.get(create)
    if not isinstance(parent, ast.Assign) or parent.value is not create:
      return None
    for target in parent.targets:
      if isinstance(target, ast.Name) and not self.flow.is_optimizer(target):
        return _codes.filled_note(_codes.CREATE_NAME_ALSO_HOLDS,
                                  name=target.id)
    return None

  def _plan_use(self, node) -> Optional[str]:
    """``optimizer.<attr>`` where ``optimizer`` is certainly an Optimizer."""
    parent = self.parents.get(node)
    receiver = node.value
    member = _members.read_rewrite(node.attr)
    if member is not None and self._read_as_whole(member, node, parent):
      self.edit(node, member.read_rewrite, 'optimizer_use',
                receiver=receiver)
      return None
    member = _members.call_rewrite(node.attr)
    if member is not None and isinstance(parent, ast.Call) and (
        parent.func is node):
      return self._plan_call_rewrite(member, parent, receiver)
    if node.attr == _members.STATE and isinstance(parent, ast.Attribute) and (
        parent.attr == _members.STEP):
      self.edit(parent, '{receiver}.step', 'optimizer_use', receiver=receiver)
      return None
    if node.attr == _members.APPLY_GRADIENT and isinstance(
        parent, ast.Call) and parent.func is node:
      return self._plan_apply_gradient(parent, receiver)
    if node.attr == _members.REPLACE and isinstance(parent, ast.Call) and all(
        k.arg == _members.TARGET for k in parent.keywords) and not parent.args:
      self.edit(parent, '{receiver}.replace(params={value})', 'optimizer_use',
                receiver=receiver, value=parent.keywords[0].value)
      return None
    if node.attr == _members.REPLICATE and isinstance(parent, ast.Call) and (
        parent.func is node):
      return self._plan_replicate(node, parent, receiver)
    if node.attr == _members.UNREPLICATE and isinstance(parent, ast.Call) and (
        parent.func is node) and not parent.args and not parent.keywords and (
            self.replica_axis is not None) and self.replicated.is_optimizer(
                receiver):
      self.edit(parent, f'{self._jax_utils_name()}.unreplicate({{receiver}})',
                _members.REPLICATE, receiver=receiver)
      return None
    if node.attr == _members.OPTIMIZER_DEF:
      unpacking = _multi.hyper_params_unpacking(self, node)
      if unpacking is not None:  # (hp0, hp1) = opt.optimizer_def.hyper_params
        self.delete_statement(unpacking, 'optimizer_use', node.lineno)
        return None
    if node.attr in _state_layout.LINKS:
      return _state_layout.plan_use(self, node, parent, receiver,
                                    _RULES)
    if node.attr in (_members.REPLICATE, _members.UNREPLICATE):
      return _codes.filled_note(
          _codes.REPLICA_STEP_UNPROVEN, attr=node.attr,
          replacement=_CATALOGUE.REPLACEMENTS[_members.REPLICATE].text)
    why = _members.no_counterpart(node.attr)
    return _codes.filled_note(_codes.NO_TRAIN_STATE_COUNTERPART,
                              attr=node.attr, why=f': {why}' if why else '')

  def _plan_call_rewrite(self, member, call, receiver) -> Optional[str]:
    """A call of a method the table rewrites (``member.call_rewrite``):
    each of its parameters given once, its result unpacked into the names
    the table says. Returns why not."""
    given = _arguments(member.parameters, call)
    if given is None:
      return _codes.filled_note(_codes.CALL_ARGUMENTS_UNMAPPED,
                                name=member.name,
                                parameters=', '.join(member.parameters))
    if member.call_targets is not None and _unpacked_into(
        self.parents.get(call), call) != member.call_targets:
      return _codes.filled_note(_codes.CALL_RESULT_NOT_UNPACKED,
                                name=member.name, count=member.call_targets)
    jax = self._jax_name(call)
    if jax is None:
      return _codes.note(_codes.JAX_TAKEN)
    self.edit(call, member.call_rewrite, member.construct, receiver=receiver,
              jax=jax, **given)
    return None

  def _jax_name(self, at) -> Optional[str]:
    """The name jax has where the node ``at`` is, imported at the module
    level where the name is free; None where it names something else
    (``_codes.JAX_TAKEN``)."""
    if self.names.resolve(ast.Name(id='jax'), at=at) == 'jax':
      return 'jax'
    if 'jax' in self._taken:
      return None
    self.imports.append(('jax', None, None))
    return 'jax'

  def _read_as_whole(self, member, node, parent) -> bool:
    """A read the table rewrites: any read, or, of a member holding a
    definition, one whose ``.create(...)`` is called (that create is
    rewritten with the transform; any other use stays with the read)."""
    if member.holds is None:
      return True
    call = self.parents.get(parent)
    return isinstance(parent, ast.Attribute) and (
        parent.attr == _members.CREATE) and isinstance(call, ast.Call) and (
            call.func is parent) and self.flow.is_def(node)

  def _tree_entry_reads(self) -> list:
    """The names and attribute chains read as the value of a dict display
    or of a keyword, in the walk's order: the only nodes
    ``_legacy_trees.entry_of`` can find an entry of (its parent is the
    dict or the keyword), so ``_plan_tree_entry`` asks of no other read."""
    reads = []
    for holder in _walk.nodes_of(self.tree, _ENTRY_HOLDERS):
      values = holder.values if isinstance(holder, ast.Dict) else [
          holder.value]
      reads += [value for value in values
                if isinstance(value, (ast.Name, ast.Attribute)) and (
                    isinstance(value.ctx, ast.Load))]
    return reads

  def _plan_tree_entry(self, node):
    """An optimizer in a dict saved or loaded as a tree (``_legacy_trees``):
    flax.optim's layout at both ends. Where the dict is otherwise used, the
    escape analysis keeps the flow with the reason."""
    parent = self.parents.get(node)
    entry = _legacy_trees.entry_of(node, parent, self.parents.get(parent))
    if entry is None or not self.flow.is_optimizer(node):
      return  # (the entry is asked first: it is the cheaper question)
    verdict = self.flow.tree_verdict(node)
    if verdict.display is None:
      return
    self.imports.append((_RULES, None, None))
    self.edit(node, f'{_RULES}.legacy_tree({{value}})', 'checkpoint',
              value=node)
    # A checkpoint call given the dict keeps flax.optim's layout: no note.
    around = self.parents.get(entry[0])
    while isinstance(around, (ast.expr, ast.keyword)):
      if isinstance(around, ast.Call):
        self.legacy_layout_lines.add(around.lineno)
      around = self.parents.get(around)
    template = _plan_records.literal_template(
        ast.unparse(verdict.display.value))
    for read in verdict.display.loaded_back:
      self.edit(read, f'{_RULES}.from_legacy_tree({template}, '
                '{read})', 'checkpoint', read=read)
    # A walker proven to walk the tree as the Optimizer: noted where the
    # flow migrates (a safe fix, with what is proven).
    self.proven_fixes += [_plan_records.Leftover(
        node.lineno, _plan_records.ESCAPE, self._line(node.lineno),
        _codes.PROVEN_FIX_NOTE.format(grounds=grounds))
                          for grounds in verdict.proven]

  def _plan_helper_call(self, call, passes) -> Optional[str]:
    """``call`` gives optimizers to a function of the user's that only
    saves or restores them with flax.serialization
    (``_serialization_helpers``): flax.optim's tree of each goes in, and
    the tree a restore gives back is turned into a TrainState, so the files
    keep flax.optim's layout. Returns why not."""
    why = _state_layout.unsupported(self, covered=('multi_optimizer',))
    if why:
      return why
    restored = [p.argument for p in passes
                if p.role == _serialization_helpers.RESTORE]
    if any(not _plan_records.is_pure(template) for template in restored) or (
        len(restored) > 1):
      return _codes.note(_codes.RESTORE_TEMPLATE_AGAIN)
    if any(self.replicated.is_optimizer(p.argument) for p in passes):
      return _codes.note(_codes.LEGACY_TREE_REPLICATED)
    self.imports.append((_RULES, None, None))
    for given in passes:
      self.edit(given.argument, f'{_RULES}.legacy_tree({{value}})',
                'checkpoint', value=given.argument)
    for template in restored:
      text = _plan_records.literal_template(ast.unparse(template))
      self.edit(call, f'{_RULES}.from_legacy_tree({text}, {{call}})',
                'checkpoint', call=call)
    self.legacy_layout_lines.add(call.lineno)
    return None

  def _plan_apply_gradient(self, call, receiver) -> Optional[str]:
    if len(call.args) != 1 or any(isinstance(a, ast.Starred)
                                  for a in call.args):
      return _codes.note(_codes.APPLY_GRADIENT_ARGUMENTS)
    grads = '{grads}'
    if self._replicate_calls():
      if self.replica_axis is None:
        return _codes.filled_note(_codes.REPLICATE_PROBLEM,
                                  problem=self.replicate_problem)
      if not self.replicated.is_optimizer(receiver):
        return _codes.note(_codes.REPLICATED_UNPROVEN)
      jax = self._jax_name(call)
      if jax is None:
        return _codes.note(_codes.JAX_TAKEN)
      # What ReplicatedOptimizer did inside apply_gradient (pmean is the
      # same psum / psum(1)).
      grads = f'{jax}.lax.pmean({{grads}}, axis_name={self.replica_axis!r})'
    extra = [k.arg for k in call.keywords]
    if not extra and self.inject:
      return _codes.note(_codes.RATE_SET_ELSEWHERE)
    if not extra:
      self.edit(call, '{receiver}.apply_gradients(grads=%s)' % grads,
                _members.APPLY_GRADIENT, receiver=receiver, grads=call.args[0])
      return None
    if extra not in (['learning_rate'], [_members.HYPER_PARAMS]):
      return _codes.filled_note(_codes.OVERRIDES_NOT_RATE,
                                names=', '.join(str(e) for e in extra))
    if not _plan_records.is_pure(receiver):
      return _codes.note(_codes.EVALUATED_TWICE)
    if extra == [_members.HYPER_PARAMS]:  # a rate per MultiOptimizer part
      return _multi.plan_hyper_params(self, call, receiver, grads,
                                      _RULES)
    self._require_tx_imports()
    self.edit(call, '{receiver}.replace(opt_state=optax.tree_utils.tree_set('
              '{receiver}.opt_state, learning_rate={rate})).apply_gradients('
              'grads=%s)' % grads, 'apply_gradient_overrides',
              receiver=receiver, rate=call.keywords[0].value,
              grads=call.args[0])
    return None


def _arguments(parameters, call) -> Optional[dict]:
  """``call``'s argument for each of ``parameters`` (a method's, its
  receiver bound), or None where one is missing, given twice, unknown, or
  passed with * or **."""
  if len(call.args) > len(parameters) or any(
      isinstance(a, ast.Starred) for a in call.args):
    return None
  given = dict(zip(parameters, call.args))
  for keyword in call.keywords:
    if keyword.arg not in parameters or keyword.arg in given:
      return None  # (** has no name: None is no parameter)
    given[keyword.arg] = keyword.value
  return given if len(given) == len(parameters) else None


def _unpacked_into(statement, call) -> Optional[int]:
  """How many names ``statement`` unpacks ``call``'s result into (``a, b =
  call``); None where it does not so."""
  if not isinstance(statement, ast.Assign) or statement.value is not call or (
      len(statement.targets) != 1):
    return None
  target = statement.targets[0]
  if not isinstance(target, (ast.Tuple, ast.List)) or any(
      isinstance(e, ast.Starred) for e in target.elts):
    return None
  return len(target.elts)
