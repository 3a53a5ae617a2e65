"""The plan of a module asks each question where it can be answered yes,
and once: ``scan`` plans every module that uses flax.optim (226 of a
3,232-file tree of real JAX code), so a question asked of every node, or
again for a plan's twin, is paid over the whole tree."""

import ast

import test_migrate_legacy_trees as tree_tests
import test_migrate_resume
import test_plan_kept

from compat.codemod import _flow
from compat.codemod import _names
from compat.codemod import _own_methods
from compat.codemod import _plan_findings
from compat.codemod import _plan_records
from compat.codemod import _plan_uses
from compat.codemod import _rewrite_plan
from compat.codemod import scan


def _calls(monkeypatch, owner, name: str) -> list:
  """The arguments of each call of ``owner.name`` from now on, in order
  (a method's with its instance first)."""
  calls = []
  function = getattr(owner, name)

  def noting(*args):
    calls.append(args)
    return function(*args)

  monkeypatch.setattr(owner, name, noting)
  return calls


def test_only_a_dicts_entries_are_asked_whether_they_hold_an_optimizer(
    tmp_path, monkeypatch):
  """``{'opt': opt}`` and ``dict(opt=opt)`` are rewritten, and no other
  read of the module is asked about (a dict's entry: a display's value or
  a keyword's, the parents ``_legacy_trees.entry_of`` reads)."""
  asked = _calls(monkeypatch, _plan_uses.PlanUses, '_plan_tree_entry')
  _, _, results = tree_tests._migrated_project(tmp_path)
  new = results['train.py'].new.decode()
  assert "{'opt': flax_optim_rules.legacy_tree(opt), 'extra': extra}" in new
  assert 'dict(opt=flax_optim_rules.legacy_tree(opt), extra=extra)' in new
  assert asked
  assert all(isinstance(planner.parents.get(node), (ast.Dict, ast.keyword))
             for planner, node in asked)
  assert len(asked) == len({id(node) for _, node in asked})


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
  bound = _calls(monkeypatch, _names, 'bound_by')
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
  found = _calls(monkeypatch, _own_methods, 'own_step_lines')
  source = test_plan_kept._FACTORY
  tree = ast.parse(source)
  names = scan.module_names(tree, 'm.py')
  walked, facts = scan.walk_module(source, 'm.py', tree=tree)
  plan, kept = _plan_findings.plan_and_kept(source, tree, names, walked,
                                            scanned=facts)
  assert plan.edits and kept.edits != plan.edits
  assert found == [(names,)]


def test_another_librarys_restore_is_asked_about_where_the_flow_migrates(
    monkeypatch):
  """A call named like a restore of no route migrate rewrites is only
  noted, where the flow migrates: its arguments are asked about there,
  and not where the flow stays (a link keeps it)."""
  source = test_migrate_resume._UNSEEN_RESTORES.encode()
  line = 1 + next(i for i, text in enumerate(source.decode().splitlines())
                  if 'restore_or_initialize' in text)
  def planned(blocked):
    tree = ast.parse(source)
    names = scan.module_names(tree, 'train.py')
    walked = scan.walk_module(source, 'train.py', tree=tree)[0]
    asked.clear()
    return _rewrite_plan.Planner(source, tree, names, walked,
                                 blocked=blocked).plan()

  asked = _calls(monkeypatch, _flow.OptimizerFlow, 'may_hold_optimizer')
  migrated = planned(())
  assert migrated.edits and asked
  assert any(note.line == line and 'is not a restore migrate rewrites' in
             note.reason for note in migrated.notes), migrated.notes
  kept = planned([(line - 1, 'create', 'kept by another module')])
  assert kept.leftovers and not kept.notes and not asked


def _whole_references(source: str) -> list:
  tree = ast.parse(source)
  names = scan.module_names(tree, 'm.py')
  walked = scan.walk_module(source.encode(), 'm.py', tree=tree)[0]
  planner = _rewrite_plan.Planner(source.encode(), tree, names, walked)
  return sorted((ast.unparse(node), str(path))
                for node, path in planner._whole_references())


def test_only_chains_that_can_lead_into_flax_optim_are_resolved_as_classes():
  """The class references the plan rewrites are of flax.optim: a chain
  from a name bound to nothing that leads there is not resolved."""
  assert _whole_references(
      'import numpy as np\n'
      'import flax\n'
      'from flax import optim\n'
      'def f(optimizer: optim.Optimizer, x):\n'
      '  return np.ones(3), flax.optim.Adam, x\n') == [
          ('flax.optim.Adam', 'flax.optim.Adam'),
          ('optim.Optimizer', 'flax.optim.Optimizer')]
  # A star import of flax.optim may bind any name: each is resolved.
  assert _whole_references(
      'from flax.optim import *\n'
      'def f(x):\n'
      '  return Adam, x\n') == [('Adam', 'flax.optim.Adam'), ('x', 'None')]
