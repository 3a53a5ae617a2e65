"""Optimizer specs: a flax.optim definition written as a short, safe string.

A spec is a call expression over the flax.optim algorithm names with literal
arguments, e.g.::

  Adam(learning_rate=1e-3, beta2=0.98)
  WeightNorm(Momentum(0.1, nesterov=True), wn_decay=1e-4)
  MultiOptimizer(('kernel', Adam(1e-3)), ('bias$', GradientDescent(0.1)))

A ``MultiOptimizer`` pair is ``(regex, spec)``: the sub-optimizer owns every
param whose ``'/'``-joined path (``'/dense/kernel'``, as
``ModelParamTraversal`` spells it) the regex matches (``re.search``).

The string is parsed with ``ast`` and only literals and the names below are
accepted: nothing is evaluated. ``build`` instantiates a spec against a
flax.optim-like namespace (``legacy_optim`` here, real ``flax.optim`` in the
oracle fixture generator), so this module imports neither jax nor flax.
"""

import ast
import dataclasses
import re
from typing import Any

from compat import _lazy

ALGORITHMS = tuple(sorted([
    *_lazy.module_without_package('legacy_optim', 'catalogue').BY_NAME,
    'MultiOptimizer']))


@dataclasses.dataclass(frozen=True)
class Spec:
  """A parsed optimizer spec: ``name(*args, **kwargs)``.

  ``args``/``kwargs`` values are literals, nested ``Spec``s (WeightNorm's
  wrapped optimizer) or ``(regex, Spec)`` pairs (MultiOptimizer).
  """
  name: str
  args: tuple = ()
  kwargs: tuple = ()  # ((name, value), ...), in the order written.

  def __str__(self):
    parts = [_format(a) for a in self.args]
    parts += [f'{k}={_format(v)}' for k, v in self.kwargs]
    return f'{self.name}({", ".join(parts)})'

  def algorithms(self) -> tuple[str, ...]:
    """Every algorithm name in the spec, outermost first."""
    names = [self.name]
    for value in list(self.args) + [v for _, v in self.kwargs]:
      if isinstance(value, Spec):
        names += value.algorithms()
      elif isinstance(value, tuple) and value and isinstance(value[-1], Spec):
        names += value[-1].algorithms()
    return tuple(names)

  def build(self, namespace: Any):
    """Instantiates the spec with the classes of ``namespace``."""
    cls = getattr(namespace, self.name)
    if self.name == 'MultiOptimizer':
      return cls(*[(_path_traversal(namespace, pattern), sub.build(namespace))
                   for pattern, sub in self.args])
    args = [_build_value(a, namespace) for a in self.args]
    kwargs = {k: _build_value(v, namespace) for k, v in self.kwargs}
    return cls(*args, **kwargs)


def _format(value) -> str:
  if isinstance(value, tuple):
    return '(' + ', '.join(_format(v) for v in value) + ')'
  return str(value) if isinstance(value, Spec) else repr(value)


def _build_value(value, namespace):
  return value.build(namespace) if isinstance(value, Spec) else value


def _path_traversal(namespace, pattern: str):
  regex = re.compile(pattern)
  return namespace.ModelParamTraversal(
      lambda path, _: regex.search(path) is not None)


def parse(text: str) -> Spec:
  """Parses ``text`` into a ``Spec``; ValueError says what is wrong."""
  if not isinstance(text, str):
    raise TypeError(f'An optimizer spec must be a string, got {text!r}.')
  try:
    tree = ast.parse(text.strip(), mode='eval')
  except SyntaxError as e:
    raise ValueError(f'Invalid optimizer spec {text!r}: {e.msg}.') from None
  return _spec_from_node(tree.body, text)


def _spec_from_node(node, text: str) -> Spec:
  if isinstance(node, ast.Name):
    node = ast.Call(func=node, args=[], keywords=[])
  if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
    raise ValueError(
        f'Invalid optimizer spec {text!r}: expected a call such as '
        f'"Adam(learning_rate=1e-3)" using one of: {", ".join(ALGORITHMS)}.')
  name = node.func.id
  if name not in ALGORITHMS:
    raise ValueError(
        f'Unknown optimizer {name!r} in spec {text!r}; expected one of: '
        f'{", ".join(ALGORITHMS)}.')
  if name == 'MultiOptimizer':
    if node.keywords or not node.args:
      raise ValueError(
          f'Invalid spec {text!r}: MultiOptimizer takes (regex, spec) pairs, '
          "e.g. MultiOptimizer(('kernel', Adam(1e-3)), ('bias', Momentum(0.1)))"
          '.')
    return Spec(name, tuple(_pair_from_node(a, text) for a in node.args))
  args = tuple(_value_from_node(a, text) for a in node.args)
  for kw in node.keywords:
    if kw.arg is None:
      raise ValueError(f'Invalid spec {text!r}: **kwargs are not allowed.')
  kwargs = tuple((kw.arg, _value_from_node(kw.value, text))
                 for kw in node.keywords)
  return Spec(name, args, kwargs)


def _pair_from_node(node, text: str):
  if not (isinstance(node, ast.Tuple) and len(node.elts) == 2):
    raise ValueError(
        f'Invalid spec {text!r}: each MultiOptimizer argument must be a '
        '(regex, spec) pair.')
  pattern = _value_from_node(node.elts[0], text)
  if not isinstance(pattern, str):
    raise ValueError(
        f'Invalid spec {text!r}: a MultiOptimizer pair starts with a regex '
        f'string, got {pattern!r}.')
  try:
    re.compile(pattern)
  except re.error as e:
    raise ValueError(
        f'Invalid regex {pattern!r} in spec {text!r}: {e}.') from None
  return (pattern, _spec_from_node(node.elts[1], text))


def _value_from_node(node, text: str):
  if isinstance(node, (ast.Call, ast.Name)) and not (
      isinstance(node, ast.Name) and node.id in ('True', 'False', 'None')):
    return _spec_from_node(node, text)
  try:
    value = ast.literal_eval(node)
  except ValueError:
    raise ValueError(
        f'Invalid spec {text!r}: arguments must be literals (numbers, '
        f'booleans, None, strings) or nested optimizer specs; got '
        f'{ast.unparse(node)!r}.') from None
  if not isinstance(value, (int, float, bool, str, type(None))):
    raise ValueError(
        f'Invalid spec {text!r}: unsupported argument {value!r}; use numbers, '
        'booleans, None or strings.')
  return value
