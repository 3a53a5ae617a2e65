"""``_givers`` keeps a module's flow across the model's solves.

The model is solved several times (each round of ``_params`` and
``_step_calls`` asks it); a flow built in one first pass serves the next
only while every read it traced stands. Counted by the flows built.
"""

import ast

import pytest

from compat.codemod import _flow
from compat.codemod import _givers
from compat.codemod import _project

_UTILS = '''from flax import optim


def make(params):
  return optim.Adam(0.1).create(params)


def step(opt, grad):
  return opt.apply_gradient(grad)
'''

_MAIN = '''import train_utils


def run(params, grads):
  opt = train_utils.make(params)
  for grad in grads:
    opt = train_utils.step(opt, grad)
  return opt
'''


@pytest.fixture(name='built')
def _built(monkeypatch):
  """The paths of the flows built while the test runs."""
  paths = []
  init = _flow.OptimizerFlow.__init__

  def counting(self, tree, names, *args, **kwargs):
    paths.append(names.path)
    init(self, tree, names, *args, **kwargs)

  monkeypatch.setattr(_flow.OptimizerFlow, '__init__', counting)
  return paths


def _model():
  parsed = [(path, source.encode(), ast.parse(source))
            for path, source in (('train_utils.py', _UTILS),
                                 ('main.py', _MAIN))]
  return _project.Model(parsed, {'train_utils.py': ['train_utils'],
                                 'main.py': ['main']}, {})


def _givings(model):
  return (set(model.optimizer_givers), dict(model.tuple_givers),
          dict(model.step_factories))


def test_a_flow_is_built_again_only_where_a_read_changed(built):
  model = _model()
  candidates = [f for f in model.functions.values() if not f.is_method]
  make = model.functions['train_utils.make'].node
  step = model.functions['train_utils.step'].node
  assert make in model.optimizer_givers  # (the model proved it)
  assert model.param_verdicts[(step, 'opt')]
  _givers.solve(model, candidates)
  solved = _givings(model)
  del built[:]
  # Nothing changed: every flow of the last first pass serves again.
  _givers.solve(model, candidates)
  assert not built
  assert _givings(model) == solved
  # A verdict ``train_utils``' flow read turned False: built again.
  model.param_verdicts[(step, 'opt')] = False
  _givers.solve(model, candidates)
  assert 'train_utils.py' in built
  del built[:]
  model.param_verdicts[(step, 'opt')] = True
  _givers.solve(model, candidates)
  assert _givings(model) == solved
  # The rest of the model changed (one more field declared): all built.
  del built[:]
  model.fields['other'] = True
  _givers.solve(model, candidates)
  assert sorted(set(built)) == ['main.py', 'train_utils.py']
  assert _givings(model) == solved
