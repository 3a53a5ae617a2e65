"""The legacy Traversal family (``flax.traverse_util`` up to flax 0.5.3).

A Traversal focuses on parts of a (nested) object: ``iterate(x)`` yields the
focused values and ``update(fn, x)`` returns a copy of ``x`` with ``fn``
applied to each of them. ``MultiOptimizer`` and ``create(focus=...)`` use them
to pick which params an optimizer owns; on the Optax side they become
``optax.partition`` labels (see ``legacy_optim.multi.traversal_labels``).

Composition reads like attribute/item access::

  t_identity['params']['Dense_0'].tree()      # every leaf of one submodule
  ModelParamTraversal(lambda path, _: path.endswith('/bias'))
"""

import abc
import copy
import dataclasses
from typing import Any, Callable

from flax import core
from flax import traverse_util as flax_traverse_util
from flax.traverse_util import empty_node
from flax.traverse_util import flatten_dict
from flax.traverse_util import unflatten_dict
import jax

from flax_optim_rules import _multi as _rules_multi
from legacy_optim import deprecation

__all__ = [
    'Traversal', 'TraverseId', 'TraverseMerge', 'TraverseCompose',
    'TraverseFilter', 'TraverseAttr', 'TraverseItem', 'TraverseEach',
    'TraverseTree', 'ModelParamTraversal', 't_identity', 'flatten_dict',
    'unflatten_dict', 'empty_node'
]


class Traversal(abc.ABC):
  """Base class of all traversals."""

  def __init__(self):
    deprecation.warn_legacy_use('Traversal', self)

  @abc.abstractmethod
  def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
    """Returns ``inputs`` with ``fn`` applied to every focused value."""

  @abc.abstractmethod
  def iterate(self, inputs: Any):
    """Yields the focused values of ``inputs``."""

  def set(self, values: list, inputs: Any) -> Any:
    """Replaces the focused values, in iteration order, by ``values``."""
    remaining = list(values)

    def take(_):
      if not remaining:
        raise ValueError(
            f'Not enough values provided: got {len(values)}, the traversal '
            'focuses on more.')
      return remaining.pop(0)

    result = self.update(take, inputs)
    if remaining:
      raise ValueError(
          f'Too many values provided: {len(remaining)} of {len(values)} were '
          'not used.')
    return result

  def compose(self, other: 'Traversal') -> 'Traversal':
    return TraverseCompose(self, other)

  def merge(self, *traversals: 'Traversal') -> 'Traversal':
    return self.compose(TraverseMerge(*traversals))

  def each(self) -> 'Traversal':
    return self.compose(TraverseEach())

  def tree(self) -> 'Traversal':
    return self.compose(TraverseTree())

  def filter(self, fn: Callable[[Any], bool]) -> 'Traversal':
    return self.compose(TraverseFilter(fn))

  def __getattr__(self, attr: str) -> 'Traversal':
    if attr.startswith('__'):  # keep copy/pickle protocol lookups working
      raise AttributeError(attr)
    return self.compose(TraverseAttr(attr))

  def __getitem__(self, key) -> 'Traversal':
    return self.compose(TraverseItem(key))


class TraverseId(Traversal):
  """Focuses on the whole input."""

  def update(self, fn, inputs):
    return fn(inputs)

  def iterate(self, inputs):
    yield inputs


class TraverseMerge(Traversal):
  """Focuses on what any of several traversals focuses on."""

  def __init__(self, *traversals):
    super().__init__()
    self._traversals = traversals

  def update(self, fn, inputs):
    for traversal in self._traversals:
      inputs = traversal.update(fn, inputs)
    return inputs

  def iterate(self, inputs):
    for traversal in self._traversals:
      yield from traversal.iterate(inputs)


class TraverseCompose(Traversal):
  """Focuses with ``second`` inside what ``first`` focuses on."""

  def __init__(self, first, second):
    super().__init__()
    self._first = first
    self._second = second

  def update(self, fn, inputs):
    return self._first.update(lambda x: self._second.update(fn, x), inputs)

  def iterate(self, inputs):
    for x in self._first.iterate(inputs):
      yield from self._second.iterate(x)


class TraverseFilter(Traversal):
  """Focuses on the input only when ``predicate(input)`` holds."""

  def __init__(self, predicate):
    super().__init__()
    self._predicate = predicate

  def update(self, fn, inputs):
    return fn(inputs) if self._predicate(inputs) else inputs

  def iterate(self, inputs):
    if self._predicate(inputs):
      yield inputs


def _is_namedtuple(value) -> bool:
  return isinstance(value, tuple) and hasattr(type(value), '_fields')


class TraverseAttr(Traversal):
  """Focuses on one attribute (namedtuples and dataclasses are rebuilt)."""

  def __init__(self, attr):
    super().__init__()
    self._attr = attr

  def update(self, fn, inputs):
    new_value = fn(getattr(inputs, self._attr))
    if _is_namedtuple(inputs):
      return inputs._replace(**{self._attr: new_value})
    if dataclasses.is_dataclass(inputs):
      return dataclasses.replace(inputs, **{self._attr: new_value})
    result = copy.copy(inputs)
    setattr(result, self._attr, new_value)
    return result

  def iterate(self, inputs):
    yield getattr(inputs, self._attr)


class TraverseItem(Traversal):
  """Focuses on ``inputs[key]`` (a slice focuses on several tuple items)."""

  def __init__(self, key):
    super().__init__()
    self._key = key

  def update(self, fn, inputs):
    if isinstance(inputs, tuple):
      key = self._key if isinstance(self._key, slice) else slice(
          self._key, self._key + 1)
      chosen = set(range(*key.indices(len(inputs))))
      items = [fn(x) if i in chosen else x for i, x in enumerate(inputs)]
      return type(inputs)(*items) if _is_namedtuple(inputs) else type(inputs)(
          items)
    result = copy.copy(inputs)
    result[self._key] = fn(result[self._key])
    return result

  def iterate(self, inputs):
    if isinstance(self._key, slice):
      yield from inputs[self._key]
    else:
      yield inputs[self._key]


class TraverseEach(Traversal):
  """Focuses on each item of a list, tuple or dict."""

  def update(self, fn, inputs):
    if type(inputs) is dict:
      return {key: fn(value) for key, value in inputs.items()}
    if type(inputs) not in (list, tuple):
      raise ValueError(
          'TraverseEach can only traverse the entries of a list, tuple or '
          f'dict, not a {type(inputs).__name__}.')
    return type(inputs)(fn(x) for x in inputs)

  def iterate(self, inputs):
    yield from (inputs.values() if isinstance(inputs, dict) else inputs)


class TraverseTree(Traversal):
  """Focuses on every leaf of a pytree."""

  def update(self, fn, inputs):
    return jax.tree_util.tree_map(fn, inputs)

  def iterate(self, inputs):
    yield from jax.tree_util.tree_leaves(inputs)


def _as_param_dict(inputs):
  if isinstance(inputs, (dict, core.FrozenDict)):
    return core.unfreeze(inputs)
  raise ValueError(
      'ModelParamTraversal can only traverse a nested dict of params, not a '
      f'{type(inputs).__name__}.')


class ModelParamTraversal(Traversal):
  """Selects params whose '/'-joined path passes ``filter_fn(path, value)``.

  Paths look like ``'/Dense_0/kernel'`` (relative to the dict traversed);
  leaves are visited in sorted path order.
  """

  def __init__(self, filter_fn):
    super().__init__()
    self._filter_fn = filter_fn

  def _selected(self, path_key, value) -> bool:
    return self._filter_fn(_rules_multi.param_path(path_key), value)

  def iterate(self, inputs):
    flat = flatten_dict(_as_param_dict(inputs))
    for key in sorted(flat):
      if self._selected(key, flat[key]):
        yield flat[key]

  def update(self, fn, inputs):
    flat = flatten_dict(_as_param_dict(inputs), keep_empty_nodes=True)
    updated = {}
    for key in sorted(flat):
      value = flat[key]
      if value is not empty_node and self._selected(key, value):
        value = fn(value)
      updated[key] = value
    new_params = unflatten_dict(updated)
    if isinstance(inputs, core.FrozenDict):
      return core.FrozenDict(new_params)
    return new_params


t_identity = TraverseId.__new__(TraverseId)  # built without a warning


def _is_traversal(value) -> bool:
  return isinstance(value, (Traversal, flax_traverse_util.Traversal))


def is_builtin(traversal) -> bool:
  """True when ``traversal`` and every traversal it is made of are this
  module's or today's ``flax.traverse_util`` classes (user functions such as
  filters may be inside). A user's Traversal subclass may depend on every
  ``iterate``/``update`` call flax.optim made, so MultiOptimizer then makes
  exactly those calls."""
  if type(traversal).__module__ not in (__name__,
                                        flax_traverse_util.__name__):
    return False
  for value in vars(traversal).values():
    parts = value if isinstance(value, tuple) else (value,)
    if any(_is_traversal(p) and not is_builtin(p) for p in parts):
      return False
  return True
