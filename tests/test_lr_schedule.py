"""``flax_optim_rules.lr_schedule``: flax 0.5.3's ``flax.training.lr_schedule``.

``golden/schedules.json`` holds what real flax 0.5.3 returned on a grid of
configurations (``golden/schedule_cases.py``; ``golden/generate_schedules.py``,
run with the oracle): every step as a Python ``int``, a ``jnp.int32`` scalar
and a jitted ``jnp.int32`` scalar. Each value here must have the same type,
dtype, weak type and bits: from the module itself and from code ``migrate``
pointed at it (``fixtures/migrate/schedules_like.py``). The stock Optax
figures that ``scan``/``migrate`` report must be what
``scripts/schedule_deviation.py`` measures.
"""

import importlib.util
import inspect
import json
import os
import types

from golden import schedule_cases
import jax
import jax.numpy as jnp
import optax
import pytest

from compat.codemod import _removals
from compat.codemod import migrate
from compat.codemod import scan
import flax_optim_rules
from flax_optim_rules import lr_schedule

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, 'fixtures', 'migrate', 'schedules_like.py')
DEVIATION_SCRIPT = os.path.join(os.path.dirname(HERE), 'scripts',
                                'schedule_deviation.py')
GUIDE = os.path.join(os.path.dirname(HERE), 'migration_guide.md')
with open(os.path.join(HERE, 'golden', 'schedules.json'),
          encoding='utf-8') as _f:
  GOLDEN = json.load(_f)


def _load(path, name):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _assert_golden(module, case, step_kind):
  got = schedule_cases.describe(
      schedule_cases.evaluate(module, case, step_kind))
  expected = GOLDEN['results'][case['name']][step_kind]
  assert {k: got[k] for k in ('kind', 'dtype', 'weak_type')} == {
      k: expected[k] for k in ('kind', 'dtype', 'weak_type')}
  differing = [(step, g, e) for step, (g, e) in enumerate(
      zip(got['bits'], expected['bits'])) if g != e]
  assert len(got['bits']) == len(expected['bits']) and not differing, (
      case['name'], step_kind, differing)


def test_golden_data_is_the_current_grid():
  assert GOLDEN['meta']['flax'] == '0.5.3'
  assert GOLDEN['cases'] == list(schedule_cases.CASES)
  assert sorted(GOLDEN['results']) == sorted(schedule_cases.BY_NAME)


@pytest.mark.parametrize('step_kind', schedule_cases.STEP_KINDS)
@pytest.mark.parametrize('name', sorted(schedule_cases.BY_NAME))
def test_values_are_flax_053s_bit_for_bit(name, step_kind):
  _assert_golden(lr_schedule, schedule_cases.BY_NAME[name], step_kind)


@pytest.mark.parametrize('name', sorted(schedule_cases.HELPERS.values()))
def test_helpers_take_flax_053s_parameters(name):
  parameters = inspect.signature(getattr(lr_schedule, name)).parameters
  assert [[p.name] if p.default is p.empty else [p.name, p.default]
          for p in parameters.values()] == GOLDEN['signatures'][name]


def test_package_exports_the_module():
  assert flax_optim_rules.lr_schedule is lr_schedule
  assert sorted(lr_schedule.__all__) == sorted(schedule_cases.HELPERS.values())


def test_a_schedule_drives_an_optax_optimizer_under_jit():
  # Optax passes its int32 step count: the rates applied are the golden
  # jitted values, step by step.
  case = schedule_cases.BY_NAME['cosine_warmup']
  schedule = schedule_cases.schedule(lr_schedule, case)
  tx = optax.sgd(learning_rate=schedule)
  params = jnp.zeros(())
  state = tx.init(params)
  update = jax.jit(tx.update)
  applied = []
  for _ in schedule_cases.steps(case):
    updates, state = update(-jnp.ones(()), state)
    applied.append(updates)
  expected = schedule_cases.values_of(GOLDEN['results'][case['name']]['jit'])
  assert [float(u) for u in applied] == expected.tolist()


def test_reported_stock_figures_are_the_measured_ones():
  # What scan/migrate report and what the guide says, at the printed
  # precision.
  deviation = _load(DEVIATION_SCRIPT, 'schedule_deviation')
  measured = deviation.measure(GOLDEN)
  assert set(measured) == set(deviation.SPELLINGS)
  with open(GUIDE, encoding='utf-8') as f:
    guide = ' '.join(f.read().split())
  for key, spelling in deviation.SPELLINGS.items():
    stated = f'{spelling.text} {deviation.phrase(measured[key])}'
    assert stated in _removals.LR_SCHEDULE_REPLACEMENT, stated
    assert (f'`{spelling.text}` {deviation.phrase(measured[key])}' in
            guide), stated


# ----------------------------------------------------------------- migrate
def _migrated_fixture(tier):
  with open(FIXTURE, 'rb') as f:
    source = f.read()
  new, plan = migrate.migrate_source(source, 'schedules_like.py', tier)
  assert not plan.leftovers, plan.leftovers
  return source, new


@pytest.mark.parametrize('tier', ['exact', 'stock'])
def test_migrate_points_every_import_at_flax_optim_rules(tier):
  source, new = _migrated_fixture(tier)
  # scan reports every use of the removed module: none is left.
  assert scan.scan_source(source, 'schedules_like.py')
  assert not scan.scan_source(new, 'schedules_like.py')
  assert b'import flax.training' not in new
  assert b'from flax.training' not in new
  for line in (b'from flax_optim_rules import lr_schedule\n',
               b'import flax_optim_rules.lr_schedule\n',
               b'from flax_optim_rules.lr_schedule import '
               b'create_cosine_learning_rate_schedule\n',
               b'flax_optim_rules.lr_schedule.create_constant_learning_rate'):
    assert line in new, line
  again, plan = migrate.migrate_source(new, 'schedules_like.py', tier)
  assert again == new and not plan.edits


def test_migrated_fixture_gives_flax_053s_values(tmp_path):
  _, new = _migrated_fixture('exact')
  path = tmp_path / 'schedules_like.py'
  path.write_bytes(new)
  module = _load(str(path), 'schedules_like_migrated')
  # The three spellings now reach the same functions: their values once.
  assert module.HELPERS['attribute'] == module.HELPERS['module'] == (
      module.HELPERS['name'])
  namespace = types.SimpleNamespace(**{
      schedule_cases.HELPERS[helper]: fn
      for helper, fn in module.HELPERS['name'].items()})
  for case in schedule_cases.CASES:
    for step_kind in ('int', 'jit'):
      _assert_golden(namespace, case, step_kind)


def test_scan_reports_each_use_with_the_exact_module_and_stock_figures():
  with open(FIXTURE, 'rb') as f:
    source = f.read()
  findings = scan.scan_source(source, 'schedules_like.py')
  lines = source.decode().splitlines()
  expected = {i for i, line in enumerate(lines, 1) if
              line.startswith(('import flax.training', 'from flax.training'))
              or 'flax.training.lr_schedule.' in line}
  assert {f.line for f in findings} == expected
  for finding in findings:
    assert finding.construct == 'removed_api'
    assert 'flax_optim_rules.lr_schedule' in finding.replacement
    assert 'optax.cosine_decay_schedule(base, halfcos_steps) is ' in (
        finding.replacement)


@pytest.mark.parametrize('source, expected', [
    # flax stays bound where the module uses it for more than the schedules.
    (b'import flax.training.lr_schedule\nlinen = flax.linen\n'
     b'f = flax.training.lr_schedule.create_constant_learning_rate_schedule\n',
     b'import flax, flax_optim_rules.lr_schedule\nlinen = flax.linen\n'
     b'f = flax_optim_rules.lr_schedule.create_constant_learning_rate_schedule'
     b'\n'),
    (b'import flax\nimport flax.training.lr_schedule as m\nx = flax.linen\n',
     b'import flax\nimport flax_optim_rules.lr_schedule as m\n'
     b'x = flax.linen\n'),
    # A statement over several lines stays one name per line.
    (b'from flax.training.lr_schedule import (\n'
     b'    create_cosine_learning_rate_schedule as cosine,\n'
     b'    create_constant_learning_rate_schedule)\n',
     b'from flax_optim_rules.lr_schedule import (\n'
     b'    create_cosine_learning_rate_schedule as cosine,\n'
     b'    create_constant_learning_rate_schedule,\n'
     b')\n'),
    (b'from flax.training import train_state, lr_schedule\n',
     b'from flax.training import train_state\n'
     b'from flax_optim_rules import lr_schedule\n'),
    # In a block the indentation is unknown: the import shares the line.
    (b'def f():\n  from flax.training import lr_schedule as s, train_state\n'
     b'  return s, train_state\n',
     b'def f():\n  from flax.training import train_state; '
     b'from flax_optim_rules import lr_schedule as s\n'
     b'  return s, train_state\n'),
    (b'from flax import training\n'
     b'f = training.lr_schedule.create_cosine_learning_rate_schedule\n',
     b'from flax import training\nimport flax_optim_rules.lr_schedule\n\n'
     b'f = flax_optim_rules.lr_schedule.create_cosine_learning_rate_schedule'
     b'\n'),
])
def test_import_spellings_are_rewritten(source, expected):
  new, plan = migrate.migrate_source(source, 'm.py')
  assert new == expected and not plan.leftovers, new
  assert migrate.migrate_source(new, 'm.py')[0] == new


def test_star_import_is_reported_not_rewritten():
  source = b'from flax.training.lr_schedule import *\n'
  new, plan = migrate.migrate_source(source, 'm.py')
  assert new == source
  [left] = plan.leftovers
  assert left.construct == 'removed_api' and (
      'import the helpers by name from flax_optim_rules.lr_schedule' in
      left.reason)
