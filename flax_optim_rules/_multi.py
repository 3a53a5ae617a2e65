"""flax.optim's ``MultiOptimizer`` of ``ModelParamTraversal``s, in Optax.

``MultiOptimizer((traversal0, def0), (traversal1, def1))`` stepped each
subset of the params with its own rule and left the leaves no traversal
selected as they were. In Optax that is ``optax.partition`` with one label
per rule and ``optax.set_to_zero()`` for the rest, the labels computed from
the traversals' filters::

  kernels = flax_optim_rules.ModelParamTraversal(lambda p, _: 'bias' not in p)
  biases = flax_optim_rules.ModelParamTraversal(lambda p, _: 'bias' in p)
  tx = flax_optim_rules.multi_optimizer((kernels, flax_optim_rules.adam()),
                                        (biases, optax.sgd(0.1)))

A rate per sub-optimizer and step (flax.optim's ``apply_gradient(g,
hyper_params=[hp0.replace(learning_rate=lr0), ...])``) is set in the state
with ``set_learning_rates`` when each transform takes an injected rate
(``inject_learning_rate``).

The labels (``sub_label``, ``FROZEN_LABEL``) and the error for a leaf two
traversals select are defined here once; ``legacy_optim``'s MultiOptimizer
uses them too.
"""

import collections.abc
from typing import Any, Callable, NamedTuple, Sequence

import jax
import optax

FROZEN_LABEL = 'frozen'


def sub_label(index: int) -> str:
  """The partition label of the ``index``-th sub-optimizer."""
  return str(index)


def param_path(keys: Sequence[Any]) -> str:
  """A leaf's path as ``ModelParamTraversal`` filters see it: keys joined by
  ``'/'`` after a leading one (``'/Dense_0/kernel'``)."""
  return '/' + '/'.join(str(key) for key in keys)


def raise_on_overlaps(treedef: Any, paths: Sequence[str],
                      owners: Sequence[Sequence[int]]) -> None:
  """Raises ``ValueError`` naming every leaf more than one traversal selects.

  ``paths[i]`` names leaf ``i`` of ``treedef``; ``owners[i]`` lists the
  indices of the traversals that select it.
  """
  overlaps = [(path, list(ks)) for path, ks in zip(paths, owners)
              if len(ks) > 1]
  if not overlaps:
    return
  listed = '; '.join(f'{path} (optimizers {ks})' for path, ks in overlaps)
  # flax.optim printed the whole tree of matches; code may parse it.
  matches = treedef.unflatten([list(ks) for ks in owners])
  raise ValueError(f'Multiple optimizers match the same leaves: {listed}. '
                   f'Optimizers matching each leaf: {matches}')


class ModelParamTraversal(NamedTuple):
  """The params whose path passes ``filter_fn(path, leaf)``.

  Only what ``multi_optimizer`` reads of flax.optim's traversal of the same
  name: the filter (paths like ``'/Dense_0/kernel'``, the leaf as its second
  argument). It does not iterate or update trees.
  """
  filter_fn: Callable[[str, Any], bool]

  @property
  def _filter_fn(self) -> Callable[[str, Any], bool]:
    """flax.optim's name of the filter, which code logging what each
    traversal selects read (``MultiRuleDef`` subclasses keep such code)."""
    return self.filter_fn


def _is_leaf(node) -> bool:
  # flax.optim walked nested dicts only: anything else is one leaf.
  return not isinstance(node, collections.abc.Mapping)


def traversal_labels(params: Any,
                     *traversals: ModelParamTraversal) -> Any:
  """``optax.partition`` labels of ``params`` from the traversals' filters.

  A leaf the ``k``-th traversal selects gets ``sub_label(k)``, one none
  selects ``FROZEN_LABEL``. The labels are ``params``' nested dicts with a
  label where a leaf (anything not a mapping) was.

  Raises:
    TypeError: an argument is not a ``ModelParamTraversal``.
    ValueError: a leaf is selected by more than one traversal (all named).
  """
  for index, traversal in enumerate(traversals):
    if not isinstance(traversal, ModelParamTraversal):
      raise TypeError(f'traversal_labels argument {index + 1} must be a '
                      'flax_optim_rules.ModelParamTraversal, got '
                      f'{type(traversal).__name__}.')
  flat, treedef = jax.tree_util.tree_flatten_with_path(params,
                                                       is_leaf=_is_leaf)
  owners = []
  for path, leaf in flat:
    where = param_path([getattr(entry, 'key', entry) for entry in path])
    owners.append([k for k, traversal in enumerate(traversals)
                   if traversal.filter_fn(where, leaf)])
  raise_on_overlaps(treedef, [jax.tree_util.keystr(p) for p, _ in flat],
                    owners)
  return treedef.unflatten(
      [sub_label(ks[0]) if ks else FROZEN_LABEL for ks in owners])


def multi_optimizer(
    *traversals_and_transforms: tuple[ModelParamTraversal,
                                      optax.GradientTransformation]
) -> optax.GradientTransformation:
  """flax.optim's ``MultiOptimizer(*pairs)`` as an Optax transform.

  Each ``(traversal, transform)`` pair steps the leaves its traversal
  selects (with a step count of its own, as every sub-optimizer advanced
  flax.optim's one step); leaves no traversal selects keep their values.

  Raises:
    TypeError: an argument is not a ``(ModelParamTraversal, transform)``
      pair (its position is named).
  """
  if not traversals_and_transforms:
    raise TypeError('multi_optimizer needs at least one (traversal, '
                    'transform) pair.')
  for index, pair in enumerate(traversals_and_transforms):
    if not (isinstance(pair, tuple) and len(pair) == 2 and
            isinstance(pair[0], ModelParamTraversal) and
            isinstance(pair[1], optax.GradientTransformation)):
      raise TypeError(
          f'multi_optimizer argument {index + 1} must be a '
          '(flax_optim_rules.ModelParamTraversal, '
          f'optax.GradientTransformation) pair, got {pair!r}.')
  traversals = tuple(pair[0] for pair in traversals_and_transforms)
  transforms = {sub_label(k): pair[1]
                for k, pair in enumerate(traversals_and_transforms)}
  transforms[FROZEN_LABEL] = optax.set_to_zero()
  return optax.partition(
      transforms, lambda tree: traversal_labels(tree, *traversals))


class MultiRuleDef:
  """A user's own ``flax.optim.MultiOptimizer`` subclass, as Optax.

  Research code subclassed MultiOptimizer to run something of its own when
  the optimizer is made (log which params each traversal selects) and then
  ``super().init_state(params)``. ``migrate`` keeps such a class verbatim on
  this base, which has what those overrides ask for: ``traversals`` (each
  also readable by its flax.optim name ``_filter_fn``), ``init_state``
  (the ``multi_optimizer`` state, which the override returns as it is) and
  ``to_optax()``, whose ``init`` runs the class's ``init_state`` where
  flax.optim's ``create`` did::

    class LoggingMulti(flax_optim_rules.MultiRuleDef):
      def init_state(self, params):
        log(self.traversals, params)
        return super().init_state(params)

    tx = LoggingMulti((kernels, flax_optim_rules.adam()),
                      (biases, optax.sgd(0.1))).to_optax()

  Steps are ``multi_optimizer``'s: the same numbers, the same state (so
  ``set_learning_rates`` applies).
  """

  def __init__(self, *traversals_and_transforms: tuple[
      ModelParamTraversal, optax.GradientTransformation]):
    self._transform = multi_optimizer(*traversals_and_transforms)
    self.traversals = tuple(pair[0] for pair in traversals_and_transforms)

  def init_state(self, params: Any) -> Any:
    """The ``multi_optimizer`` state of ``params``."""
    return self._transform.init(params)

  def to_optax(self) -> optax.GradientTransformationExtraArgs:
    """The steps of ``multi_optimizer``, made by this class's
    ``init_state``."""
    return optax.GradientTransformationExtraArgs(self.init_state,
                                                 self._transform.update)


def set_learning_rates(opt_state: Any, learning_rates: Sequence[Any]) -> Any:
  """``opt_state`` of a ``multi_optimizer`` with sub-optimizer ``k``'s
  injected learning rate set to ``learning_rates[k]``.

  flax.optim's ``apply_gradient(g, hyper_params=[hp0.replace(
  learning_rate=lr0), hp1.replace(learning_rate=lr1)])`` on a
  MultiOptimizer; each transform must take its rate as an injected
  hyper-parameter (``inject_learning_rate``, ``optax.inject_hyperparams``).

  Raises:
    ValueError: ``opt_state`` is not a multi_optimizer's state, has another
      number of sub-optimizers than ``learning_rates`` (both named), or a
      sub-optimizer takes no injected rate (named).
  """
  inner = getattr(opt_state, 'inner_states', None)
  labels = [sub_label(k) for k in range(len(learning_rates))]
  if not isinstance(inner, collections.abc.Mapping) or set(inner) != {
      *labels, FROZEN_LABEL}:
    found = sorted(inner) if isinstance(inner, collections.abc.Mapping) else (
        type(opt_state).__name__)
    raise ValueError(
        f'set_learning_rates got {len(learning_rates)} learning rates for a '
        f'state that is not a multi_optimizer state of as many '
        f'sub-optimizers (its parts: {found}).')
  updated = dict(inner)
  for label, rate in zip(labels, learning_rates):
    try:
      updated[label] = optax.tree_utils.tree_set(inner[label],
                                                 learning_rate=rate)
    except KeyError:
      raise ValueError(
          f'sub-optimizer {label} of this multi_optimizer takes no injected '
          'learning rate: build its transform with '
          'flax_optim_rules.inject_learning_rate (or optax.inject_hyperparams)'
          '.') from None
  return opt_state._replace(inner_states=updated)
