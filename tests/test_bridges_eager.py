"""Old path = new path without jit: K legacy steps op by op
(``OptimizerDef.apply_gradient``), convert, K eager steps of a raw Optax loop;
bit-identical to 2K legacy steps op by op.

(``Optimizer.apply_gradient`` outside jit runs one compiled step, see
``legacy_optim._eager``; it matches the jitted paths of test_bridges.py.)
"""

import functools

import chex
import pytest

from compat.cli import _configs
from compat.cli import check

K = 2


@functools.lru_cache(maxsize=None)
def problem():
  return check.Problem(2 * K)


@pytest.mark.parametrize('name', [config.name for config in _configs.CONFIGS])
def test_eager_optax_loop_is_bit_identical_to_legacy_rule_op_by_op(name):
  config = _configs.BY_NAME[name]
  comparison = check.run_config(config, problem(), K, ('optax (eager)',))[
      'optax (eager)']
  if comparison.error is not None:
    raise comparison.error
  chex.assert_trees_all_equal(comparison.expected, comparison.actual,
                              strict=True)
