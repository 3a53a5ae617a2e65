"""Deprecation warnings: category, location, frequency, content, strict mode.

setup.cfg ignores LegacyOptimDeprecationWarning suite-wide; these tests turn
it back on explicitly (``recorded()``).
"""

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import optax
import pytest

from compat.codemod import migrate
from compat.codemod import scan
import legacy_optim as lo
from legacy_optim import catalogue
from legacy_optim import deprecation

THIS_FILE = os.path.abspath(__file__)
GUIDE = os.path.join(os.path.dirname(os.path.dirname(THIS_FILE)),
                     'migration_guide.md')
with open(catalogue.DEVIATION_FILE, encoding='utf-8') as _f:
  DEVIATIONS = json.load(_f)['results']


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
  monkeypatch.delenv(deprecation.STRICT_ENV_VAR, raising=False)
  deprecation.reset()
  yield
  deprecation.reset()


@contextlib.contextmanager
def recorded():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    yield caught


def legacy(caught):
  return [w for w in caught
          if issubclass(w.category, lo.LegacyOptimDeprecationWarning)]


def here():
  """The caller's line number (call it on the same line as the legacy use)."""
  return sys._getframe(1).f_lineno


def params():
  return {'w': jnp.ones((2, 3)), 'b': jnp.zeros((3,))}


def quiet(fn, *args, **kwargs):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    return fn(*args, **kwargs)


def test_category_is_an_exported_future_warning():
  # FutureWarning: shown by Python's default filters (DeprecationWarning is
  # hidden outside __main__); the fresh-interpreter tests below check it.
  assert issubclass(lo.LegacyOptimDeprecationWarning, FutureWarning)
  assert not issubclass(lo.LegacyOptimDeprecationWarning, DeprecationWarning)
  assert lo.LegacyOptimDeprecationWarning is (
      deprecation.LegacyOptimDeprecationWarning)
  assert 'usage_report' in lo.__all__


# A program as users write them: the flax.optim calls in its own module, one
# more in an installed third-party package; run in a fresh interpreter with
# Python's default warning filters (no -W, no pytest).
_PROGRAM = {
    'train.py': """
        import sys
        sys.path.insert(0, 'env/site-packages')
        import model
        import vendored
        model.make()
        vendored.make()
        """,
    'model.py': """
        from flax import optim

        def make():
          return optim.Adam(learning_rate=0.1)
        """,
    'env/site-packages/vendored/__init__.py': """
        from flax import optim

        def make():
          return optim.Momentum(learning_rate=0.1)
        """,
}


def _run_program(tmp_path, *flags, **env):
  for name, text in _PROGRAM.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(textwrap.dedent(text).lstrip())
  root = os.path.dirname(os.path.dirname(THIS_FILE))
  env = {**{k: v for k, v in os.environ.items()
            if k not in ('PYTHONWARNINGS', deprecation.STRICT_ENV_VAR)},
         'PYTHONPATH': root, 'JAX_PLATFORMS': 'cpu', **env}
  result = subprocess.run([sys.executable, *flags, 'train.py'], cwd=tmp_path,
                          env=env, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stderr
  return result.stderr


def test_warnings_in_an_imported_module_are_shown_by_default(tmp_path):
  stderr = _run_program(tmp_path)
  model = str(tmp_path / 'model.py')
  assert f'{model}:4: LegacyOptimDeprecationWarning: flax.optim.Adam' in (
      stderr), stderr
  # The third party's call is shown at the user's line that calls into it,
  # naming the package and its own line.
  train = str(tmp_path / 'train.py')
  vendored = tmp_path / 'env' / 'site-packages' / 'vendored' / '__init__.py'
  assert f'{train}:6: LegacyOptimDeprecationWarning: flax.optim.Momentum' in (
      stderr), stderr
  assert f"installed package 'vendored' ({vendored}:4)" in stderr, stderr


@pytest.mark.parametrize('how', ['-W', 'PYTHONWARNINGS'])
def test_the_warning_option_naming_the_category_silences_them(tmp_path, how):
  # Every warning shown but the shim's: Python drops the option naming our
  # category (it reads -W before site-packages is importable), so without
  # legacy_optim applying it the first option would show them all.
  options = ['always', 'ignore::legacy_optim.LegacyOptimDeprecationWarning']
  stderr = (_run_program(tmp_path, '-W', options[0], '-W', options[1])
            if how == '-W' else
            _run_program(tmp_path, PYTHONWARNINGS=','.join(options)))
  assert 'LegacyOptimDeprecationWarning' not in stderr, stderr


# Each entry point, called on the marked line of this file.
def _use_def():
  return lo.Adam(0.1), here()


def _use_create():
  opt_def = quiet(lo.Adam, 0.1)
  return opt_def.create(params()), here()


def _use_overrides():
  opt = quiet(quiet(lo.Adam, 0.1).create, params())
  grads = jax.tree_util.tree_map(jnp.ones_like, opt.target)
  return opt.apply_gradient(grads, learning_rate=0.2), here()


def _use_compute_gradient():
  opt = quiet(quiet(lo.GradientDescent, 0.1).create, params())
  loss = lambda p: jnp.sum(p['w'])
  return opt.compute_gradient(loss), here()


def _use_optimize():
  opt = quiet(quiet(lo.GradientDescent, 0.1).create, params())
  loss = lambda p: jnp.sum(p['w'])
  return opt.optimize(loss), here()


def _use_replicate():
  opt = quiet(quiet(lo.GradientDescent, 0.1).create, params())
  return opt.replicate(), here()


def _use_traversal():
  return lo.ModelParamTraversal(lambda path, _: 'w' in path), here()


def _use_multi():
  kernels = quiet(lo.ModelParamTraversal, lambda path, _: 'w' in path)
  sub = quiet(lo.GradientDescent, 0.1)
  return lo.MultiOptimizer((kernels, sub)), here()


def _use_dynamic_scale():
  scale = lo.DynamicScale()
  return scale.value_and_grad(lambda p: jnp.sum(p['w']))(params()), here()


ENTRY_POINTS = {
    'OptimizerDef': (_use_def, 'flax.optim.Adam is deprecated'),
    'create': (_use_create, 'Adam.create(target) is deprecated'),
    'apply_gradient_overrides': (
        _use_overrides, 'apply_gradient(grads, learning_rate=0.2)'),
    'compute_gradient': (_use_compute_gradient, 'jax.value_and_grad'),
    'optimize': (_use_optimize, 'state.apply_gradients(grads=grads)'),
    'replicate': (_use_replicate, 'jax.lax.pmean'),
    'Traversal': (_use_traversal, 'flax_optim_rules.ModelParamTraversal('),
    'MultiOptimizer': (_use_multi, 'flax_optim_rules.multi_optimizer('),
    'DynamicScale': (_use_dynamic_scale,
                     'flax.training.dynamic_scale.DynamicScale('),
}


@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
def test_each_entry_point_warns_at_the_users_line(entry):
  use, text = ENTRY_POINTS[entry]
  with recorded() as caught:
    _, line = use()
  at_line = [w for w in legacy(caught) if w.lineno == line]
  assert at_line, [(w.filename, w.lineno, str(w.message)[:60])
                   for w in legacy(caught)]
  assert all(os.path.abspath(w.filename) == THIS_FILE for w in at_line)
  assert any(text in str(w.message) for w in at_line), [
      str(w.message) for w in at_line]


def test_warning_inside_jit_points_at_the_traced_line():
  opt = quiet(quiet(lo.Adam, 0.1).create, params())

  @jax.jit
  def step(opt, lr):
    grads = jax.tree_util.tree_map(jnp.ones_like, opt.target)
    return opt.apply_gradient(grads, learning_rate=lr), here()

  with recorded() as caught:
    _, line = step(opt, 0.05)
  [w] = legacy(caught)
  assert (os.path.abspath(w.filename), w.lineno) == (THIS_FILE, int(line))
  # Traced override values are shown as names, not tracer reprs.
  assert 'learning_rate=...' in str(w.message)


def test_library_frames_between_user_and_shim_are_skipped():
  # A function whose module is a library (jax.*) calling the shim: the
  # warning goes to the user line that called the library.
  namespace = {'__name__': 'jax._fake_library', 'lo': lo}
  exec(compile('def build():\n  return lo.Momentum(0.1)\n',
               '/fake/jax/_fake_library.py', 'exec'), namespace)
  with recorded() as caught:
    namespace['build'](); line = here()  # noqa: E702  (one line)
  [w] = legacy(caught)
  assert (os.path.abspath(w.filename), w.lineno) == (THIS_FILE, line)


def test_once_per_call_site_whatever_the_values():
  opt = quiet(quiet(lo.Adam, 0.1).create, params())
  grads = jax.tree_util.tree_map(jnp.ones_like, opt.target)
  with recorded() as caught:
    for i in range(4):
      opt = opt.apply_gradient(grads, learning_rate=0.1 * (i + 1))
    opt = opt.apply_gradient(grads, learning_rate=0.5)  # another call site
  lines = [w.lineno for w in legacy(caught)]
  assert len(lines) == 2 and lines[0] != lines[1], lines
  [use] = [u for u in lo.usage_report()
           if u.feature == 'apply_gradient_overrides' and u.lineno == lines[0]]
  assert use.count == 4


def test_usage_report_lists_feature_subject_location_and_count():
  with recorded():
    for _ in range(3):
      lo.Adagrad(0.1); line_def = here()  # noqa: E702  (one line)
    lo.ModelParamTraversal(lambda *_: True); line_t = here()  # noqa: E702
  report = lo.usage_report()
  assert [(u.feature, u.subject, os.path.abspath(u.filename), u.lineno,
           u.count) for u in report] == [
               ('OptimizerDef', 'Adagrad', THIS_FILE, line_def, 3),
               ('Traversal', 'ModelParamTraversal', THIS_FILE, line_t, 1)]
  table = str(report)
  assert f'test_deprecation.py:{line_def}' in table
  assert table.splitlines()[0].split() == ['count', 'feature', 'subject',
                                           'location']
  deprecation.reset()
  assert str(lo.usage_report()).startswith('No legacy flax.optim use')


def test_usage_is_recorded_even_when_warnings_are_ignored():
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    lo.GradientDescent(0.1)
  assert [u.subject for u in lo.usage_report()] == ['GradientDescent']


def test_strict_mode_raises_every_time(monkeypatch):
  with recorded():
    lo.Adam(0.1)
  monkeypatch.setenv(deprecation.STRICT_ENV_VAR, '1')
  for _ in range(2):
    with pytest.raises(lo.LegacyOptimDeprecationWarning,
                       match='flax.optim.Adam is deprecated'):
      lo.Adam(0.1)
  with pytest.raises(lo.LegacyOptimDeprecationWarning,
                     match='LEGACY_OPTIM_STRICT=1'):
    lo.ModelParamTraversal(lambda *_: True)
  monkeypatch.setenv(deprecation.STRICT_ENV_VAR, '0')
  with recorded() as caught:
    lo.Adam(0.1)
  assert len(legacy(caught)) == 1


# Hand-written expectations: the stock expression each algorithm's warning
# names, with the values passed here, and the deviation-table row it cites.
STOCK = [
    ('GradientDescent', {'learning_rate': 0.3}, 'optax.sgd(0.3)', 'sgd'),
    ('Momentum', {'learning_rate': 0.1, 'beta': 0.8, 'nesterov': True},
     'optax.sgd(0.1, momentum=0.8, nesterov=True)', 'momentum'),
    ('Momentum', {'learning_rate': 0.1, 'weight_decay': 1e-4},
     'optax.chain(optax.add_decayed_weights(0.0001), optax.sgd(0.1, '
     'momentum=0.9, nesterov=False))', 'momentum_wd'),
    ('Adam', {'learning_rate': 1e-3, 'beta2': 0.98},
     'optax.adam(0.001, b1=0.9, b2=0.98, eps=1e-08)', 'adam'),
    ('Adam', {'learning_rate': 1e-3, 'weight_decay': 1e-4},
     'optax.adamw(0.001, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.0001)',
     'adam_wd'),
    ('AdaBelief', {'learning_rate': 1e-3},
     'optax.adabelief(0.001, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16)',
     'adabelief'),
    ('Adadelta', {'learning_rate': 1.0, 'weight_decay': 0.01},
     'optax.chain(optax.scale_by_adadelta(rho=0.9, eps=1e-06), '
     'optax.add_decayed_weights(0.01), optax.scale_by_learning_rate(1.0))',
     'adadelta_wd'),
    ('Adagrad', {'learning_rate': 0.1},
     'optax.adagrad(0.1, initial_accumulator_value=0.0, eps=1e-08)',
     'adagrad'),
    ('RMSProp', {'learning_rate': 1e-3, 'centered': True},
     'optax.rmsprop(0.001, decay=0.9, eps=1e-08, eps_in_sqrt=False, '
     'centered=True)', 'rmsprop_centered'),
    ('LAMB', {'learning_rate': 1e-3, 'weight_decay': 0.01},
     'optax.lamb(0.001, b1=0.9, b2=0.999, eps=1e-06, weight_decay=0.01)',
     'lamb'),
    ('LARS', {'learning_rate': 0.1, 'weight_decay': 5e-4},
     'optax.lars(0.1, weight_decay=0.0005, trust_coefficient=0.001, eps=0, '
     'momentum=0.9, nesterov=False)', 'lars_wd'),
    ('Adafactor', {'learning_rate': 0.01, 'beta1': 0.9},
     'optax.adafactor(0.01, min_dim_size_to_factor=128, decay_rate=0.8, '
     'decay_offset=0, multiply_by_parameter_scale=True, '
     'clipping_threshold=1.0, momentum=0.9, weight_decay_rate=None, '
     'eps=1e-30, factored=True)', 'adafactor'),
]


@pytest.mark.parametrize('cls,kwargs,stock,variant', STOCK,
                         ids=[f'{c}-{v}' for c, _, _, v in STOCK])
def test_algorithm_message_names_replacements_with_user_values(
    cls, kwargs, stock, variant):
  with recorded() as caught:
    opt_def = getattr(lo, cls)(**kwargs)
  [w] = legacy(caught)
  message = str(w.message)
  assert f'nearest stock Optax: {stock} (' in message
  # What migrate writes comes first (test_warning_names_what_migrate_writes
  # checks it equals migrate's output), and the bridge for live objects.
  assert 'Replace it with what `flax-optim-compat migrate` writes' in message
  assert 'compat.to_train_state(optimizer, apply_fn)' in message
  # The measured deviation of exactly this stock expression.
  row = DEVIATIONS[variant]
  assert row['stock'].split('(')[0] == stock.split('(')[0]
  if row['rel_err'] == 0:
    assert 'bit-identical to flax 0.5.3' in message
  else:
    assert f'deviates up to {row["rel_err"]:.2g} from flax 0.5.3' in message
  assert f'section "{catalogue.SECTION_ALGORITHMS}"' in message
  # The expression is real Optax code that updates these params.
  tx = eval(stock, {'optax': optax})
  p = params()
  updates, _ = tx.update(jax.tree_util.tree_map(jnp.ones_like, p),
                         tx.init(p), p)
  assert jax.tree_util.tree_structure(updates) == (
      jax.tree_util.tree_structure(p))
  del opt_def


def test_known_large_deviations_are_explained():
  with recorded() as caught:
    lo.Adagrad(0.1)
    lo.LARS(0.1, weight_decay=1e-3)
  adagrad, lars = (str(w.message) for w in legacy(caught))
  assert 'eps inside the square root' in adagrad
  assert 'trust ratio' in lars


def test_missing_learning_rate_is_explained():
  with recorded() as caught:
    lo.Adam()
  [w] = legacy(caught)
  assert 'optax.adam(learning_rate, ' in str(w.message)
  assert 'no learning rate given: migrate injects' in str(w.message)
  assert ('flax_optim_rules.inject_learning_rate(flax_optim_rules.adam)('
          'learning_rate=0.0)') in str(w.message)


def test_subclass_of_a_builtin_and_custom_def_messages():
  class MyAdam(lo.Adam):
    pass

  class SignSGD(lo.OptimizerDef):

    def init_param_state(self, param):
      return ()

    def apply_param_gradient(self, step, hyper_params, param, state, grad):
      return param - hyper_params * jnp.sign(grad), state

  with recorded() as caught:
    MyAdam(0.1)
    SignSGD(0.1)
  mine, custom = (str(w.message) for w in legacy(caught))
  assert mine.startswith('MyAdam (a flax.optim.Adam subclass) is deprecated')
  assert 'opt_def.to_optax()' in mine and 'if MyAdam keeps the Adam rule' in (
      mine)
  assert custom.startswith('SignSGD (a custom flax.optim.OptimizerDef)')
  assert 'optax.GradientTransformation' in custom


def test_weight_norm_and_replicated_messages():
  inner = quiet(lo.Adam, 0.1)
  with recorded() as caught:
    lo.WeightNorm(inner)
    lo.ReplicatedOptimizer(inner)
  messages = [str(w.message) for w in legacy(caught)]
  assert any('Optax has no counterpart' in m and 'flax.linen.WeightNorm' in m
             for m in messages), messages
  assert any('ReplicatedOptimizer is deprecated' in m and 'jax.lax.pmean' in m
             for m in messages), messages


def test_every_cited_guide_section_exists():
  with open(GUIDE, encoding='utf-8') as f:
    headings = {l.lstrip('#').strip() for l in f if l.startswith('#')}
  assert set(catalogue.SECTIONS) <= headings, sorted(
      set(catalogue.SECTIONS) - headings)


# ---------------------------------------------------------------------------
# One voice: the warning names what migrate writes for the same call.


def _migrated_definition(source: str) -> str:
  """The right-hand side migrate writes for ``d = ...`` in ``source``."""
  new, plan = migrate.migrate_source(source.encode(), 'x.py')
  assert not plan.leftovers, plan.leftovers
  [line] = [l for l in new.decode().splitlines() if l.startswith('d = ')]
  return line[len('d = '):]


def _one_voice_rows():
  for algorithm in catalogue.RULES:
    for check in algorithm.checks:
      if not check.schedule:
        yield pytest.param(algorithm.name, dict(check.kwargs),
                           id=f'{algorithm.name}{check.label}')


@pytest.mark.parametrize('name,kwargs', list(_one_voice_rows()))
def test_warning_names_what_migrate_writes(name, kwargs):
  arguments = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
  written = _migrated_definition(
      f'from flax import optim\nd = optim.{name}({arguments})\n'
      'o = d.create(p)\no = o.apply_gradient(g)\n')
  with recorded() as caught:
    getattr(lo, name)(**kwargs)
  [w] = legacy(caught)
  lines = str(w.message).splitlines()
  assert 'flax-optim-compat migrate' in lines[1]
  assert lines[2] == f'  {written}'
  # scan's replacement names it too.
  [finding] = [f for f in scan.scan_source(
      f'from flax import optim\nd = optim.{name}({arguments})\n')
               if f.construct == 'optimizer_def']
  assert finding.replacement.startswith(
      f'{written} (what migrate writes: same numbers as flax 0.5.3)')


@pytest.mark.parametrize('name,kwargs', list(_one_voice_rows()))
def test_override_warning_names_what_migrate_writes(name, kwargs):
  kwargs = {k: v for k, v in kwargs.items() if k != 'learning_rate'}
  arguments = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
  written = _migrated_definition(
      f'from flax import optim\nd = optim.{name}({arguments})\n'
      'o = d.create(p)\no = o.apply_gradient(g, learning_rate=lr)\n')
  opt_def = quiet(getattr(lo, name), **kwargs)
  optimizer = quiet(opt_def.create, params())
  grads = jax.tree_util.tree_map(jnp.ones_like, params())
  with recorded() as caught:
    optimizer.apply_gradient(grads, learning_rate=0.1)
  [w] = [w for w in legacy(caught) if 'overrides' in str(w.message)]
  assert (f'For this definition `flax-optim-compat migrate` writes '
          f'{written}.') in str(w.message)
  with recorded() as caught:
    getattr(lo, name)(**kwargs)
  [w] = legacy(caught)
  assert str(w.message).splitlines()[2] == f'  {written}'
