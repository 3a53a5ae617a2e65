"""The project's model, its links and the optimizer flow answer the
questions every module asks again without redoing the work per question:
a roll-back passes over the project's links a fixed number of times
whatever the size of the component it keeps, a holder class's fields are
looked up by its name (not every holder per question), and a solved flow
tells a name no binding of which holds an optimizer without walking its
scopes. Each still follows what can change its answer."""

import ast

from compat.codemod import _flow
from compat.codemod import _flow_queries
from compat.codemod import _links
from compat.codemod import _names
from compat.codemod import _project


class _Passes(list):
  """A list counting the passes over it."""

  passes = 0

  def __iter__(self):
    type(self).passes += 1
    return super().__iter__()


def _field_links(paths) -> list:
  """A chain of field links through ``paths`` (each module stores what
  the next one's class field holds)."""
  return [_links.Link(producer, 1, consumer, 2, 2, 'reads the field', 'field')
          for producer, consumer in zip(paths, paths[1:])]


def _rolled_back(links, paths):
  """``[(path, blocked)]`` of a roll-back where every module but the last
  migrates its flow (so the whole chain is kept as it is)."""
  plans = {path: object() for path in paths[:-1]}
  return list(_links.roll_back(links, plans.get))


def test_a_roll_back_passes_over_the_links_alike_for_any_component():
  passes = []
  for size in (3, 12):
    paths = [f'm{i}.py' for i in range(size)]
    _Passes.passes = 0
    rolled = _rolled_back(_Passes(_field_links(paths)), paths)
    passes.append(_Passes.passes)
    assert [path for path, _ in rolled] == sorted(paths)
    # Each module is blocked at the links ending there, in their order.
    by_path = dict(rolled)
    assert [line for line, _, _ in by_path['m1.py']] == [2, 1]
    assert len(by_path['m0.py']) == 1 and len(by_path[paths[-1]]) == 1
  assert passes[0] == passes[1]  # (not once per module of the component)
  # A link the caller adds while it runs (a plan made again: scan's flows
  # add some) blocks the modules after it too.
  paths = ['a.py', 'b.py', 'c.py']
  links = _field_links(paths)
  found = {}
  for path, blocked in _links.roll_back(links, {'a.py': 1, 'b.py': 1}.get):
    found[path] = blocked
    if path == 'a.py':
      links.append(_links.Link('a.py', 7, 'c.py', 9, 9, 'keeps it too',
                               'field'))
  assert [line for line, _, _ in found['c.py']] == [2, 9]


_HOLDERS = '''from flax import optim
import flax


@flax.struct.dataclass
class TrainState:
  optimizer: optim.Optimizer
  step: int
'''

_LATER = '''from flax import optim
import flax


@flax.struct.dataclass
class EvalState:
  ema: optim.Optimizer
'''


def test_a_holder_class_fields_are_looked_up_by_its_name():
  tree = ast.parse(_HOLDERS)
  model = _project.Model([('state.py', _HOLDERS.encode(), tree)],
                         {'state.py': ('pkg.state',)}, {}, links=False)
  model.holders = _Passes(model.holders)
  _Passes.passes = 0
  for _ in range(3):
    assert model.class_fields('pkg.state.TrainState') == {'optimizer'}
    assert model.class_fields('pkg.state.Other') == frozenset()
    assert model.class_fields(None) == frozenset()
  assert _Passes.passes == 1
  # A holder the index adds later (another module read) is found.
  model.holders += _project.holders_in('later.py', ast.parse(_LATER),
                                       _names.ModuleNames(ast.parse(_LATER)))
  model.module_names_of['later.py'] = ('pkg.later',)
  assert model.class_fields('pkg.later.EvalState') == {'ema'}
  assert model.class_fields('pkg.state.TrainState') == {'optimizer'}


_FLOW = '''from flax import optim


def train(params, grads, batches):
  optimizer = optim.Adam(1e-3).create(params)
  for batch in batches:
    loss = batch.sum()
    optimizer = optimizer.apply_gradient(grads)
  print(loss)
  return optimizer
'''


def test_a_solved_flow_tells_a_name_kept_nowhere_without_its_scopes(
    monkeypatch):
  tree = ast.parse(_FLOW)
  flow = _flow.OptimizerFlow(tree, _names.ModuleNames(tree))
  reads = {n.id: n for n in ast.walk(tree)
           if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
  asked = []
  scope_of = _flow_queries.FlowQueries.scope_of

  def noting(self, node):
    asked.append(node)
    return scope_of(self, node)

  monkeypatch.setattr(_flow_queries.FlowQueries, 'scope_of', noting)
  assert not flow.is_optimizer(reads['loss'])
  assert not flow.is_optimizer(reads['batch'])
  assert not asked
  assert flow.is_optimizer(reads['optimizer'])
  assert asked == [reads['optimizer']]
