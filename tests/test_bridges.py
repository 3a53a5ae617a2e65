"""Old path = new path: K legacy steps, convert, K more on each new path.

For every configuration of ``compat.cli._configs`` the params (and, where the
path allows converting back, the whole optimizer state) after 2K steps must be
bit-identical to 2K legacy steps: raw Optax loop, ``TrainState`` and
``nnx.Optimizer`` on a ``bridge.ToNNX`` model under jit (the eager Optax loop
is in test_bridges_eager.py). Each configuration runs once; its tests share
the compiled steps.
"""

from concurrent import futures
import functools

import chex
import pytest

from compat.cli import _configs
from compat.cli import check

K = 2
NAMES = [config.name for config in _configs.CONFIGS]
# The paths here are the same for every rule once its state converts, which
# test_bridges_eager.py checks for every configuration. The default run keeps
# the rules whose state or overrides differ most (none, a schedule, factored
# moments, nesterov, centered) and every wrapper; all of them run with
# -m slow.
REPRESENTATIVE = ('GradientDescent', 'Momentum + lr schedule', 'Adam',
                  'Adafactor(factored, beta1)', 'LARS(nesterov)',
                  'RMSProp(centered)', 'WeightNorm(Momentum)',
                  'MultiOptimizer', 'MultiOptimizer(unmatched)', 'focus')
JIT_PATHS = check.DEFAULT_PATHS  # all but the eager loop


@functools.lru_cache(maxsize=None)
def problem():
  return check.Problem(2 * K)


@functools.lru_cache(maxsize=None)
def outcome(name):
  return check.run_config(_configs.BY_NAME[name], problem(), K, JIT_PATHS)


@pytest.fixture(scope='module', autouse=True)
def _run_selected_configs_two_at_a_time(request):
  """XLA compiles without the GIL: two threads keep both cores busy."""
  names = {item.callspec.params['name'] for item in request.session.items
           if item.module is request.module and hasattr(item, 'callspec')}
  with futures.ThreadPoolExecutor(2) as pool:
    list(pool.map(outcome, sorted(names)))


@pytest.mark.parametrize('path', [
    pytest.param(path, marks=pytest.mark.nnx) if path == 'nnx.Optimizer'
    else path for path in JIT_PATHS])
@pytest.mark.parametrize('name', [
    name if name in REPRESENTATIVE
    else pytest.param(name, marks=pytest.mark.slow) for name in NAMES])
def test_new_path_is_bit_identical_to_legacy(name, path):
  comparison = outcome(name)[path]
  if comparison.error is not None:
    raise comparison.error
  chex.assert_trees_all_equal(comparison.expected, comparison.actual,
                              strict=True)
