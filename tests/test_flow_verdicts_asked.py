"""An optimizer flow asks whether a dict is only saved or loaded as a tree
(``_legacy_trees.Checker.verdict``: it follows the dict through the
functions it reaches, a flow's costliest question) only where the answer
can matter: a read by key of what such a dict gives back is an optimizer
only where an entry stored under that key is one, so a read by another key
(``checkpoint['extra']``) asks no verdict, while the optimizer's key is
still followed back."""

import ast

from compat.codemod import _flow
from compat.codemod import _legacy_trees
from compat.codemod import _names

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


def test_a_read_by_a_key_holding_no_optimizer_asks_no_verdict(monkeypatch):
  asked = []
  verdict = _legacy_trees.Checker.verdict

  def noting(self, value, dict_node, key, parents):
    asked.append(key)
    return verdict(self, value, dict_node, key, parents)

  monkeypatch.setattr(_legacy_trees.Checker, 'verdict', noting)
  tree = ast.parse(_RESUME)
  flow = _flow.OptimizerFlow(tree, _names.ModuleNames(tree))
  reads = {ast.unparse(n): n for n in ast.walk(tree)
           if isinstance(n, ast.Subscript)}
  assert flow.is_optimizer(reads["checkpoint['opt']"])
  assert not flow.is_optimizer(reads["checkpoint['extra']"])
  assert sorted(name for _, name in flow.alive) == ['opt']
  assert asked == ['opt']  # (once: the flow keeps its verdicts)
