"""A module's flows share what the walk for its scopes and bindings
collects (``FlowScopes._collect_module``): the project's phases build a
flow of one module again and again."""

import ast

from compat.codemod import _flow
from compat.codemod import _flow_scopes
from compat.codemod import _names
from compat.codemod import _walk

_SOURCE = '''
from flax import optim


def make(params):
  return optim.Adam(0.1).create(params)


def step(optimizer, grads):
  return optimizer.apply_gradient(grads)


def train(params, grads):
  optimizer = make(params)
  optimizer = step(optimizer, grads)
  return optimizer
'''


def test_the_flows_of_a_module_collect_it_once_and_prove_alike(
    monkeypatch):
  tree = ast.parse(_SOURCE)
  names = _names.ModuleNames(tree)
  collected = []
  collect = _flow_scopes.FlowScopes._collect

  def noting(self, node, parent):
    if parent is None:  # (the module's own scope: a whole collection)
      collected.append(node)
    return collect(self, node, parent)

  monkeypatch.setattr(_flow_scopes.FlowScopes, '_collect', noting)
  _walk.start_run()
  try:
    _walk.keep(tree)
    one = _flow.OptimizerFlow(tree, names)
    two = _flow.OptimizerFlow(tree, names)
  finally:
    _walk.forget()
  assert collected == [tree]
  fresh = _flow.OptimizerFlow(tree, names)
  assert collected == [tree, tree]
  returned = tree.body[-1].body[-1].value
  assert one.is_optimizer(returned) and two.is_optimizer(returned)
  assert fresh.is_optimizer(returned)
  assert one.functions == two.functions == fresh.functions
  assert one.functions is not two.functions  # (each flow's own tables)
