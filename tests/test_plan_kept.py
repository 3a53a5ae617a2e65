"""A roll-back's plan follows from a module's first planning.

``scan`` plans a module at a link's end once; where a roll-back keeps its
flow as it is, the plan is its plan with the flow kept
(``Planner.plan_and_kept``) plus the leftovers of the links kept
(``_plan_records.with_blocked``), never planned again. It must be what
planning the module again with those links (``blocked``) gives, as
``migrate`` plans it.
"""

import ast

import pytest

from compat.codemod import _plan_findings
from compat.codemod import _plan_records
from compat.codemod import _rewrite_plan
from compat.codemod import scan

_KEPT = 'kept with its flow: the other module keeps its optimizer'

# A factory, its .create, a step, annotations of the Optimizer (rewritten
# only where the flow migrates) and a removal (rewritten either way).
_FACTORY = b'''\
import jax
from flax import optim


def make(params, learning_rate) -> optim.Optimizer:
  opt_def = optim.Adam(learning_rate=learning_rate)
  return opt_def.create(params)


def step(optimizer: optim.Optimizer, grads):
  optimizer = optimizer.apply_gradient(grads)
  return optimizer, jax.tree_map(lambda g: g * 2, grads)
'''
# Only an annotation, which the plan rewrites where the flow migrates, and
# no edit of the flow: kept, the annotation stays.
_ANNOTATED = b'''\
from flax import optim


def log(optimizer: optim.Optimizer):
  print('a step')
'''

_CASES = {
    'definition_and_create': (_FACTORY, [(6, 'algorithm', _KEPT),
                                         (7, 'create', _KEPT)]),
    'field': (_FACTORY, [(7, 'optimizer_field', _KEPT)]),
    'annotation_only': (_ANNOTATED, [(4, 'optimizer_field', _KEPT)]),
}


def _planned_again(source, blocked):
  """What planning the module again with ``blocked`` gives (scan's and
  migrate's roll-back before)."""
  tree = ast.parse(source)
  names = scan.module_names(tree, 'm.py')
  walked = scan.walk_module(source, 'm.py', tree=tree)[0]
  return _rewrite_plan.Planner(source, tree, names, walked,
                               blocked=blocked).plan()


@pytest.mark.parametrize('case', sorted(_CASES))
def test_the_kept_plan_with_the_links_is_the_plan_made_again(case):
  source, blocked = _CASES[case]
  tree = ast.parse(source)
  names = scan.module_names(tree, 'm.py')
  walked, facts = scan.walk_module(source, 'm.py', tree=tree)
  plan, kept = _plan_findings.plan_and_kept(source, tree, names, walked,
                                            scanned=facts)
  assert plan == _planned_again(source, ())
  again = _planned_again(source, blocked)
  assert again != plan  # the links keep something the plan rewrote
  assert _plan_records.with_blocked(kept, source, blocked) == again


def test_a_link_that_keeps_no_flow_is_planned_again():
  """A construct that does not keep the flow, or no link: no shortcut."""
  tree = ast.parse(_FACTORY)
  names = scan.module_names(tree, 'm.py')
  walked, facts = scan.walk_module(_FACTORY, 'm.py', tree=tree)
  _, kept = _plan_findings.plan_and_kept(_FACTORY, tree, names, walked,
                                         scanned=facts)
  assert _plan_records.with_blocked(kept, _FACTORY, []) is None
  assert _plan_records.with_blocked(
      kept, _FACTORY, [(7, 'checkpoint', _KEPT)]) is None
