"""Whether an optimizer's target is provably one bare array (or number).

flax.optim steps any pytree, a single array included (``Adam().create(
jnp.zeros(1))``: a temperature, a Lagrange multiplier). flax's
``TrainState.apply_gradients`` asks ``OVERWRITE_WITH_GRADIENT in grads``
first, which a jax array refuses (``TypeError: Array.__contains__``), so a
TrainState made over a bare array cannot be stepped: migrate keeps such a
flow as it is, with this reason. Only what is proven is told: a target of
unknown kind (a parameter, a restored tree) is not one. Stdlib only.
"""

import ast
from typing import Optional

# Constructors whose result is one array: jax.numpy's and numpy's, and
# jax.random's samplers.
_ARRAY_MODULES = ('jax.numpy', 'numpy', 'jax.random')
_ARRAY_CONSTRUCTORS = frozenset((
    'array', 'asarray', 'zeros', 'ones', 'full', 'empty', 'zeros_like',
    'ones_like', 'full_like', 'empty_like', 'arange', 'linspace', 'eye',
    'float16', 'float32', 'float64', 'bfloat16', 'int32', 'int64',
    'normal', 'uniform', 'truncated_normal'))

REASON = ('create() is given a single array, which flax.optim steps and '
          "TrainState.apply_gradients cannot (it asks whether "
          "'overwrite_with_gradient' is in the gradients, which a jax array "
          "refuses): keep the array in a dict, e.g. {'value': x}, and read it "
          'back by its key')


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


def _scope_of(node, parents) -> Optional[ast.AST]:
  scope = parents.get(node)
  while scope is not None and not isinstance(
      scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
    scope = parents.get(scope)
  return scope


def _bindings(name: str, scope) -> Optional[list]:
  """The values ``name`` is assigned in ``scope`` (its nested defs
  included); None where it is bound otherwise too (a parameter, a loop, an
  unpacking, an import), so its value is not known."""
  values = []
  if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
    arguments = scope.args
    if name in {a.arg for a in arguments.posonlyargs + arguments.args +
                arguments.kwonlyargs} | {
                    a.arg for a in (arguments.vararg, arguments.kwarg) if a}:
      return None
  for node in ast.walk(scope):
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in node.targets):
      if len(node.targets) != 1:
        return None
      values.append(node.value)
    elif isinstance(node, ast.Name) and node.id == name and isinstance(
        node.ctx, (ast.Store, ast.Del)) and not isinstance(
            _assign_of(node, scope), ast.Assign):
      return None
    elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
      return None
  return values


def _assign_of(name_node, scope):
  """The ``Assign`` whose single target is ``name_node`` (else None)."""
  for node in ast.walk(scope):
    if isinstance(node, ast.Assign) and name_node in node.targets:
      return node
  return None


def is_bare_array(target, names, parents) -> bool:
  """``target`` (an optimizer's ``create`` argument) is an array
  constructor's result or a number, written there or assigned to a name
  bound only to such values in its scope."""
  if _is_array_value(target, names):
    return True
  if not isinstance(target, ast.Name):
    return False
  scope = _scope_of(target, parents)
  if scope is None:
    return False
  values = _bindings(target.id, scope)
  return bool(values) and all(_is_array_value(v, names) for v in values)
