"""Whether an optimizer's target is provably one bare array (or number).

flax.optim steps any pytree, a single array included (``Adam().create(
jnp.zeros(1))``: a temperature, a Lagrange multiplier). flax's
``TrainState`` asks ``OVERWRITE_WITH_GRADIENT in grads`` first, which a jax
array refuses (``TypeError: Array.__contains__``), so the creates of a
flow with such a target make ``flax_optim_rules.train_state.TrainState``,
which steps one (``_plan_uses``). Only what is proven is told: a target of
unknown kind (a parameter, a restored tree) is not one. Stdlib only.
"""

import ast

# Constructors whose result is one array: jax.numpy's and numpy's, and
# jax.random's samplers.
_ARRAY_MODULES = ('jax.numpy', 'numpy', 'jax.random')
_ARRAY_CONSTRUCTORS = frozenset((
    'array', 'asarray', 'zeros', 'ones', 'full', 'empty', 'zeros_like',
    'ones_like', 'full_like', 'empty_like', 'arange', 'linspace', 'eye',
    'float16', 'float32', 'float64', 'bfloat16', 'int32', 'int64',
    'normal', 'uniform', 'truncated_normal'))


def _is_array_value(node, names) -> bool:
  """A number, or a call of an array constructor."""
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
    node = node.operand
  if isinstance(node, ast.Constant):
    return type(node.value) in (int, float)
  if not isinstance(node, ast.Call):
    return False
  path = names.resolve(node.func)
  if path is None:
    return False
  module, _, function = path.rpartition('.')
  return module in _ARRAY_MODULES and function in _ARRAY_CONSTRUCTORS


def is_bare_array(target, names, flow) -> bool:
  """``target`` (an optimizer's ``create`` argument) is an array
  constructor's result or a number, written there or read from a name
  whose every binding the read sees (``flow``'s scopes) is such a value."""
  if _is_array_value(target, names):
    return True
  if not isinstance(target, ast.Name):
    return False
  scope = flow.binding_scope_of(target, target.id)
  values = scope.bindings.get(target.id) if scope is not None else None
  # (a parameter, a loop or an import binds a value not known here)
  return bool(values) and all(
      isinstance(value, ast.AST) and _is_array_value(value, names)
      for value in values)
