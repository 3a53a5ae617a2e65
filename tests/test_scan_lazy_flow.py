"""scan builds a module's optimizer flow only where a value can be an
optimizer at all (issue 38: building it for any member read was nearly half
of scan's time). The speed itself is measured in benchmarks/scan_speed.py;
here, the structure: no flow for a module that cannot name flax.optim, the
flow (and its finding) where one can."""

import pytest

from compat.codemod import _flow
from compat.codemod import scan

_READS = ('def step(state, grads):\n'
          '  new = state.apply(grads)\n'
          '  return new.target, new.state.step\n')


@pytest.fixture
def flows_built(monkeypatch):
  built = []
  original = _flow.OptimizerFlow.__init__

  def recording(self, tree, names, replicated_of=None):
    # (the plain flow; the escape check also asks a replicated one)
    if replicated_of is None:
      built.append(tree)
    original(self, tree, names, replicated_of)

  monkeypatch.setattr(_flow.OptimizerFlow, '__init__', recording)
  return built


def test_no_flow_where_nothing_can_name_flax_optim(flows_built):
  # apply_gradient is a prefilter word: the module is walked, its member
  # reads (.target, .state, .step) asked about, and no flow is built.
  source = 'import jax\n' + _READS + 'x = y.apply_gradient\n'
  assert scan.scan_source(source, 'm.py') == []
  assert flows_built == []


def test_the_flow_is_built_and_proves_where_flax_optim_is_named(flows_built):
  source = ('from flax import optim\n\n'
            'def make(params):\n'
            '  optimizer = optim.Adam(0.1).create(params)\n'
            '  return optimizer.target\n')
  found = scan.scan_source(source, 'm.py')
  assert len(flows_built) == 1
  assert any(f.line == 5 and f.construct == 'optimizer_use' for f in found)
