"""``flax_optim_rules``: the legacy rules on jax and optax alone.

Migrated code imports this package instead of flax.optim; these tests hold
it to its promises: it imports nothing but jax, optax and NumPy (and the
standard library), each keyword function takes the legacy constructor's
parameters with the same defaults and builds exactly ``to_optax()``'s
transform (same state, same updates to the bit), and a learning rate
injected per step with ``inject_learning_rate`` gives what the shim's
``apply_gradient(g, learning_rate=lr)`` gives.
"""

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flax_optim_rules
from flax_optim_rules import _legacy_layout
import legacy_optim
from legacy_optim import catalogue

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / 'flax_optim_rules'
ALLOWED_ROOTS = {'jax', 'optax', 'numpy', 'flax_optim_rules'}
# train_state.py subclasses flax's TrainState (to step a bare array, which
# flax's own refuses): it alone may import flax, and the package does not
# import it (the test below loads the package).
FLAX_MODULES = {'train_state.py'}
RULES = {algorithm.name: algorithm for algorithm in catalogue.RULES}


def _legacy_class(algorithm):
  return getattr(importlib.import_module(
      f'legacy_optim.{algorithm.module}'), algorithm.name)


def _keyword_function(algorithm):
  # The public function is named after the algorithm's module (the
  # catalogue's ``module``): adam, lamb, ..., sgd for GradientDescent.
  return getattr(flax_optim_rules, algorithm.module)


def test_imports_nothing_but_jax_optax_numpy_and_the_stdlib():
  for path in sorted(PACKAGE.glob('*.py')):
    allowed = ALLOWED_ROOTS | ({'flax'} if path.name in FLAX_MODULES else
                               set())
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        roots = {alias.name.split('.')[0] for alias in node.names}
      elif isinstance(node, ast.ImportFrom):
        roots = {(node.module or '').split('.')[0]}
      else:
        continue
      for root in roots:
        assert root in allowed or root in sys.stdlib_module_names, (
            f'{path.name}:{node.lineno} imports {root}')


def test_importing_it_loads_neither_flax_nor_the_shim():
  code = ('import sys, flax_optim_rules; '
          'print(sorted(m for m in sys.modules if m.split(".")[0] in '
          '("flax", "legacy_optim", "compat")))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True, cwd=ROOT)
  assert out.stdout.strip() == '[]'


@pytest.mark.parametrize('name', sorted(RULES))
def test_keyword_function_takes_the_constructors_parameters(name):
  algorithm = RULES[name]
  legacy = inspect.signature(_legacy_class(algorithm).__init__).parameters
  rules = inspect.signature(_keyword_function(algorithm)).parameters
  assert [(p.name, p.default) for p in rules.values()] == [
      (p.name, p.default) for p in legacy.values() if p.name != 'self']


def _named_tuples(state):
  """Every NamedTuple in an Optax state (chains are plain tuples of them)."""
  if hasattr(state, '_fields'):
    yield state
  if isinstance(state, tuple):
    for part in state:
      yield from _named_tuples(part)


@pytest.mark.parametrize('name', sorted(
    n for n, a in RULES.items() if a.state_fields))
def test_state_keeps_the_legacy_field_names(name):
  algorithm = RULES[name]
  renamed = _legacy_layout.layout_of(
      _legacy_class(algorithm)._param_state_cls).optax_names
  expected = tuple(renamed.get(f, f) for f in algorithm.state_fields)
  state = _keyword_function(algorithm)(learning_rate=0.1).init(
      {'w': jnp.ones((3, 2))})
  assert any(s._fields[-len(expected):] == expected
             for s in _named_tuples(state)), state
  if not renamed:  # the rule's own state: count first, then the fields.
    assert type(state)._fields == ('count',) + expected


def _params():
  return {'dense': {'kernel': jnp.array([[0.5, -1.25], [2.0, 0.75],
                                         [-0.3, 1.1]], jnp.float32),
                    'bias': jnp.array([0.1, -0.2], jnp.float32)}}


def _grads(step):
  scale = 1.0 + 0.37 * step
  return jax.tree_util.tree_map(
      lambda p: jnp.sin(p * scale + step).astype(p.dtype), _params())


def _check_kwargs(quick):
  """Every catalogue check row; rows ``quick`` refuses are marked slow."""
  for algorithm in catalogue.RULES:
    checks = [check for check in algorithm.checks if not check.schedule]
    for row, check in enumerate(checks):
      yield pytest.param(
          algorithm, dict(check.kwargs), id=f'{algorithm.name}{check.label}',
          marks=() if quick(algorithm, row, len(checks)) else pytest.mark.slow)


def _last_row_of_each_rule(algorithm, row, rows):
  del algorithm  # every rule keeps one
  return row == rows - 1


def _one_rule_of_each_state_kind(algorithm, row, rows):
  # Injecting the rate works the same for every rule: one without state, one
  # with factored moments, one with a static flag (centered).
  return (_last_row_of_each_rule(algorithm, row, rows) and
          algorithm.name in ('GradientDescent', 'Adafactor', 'RMSProp'))


# Each rule's own module: the default run checks its most involved row.
@pytest.mark.parametrize('algorithm, kwargs',
                         list(_check_kwargs(_last_row_of_each_rule)))
def test_same_transform_as_to_optax(algorithm, kwargs):
  legacy_tx = _legacy_class(algorithm)(**kwargs).to_optax()
  rules_tx = _keyword_function(algorithm)(**kwargs)
  params_a = params_b = _params()
  state_a, state_b = legacy_tx.init(params_a), rules_tx.init(params_b)
  chex.assert_trees_all_equal_structs(state_a, state_b)
  step_a, step_b = jax.jit(legacy_tx.update), jax.jit(rules_tx.update)
  for step in range(4):
    updates_a, state_a = step_a(_grads(step), state_a, params_a)
    updates_b, state_b = step_b(_grads(step), state_b, params_b)
    params_a = optax.apply_updates(params_a, updates_a)
    params_b = optax.apply_updates(params_b, updates_b)
  chex.assert_trees_all_equal(params_a, params_b)
  chex.assert_trees_all_equal(state_a, state_b)
  assert type(state_a) is type(state_b)


@pytest.mark.parametrize('algorithm, kwargs',
                         list(_check_kwargs(_one_rule_of_each_state_kind)))
def test_injected_learning_rate_matches_apply_gradient_override(
    algorithm, kwargs):
  kwargs.pop('learning_rate')
  legacy_def = _legacy_class(algorithm)(**kwargs)
  optimizer = legacy_def.create(_params())
  tx = flax_optim_rules.inject_learning_rate(_keyword_function(algorithm))(
      learning_rate=0.0, **kwargs)
  optimizer, params = _step_with_rates(optimizer, tx)
  chex.assert_trees_all_equal(optimizer.target, params)


def _step_with_rates(optimizer, tx):
  """Four steps of a legacy optimizer with ``apply_gradient(g,
  learning_rate=lr)`` and of ``tx`` with the rate set by ``tree_set``, as
  migrate writes it: ``(optimizer, params)`` after them."""
  params, opt_state = _params(), tx.init(_params())

  @jax.jit
  def legacy_step(optimizer, grads, rate):
    return optimizer.apply_gradient(grads, learning_rate=rate)

  @jax.jit
  def new_step(params, opt_state, grads, rate):
    opt_state = optax.tree_utils.tree_set(opt_state, learning_rate=rate)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  for step in range(4):
    rate = jnp.float32(0.05 / (1 + step))
    optimizer = legacy_step(optimizer, _grads(step), rate)
    params, opt_state = new_step(params, opt_state, _grads(step), rate)
  return optimizer, params


def test_state_zeros_are_those_of_jnp_zeros_like():
  # Host zeros in one device_put must equal op-by-op jnp.zeros_like: dtype
  # (float64 input canonicalized), weak type, placement (committed or not).
  from flax_optim_rules import _numerics
  params = {
      'f64': np.ones((2, 3), np.float64),
      'bf16': jnp.ones(4, jnp.bfloat16),
      'weak': 1.0,
      'weak_array': jnp.asarray(2.0),
      'int': np.arange(3, dtype=np.int32),
      'committed': jax.device_put(jnp.ones(2), jax.devices()[0]),
  }
  got = _numerics.zeros_like_tree(params)
  want = jax.tree_util.tree_map(jnp.zeros_like, params)
  chex.assert_trees_all_equal(got, want, strict=True)
  for name in params:
    assert (got[name].weak_type, got[name].committed) == (
        want[name].weak_type, want[name].committed), name
  traced = jax.jit(_numerics.zeros_like_tree)(params)
  chex.assert_trees_all_equal(traced, want, strict=True)


def test_weight_norm_with_an_injected_rate_matches_the_shims_weight_norm():
  # What migrate writes for `WeightNorm(Adam(beta2=0.99), wn_decay=1e-3)`
  # stepped with `apply_gradient(g, learning_rate=lr)`: the rate is set in
  # the wrapped transform's state, found there by tree_set.
  optimizer = legacy_optim.WeightNorm(
      legacy_optim.Adam(beta2=0.99), wn_decay=1e-3).create(_params())
  tx = flax_optim_rules.weight_norm(
      flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)(
          learning_rate=0.0, beta2=0.99), wn_decay=1e-3)
  optimizer, params = _step_with_rates(optimizer, tx)
  chex.assert_trees_all_equal(optimizer.target, params)
  assert not np.array_equal(params['dense']['kernel'],
                            _params()['dense']['kernel'])
