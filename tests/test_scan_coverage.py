"""scan reports every statement migrate changes or leaves.

A work list, a CI gate and a pre-commit hook read scan, so what migrate
would rewrite or leave must show there too: each statement with a changed
or left line carries a scan finding (``scripts/corpus.py``'s
``unreported_statements``; lines migrate only adds, its imports, are not
statements of the old source).
"""

import ast
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / 'tests' / 'fixtures'


def _corpus():
  spec = importlib.util.spec_from_file_location(
      'corpus', ROOT / 'scripts' / 'corpus.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize('tree', ['migrate', 'scan_tree'])
def test_every_statement_migrate_touches_has_a_finding(tree):
  touched, unreported = _corpus().unreported_statements(
      [str(FIXTURES / tree)])
  assert touched > 20  # the fixtures' flows are migrated
  assert unreported == []


def test_a_create_passed_as_a_value_is_found(tmp_path):
  source = tmp_path / 'train.py'
  source.write_text(
      'import jax\n'
      'from flax import optim\n'
      '\n'
      '\n'
      'def make(params):\n'
      '  definition = optim.Adam(learning_rate=0.1)\n'
      "  return jax.jit(definition.create, backend='cpu')(params)\n")
  from compat.codemod import scan
  found = scan.scan_paths([str(tmp_path)]).findings
  assert [(f.line, f.rule) for f in found if f.line == 7] == [(7, 'FOC108')]


def test_a_member_read_as_a_value_reports_its_constructs_text(tmp_path):
  # One fact, one text: a create or step method read (not called) names
  # the same replacement as its call, the rule table's for its construct.
  (tmp_path / 'train.py').write_text(
      'import jax\n'
      'from flax import optim\n'
      '\n'
      '\n'
      'def make(params, grads):\n'
      '  definition = optim.Adam(learning_rate=0.1)\n'
      "  optimizer = jax.jit(definition.create, backend='cpu')(params)\n"
      '  optimizer = definition.create(params)\n'
      '  step = optimizer.apply_gradient\n'
      '  return step(grads), optimizer.apply_gradient(grads)\n')
  from compat.codemod import scan
  from legacy_optim import catalogue
  found = {(f.line, f.construct): f.replacement
           for f in scan.scan_paths([str(tmp_path)]).findings}
  create = catalogue.REPLACEMENTS['create'].text
  step = catalogue.REPLACEMENTS['apply_gradient'].text
  assert found[7, 'create'] == found[8, 'create'] == create
  assert found[9, 'optimizer_use'] == found[10, 'apply_gradient'] == step
  assert step == 'state = state.apply_gradients(grads=grads)'


_RESTORED_STATE = '''\
import flax
from flax import optim
from flax.training import checkpoints


@flax.struct.dataclass
class State:
  step: int
  optimizer: optim.Optimizer


def make(params):
  optimizer = optim.Adam(learning_rate=0.1).create(params)
  return State(step=0, optimizer=optimizer)


def resume(workdir, params):
  state = make(params)
  state = checkpoints.restore_checkpoint(workdir, state)
  return state.optimizer.target
'''


def test_a_restore_into_a_state_holding_an_optimizer_is_found(tmp_path):
  # The template holds the optimizer in a field: no argument is one, yet
  # migrate rewrites the restore to read both layouts.
  (tmp_path / 'train.py').write_text(_RESTORED_STATE)
  from compat.codemod import scan
  found = scan.scan_paths([str(tmp_path)]).findings
  assert [f.rule for f in found if f.line == 19] == ['FOC114']
  touched, unreported = _corpus().unreported_statements([str(tmp_path)])
  assert touched >= 5 and unreported == []


_RULE_CONSTRUCTED = '''\
from flax import optim


class Plain(optim.OptimizerDef):

  def init_param_state(self, param):
    return ()

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    return param - 0.1 * grad, state


def make(params):
  definition = Plain(None)
  return definition.create(params)
'''

_ESCAPING = '''\
import tracker
from flax import optim


def make(params):
  optimizer = optim.Adam(0.1).create(params)
  tracker.watch(optimizer)
  return optimizer
'''

_STORED_UNPROVEN = '''\
import flax
from flax import optim


@flax.struct.dataclass
class State:
  optimizer: optim.Optimizer


def make(thing):
  return State(optimizer=thing)
'''


@pytest.mark.parametrize('source, line, rule', [
    # migrate rewrites the construction of the user's rule class
    (_RULE_CONSTRUCTED, 14, 'FOC103'),
    # migrate keeps the flow: the optimizer goes to code it cannot follow
    (_ESCAPING, 7, 'FOC119'),
    # ... or a value it cannot prove an optimizer goes into the field
    (_STORED_UNPROVEN, 11, 'FOC119'),
])
def test_what_the_plan_finds_in_the_tree_is_a_finding(tmp_path, source, line,
                                                      rule):
  (tmp_path / 'train.py').write_text(source)
  from compat.codemod import scan
  found = scan.scan_paths([str(tmp_path)]).findings
  assert rule in [f.rule for f in found if f.line == line]
  touched, unreported = _corpus().unreported_statements([str(tmp_path)])
  assert touched >= 2 and unreported == []


# Flows that cross modules (tests/fixtures/scan_across/README.md): what
# migrate's plan follows there (a parameter, a return, a field, the links
# that keep a flow whole), scan reports from the same analysis.
@pytest.mark.parametrize('case', ['params', 'returns', 'fields'])
def test_every_statement_of_a_flow_across_modules_has_a_finding(case):
  touched, unreported = _corpus().unreported_statements(
      [str(FIXTURES / 'scan_across' / case)])
  assert touched >= 5  # the flow is planned
  assert unreported == []


def test_a_link_that_keeps_a_flow_is_found_at_both_ends():
  # update() overrides a hyper-parameter per step, so the flow stays in
  # both modules: the call and the function are left, each with its reason.
  from compat.codemod import scan
  project = FIXTURES / 'scan_across' / 'params' / 'proj'
  found = scan.scan_paths([str(project.parent)]).findings
  ends = {(pathlib.Path(f.path).name, f.line): f.rule for f in found
          if f.line in (1, 8) and f.rule != 'FOC101'}  # (not train's import)
  assert ends == {('steps.py', 1): 'FOC119', ('train.py', 8): 'FOC119'}


def test_a_noqa_hides_a_finding_of_the_plan(tmp_path):
  # The mark is used (no FOC901), and the line's finding is not reported.
  import shutil
  shutil.copytree(FIXTURES / 'scan_across' / 'params', tmp_path / 'params')
  steps = tmp_path / 'params' / 'proj' / 'steps.py'
  lines = steps.read_text().splitlines(keepends=True)
  lines[0] = lines[0].rstrip('\n') + '  # noqa: FOC119\n'
  steps.write_text(''.join(lines))
  from compat.codemod import scan
  found = scan.scan_paths([str(tmp_path / 'params')]).findings
  assert [f.rule for f in found if f.path == str(steps).replace(
      '\\', '/') and f.line == 1] == []
  assert [f.rule for f in found if f.line == 8] == ['FOC119']


_TWO_STEPS = '''\
from flax import optim


def run(params, grads):
  optimizer = optim.Adam(learning_rate=0.1).create(params)
  optimizer = optimizer.apply_gradient(grads)
  return optimizer.target
'''


def _planned(source: str, held=frozenset(), missed=None):
  """``(plan, findings, tree)`` of ``source`` as one module, the walk's
  findings on line ``missed`` left out (as if the walk missed them)."""
  from compat.codemod import _rewrite_plan
  from compat.codemod import scan
  tree = ast.parse(source)
  findings = [f for f in scan.scan_source(source, 'train.py', tree=tree)
              if f.line != missed]
  return _rewrite_plan.Planner(
      source.encode(), tree, scan.module_names(tree, 'train.py'), findings,
      held=held).plan(), findings, tree


def test_a_noqa_on_a_plan_finding_holds_its_flow_in_migrate():
  # As ruff keeps a suppressed diagnostic's fix: a statement scan reports
  # only from the plan, marked # noqa for its code, keeps migrate's flow.
  from compat.codemod import _plan_findings
  plan, walked, _ = _planned(_TWO_STEPS, missed=6)
  assert 6 in {e.line for e in plan.edits}  # the step is rewritten
  marked = _TWO_STEPS.replace('(grads)\n', '(grads)  # noqa: FOC109\n')
  held = _plan_findings.held(plan, walked, marked.encode(),
                             ast.parse(marked), None)
  assert held == {(6, 'FOC109')}
  kept, _, _ = _planned(_TWO_STEPS, held, missed=6)
  assert kept.edits == []  # nothing of the flow is rewritten
