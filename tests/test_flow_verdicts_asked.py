"""An optimizer flow asks whether a dict is only saved or loaded as a tree
(``_legacy_trees.Checker.verdict``: it follows the dict through the
functions it reaches, a flow's costliest question) only where the answer
can matter: a read by key of what such a dict gives back is an optimizer
only where an entry stored under that key is one, so a read by another key
(``checkpoint['extra']``) asks no verdict, while the optimizer's key is
still followed back. And a verdict is the same for every flow of a
module's tree and names (the project's phases build one again and again):
they share it, found anew where the project's model reads another module
(whose functions the dict may reach)."""

import ast

import pytest

from compat.codemod import _flow
from compat.codemod import _legacy_trees
from compat.codemod import _names
from compat.codemod import _project

_RESUME = '''import jax
from flax import optim


def load(tree, leaves):
  treedef = jax.tree_util.tree_structure(tree)
  return jax.tree_util.tree_unflatten(treedef, leaves)


def resume(params, leaves):
  opt = optim.Adam(0.1).create(params)
  checkpoint = load({'opt': opt, 'extra': params.extra}, leaves)
  opt = checkpoint['opt']
  extra = checkpoint['extra']
  return opt.target, extra
'''


@pytest.fixture(name='asked')
def _asked(monkeypatch) -> list:
  """The keys of the dicts whose verdicts are asked, in order."""
  asked: list = []
  verdict = _legacy_trees.Checker.verdict

  def noting(self, value, dict_node, key, parents):
    asked.append(key)
    return verdict(self, value, dict_node, key, parents)

  monkeypatch.setattr(_legacy_trees.Checker, 'verdict', noting)
  return asked


def test_a_read_by_a_key_holding_no_optimizer_asks_no_verdict(asked):
  tree = ast.parse(_RESUME)
  flow = _flow.OptimizerFlow(tree, _names.ModuleNames(tree))
  reads = {ast.unparse(n): n for n in ast.walk(tree)
           if isinstance(n, ast.Subscript)}
  assert flow.is_optimizer(reads["checkpoint['opt']"])
  assert not flow.is_optimizer(reads["checkpoint['extra']"])
  assert sorted(name for _, name in flow.alive) == ['opt']
  assert asked == ['opt']  # (once: the flow keeps its verdicts)


def test_the_flows_of_a_module_the_model_read_share_its_verdicts(asked):
  tree = ast.parse(_RESUME)
  model = _project.Model([('train.py', _RESUME.encode(), tree)],
                         {'train.py': ('pkg.train',)}, {}, links=False)
  names = model.names['train.py']
  reads = {ast.unparse(n): n for n in ast.walk(tree)
           if isinstance(n, ast.Subscript)}
  for _ in range(3):  # (the project's phases build a module's flow again)
    flow = _flow.OptimizerFlow(tree, names)
    assert flow.is_optimizer(reads["checkpoint['opt']"])
  assert asked == ['opt']
  # Another module read may give the functions a dict reaches: asked anew.
  other = ast.parse('def helper(tree):\n  return tree\n')
  model._read('helper.py', other)
  assert _flow.OptimizerFlow(tree, names).is_optimizer(
      reads["checkpoint['opt']"])
  assert asked == ['opt', 'opt']
  # A flow of another tree of the module (not the model's) keeps its own.
  again = ast.parse(_RESUME)
  assert _flow.OptimizerFlow(again, _names.ModuleNames(again)).is_optimizer(
      next(n for n in ast.walk(again) if isinstance(n, ast.Subscript) and
           ast.unparse(n) == "checkpoint['opt']"))
  assert asked == ['opt', 'opt', 'opt']
