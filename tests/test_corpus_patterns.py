"""The corpus instrument (scripts/corpus.py) and the corpus's patterns.

``tox -e corpus`` runs scan and migrate on public research repositories
(tests/corpus/repos.toml). Here, in the default run and without them:

- the instrument's own parts on small hand-written sources: the independent
  usage count and the checks for broken links of a migrated program;
- the patterns those repositories showed that scan and migrate handle today,
  each as a small fixture written here (the repositories' code is never
  copied). Patterns that break today are described in the corpus table's
  output, not tested as expected failures.
"""

import ast
import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

from compat.codemod import migrate
from compat.codemod import scan

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'scripts',
                      'corpus.py')


def _load_corpus_script():
  spec = importlib.util.spec_from_file_location('corpus_script', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


corpus = _load_corpus_script()


def _count(source: str):
  return [(line, what) for line, _, what in
          corpus.count_usages(ast.parse(source))]


# ---------------------------------------------------------------------------
# The independent count.


def test_count_has_one_usage_per_import_chain_and_imported_name():
  source = '\n'.join([
      'import flax',                                       # 1: not optim
      'from flax import optim',                            # 2
      'from flax import optim as optimizers, linen',       # 3
      'from flax.optim import Adam',                       # 4
      'import flax.optim as fo',                           # 5
      'def make() -> optim.OptimizerDef:',                 # 6
      '  return optim.Adam(1e-3)',                         # 7
      'x = flax.optim.Momentum(0.1).create(p)',            # 8
      'y = Adam(0.1)',                                     # 9
      'z = fo.GradientDescent, optimizers.Adam',           # 10
      'w = flax.linen.Dense(3), linen.Dense(3)',           # 11: not optim
      'optim = None',                                      # 12: a store
      'Adam.create',                                       # 13
  ])
  assert _count(source) == [
      (2, 'import optim'), (3, 'import optim'), (4, 'import Adam'),
      (5, 'import flax.optim'), (6, 'flax.optim.OptimizerDef'),
      (7, 'flax.optim.Adam'), (8, 'flax.optim.Momentum'),
      (9, 'flax.optim.Adam'), (10, 'flax.optim.GradientDescent'),
      (10, 'flax.optim.Adam'), (13, 'flax.optim.Adam.create')]


def test_count_ignores_names_not_bound_by_a_flax_import():
  source = 'from mylib import optim\nx = optim.Adam(1)\nimport optax\n'
  assert not _count(source)


def test_notebook_code_keeps_blocks_whose_only_statement_is_a_magic():
  notebook = {'cells': [
      {'cell_type': 'markdown', 'source': ['# title']},
      {'cell_type': 'code', 'source': ['if colab:\n', '  !pip install x\n',
                                       'from flax import optim']},
  ]}
  code = corpus.notebook_code(json.dumps(notebook).encode())
  assert _count(code) == [(3, 'import optim')]


def test_notebook_code_leaves_out_cell_magics_and_continued_shell_lines():
  notebook = {'cells': [
      {'cell_type': 'code', 'source': ['%%bash\n', 'echo $HOME']},
      {'cell_type': 'code', 'source': ['!python -m train \\\n',
                                       '    --workdir=./\n',
                                       'from flax import optim']},
  ]}
  code = corpus.notebook_code(json.dumps(notebook).encode())
  assert _count(code) == [(5, 'import optim')]


# ---------------------------------------------------------------------------
# Broken links of a migrated program.


def _broken(old: dict, new: dict):
  return [(path, line) for path, line, _ in corpus.broken_links(old, new)]


def test_a_migrated_file_that_does_not_parse_is_broken():
  assert _broken({'a.py': 'x = 1\n'}, {'a.py': 'x = (\n'}) == [('a.py', 1)]


def test_a_name_only_a_removed_import_bound_is_broken():
  old = {'a.py': 'from flax import optim\nx = optim.Adam(1)\n'
                 'def f() -> optim.OptimizerDef: ...\n'}
  new = {'a.py': 'import optax\nx = optax.adam(1)\n'
                 'def f() -> optim.OptimizerDef: ...\n'}
  assert _broken(old, new) == [('a.py', 3)]


def test_importing_a_name_another_module_lost_is_broken():
  old = {'pkg/opt.py': 'from flax import optim as optimizers\n',
         'pkg/train.py': 'from pkg.opt import optimizers\n'}
  new = {'pkg/opt.py': 'import optax\n',
         'pkg/train.py': 'from pkg.opt import optimizers\n'}
  assert _broken(old, new) == [('pkg/train.py', 1)]


def test_create_on_a_definition_a_migrated_factory_returns_is_broken():
  # The config-class pattern: the definition is rewritten where it is
  # made, the ``.create`` where it is used is not.
  old = {
      'config.py': 'from flax import optim\nclass Factory:\n'
                   '  def create_optimizer_def(self):\n'
                   '    return optim.Adam(1e-3)\n',
      'train.py': 'def init(self, params):\n'
                  '  optimizer_def = self.factory.create_optimizer_def()\n'
                  '  return optimizer_def.create(params)\n'}
  new = dict(old, **{'config.py': 'import flax_optim_rules\n'
                                  'class Factory:\n'
                                  '  def create_optimizer_def(self):\n'
                                  '    return flax_optim_rules.adam(1e-3)\n'})
  assert _broken(old, new) == [('train.py', 3)]


def test_legacy_api_is_broken_once_no_module_makes_a_legacy_optimizer():
  step = ('def train_step(state, grad):\n'
          '  return state.optimizer.apply_gradient(grad)\n')
  old = {'train.py': 'from flax import optim\n'
                     'def init(p):\n  return optim.Adam(1).create(p)\n',
         'step.py': step}
  migrated = {'train.py': 'import optax\nfrom flax.training import '
                          'train_state\ndef init(p):\n'
                          '  return train_state.TrainState.create(\n'
                          '      apply_fn=None, params=p, tx=optax.adam(1))\n',
              'step.py': step}
  assert _broken(old, migrated) == [('step.py', 2)]
  # While a module still makes legacy optimizers, the use may be theirs.
  assert not _broken(old, old)


def test_a_method_of_the_programs_own_class_is_no_legacy_api():
  # jaxrl's Model wraps its optimizer's step in its own ``apply_gradient``:
  # once migrated, calls of it are the class's, not flax.optim's.
  model = ('class Model:\n  def apply_gradient(self, loss_fn):\n'
           '    return self\n')
  step = 'def step(model, loss_fn):\n  return model.apply_gradient(loss_fn)\n'
  old = {'model.py': 'from flax import optim\n' + model, 'step.py': step}
  new = {'model.py': 'import optax\n' + model, 'step.py': step}
  assert not _broken(old, new)
  # Without the class defining it, the same call is flax.optim's API.
  bare = {'model.py': 'import optax\n', 'step.py': step}
  assert _broken(dict(old, **{'model.py': 'from flax import optim\n'}),
                 bare) == [('step.py', 2)]


def test_a_complete_migration_has_no_broken_links():
  old = {'train.py': 'from flax import optim\n'
                     'def init(p):\n  return optim.Adam(1).create(p)\n'
                     'def step(opt, g):\n  return opt.apply_gradient(g)\n'}
  new = {'train.py': 'import optax\nfrom flax.training import train_state\n'
                     'def init(p):\n  return train_state.TrainState.create('
                     'apply_fn=None, params=p, tx=optax.adam(1))\n'
                     'def step(opt, g):\n  return opt.apply_gradients('
                     'grads=g)\n'}
  assert not _broken(old, new)


def test_the_table_has_a_line_per_train_step_compared():
  def row(name, trains):
    return corpus.Row(name, 1, 2, 2, 2, 0, [], [], {}, [], trains)

  text = corpus.format_table([row('a', 'bit-identical over 5 steps'),
                              row('b', None), row('c', 'FAILS: why')], [])
  assert text.splitlines()[-3:] == [
      'train steps, migrated beside the original (the shim\'s imports '
      'blocked; tests/_corpus_train.py):',
      '  a: bit-identical over 5 steps', '  c: FAILS: why']
  assert 'train steps' not in corpus.format_table([row('b', None)], [])


def test_the_unsafe_fixes_figures_are_a_table_of_their_own():
  plain = corpus.Row('a', 1, 4, 4, 0, 4, [], [], {}, [])
  measured = plain._replace(name='b', unsafe={
      'rewritten': 3, 'left': 1, 'broken': 1, 'applied': 2,
      'broken_links': [('x.py', 7, 'why')], 'run': True})
  skipped = plain._replace(name='c', unsafe={
      'rewritten': 0, 'left': 4, 'broken': 0, 'applied': 0,
      'broken_links': [], 'run': False})
  lines = corpus.format_table([plain, measured, skipped], []).splitlines()
  table = lines.index('repository rewritten  left broken applied pass')
  assert lines[table - 1].startswith('with --unsafe-fixes (each applied fix '
                                     'rests on an assumption')
  assert lines[table + 1:table + 4] == [
      'b                  3     1      1       2  run',
      '  broken: x.py:7: why',
      'c                  0     4      0       0    -']
  # The row's own figures are migrate's without them.
  assert any(line.startswith('b              1      4      4         0     4')
             for line in lines)
  assert '--unsafe-fixes' not in corpus.format_table([plain], [])


def _tiers(name, usages, exact, unsafe, framework=False):
  return corpus.Row(name, 1, usages, usages, exact, usages - exact, [], [],
                    {}, [], framework=framework, unsafe={
                        'rewritten': unsafe, 'left': usages - unsafe,
                        'broken': 0, 'applied': unsafe - exact,
                        'broken_links': [], 'run': unsafe != exact})


def test_both_tiers_are_printed_against_the_targets_frameworks_apart():
  rows = [_tiers('a', 10, 9, 10), _tiers('b', 10, 8, 9),
          _tiers('fw', 80, 0, 0, framework=True)]
  text = corpus.format_table(rows, [])
  assert ("against issue 40's targets (frameworks apart: fw):\n"
          '  exact tier: 17 of 20 rewritten (85%; target 90%: NOT met)\n'
          '  unsafe tier: 19 of 20 rewritten (95%; target 95%: met)') in text


def test_a_row_whose_exact_report_names_no_unsafe_fix_skips_that_pass(
    monkeypatch):
  # analyse() would run the pass; it must not be called for such a row.
  monkeypatch.setattr(corpus, 'analyse', lambda *a, **k: pytest.fail(
      'the unsafe pass ran'))
  row = corpus.Row('a', 1, 8, 8, 6, 2, [('x.py', 3, 'why')], [], {}, [])
  assert corpus.unsafe_tier('root', None, row) == {
      'rewritten': 6, 'left': 2, 'broken': 1, 'applied': 0,
      'broken_links': [('x.py', 3, 'why')], 'run': False}


def test_a_row_whose_exact_report_names_an_unsafe_fix_runs_that_pass(
    monkeypatch):
  unsafe = corpus.Row('a', 1, 8, 8, 8, 0, [], [], {}, [], unsafe_applied=2)
  monkeypatch.setattr(corpus, 'analyse', lambda root, entry, unsafe_fixes: (
      unsafe if unsafe_fixes else pytest.fail('the exact tier again')))
  row = corpus.Row('a', 1, 8, 8, 6, 2, [], [], {}, [], unsafe_hidden=2)
  assert corpus.unsafe_tier('root', None, row) == {
      'rewritten': 8, 'left': 0, 'broken': 0, 'applied': 2,
      'broken_links': [], 'run': True}


def test_an_unsafe_pass_run_on_a_row_naming_no_fix_must_not_differ():
  same = _tiers('a', 8, 6, 6)._replace(unsafe={
      'rewritten': 6, 'left': 2, 'broken': 0, 'applied': 0,
      'broken_links': [], 'run': True})
  assert corpus.skip_contradicted(same) is None
  differs = same._replace(unsafe=dict(same.unsafe, rewritten=7, left=1))
  assert corpus.skip_contradicted(differs) == (
      'a: with --unsafe-fixes rewritten 7, left 1, broken 0, without 6, 2, '
      '0, although its exact report names no unsafe fix (a run without '
      '--unsafe-fixes skips that pass)')
  # Where the report names a fix, the tiers may differ: that is the pass.
  assert corpus.skip_contradicted(differs._replace(unsafe_hidden=1)) is None


# ---------------------------------------------------------------------------
# The recorded figures (tests/corpus/figures.toml): a row worse than its
# record fails, naming the row and the figure.

_RECORDED = {'scenic': {'usages': 30, 'found': 29, 'rewritten': 24,
                        'left': 6, 'broken': 0, 'unreported': 3,
                        'rewritten_unsafe': 27}}


def _changed(figure, by):
  figures = dict(_RECORDED['scenic'])
  figures[figure] += by
  return {'scenic': figures}


def test_figures_as_recorded_neither_fail_nor_improve():
  assert corpus.compare_figures(_changed('usages', 0), _RECORDED) == ([], [])


@pytest.mark.parametrize('figure, by, sign', [
    ('usages', -1, '<'), ('found', -1, '<'), ('rewritten', -1, '<'),
    ('left', 1, '>'), ('broken', 1, '>'), ('unreported', 1, '>'),
    ('rewritten_unsafe', -1, '<')])
def test_a_figure_worse_than_recorded_fails_naming_row_and_figure(
    figure, by, sign):
  worse, better = corpus.compare_figures(_changed(figure, by), _RECORDED)
  then = _RECORDED['scenic'][figure]
  assert worse == [f'scenic: {figure} {then + by} {sign} recorded {then}']
  assert better == []


@pytest.mark.parametrize('figure, by', [
    ('usages', 1), ('found', 1), ('rewritten', 1), ('left', -1),
    ('broken', -1), ('unreported', -1), ('rewritten_unsafe', 1)])
def test_a_figure_better_than_recorded_is_printed_not_failed(figure, by):
  worse, better = corpus.compare_figures(_changed(figure, by), _RECORDED)
  assert worse == []
  assert len(better) == 1
  assert better[0].startswith(f'scenic: {figure} ')
  assert 'tests/corpus/figures.toml' in better[0]


def test_a_row_with_no_recorded_figures_fails():
  worse, _ = corpus.compare_figures(
      {'newrow': _RECORDED['scenic']}, _RECORDED)
  assert len(worse) == 1
  assert worse[0].startswith('newrow: no recorded figures in '
                             'tests/corpus/figures.toml')


def test_the_figures_compared_are_the_rows_figures():
  row = corpus.Row('a', 9, 8, 7, 5, 3, [('x.py', 1, 'why')] * 2, [], {}, [],
                   unreported=[('y.py', 4, 'state = restore(d, state)')],
                   unsafe={'rewritten': 6, 'left': 2, 'broken': 0,
                           'applied': 1, 'broken_links': [], 'run': True})
  assert corpus.row_figures(row) == {'usages': 8, 'found': 7, 'rewritten': 5,
                                     'left': 3, 'broken': 2, 'unreported': 1,
                                     'rewritten_unsafe': 6}


def test_the_table_lists_the_statements_scan_does_not_report():
  row = corpus.Row('a', 1, 2, 2, 2, 0, [], [], {}, [],
                   unreported=[('y.py', 4, 'state = restore(d, state)')])
  text = corpus.format_table([row], [])
  assert text.splitlines()[-2:] == [
      'a: statements migrate changes or leaves with no scan finding:',
      '  y.py:4: state = restore(d, state)']


def test_a_figures_file_missing_a_figure_is_refused_naming_the_row(tmp_path):
  path = tmp_path / 'figures.toml'
  path.write_text('[vit]\nusages = 1\nfound = 1\nrewritten = 1\n'
                  'left = 0\n')
  with pytest.raises(ValueError, match=r'\[vit\] must give exactly'):
    corpus.load_figures(str(path))


def test_a_figures_file_without_the_unsafe_tiers_floor_is_refused(tmp_path):
  path = tmp_path / 'figures.toml'
  path.write_text('[ub]\nusages = 36\nfound = 36\nrewritten = 0\n'
                  'left = 36\nbroken = 0\nunreported = 0\n')
  with pytest.raises(ValueError, match=r'\[ub\] must give exactly .*'
                     r"'rewritten_unsafe'"):
    corpus.load_figures(str(path))


def test_every_row_of_the_corpus_has_recorded_figures():
  assert set(corpus.load_figures()) == {e.name for e in corpus.load_table()}


@pytest.mark.parametrize('mirrored', [False, True],
                         ids=['no_mirror', 'mirror_without_the_commit'])
def test_a_row_the_mirrors_lack_is_not_available_and_no_failure(
    tmp_path, monkeypatch, capsys, mirrored):
  mirrors = tmp_path / 'mirrors'
  mirrors.mkdir()
  git_dir = mirrors / 'google-research+vision_transformer'
  if mirrored:  # a mirror, empty: an older turn's, say
    subprocess.run(['git', 'init', '--quiet', '--bare', str(git_dir)],
                   check=True)
  monkeypatch.setenv(corpus.MIRRORS_ENV, str(mirrors))
  assert corpus.main(['--only', 'vit', '--into', str(tmp_path / 'got')]) == 0
  out = capsys.readouterr().out
  commit = next(e.commit for e in corpus.load_table() if e.name == 'vit')
  why = (f'the mirror {git_dir} lacks commit {commit}' if mirrored else
         f'no mirror of google-research/vision_transformer under {mirrors}')
  assert f'not available: vit: {why}' in out
  assert 'NOT GOT' not in out


# ---------------------------------------------------------------------------
# Patterns of the corpus that scan and migrate handle today.


def _constructs(source: bytes):
  return {(f.line, f.construct) for f in scan.scan_source(source, 'x.py')
          if f.construct != 'import'}


def test_scan_follows_an_aliased_optim_module_in_a_factory():
  # ``from flax import optim as optimizers`` and a get_optimizer(config)
  # returning one definition per branch (scenic's train_lib).
  source = b'''from flax import optim as optimizers


def get_optimizer(config):
  if config.optimizer == 'adam':
    return optimizers.Adam(learning_rate=config.lr, beta1=0.9)
  return optimizers.Momentum(learning_rate=config.lr, beta=0.9)
'''
  assert _constructs(source) == {(6, 'optimizer_def'), (7, 'optimizer_def')}


def test_scan_reports_fields_subclasses_traversals_and_multi_optimizers():
  # ``import flax`` then ``flax.optim.X`` (nested-transformer, t5x, vit).
  source = b'''import flax


@flax.struct.dataclass
class TrainState:
  step: int
  optimizer: flax.optim.Optimizer


class Clipped(flax.optim.OptimizerDef):
  pass


def param_groups():
  decay = flax.optim.ModelParamTraversal(lambda path, _: 'bias' not in path)
  rest = flax.optim.ModelParamTraversal(lambda path, _: 'bias' in path)
  return flax.optim.MultiOptimizer((decay, flax.optim.Adam(weight_decay=0.1)),
                                   (rest, flax.optim.Adam()))
'''
  assert _constructs(source) == {
      (7, 'annotation'), (10, 'optimizer_def_subclass'), (15, 'traversal'),
      (16, 'traversal'), (17, 'multi_optimizer'), (17, 'optimizer_def'),
      (18, 'optimizer_def')}



def test_scan_reports_every_flax_optim_name_in_an_annotation():
  # Return annotations, also on a config class's method (meliad), inside
  # Tuple[...]/Optional[...] and strings (scenic's optimizers and
  # train_utils), a module's own alias of flax.optim (``optimizers``).
  source = b"""import dataclasses
from typing import Any, Optional, Tuple

from flax import optim
from flax import optim as optimizers


class OptimizerConfig:

  def create_optimizer_def(self) -> optim.OptimizerDef:
    return make()


def make() -> 'optimizers.OptimizerDef':
  return optimizers.Adam(0.1)


def backbone(config) -> optim.MultiOptimizer:
  return config.multi


def init_param_state(param) -> Tuple[Any, optimizers.OptimizerState]:
  return param, None


@dataclasses.dataclass
class TrainState:
  optimizer: Optional[optim.Optimizer] = None
  step: int = 0
"""
  assert _constructs(source) == {
      (10, 'annotation'), (14, 'annotation'), (15, 'optimizer_def'),
      (18, 'annotation'), (22, 'annotation'), (28, 'annotation')}


def test_scan_reports_state_and_optimizers_built_by_hand_and_aliases():
  # t5x's tests and its Adafactor: ``flax.optim.base`` names, an Optimizer
  # assembled from a definition, a state and a target, a module-level alias
  # of the class and the alias's uses; scenic's ``OptimizerState(step + 1,
  # ...)``; a class tested with isinstance.
  source = b"""from flax import optim
from flax.optim.base import OptimizerState

Optimizer = optim.Optimizer


def apply_gradient(step, new_states):
  return OptimizerState(step + 1, new_states)


def restored(params, step):
  return optim.Optimizer(
      optim.GradientDescent(),
      state=optim.OptimizerState(step=step, param_states={}),
      target=params)


def check(value) -> bool:
  made = Optimizer(None, None, None)
  return isinstance(value, optim.Optimizer) and made is not None
"""
  assert _constructs(source) == {
      (4, 'reference'), (8, 'reference'), (12, 'reference'),
      (13, 'optimizer_def'), (14, 'reference'), (19, 'reference'),
      (20, 'reference')}


def test_scan_follows_aliases_and_reexports_across_modules(tmp_path):
  # A user module that re-exports flax.optim (scenic's
  # ``train_lib/optimizers.py``) and one that aliases a class (t5x's
  # ``models.py``), used from other modules by name, also through a
  # relative import.
  package = tmp_path / 'lib'
  package.mkdir()
  (package / '__init__.py').write_text('')
  (package / 'optimizers.py').write_text(
      'from flax import optim as optimizers\n')
  (package / 'models.py').write_text(
      'from flax import optim\n\nOptimizer = optim.Optimizer\n')
  (package / 'train.py').write_text(
      'from lib import models\n'
      'from lib.models import Optimizer\n'
      'from lib.optimizers import optimizers\n\n\n'
      'def step(opt: models.Optimizer, s) -> optimizers.OptimizerState:\n'
      '  return optimizers.OptimizerState(s + 1, opt)\n\n\n'
      'def build() -> Optimizer:\n'
      '  return Optimizer(None, None, None)\n')
  (package / 'relative.py').write_text(
      'from .optimizers import optimizers\n\n\n'
      'def state(s) -> optimizers.OptimizerState:\n'
      '  return s\n')
  found = {(f.path.rpartition('/')[2], f.line, f.construct)
           for f in scan.scan_paths([str(tmp_path)]).findings}
  assert {f for f in found if f[0] == 'train.py'} == {
      ('train.py', 2, 'import'), ('train.py', 3, 'import'),
      ('train.py', 6, 'annotation'), ('train.py', 7, 'reference'),
      # migrate keeps the flow: the optimizer goes into OptimizerState(...)
      ('train.py', 7, 'optimizer_escape'),
      ('train.py', 10, 'annotation'), ('train.py', 11, 'reference')}
  assert {f for f in found if f[0] == 'relative.py'} == {
      ('relative.py', 1, 'import'), ('relative.py', 4, 'annotation')}


def test_scan_finds_every_usage_the_independent_count_finds(tmp_path):
  # Every shape above at once, in one module: each line the corpus's
  # independent count has a usage on is a line scan reports.
  source = b"""import flax
from flax import optim
from flax.optim import base as optim_base
import flax.optim as fo

Optimizer = optim.Optimizer
DEFAULTS = (fo.Adam, optim_base.OptimizerState)


def make(config) -> flax.optim.OptimizerDef:
  kind = getattr(optim, config.name)
  return kind(config.lr)


def restore(params, step) -> 'Optimizer':
  state = flax.optim.OptimizerState(step, {})
  return Optimizer(make(None), state=state, target=params)


def states(a: 'optim.OptimizerState', b: list[optim_base.OptimizerState]):
  return a, b, optim.OptimizerState
"""
  path = tmp_path / 'module.py'
  path.write_bytes(source)
  counted = {line for line, _ in _count(source.decode())}
  found = {f.line for f in scan.scan_paths([str(path)]).findings}
  assert counted and counted <= found, sorted(counted - found)



_BUILT_BY_HAND = b"""from flax import optim


def restored(params, step):
  opt_def = optim.GradientDescent(learning_rate=0.1)
  optimizer = optim.Optimizer(
      opt_def,
      state=optim.OptimizerState(step=step, param_states=params),
      target=params)
  return optimizer.apply_gradient(params)
"""


def test_migrate_builds_a_train_state_for_an_optimizer_built_by_hand():
  # t5x's tests: an Optimizer from a definition, a state and a target is a
  # TrainState of the definition's transform holding that state.
  new, plan = migrate.migrate_source(_BUILT_BY_HAND, 'x.py')
  assert not plan.leftovers, plan.leftovers
  assert (b'optimizer = flax_optim_rules.replace_optimizer_state('
          b'train_state.TrainState.create(apply_fn=None, params=params, '
          b'tx=opt_def), flax_optim_rules.OptimizerState(step=step, '
          b'param_states=params))') in new, new


def test_migrate_keeps_a_flow_with_an_optimizer_built_from_an_unknown_def():
  # The definition comes from callers not scanned: no transform to hold.
  source = _BUILT_BY_HAND.replace(
      b'def restored(params, step):\n'
      b'  opt_def = optim.GradientDescent(learning_rate=0.1)\n',
      b'def restored(opt_def, params, step):\n')
  new, plan = migrate.migrate_source(source, 'x.py')
  assert new == source
  reasons = {(l.line, l.construct): l.reason for l in plan.leftovers}
  assert 'definition is not provably' in reasons[5, 'reference']


def test_migrate_renames_a_module_level_alias_of_the_optimizer_class():
  # t5x's models.py: ``Optimizer = optim.Optimizer``, then annotations and
  # isinstance checks through the alias; the alias's own name stays.
  source = b"""from flax import optim

Optimizer = optim.Optimizer


def train(params, grads) -> Optimizer:
  optimizer = optim.GradientDescent(learning_rate=0.1).create(params)
  assert isinstance(optimizer, Optimizer)
  return optimizer.apply_gradient(grads)
"""
  new, plan = migrate.migrate_source(source, 'x.py')
  assert not plan.leftovers, plan.leftovers
  assert b'Optimizer = train_state.TrainState\n' in new
  assert b'def train(params, grads) -> train_state.TrainState:' in new
  assert b'isinstance(optimizer, train_state.TrainState)' in new
  assert b'optim.' not in new


# A small research example's module (ladax's examples): a definition from a
# module-level setting, created in a function, a jitted step that reads
# ``.target`` and calls ``.apply_gradient`` without hyper-parameters, and
# the loop that uses both in the same module. (Without that loop, the
# optimizer leaves the module and migrate leaves it all, reported.)
_SCRIPT = b'''import jax
from flax import optim

LEARNING_RATE = 0.05


def create_optimizer(params):
    optimizer_def = optim.Momentum(learning_rate=LEARNING_RATE)
    optimizer = optimizer_def.create(params)
    return optimizer


@jax.jit
def train_step(optimizer, batch):
    def loss_fn(params):
        return ((batch['x'] @ params['w'] - batch['y']) ** 2).mean()
    loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
    optimizer = optimizer.apply_gradient(grad)
    return optimizer, {'loss': loss}


def train(params, batches):
    optimizer = create_optimizer(params)
    for batch in batches:
        optimizer, _ = train_step(optimizer, batch)
    return optimizer.target
'''


def _load(source: bytes, tmp_path, name):
  """``source`` imported as module ``name`` from a file under tmp_path."""
  path = tmp_path / f'{name}.py'
  path.write_bytes(source)
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _train(source: bytes, tmp_path, name):
  module = _load(source, tmp_path, name)
  rng = np.random.RandomState(0)
  params = {'w': rng.rand(3, 2).astype(np.float32)}
  optimizer = module.create_optimizer(params)
  trained = []
  for _ in range(5):
    batch = {'x': rng.rand(4, 3).astype(np.float32),
             'y': rng.rand(4, 2).astype(np.float32)}
    optimizer, metrics = module.train_step(optimizer, batch)
    params = getattr(optimizer, 'params', None) or optimizer.target
    trained.append((np.asarray(params['w']), np.asarray(metrics['loss'])))
  return trained


def _assert_trains_like_the_original(source, new, tmp_path, name):
  old_steps = _train(source, tmp_path, name + '_original')
  new_steps = _train(new, tmp_path, name + '_migrated')
  for (old_w, old_loss), (new_w, new_loss) in zip(old_steps, new_steps,
                                                  strict=True):
    assert old_w.tobytes() == new_w.tobytes()
    assert old_loss.tobytes() == new_loss.tobytes()
  assert old_steps[-1][0].tobytes() != old_steps[0][0].tobytes()


def test_a_small_example_migrates_completely_and_trains_bit_identically(
    tmp_path):
  new, plan = migrate.migrate_source(_SCRIPT, 'example.py')
  assert not plan.leftovers, plan.leftovers
  assert b'flax.optim' not in new and b'from flax import optim' not in new
  _assert_trains_like_the_original(_SCRIPT, new, tmp_path, 'example')


# A jitted step and its loop, after a module's create_optimizer(params).
_TRAIN_LOOP = b'''

@jax.jit
def train_step(optimizer, batch):
  def loss_fn(params):
    return ((batch['x'] @ params['w'] - batch['y']) ** 2).mean()
  loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad), {'loss': loss}


def train(params, batches):
  optimizer = create_optimizer(params)
  for batch in batches:
    optimizer, _ = train_step(optimizer, batch)
  return optimizer.target
'''

# scenic's get_optimizer: a Momentum whose weight decay comes from the
# config. The stock spelling (optax.sgd) would have to know whether it is
# zero (flax.optim left a zero decay term out); flax_optim_rules.momentum
# decides that on the value when the definition is built, as flax.optim did.
_CONFIG_DECAY = b'''import jax
from flax import optim

CONFIG = {'weight_decay': WEIGHT_DECAY}


def get_optimizer(config):
  return optim.Momentum(learning_rate=0.1, beta=0.9,
                        weight_decay=config.get('weight_decay', 0.0))


def create_optimizer(params):
  return get_optimizer(CONFIG).create(params)
''' + _TRAIN_LOOP


def test_a_weight_decay_from_the_config_migrates_to_the_exact_rule(tmp_path):
  for decay in (b'0.0', b'1e-3'):
    source = _CONFIG_DECAY.replace(b'WEIGHT_DECAY', decay)
    new, plan = migrate.migrate_source(source, 'optimizers.py')
    assert not plan.leftovers, plan.leftovers
    assert b'flax_optim_rules.momentum(learning_rate=0.1, beta=0.9,' in new
    assert b'from flax import optim' not in new
    name = 'decay_' + decay.decode().replace('.', '_').replace('-', '_')
    _assert_trains_like_the_original(source, new, tmp_path, name)


def test_a_literal_weight_decay_keeps_the_stock_spelling():
  source = _CONFIG_DECAY.replace(
      b"config.get('weight_decay', 0.0)", b'1e-3')
  new, plan = migrate.migrate_source(source, 'optimizers.py')
  assert not plan.leftovers, plan.leftovers
  assert b'optax.add_decayed_weights(0.001)' in new
  assert b'flax_optim_rules' not in new


# scenic's get_backbone_multioptimizer and nested-transformer's param
# groups: ModelParamTraversals bound to names, a MultiOptimizer of
# (traversal, definition) pairs, created and stepped (a per-step rate) in
# the same program.
_MULTI = b'''import jax
from flax import optim


def make_multi_optimizer(config):
  backbone = optim.ModelParamTraversal(lambda path, _: 'backbone' in path)
  head = optim.ModelParamTraversal(
      lambda path, param: 'backbone' not in path and param.ndim > 1)
  head_def = optim.Momentum(config['lr'], beta=0.9,
                            weight_decay=config['decay'])
  return optim.MultiOptimizer(
      (backbone, optim.Adam(learning_rate=0.01, weight_decay=1e-3)),
      (head, head_def))


@jax.jit
def train_step(optimizer, batch, lr):
  def loss_fn(params):
    hidden = batch['x'] @ params['backbone']['kernel']
    return ((hidden @ params['head']['kernel'] + params['head']['bias'] -
             batch['y']) ** 2).mean()
  grad = jax.grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad, learning_rate=lr)


def train(params, batches):
  optimizer = make_multi_optimizer({'lr': 0.1, 'decay': 0.0}).create(params)
  for step, batch in enumerate(batches):
    optimizer = train_step(optimizer, batch, 0.1 / (step + 1))
  return optimizer.target
'''


def _train_multi(source: bytes, tmp_path, name):
  module = _load(source, tmp_path, name)
  rng = np.random.RandomState(3)
  params = {'backbone': {'kernel': rng.randn(3, 4).astype(np.float32)},
            'head': {'kernel': rng.randn(4, 2).astype(np.float32),
                     'bias': np.zeros(2, np.float32)}}
  batches = [{'x': rng.randn(8, 3).astype(np.float32),
              'y': rng.randn(8, 2).astype(np.float32)} for _ in range(5)]
  return module.train(params, batches)


def _assert_same_multi_params(old, migrated):
  for part, leaf in (('backbone', 'kernel'), ('head', 'kernel'),
                     ('head', 'bias')):
    assert np.asarray(old[part][leaf]).tobytes() == np.asarray(
        migrated[part][leaf]).tobytes(), (part, leaf)


def test_a_multi_optimizer_of_param_traversals_migrates_and_trains_alike(
    tmp_path):
  new, plan = migrate.migrate_source(_MULTI, 'multi.py')
  assert not plan.leftovers, plan.leftovers
  assert b'flax.optim' not in new and b'from flax import optim' not in new
  assert b"backbone = flax_optim_rules.ModelParamTraversal(lambda path" in new
  assert b'return flax_optim_rules.multi_optimizer(\n' in new
  old = _train_multi(_MULTI, tmp_path, 'multi_original')
  migrated = _train_multi(new, tmp_path, 'multi_migrated')
  _assert_same_multi_params(old, migrated)
  # The bias no traversal selects kept its value (flax.optim's 'frozen').
  assert not np.asarray(migrated['head']['bias']).any()


def _reasons(plan):
  reasons: dict = {}
  for left in plan.leftovers:
    key = left.line, left.construct
    reasons[key] = reasons.get(key, '') + left.reason + '\n'
  return reasons


def test_a_traversal_used_for_more_than_a_pair_keeps_the_flow():
  # The traversal also walks a tree: the rules' traversal cannot.
  source = _MULTI.replace(
      b'  return optim.MultiOptimizer(\n',
      b"  assert list(backbone.iterate({'backbone': {'k': 1}})) == [1]\n"
      b'  return optim.MultiOptimizer(\n')
  new, plan = migrate.migrate_source(source, 'multi.py')
  assert new == source
  reasons = _reasons(plan)
  assert 'not only the first element of a MultiOptimizer pair' in reasons[
      6, 'traversal']
  assert 'another link of this optimizer flow' in reasons[13, 'algorithm']


def test_a_pair_that_is_not_a_literal_tuple_keeps_the_flow():
  source = _MULTI.replace(
      b'  return optim.MultiOptimizer(\n'
      b'      (backbone, optim.Adam(learning_rate=0.01, weight_decay=1e-3)),\n'
      b'      (head, head_def))\n',
      b'  pairs = [(backbone, optim.Adam(learning_rate=0.01)),\n'
      b'           (head, head_def)]\n'
      b'  return optim.MultiOptimizer(*pairs)\n')
  new, plan = migrate.migrate_source(source, 'multi.py')
  assert new == source
  reasons = _reasons(plan)
  assert 'argument 1 is not a literal (traversal, definition) pair' in (
      reasons[13, 'multi_optimizer'])
  assert 'the traversal reaches `(backbone, optim.Adam(' in reasons[
      6, 'traversal']
  assert 'another link of this optimizer flow' in reasons[27, 'create']


_T5X_STATE = b'''from flax import optim


def make(params, restored):
  opt = optim.Adam(0.1).create(params)
  from_checkpoint = opt.restore_state(restored)
  stepped = opt.replace(state=opt.state.replace(step=3))
  return opt.state_dict(), from_checkpoint, stepped
'''


def test_t5x_state_dict_restore_state_and_a_moved_step_keep_the_layout():
  # t5x's train_state.py keeps the Optimizer in its own struct and hands
  # out flax.optim's checkpoint layout: flax_optim_rules' view keeps it.
  new, plan = migrate.migrate_source(_T5X_STATE, 'train_state.py')
  assert not plan.leftovers, plan.leftovers
  for expected in (
      b'from_checkpoint = flax_optim_rules.restore_state(opt, restored)',
      b'stepped = flax_optim_rules.replace_optimizer_state(opt, '
      b'flax_optim_rules.optimizer_state(opt).replace(step=3))',
      b'return flax_optim_rules.state_dict(opt), from_checkpoint, stepped'):
    assert expected in new, (expected, new)


def test_t5x_optimizer_def_class_name_stays_with_why():
  # t5x names the optimizer by its definition's class: a TrainState holds
  # an Optax transform, so the flow (the layout links too) stays.
  source = _T5X_STATE.replace(
      b'  from_checkpoint', b'  name = opt.optimizer_def.__class__.__name__'
      b'\n  from_checkpoint')
  new, plan = migrate.migrate_source(source, 'train_state.py')
  assert new == source
  reasons = _reasons(plan)
  assert 'no OptimizerDef class to name' in reasons[6, 'optimizer_use']
  assert 'another link of this optimizer flow' in reasons[7, 'optimizer_use']
  assert 'another link of this optimizer flow' in reasons[5, 'create']


def test_a_created_optimizer_whose_name_is_rebound_keeps_the_flow():
  # ``opt = load(opt, d)``: the name holds an unproven value too, so its
  # reads are not rewritten, and neither may the .create be (it would hand
  # them a TrainState).
  source = b'''from flax import optim
from mylib import load


def make(params, restored):
  opt = optim.Adam(0.1).create(params)
  opt = load(opt, restored)
  return opt.target
'''
  new, plan = migrate.migrate_source(source, 'restore.py')
  assert new == source
  assert 'also holds values not provably' in _reasons(plan)[6, 'create']


# scenic's DETR trainer: a rate per MultiOptimizer part and step, from the
# definition's own hyper_params unpacked in the train step.
_PER_PART_RATES = b'''import jax
from flax import optim


def make_optimizer_def():
  backbone = optim.ModelParamTraversal(lambda path, _: 'backbone' in path)
  head = optim.ModelParamTraversal(lambda path, _: 'backbone' not in path)
  return optim.MultiOptimizer((backbone, optim.Momentum(0.1, beta=0.9)),
                              (head, optim.Adam(0.01, weight_decay=1e-4)))


@jax.jit
def train_step(optimizer, batch, step):
  def loss_fn(params):
    hidden = batch['x'] @ params['backbone']['kernel']
    return ((hidden @ params['head']['kernel'] + params['head']['bias'] -
             batch['y']) ** 2).mean()
  grad = jax.grad(loss_fn)(optimizer.target)
  (backbone_hps,
   head_hps) = optimizer.optimizer_def.hyper_params
  return optimizer.apply_gradient(grad, hyper_params=[
      backbone_hps.replace(learning_rate=0.01 / (step + 1)),
      head_hps.replace(learning_rate=0.1 / (step + 1))])


def train(params, batches):
  optimizer = make_optimizer_def().create(params)
  for step, batch in enumerate(batches):
    optimizer = train_step(optimizer, batch, step)
  return optimizer.target
'''


def test_per_part_rates_from_the_definitions_hyper_params_train_alike(
    tmp_path):
  new, plan = migrate.migrate_source(_PER_PART_RATES, 'detr.py')
  assert not plan.leftovers, plan.leftovers
  assert b'flax.optim' not in new and b'from flax import optim' not in new
  assert b'.optimizer_def' not in new and b'hyper_params' not in new
  assert b'flax_optim_rules.set_learning_rates(optimizer.opt_state, [' in new
  old = _train_multi(_PER_PART_RATES, tmp_path, 'rates_original')
  migrated = _train_multi(new, tmp_path, 'rates_migrated')
  _assert_same_multi_params(old, migrated)


# l2p's continual-learning step: the same rates per part, read as
# ``hparams[0]``, ``hparams[1]`` of the list rather than unpacked.
_PER_PART_RATES_INDEXED = _PER_PART_RATES.replace(
    b"""  (backbone_hps,
   head_hps) = optimizer.optimizer_def.hyper_params""",
    b"  hparams = optimizer.optimizer_def.hyper_params").replace(
        b"backbone_hps.replace(", b"hparams[0].replace(").replace(
            b"head_hps.replace(", b"hparams[1].replace(")


def test_per_part_rates_read_by_index_train_alike(tmp_path):
  assert b'hparams[1].replace(' in _PER_PART_RATES_INDEXED
  new, plan = migrate.migrate_source(_PER_PART_RATES_INDEXED, 'l2p.py')
  assert not plan.leftovers, plan.leftovers
  assert b'hparams' not in new and b'hyper_params' not in new
  assert b'flax_optim_rules.set_learning_rates(optimizer.opt_state, [' in new
  old = _train_multi(_PER_PART_RATES_INDEXED, tmp_path, 'indexed_original')
  migrated = _train_multi(new, tmp_path, 'indexed_migrated')
  _assert_same_multi_params(old, migrated)


def test_traverse_utils_param_traversal_in_a_multi_optimizer_trains_alike(
    tmp_path):
  # uncertainty-baselines' active learning: flax.optim re-exported
  # flax.traverse_util's ModelParamTraversal; the same class in the pairs.
  source = _PER_PART_RATES.replace(
      b'from flax import optim\n',
      b'from flax import optim\nfrom flax import traverse_util\n').replace(
          b'optim.ModelParamTraversal(', b'traverse_util.ModelParamTraversal(')
  assert source.count(b'traverse_util.ModelParamTraversal(') == 2
  new, plan = migrate.migrate_source(source, 'active.py')
  assert not plan.leftovers, plan.leftovers
  assert new.count(b'flax_optim_rules.ModelParamTraversal(') == 2
  old = _train_multi(source, tmp_path, 'traverse_util_original')
  migrated = _train_multi(new, tmp_path, 'traverse_util_migrated')
  _assert_same_multi_params(old, migrated)


def test_hyper_params_read_by_index_otherwise_keep_the_flow():
  changed = {
      'out of order': (b'hparams[0].replace(', b'hparams[1].replace(',
                       b'hparams[1].replace(learning_rate=0.1',
                       b'hparams[0].replace(learning_rate=0.1'),
      'read for more': (
          b'  return optimizer.apply_gradient(',
          b'  print(hparams)\n  return optimizer.apply_gradient('),
      'a negative index': (b'hparams[1].replace(', b'hparams[-1].replace('),
  }
  for what, swaps in changed.items():
    source = _PER_PART_RATES_INDEXED
    for old, new_text in zip(swaps[::2], swaps[1::2]):
      source = source.replace(old, new_text, 1)
    assert source != _PER_PART_RATES_INDEXED, what
    new, plan = migrate.migrate_source(source, 'l2p.py')
    assert new == source, what
    assert any('maps only as a list of the names unpacked' in left.reason
               for left in plan.leftovers), (what, plan.leftovers)


def test_hyper_params_read_for_more_than_a_rate_keep_the_flow():
  source = _PER_PART_RATES.replace(
      b'  return optimizer.apply_gradient(grad, hyper_params=[\n',
      b'  jax.debug.print("{}", head_hps.beta1)\n'
      b'  return optimizer.apply_gradient(grad, hyper_params=[\n')
  new, plan = migrate.migrate_source(source, 'detr.py')
  assert new == source
  reasons = _reasons(plan)
  assert 'no hyper_params to read or override' in reasons[
      20, 'optimizer_use']
  assert 'maps only as a list of the names unpacked' in reasons[
      22, 'optimizer_use']
  assert 'another link of this optimizer flow' in reasons[28, 'create']


# jax3d's MobileNeRF scripts: the definition's hyper-parameters in a dict
# literal passed with ``**`` (``Adam(**adam_kwargs)``) and the rate set per
# step. flax_optim_rules' functions take flax.optim's keywords, so a ``**``
# mapping passes on as it is; a rate injected per step starts at 0.0 where
# nothing sets it: ``learning_rate=0.0`` where the mapping's keys are known,
# else ``**{'learning_rate': 0.0, **mapping}`` (the mapping's own rate wins).
_SPREAD = b'''import jax
from flax import optim

ADAM_KWARGS = {'beta1': 0.8, 'beta2': 0.99, 'eps': 1e-6}


def create_optimizer(params):
  return optim.Adam(**ADAM_KWARGS).create(params)
''' + _TRAIN_LOOP.replace(
    b'apply_gradient(grad)', b'apply_gradient(grad, learning_rate=0.05)')


def test_a_dict_literal_passed_with_stars_goes_on_to_the_rule(tmp_path):
  new, plan = migrate.migrate_source(_SPREAD, 'stage.py')
  assert not plan.leftovers, plan.leftovers
  assert (b'flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)('
          b'learning_rate=0.0, **ADAM_KWARGS)') in new
  _assert_trains_like_the_original(_SPREAD, new, tmp_path, 'spread')


def test_any_mapping_passed_with_stars_goes_on_where_no_rate_is_injected(
    tmp_path):
  # Momentum's stock spelling (optax.sgd) renames the keywords, so the
  # rules' own function is written, with the mapping as it is.
  source = _SPREAD.replace(
      b"ADAM_KWARGS = {'beta1': 0.8, 'beta2': 0.99, 'eps': 1e-6}",
      b"ADAM_KWARGS = dict(beta=0.8, nesterov=True)").replace(
          b'optim.Adam(**ADAM_KWARGS)',
          b'optim.Momentum(0.05, **ADAM_KWARGS)').replace(
              b', learning_rate=0.05)', b')')
  new, plan = migrate.migrate_source(source, 'stage.py')
  assert not plan.leftovers, plan.leftovers
  assert (b'flax_optim_rules.momentum(learning_rate=0.05, **ADAM_KWARGS)'
          in new)
  _assert_trains_like_the_original(source, new, tmp_path, 'spread_any')


def test_a_mapping_that_may_set_the_injected_rate_starts_it(tmp_path):
  # Whatever the mapping holds, its rate (if any) starts the injected one,
  # as it set flax.optim's definition; each step then sets its own.
  changed = {
      'built by a call': (b"{'beta1': 0.8, 'beta2': 0.99, 'eps': 1e-6}",
                          b"dict(beta1=0.8)"),
      'changed later': (b"'eps': 1e-6}\n",
                        b"'eps': 1e-6}\nADAM_KWARGS['eps'] = 1e-7\n"),
      'setting the rate': (b"'eps': 1e-6}", b"'learning_rate': 0.1}"),
  }
  for what, (old, new_text) in changed.items():
    source = _SPREAD.replace(old, new_text)
    new, plan = migrate.migrate_source(source, 'stage.py')
    assert not plan.leftovers, (what, plan.leftovers)
    assert (b"flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)("
            b"**{'learning_rate': 0.0, **ADAM_KWARGS})") in new, what
    _assert_trains_like_the_original(source, new, tmp_path,
                                     'spread_' + what.replace(' ', '_'))


def test_two_mappings_that_may_each_set_the_injected_rate_keep_the_flow():
  source = _SPREAD.replace(
      b'optim.Adam(**ADAM_KWARGS)',
      b'optim.Adam(**ADAM_KWARGS, **dict(eps=1e-7))').replace(
          b"'eps': 1e-6}", b"}\nADAM_KWARGS.update(eps=1e-7)")
  new, plan = migrate.migrate_source(source, 'stage.py')
  assert new == source
  assert any('may each set learning_rate' in left.reason
             for left in plan.leftovers if left.construct == 'algorithm'), (
                 plan.leftovers)


def test_the_stock_tier_leaves_a_mapping_passed_with_stars():
  new, plan = migrate.migrate_source(_SPREAD, 'stage.py', 'stock')
  assert new == _SPREAD
  assert any("cannot be mapped to a stock alias's keywords" in left.reason
             for left in plan.leftovers), plan.leftovers


def test_create_with_its_target_by_keyword_is_rewritten(tmp_path):
  # jax3d's train_utils_test: ``opt_def.create(target={...})``.
  source = _SCRIPT.replace(b'optimizer_def.create(params)',
                           b'optimizer_def.create(target=params)')
  new, plan = migrate.migrate_source(source, 'example.py')
  assert not plan.leftovers, plan.leftovers
  assert b'TrainState.create(apply_fn=None, params=params, tx=' in new
  _assert_trains_like_the_original(source, new, tmp_path, 'target_keyword')
  for focused in (b'optimizer_def.create(params, focus)',
                  b'optimizer_def.create(target=params, focus=focus)'):
    _, plan = migrate.migrate_source(
        source.replace(b'optimizer_def.create(target=params)', focused),
        'example.py')
    assert any('focus=...) selects parameters' in left.reason
               for left in plan.leftovers), (focused, plan.leftovers)


def test_the_legacy_api_on_a_field_that_now_holds_a_train_state_is_broken():
  # What migrate left before a field another class declares otherwise held
  # its flow: the holder and its maker migrated, a reader of the field not.
  old = {
      'state.py': 'from flax import optim\nclass Holder:\n'
                  '  optimizer: optim.Optimizer\n',
      'use.py': 'def weights(holder):\n  return holder.optimizer.target\n',
      # Another flow keeps flax.optim: only this check sees the read.
      'other.py': 'from flax import optim\nd = optim.Adam(0.1)\n',
  }
  new = dict(old, **{'state.py': 'from flax.training import train_state\n'
                                 'class Holder:\n'
                                 '  optimizer: train_state.TrainState\n'})
  assert _broken(old, new) == [('use.py', 2)]
  new['use.py'] = old['use.py'].replace('.target', '.params')
  assert not _broken(old, new)


def test_a_pickled_optimizer_holds_its_flow_with_the_reason(tmp_path):
  # jax3d's MobileNeRF scripts pickle the optimizer to resume from. A
  # TrainState does not pickle (its tx holds functions): a rewrite would
  # fail at the checkpoint, so the flow stays, with why and what to do.
  source = _SCRIPT.replace(b'import jax\n', b'import pickle\n\nimport jax\n')
  source += (b'\n\ndef save(optimizer, params, f):\n'
             b'  pickle.dump(params, f)\n'
             b'  return pickle.dumps(optimizer)\n'
             b'\n\nsave(create_optimizer({}), {}, None)\n')
  dumps = source.splitlines().index(b'  return pickle.dumps(optimizer)') + 1
  findings = [(f.line, f.rule, f.replacement)
              for f in scan.scan_source(source, 'stage.py')
              if f.construct in ('checkpoint', 'optimizer_escape')]
  assert [(line, rule) for line, rule, _ in findings] == [
      (dumps, 'FOC114'), (dumps, 'FOC119')]
  assert 'does not pickle' in findings[0][2]
  new, plan = migrate.migrate_source(source, 'stage.py')
  assert new == source
  escapes = [left for left in plan.leftovers
             if left.construct == 'optimizer_escape']
  assert [left.line for left in escapes] == [dumps]
  assert '`pickle.dumps(...)`: a TrainState does not pickle' in (
      escapes[0].reason)
  assert 'flax_optim_rules.legacy_tree(state)' in escapes[0].reason
  assert not plan.notes, plan.notes


def test_an_optimizer_in_a_pickled_tuple_holds_its_flow(tmp_path):
  source = _SCRIPT.replace(b'import jax\n',
                           b'import cloudpickle\n\nimport jax\n')
  source += (b'\n\ndef save(optimizer, f):\n'
             b'  cloudpickle.dump((optimizer, 0), f)\n'
             b'\n\nsave(create_optimizer({}), None)\n')
  new, plan = migrate.migrate_source(source, 'stage.py')
  assert new == source
  assert any(left.construct == 'optimizer_escape' and
             '`cloudpickle.dump(...)`: a TrainState does not pickle' in
             left.reason for left in plan.leftovers), plan.leftovers


# uncertainty-baselines' JFT scripts (and other vision_transformer-era
# code): the rule chosen by its class name from the config,
# ``getattr(flax.optim, name)(**config.optim)``, its rate set per step.
# flax_optim_rules.rule_named(name) is that rule's function, which takes
# the class's keywords: the same rule whichever the name.
_BY_NAME = b'''import flax
import jax

CONFIG = {'optim_name': NAME, 'optim': HYPER_PARAMS}


def create_optimizer(params):
  opt_def = getattr(flax.optim, CONFIG['optim_name'])(
      **CONFIG.get('optim', {}))
  return opt_def.create(params)
''' + _TRAIN_LOOP.replace(
    b'apply_gradient(grad)', b'apply_gradient(grad, learning_rate=0.05)')

_NAMED_RULES = {
    b"'Momentum'": b"{'beta': 0.8, 'nesterov': True}",
    b"'Adam'": b"{'beta1': 0.8, 'weight_decay': 1e-3}",
    b"'LARS'": b'{}',
    b"'Adafactor'": b"{'learning_rate': 0.1, 'min_dim_size_to_factor': 1}",
}


def test_a_rule_chosen_by_name_is_found_and_migrates(tmp_path):
  for name, hyper_params in _NAMED_RULES.items():
    source = _BY_NAME.replace(b'NAME', name).replace(b'HYPER_PARAMS',
                                                     hyper_params)
    constructs = {(f.line, f.construct)
                  for f in scan.scan_source(source, 'train.py')}
    assert {(8, 'optimizer_def'), (10, 'create'),
            (18, 'apply_gradient_overrides')} <= constructs, constructs
    new, plan = migrate.migrate_source(source, 'train.py')
    assert not plan.leftovers, (name, plan.leftovers)
    assert (b'flax_optim_rules.inject_learning_rate(flax_optim_rules.'
            b"rule_named(CONFIG['optim_name']))(**{'learning_rate': 0.0, "
            b"**CONFIG.get('optim', {})})") in new, new.decode()
    assert b'flax.optim' not in new and b'legacy_optim' not in new
    _assert_trains_like_the_original(source, new, tmp_path,
                                     'by_name_' + name.decode().strip("'"))


def test_a_rule_chosen_by_name_without_a_per_step_rate(tmp_path):
  source = _BY_NAME.replace(b'NAME', b"'Momentum'").replace(
      b'HYPER_PARAMS', b"{'learning_rate': 0.1, 'beta': 0.8}").replace(
          b', learning_rate=0.05)', b')')
  new, plan = migrate.migrate_source(source, 'train.py')
  assert not plan.leftovers, plan.leftovers
  assert (b"flax_optim_rules.rule_named(CONFIG['optim_name'])("
          b"**CONFIG.get('optim', {}))") in new
  _assert_trains_like_the_original(source, new, tmp_path, 'by_name_fixed')


def test_a_rule_chosen_by_name_that_cannot_be_mapped_keeps_its_flow():
  source = _BY_NAME.replace(b'NAME', b"'Adam'").replace(b'HYPER_PARAMS',
                                                        b'{}')
  cases = {
      'stock': (source, 'stock', 'no stock alias can be named'),
      'by position': (source.replace(
          b"**CONFIG.get('optim', {}))", b'0.1, 0.9)'), 'exact',
                      'mapped only by keyword'),
  }
  for what, (changed, tier, reason) in cases.items():
    new, plan = migrate.migrate_source(changed, 'train.py', tier)
    assert new == changed, what
    assert any(reason in left.reason for left in plan.leftovers
               if left.construct == 'algorithm'), (what, plan.leftovers)


def test_getattr_with_a_default_is_no_rule_chosen_by_name():
  # getattr(flax.optim, name, None) may give anything: not a definition.
  source = _BY_NAME.replace(b'NAME', b"'Adam'").replace(
      b'HYPER_PARAMS', b'{}').replace(
          b"CONFIG['optim_name'])", b"CONFIG['optim_name'], None)")
  constructs = {f.construct for f in scan.scan_source(source, 'train.py')}
  assert 'optimizer_def' not in constructs and 'create' not in constructs
