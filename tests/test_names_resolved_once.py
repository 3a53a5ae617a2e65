"""``ModuleNames.resolve`` looks a chain up once per node (and place read
at): the scan's walk, the flows, the project's links and the plan ask the
same chains again, seven times in eight on real code. The answer still
follows what can change it: a new or grown re-export table (the rounds of
``project_reexports``) and the aliases ``collect_aliases`` adds."""

import ast

from compat.codemod import _names
from compat.codemod import _removals
from compat.codemod import scan


def _counting_look_ups(monkeypatch) -> list:
  """The names whose root ``_root_path`` looks up, in order."""
  looked = []
  root_path = _names.ModuleNames._root_path

  def noting(self, name, at):
    looked.append(name)
    return root_path(self, name, at)

  monkeypatch.setattr(_names.ModuleNames, '_root_path', noting)
  return looked


def test_a_chain_is_looked_up_once_and_follows_a_new_reexport_table(
    monkeypatch):
  tree = ast.parse('from mylib import optimizers\n'
                   'print(optimizers.Adam)\n')
  chain = tree.body[1].value.args[0]
  names = _names.ModuleNames(tree)
  looked = _counting_look_ups(monkeypatch)
  assert [names.resolve(chain) for _ in range(3)] == ['mylib.optimizers.Adam'
                                                      ] * 3
  assert looked == ['optimizers']
  # Another table of the same size: the memo does not answer for it.
  names.reexports = {'mylib.optimizers': 'flax.optim'}
  names.used_reexports.clear()
  assert names.resolve(chain) == 'flax.optim.Adam'
  assert names.resolve(chain) == 'flax.optim.Adam'
  assert looked == ['optimizers', 'optimizers']
  assert names.used_reexports == {'mylib.optimizers'}
  # A remembered answer still counts the re-export it used.
  names.used_reexports.clear()
  assert names.resolve(chain) == 'flax.optim.Adam'
  assert names.used_reexports == {'mylib.optimizers'}
  # The same table grown in place (a later round's entry).
  names.reexports = {'mylib.other': 'flax.optim', 'mylib.more': 'flax.optim'}
  assert names.resolve(chain) == 'mylib.optimizers.Adam'
  names.reexports['mylib.optimizers'] = 'flax.optim'
  assert names.resolve(chain) == 'flax.optim.Adam'

def test_an_alias_found_later_is_resolved_through(monkeypatch):
  tree = ast.parse('from flax import optim\n'
                   'Opt = optim.Optimizer\n'
                   'print(Opt)\n')
  names = _names.ModuleNames(tree, collect=False)
  read = tree.body[2].value.args[0]
  looked = _counting_look_ups(monkeypatch)
  assert names.resolve(read) == 'flax.optim.Optimizer'
  assert names.resolve(read) == 'flax.optim.Optimizer'
  assert looked == ['Opt']
  names.bindings.clear()
  names.aliases.clear()
  names.bindings['optim'] = 'flax.optim'
  tree.body[1].value = ast.parse('optim.Adam', mode='eval').body
  names.collect_aliases()
  assert names.resolve(read) == 'flax.optim.Adam'


_PLANNED = '''import jax
from flax import optim


def train(params, grads):
  optimizer = optim.Adam(1e-3).create(params)
  optimizer = optimizer.apply_gradient(grads)
  return jax.tree_map(lambda x: x, optimizer.target)
'''


def test_scan_and_the_plan_match_each_node_against_removals_once(
    tmp_path, monkeypatch):
  """The scan's walk and the plan of a module it plans ask which removed
  API each node uses of the same names: matched once, answered twice."""
  (tmp_path / 'train.py').write_text(_PLANNED)
  matched = []
  match = _removals.match

  def noting(node, names):
    matched.append(node)
    return match(node, names)

  monkeypatch.setattr(_removals, 'match', noting)
  result = scan.scan_paths([str(tmp_path)])
  # (planned: its plan's findings are there, and the removal's)
  assert 'removed_api' in {f.construct for f in result.findings}
  assert any(f.construct == 'apply_gradient' for f in result.findings)
  assert matched and len(matched) == len(set(matched))
