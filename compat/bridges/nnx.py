"""Legacy ``Optimizer`` -> ``flax.nnx.Optimizer`` on an nnx model.

``to_nnx_optimizer(optimizer, model)`` writes the legacy target into the
model's params and returns an ``nnx.Optimizer`` whose state is the legacy
state (step count included), so ``nnx_opt.update(model, grads)`` continues
training bit-identically.

Legacy params and the model's params are matched by path. A linen model
wrapped with ``flax.nnx.bridge.ToNNX`` has the same paths
(``Dense_0/kernel``); for a hand-ported model, ``path_map`` renames legacy
paths (``{'Dense_0': 'linear1'}``).

The optimizer's ``tx`` is the def's transform (``to_optax()``) behind a thin
re-keying layer: the legacy rule sees params, gradients and state laid out as
the legacy target (so ``MultiOptimizer`` traversals and per-path rules select
the same leaves), while ``nnx.Optimizer`` stores the state in its own layout,
keyed by the model's paths (``OptVariable``/``OptArray`` leaves). Re-keying
moves references only; it is free under ``jax.jit``.
"""

import importlib.metadata
import inspect
from typing import Any, Optional, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from compat.bridges import _paths
from compat.bridges import optax_bridge
from compat.bridges import sharding
from legacy_optim import base

# The installed nnx API, detected here and nowhere else. The bridge needs
# flax 0.11's nnx.Optimizer: state held in Variables (``nnx.state`` returns
# the Variables, not ``VariableState`` copies), ``wrt`` keyword-only,
# ``update(model, grads, **kwargs)`` and an ``OptState`` step set with
# ``step[...]``; the recipes, the guide and compat.testing also need
# ``nnx.as_pure``, which flax 0.12.7 added (0.11.0-0.12.6 call it
# ``nnx.pure``). The oldest flax with both is what ``tox -e oldest-nnx`` tests.
NNX_MIN_FLAX = '0.12.7'
_UPDATE_TAKES_MODEL = 'model' in inspect.signature(
    nnx.Optimizer.update).parameters
_as_pure = getattr(nnx, 'as_pure', None)


def nnx_api_problem() -> Optional[str]:
  """Why the installed flax cannot host the nnx bridge; None when it can."""
  if _UPDATE_TAKES_MODEL and _as_pure is not None:
    return None
  return (f'compat.to_nnx_optimizer needs flax>={NNX_MIN_FLAX} (nnx.Optimizer '
          '(model, tx, wrt=...) with update(model, grads, **kwargs), '
          "Variable-held state and nnx.as_pure); the installed flax is "
          f"{importlib.metadata.version('flax')}. Upgrade flax, or continue "
          'with compat.to_optax / compat.to_train_state, which work on it.')


def as_pure(tree):
  """``tree`` with every nnx ``Variable`` replaced by its value."""
  return _as_pure(tree)


def _new_optimizer(model, tx, wrt, step, opt_state=None) -> nnx.Optimizer:
  """``nnx.Optimizer(model, tx, wrt=wrt)`` at ``step`` holding ``opt_state``."""
  return _with_state(nnx.Optimizer(model, tx, wrt=wrt), step, opt_state)


def _with_state(nnx_opt, step, opt_state=None) -> nnx.Optimizer:
  """``nnx_opt`` at ``step``, holding ``opt_state`` (None: its own init)."""
  if opt_state is not None:
    nnx.update(nnx_opt.opt_state, nnx.state(opt_state))
  # From the host: the legacy step may sit on other devices than the params
  # (state sharded on one mesh, params on another, the state following them).
  nnx_opt.step[...] = jnp.asarray(jax.device_get(step), jnp.uint32)
  return nnx_opt


def _leaf_order(legacy_params, model_params, path_map) -> list[int]:
  """``order[j]``: the legacy leaf that model leaf ``j`` receives.

  Raises one ValueError listing every unmatched, doubly matched or
  shape/dtype-mismatched path (and unused ``path_map`` entries).
  """
  legacy = jax.tree_util.tree_flatten_with_path(legacy_params)[0]
  model = jax.tree_util.tree_flatten_with_path(model_params)[0]
  model_index = {_paths.segments(path): j for j, (path, _) in enumerate(model)}
  rename = _paths.PathRenamer(path_map)
  order: list[Any] = [None] * len(model)  # every entry an int on return
  problems = []
  for i, (key_path, value) in enumerate(legacy):
    old = _paths.segments(key_path)
    new = rename(old)
    shown = _paths.show(old)
    if new != old:
      shown += f' -> {_paths.show(new)}'
    j = model_index.get(new)
    if j is None:
      problems.append(f'legacy param {shown}: the model has no such param')
      continue
    if order[j] is not None:
      taken_by = _paths.show(_paths.segments(legacy[order[j]][0]))
      problems.append(f'legacy param {shown}: model param '
                      f'{_paths.show(new)} is already taken by {taken_by}')
      continue
    order[j] = i
    want = model[j][1]
    if np.shape(value) != np.shape(want):
      problems.append(f'legacy param {shown}: shape {np.shape(value)}, the '
                      f'model expects {np.shape(want)}')
    elif jnp.result_type(value) != jnp.result_type(want):
      problems.append(f'legacy param {shown}: dtype {jnp.result_type(value)}, '
                      f'the model expects {jnp.result_type(want)}')
  problems += [f'model param {_paths.show(_paths.segments(model[j][0]))}: '
               'no legacy param maps to it'
               for j, i in enumerate(order) if i is None]
  problems += [f'path_map entry {_paths.show(p)!r} matches no legacy param'
               for p in rename.unused()]
  if problems:
    hint = ''
    if legacy and all(_paths.segments(p)[:1] == ('params',) for p, _ in legacy):
      hint = ("\nThe legacy target holds the whole variables dict; drop the "
              "'params' level with path_map={'params': ''}.")
    raise ValueError(
        'The legacy params do not match the model\'s params:\n  ' +
        '\n  '.join(problems) + hint)
  return order


class _Relayout:
  """Moves params-shaped trees between the legacy and the model's layout."""

  def __init__(self, legacy_params, model_params, order: list[int]):
    self.legacy_def = jax.tree_util.tree_structure(legacy_params)
    self.model_def = jax.tree_util.tree_structure(model_params)
    self.order = order
    self.model_names = [
        _paths.show(_paths.segments(path)) for path, _ in
        jax.tree_util.tree_flatten_with_path(model_params)[0]]

  def to_model(self, tree):
    leaves = self.legacy_def.flatten_up_to(tree)
    return self.model_def.unflatten([leaves[i] for i in self.order])

  def to_legacy(self, tree):
    leaves = self.model_def.flatten_up_to(tree)
    out = [None] * len(leaves)
    for j, i in enumerate(self.order):
      out[i] = leaves[j]
    return self.legacy_def.unflatten(out)

  def state_to_model(self, opt_state):
    return _map_params_shaped(opt_state, self.legacy_def, self.to_model)

  def state_to_legacy(self, opt_state):
    return _map_params_shaped(opt_state, self.model_def, self.to_legacy)


def _map_params_shaped(tree, params_def: Any, fn):
  """Applies ``fn`` to every outermost subtree shaped like the params."""

  def fits(node) -> bool:
    # jax's error for a misfit spells out the whole node (array values
    # included, seconds for thousands of leaves): rule out a different root
    # container first.
    node_def: Any = jax.tree_util.tree_structure(node)
    if node_def == params_def:
      return True
    if (params_def.num_nodes > 1 and
        node_def.node_data() != params_def.node_data()):
      return False
    try:
      params_def.flatten_up_to(node)
    except (ValueError, TypeError):
      return False
    return True

  return jax.tree_util.tree_map(
      lambda node: fn(node) if fits(node) else node, tree, is_leaf=fits)


def _with_param_metadata(tree, model_vars):
  """Leaves shaped like their param become copies of its Variable.

  ``nnx.Optimizer`` turns such leaves into ``OptVariable`` (keeping e.g. the
  params' sharding metadata), exactly as for a stock Optax transform.
  """

  def wrap(var, value):
    if isinstance(var, nnx.Variable) and hasattr(value, 'shape') and (
        np.shape(value) == var.shape):
      return var.replace(value)
    return value

  return jax.tree_util.tree_map(
      wrap, model_vars, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def _param_shardings(model_params) -> list:
  """The params' shardings in leaf order (None for a leaf without one)."""
  return [getattr(leaf, 'sharding', None)
          for leaf in jax.tree_util.tree_leaves(model_params)]


def _constrain(update, where: jax.sharding.NamedSharding):
  explicit = jax.sharding.AxisType.Explicit
  if any(t == explicit for t in where.mesh.axis_types):
    return jax.sharding.reshard(update, where)
  return jax.lax.with_sharding_constraint(update, where)


def _place_as(update, param, param_sharding, name: str):
  """``update`` placed as its param: ZeRO-1 splits the state, not the params.

  Without this, params plus updates computed from split state come out split
  under ``nnx.jit`` (which writes them back into the model), and the next
  step contracts over a split dimension. Where the param is: its traced type
  on explicit axes; else its sharding at conversion, if it was on a mesh
  then. A param made off any mesh (uncommitted, as ``nnx.Rngs`` makes them)
  is replicated over an explicit mesh; auto axes leave its placement to
  XLA, which splits it like the state, so that raises while tracing the
  first step, as does a param put on auto axes after the conversion.
  """
  update_mesh = jax.typeof(update).sharding.mesh
  param_type = None if param is None else jax.typeof(param).sharding
  explicit = jax.sharding.AxisType.Explicit
  if param_type is not None and any(t == explicit
                                    for t in param_type.mesh.axis_types):
    return jax.sharding.reshard(update, param_type)
  if isinstance(param_sharding, jax.sharding.NamedSharding):
    return _constrain(update, param_sharding)
  if update_mesh.empty:
    return update  # Neither on a mesh: nothing to keep.
  if any(t == explicit for t in update_mesh.axis_types) and (
      param_type is None or param_type.mesh.empty):
    return jax.sharding.reshard(update, jax.sharding.NamedSharding(
        update_mesh, jax.sharding.PartitionSpec()))
  where = ('on no mesh' if param_type is None or param_type.mesh.empty else
           'put on a mesh with auto axes after compat.to_nnx_optimizer')
  raise ValueError(
      f'model param {name} is {where}, its optimizer state on {update_mesh}: '
      'on auto axes the step cannot keep the param where it is and would '
      'split it like the state. Put the params on the mesh before '
      'compat.to_nnx_optimizer (for ZeRO-1 replicated: nnx.update(model, '
      'jax.device_put(nnx.state(model, nnx.Param), NamedSharding(mesh, '
      'PartitionSpec())))), or use a mesh with explicit axes.')


def relayout_transform(tx: optax.GradientTransformation,
                       relayout: _Relayout,
                       param_shardings: Optional[list] = None
                      ) -> optax.GradientTransformationExtraArgs:
  """``tx`` (written for the legacy layout) on trees in the model's layout.

  Extra ``update`` kwargs reach ``tx``, params-shaped ones re-keyed too.
  The updates are placed as the params are (``_place_as``);
  ``param_shardings`` are the model's params' shardings at conversion, leaf
  by leaf.
  """
  param_shardings = param_shardings or [None] * len(relayout.model_names)
  tx = optax.with_extra_args_support(tx)

  def init_fn(params):
    pure = as_pure(params)
    state = relayout.state_to_model(tx.init(relayout.to_legacy(pure)))
    return _map_params_shaped(
        state, relayout.model_def,
        lambda node: _with_param_metadata(node, params))

  def update_fn(updates, state, params=None, **extra_args):
    legacy_params = None if params is None else relayout.to_legacy(params)
    new_updates, new_state = tx.update(
        relayout.to_legacy(updates), relayout.state_to_legacy(state),
        legacy_params,
        **_map_params_shaped(extra_args, relayout.model_def,
                             relayout.to_legacy))
    new_updates = relayout.to_model(new_updates)
    params_flat = ([None] * len(param_shardings) if params is None
                   else relayout.model_def.flatten_up_to(params))
    new_updates = relayout.model_def.unflatten([
        _place_as(u, p, s, name) for u, p, s, name in zip(
            relayout.model_def.flatten_up_to(new_updates), params_flat,
            param_shardings, relayout.model_names)])
    return new_updates, relayout.state_to_model(new_state)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def _variable_paths(model: nnx.Module, where: Any) -> list[_paths.Path]:
  return [_paths.segments(path) for path, _ in
          jax.tree_util.tree_flatten_with_path(
              as_pure(nnx.state(model, where)))[0]]


def _placed_target(relayout: _Relayout, target, model_params):
  """The legacy target in the model's layout, placed as the model's params
  where those are on a mesh, else where the target is."""
  new_params = relayout.to_model(target)
  if any(isinstance(s, jax.sharding.NamedSharding)
         for s in _param_shardings(model_params)):
    new_params = jax.tree_util.tree_map(
        lambda new, old: jax.device_put(new, old.sharding), new_params,
        model_params)
  return new_params


def _follow_param_shardings(opt_state, model_params):
  """``opt_state`` placed as its params are (when they are on a mesh).

  Each state leaf shaped like its param takes the param's sharding (a
  factored moment the param's minus the dropped axis, other leaves, e.g.
  step counts, replicated): what ``compat.state_shardings`` gives for a
  rule made of the params' own shardings.
  """
  param_shardings = jax.tree_util.tree_map(
      lambda x: getattr(x, 'sharding', None), model_params)
  meshes = [s.mesh for s in jax.tree_util.tree_leaves(param_shardings)
            if isinstance(s, jax.sharding.NamedSharding)]
  if not meshes:
    return opt_state
  shardings = sharding.state_shardings(opt_state, meshes[0], param_shardings,
                                       params=model_params)
  return jax.device_put(opt_state, shardings)


def to_nnx_optimizer(optimizer: base.Optimizer,
                     model: nnx.Module,
                     wrt: Any = nnx.Param,
                     path_map: Optional[_paths.PathMap] = None,
                     *,
                     load: Any = None,
                     wrap: Optional[optax_bridge.Wrap] = None,
                     inject: Sequence[str] = (),
                     **hyper_param_overrides) -> nnx.Optimizer:
  """Sets ``model``'s params from ``optimizer`` and returns its nnx.Optimizer.

  Args:
    optimizer: a legacy ``Optimizer`` (not replicated: ``unreplicate()`` it).
    model: the nnx model; its ``load`` variables receive ``optimizer.target``.
    wrt: the nnx filter of the trained variables (as for ``nnx.Optimizer``).
    path_map: renames legacy param paths to the model's: a mapping from a
      legacy path or path prefix (``'Dense_0'``, ``'Dense_0/kernel'`` or a
      tuple of keys) to the model's (``''`` drops a level), the longest
      matching prefix winning; or a function of the '/'-joined path.
    load: the nnx filter of the variables that receive the legacy target;
      default ``wrt``. When it selects other variables than ``wrt`` (load
      the base weights, train only ``nnx.LoRAParam``), the legacy state
      belongs to no trained variable: the optimizer starts afresh (step 0)
      on the ``wrt`` variables with the def's rule, as ``create`` would.
    wrap, inject: wrap the transform (``optax.chain`` with clipping in
      front, ``MultiSteps``) and make hyper-params settable between steps,
      the legacy state carried inside; as in ``compat.to_optax``.
    **hyper_param_overrides: as in ``compat.to_optax`` (schedules allowed).

  Returns:
    ``nnx.Optimizer(model, tx, wrt=wrt)`` holding the legacy state, placed
    as the model's params are (sharded params: sharded state).
    ``nnx_opt.update(model, grads, learning_rate=lr)`` overrides a
    hyper-param for one step, as ``apply_gradient`` did; other keywords
    reach ``tx`` as for a stock Optax transform.

  Raises:
    ValueError: some param is unmatched (either side), matched twice, or has
      another shape or dtype; the message lists every such path.
  """
  problem = nnx_api_problem()
  if problem:
    raise NotImplementedError(problem)
  load = wrt if load is None else load
  opt_state = optax_bridge.optax_state(optimizer)
  target = optimizer.target
  model_params = as_pure(nnx.state(model, load))
  relayout = _Relayout(target, model_params,
                       _leaf_order(target, model_params, path_map))
  overrides = hyper_param_overrides
  if load is not wrt and (_variable_paths(model, load) !=
                          _variable_paths(model, wrt)):
    optax_bridge.transform(optimizer, **overrides)  # Refuses what cannot go.
    nnx.update(model, _placed_target(relayout, target, model_params))
    tx = optax_bridge.wrapped_transform(
        lambda **hp: optax_bridge.transform(optimizer, **{**overrides, **hp}),
        wrap=wrap, inject=optax_bridge.injectable(
            inject, optimizer.optimizer_def, overrides))
    return _new_optimizer(model, tx, wrt, 0)

  # The params as the model will hold them: the updates keep them there.
  new_params = _placed_target(relayout, target, model_params)
  tx, new_state = optax_bridge.compose(
      lambda **hp: relayout_transform(
          optax_bridge.transform(optimizer, **{**overrides, **hp}), relayout,
          _param_shardings(new_params)),
      relayout.state_to_model(opt_state), model_params, optimizer.state.step,
      wrap=wrap, inject=optax_bridge.injectable(
          inject, optimizer.optimizer_def, overrides))
  nnx_opt = _new_optimizer(model, tx, wrt, 0)
  # The layout tx.init gave nnx_opt (its state leaves are Variables): no
  # second init, not even traced (seconds at thousands of leaves).
  expected: Any = jax.tree_util.tree_structure(
      nnx_opt.opt_state, is_leaf=lambda x: isinstance(x, nnx.Variable))
  if jax.tree_util.tree_structure(new_state) != expected:
    raise TypeError(
        'The converted optimizer state does not fit the layout of '
        f'{optimizer.optimizer_def._name}.to_optax().init on the model:\n'
        f'  converted: {jax.tree_util.tree_structure(new_state)}\n'
        f'  expected:  {expected}')

  nnx.update(model, new_params)
  return _with_state(nnx_opt, optimizer.state.step,
                     _follow_param_shardings(new_state, model_params))
