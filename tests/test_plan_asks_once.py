"""The plan of a module asks each question where it can be answered yes,
and once: ``scan`` plans every module that uses flax.optim (226 of a
3,232-file tree of real JAX code), so a question asked of every node, or
again for a plan's twin, is paid over the whole tree."""

import ast

import test_migrate_legacy_trees as tree_tests
import test_plan_kept

from compat.codemod import _names
from compat.codemod import _own_methods
from compat.codemod import _plan_findings
from compat.codemod import _plan_records
from compat.codemod import _plan_uses
from compat.codemod import scan


def test_only_a_dicts_entries_are_asked_whether_they_hold_an_optimizer(
    tmp_path, monkeypatch):
  """``{'opt': opt}`` and ``dict(opt=opt)`` are rewritten, and no other
  read of the module is asked about (a dict's entry: a display's value or
  a keyword's, the parents ``_legacy_trees.entry_of`` reads)."""
  asked = []
  plan_entry = _plan_uses.PlanUses._plan_tree_entry

  def noting(self, node):
    asked.append((node, self.parents.get(node)))
    return plan_entry(self, node)

  monkeypatch.setattr(_plan_uses.PlanUses, '_plan_tree_entry', noting)
  _, _, results = tree_tests._migrated_project(tmp_path)
  new = results['train.py'].new.decode()
  assert "{'opt': flax_optim_rules.legacy_tree(opt), 'extra': extra}" in new
  assert 'dict(opt=flax_optim_rules.legacy_tree(opt), extra=extra)' in new
  assert asked
  assert all(isinstance(parent, (ast.Dict, ast.keyword))
             for _, parent in asked)
  assert len(asked) == len({id(node) for node, _ in asked})


_SPREAD = '''\
import functools
from flax import optim

ADAM_KWARGS = {'beta1': 0.8, 'beta2': 0.9}
CHANGED = {'beta1': 0.8}
CHANGED.update(beta2=0.9)
TWICE = {'beta1': 0.8}
TWICE = {'beta2': 0.9}


def make(kwargs):
  local = {'beta1': 0.8}
  return [optim.Adam(**ADAM_KWARGS), optim.Adam(**CHANGED),
          optim.Adam(**TWICE), optim.Adam(**local), optim.Adam(**kwargs),
          ADAM_KWARGS['beta1']]
'''


def test_a_spread_dicts_keys_are_found_once_per_tree_and_name(monkeypatch):
  tree = ast.parse(_SPREAD)
  spreads = [call.keywords[0].value
             for call in tree.body[-1].body[-1].value.elts[:5]]
  bound = []
  bound_by = _names.bound_by

  def noting(node):
    bound.append(node)
    return bound_by(node)

  monkeypatch.setattr(_names, 'bound_by', noting)
  keys, walked = [], []
  for spread in spreads:
    before = len(bound)
    keys.append(_plan_records.literal_dict_keys(spread, tree))
    walked.append(len(bound) - before)
  assert keys == [{'beta1', 'beta2'}, None, None, None, None]
  assert walked[0] == len(list(ast.walk(tree)))  # one walk, whole
  assert walked[1] > 0  # (up to the call that may change it)
  # Not bound once at the top level to a dict: no walk at all.
  assert walked[2:] == [0, 0, 0]
  before = len(bound)
  assert [_plan_records.literal_dict_keys(s, tree) for s in spreads] == keys
  assert len(bound) == before

def test_a_plan_and_its_twin_find_the_own_step_lines_once(monkeypatch):
  found = []
  own_step_lines = _own_methods.own_step_lines

  def noting(names):
    found.append(names)
    return own_step_lines(names)

  monkeypatch.setattr(_own_methods, 'own_step_lines', noting)
  source = test_plan_kept._FACTORY
  tree = ast.parse(source)
  names = scan.module_names(tree, 'm.py')
  walked, facts = scan.walk_module(source, 'm.py', tree=tree)
  plan, kept = _plan_findings.plan_and_kept(source, tree, names, walked,
                                            scanned=facts)
  assert plan.edits and kept.edits != plan.edits
  assert found == [names]
