"""The zero-change ``flax.optim`` import alias (compat.importer).

Each spelling runs in a fresh interpreter *without* ``import legacy_optim``,
from a scratch directory, so only the installed ``flax_optim_compat.pth``
can make it work.
"""

import os
import site
import subprocess
import sys
import textwrap
import types
import zipfile

import pytest

import _flax_optim_compat_hook as hook
import _flax_optim_compat_startup as startup
from compat import importer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every legacy submodule with the names flax 0.5.3 defined in it.
LEGACY_NAMES = {
    'adabelief': ('AdaBelief', '_AdaBeliefHyperParams',
                  '_AdaBeliefParamState'),
    'adadelta': ('Adadelta', '_AdadeltaHyperParams', '_AdadeltaParamState'),
    'adafactor': ('Adafactor', '_AdafactorHyperParams',
                  '_AdafactorParamState'),
    'adagrad': ('Adagrad', '_AdagradHyperParams', '_AdagradParamState'),
    'adam': ('Adam', '_AdamHyperParams', '_AdamParamState'),
    'base': ('OptimizerState', 'OptimizerDef', 'Optimizer', 'MultiOptimizer',
             'ModelParamTraversal', 'ReplicatedOptimizer'),
    'dynamic_scale': ('DynamicScale', 'DynamicScaleResult'),
    'lamb': ('LAMB', '_LAMBHyperParams', '_LAMBParamState'),
    'lars': ('LARS', '_LARSHyperParams', '_LARSParamState'),
    'momentum': ('Momentum', '_MomentumHyperParams', '_MomentumParamState'),
    'rmsprop': ('RMSProp', '_RMSPropHyperParams', '_RMSPropParamState'),
    'sgd': ('GradientDescent', '_GradientDescentHyperParams'),
    'weight_norm': ('WeightNorm', '_WeightNormHyperParams',
                    '_WeightNormParamState'),
}

_PRELUDE = """
import sys
assert 'legacy_optim' not in sys.modules, 'legacy_optim imported at start-up'
"""

# Runs after a spelling: the objects must be legacy_optim's own.
_SAME_OBJECTS = """
import legacy_optim
for _name, _mod in list(sys.modules.items()):
  if _name.startswith('flax.optim.'):
    legacy_name = 'legacy_optim' + _name[len('flax.optim'):]
    assert _mod is sys.modules[legacy_name], _name
assert sys.modules['flax.optim'] is legacy_optim
import flax
assert flax.optim is legacy_optim
print('OK')
"""


def _clean_env(**extra):
  env = {k: v for k, v in os.environ.items()
         if k not in (hook.ENV_VAR, 'LEGACY_OPTIM_STRICT', 'PYTHONPATH')}
  env['JAX_PLATFORMS'] = 'cpu'
  env.update(extra)
  return env


def run_python(code, tmp_path, **env):
  """Runs ``code`` in a fresh interpreter from ``tmp_path``; returns result."""
  return subprocess.run(
      [sys.executable, '-c', textwrap.dedent(code)], cwd=tmp_path,
      env=_clean_env(**env), capture_output=True, text=True, timeout=300)


def assert_ok(result):
  assert result.returncode == 0 and result.stdout.strip().endswith('OK'), (
      f'exit {result.returncode}\nstdout:\n{result.stdout}\n'
      f'stderr:\n{result.stderr}')


SPELLINGS = {
    'from_flax_import_optim': """
        from flax import optim
        assert optim.Adam(learning_rate=0.1).hyper_params.learning_rate == 0.1
        from legacy_optim import Adam
        assert optim.Adam is Adam
    """,
    'import_flax_optim_as': """
        import flax.optim as optim
        from legacy_optim import GradientDescent
        assert optim.GradientDescent is GradientDescent
    """,
    'import_flax_then_attribute': """
        import flax
        opt_def = flax.optim.Adam(learning_rate=0.1)
        import legacy_optim
        assert type(opt_def) is legacy_optim.Adam
    """,
    'from_flax_optim_import_names': """
        from flax.optim import (Adam, DynamicScale, ModelParamTraversal,
                                MultiOptimizer, Optimizer, OptimizerDef,
                                OptimizerState, GradientDescent, WeightNorm)
        import legacy_optim
        assert (Adam, DynamicScale, ModelParamTraversal, MultiOptimizer,
                Optimizer, OptimizerDef, OptimizerState, GradientDescent,
                WeightNorm) == (
            legacy_optim.Adam, legacy_optim.DynamicScale,
            legacy_optim.ModelParamTraversal, legacy_optim.MultiOptimizer,
            legacy_optim.Optimizer, legacy_optim.OptimizerDef,
            legacy_optim.OptimizerState, legacy_optim.GradientDescent,
            legacy_optim.WeightNorm)
    """,
    'from_flax_optim_import_submodule': """
        from flax.optim import dynamic_scale
        import legacy_optim.dynamic_scale
        assert dynamic_scale is legacy_optim.dynamic_scale
        assert sys.modules['flax.optim.dynamic_scale'] is dynamic_scale
    """,
    'from_flax_optim_base_import': """
        from flax.optim.base import ReplicatedOptimizer, MultiOptimizer
        import legacy_optim
        assert ReplicatedOptimizer is legacy_optim.ReplicatedOptimizer
        assert MultiOptimizer is legacy_optim.MultiOptimizer
    """,
    'every_submodule_and_private_class': f"""
        import importlib
        import pickle
        # A pickle written by real flax.optim names classes by the old path.
        cls = pickle.loads(b'cflax.optim.momentum\\n_MomentumParamState\\n.')
        names = {LEGACY_NAMES!r}
        for sub, attrs in names.items():
          flax_mod = importlib.import_module('flax.optim.' + sub)
          real = importlib.import_module('legacy_optim.' + sub)
          assert flax_mod is real, sub
          for attr in attrs:
            ns = {{}}
            exec(f'from flax.optim.{{sub}} import {{attr}} as x', ns)
            assert ns['x'] is getattr(real, attr), (sub, attr)
        momentum = importlib.import_module('legacy_optim.momentum')
        assert cls is momentum._MomentumParamState, cls
    """,
}


# Each spelling is a Python start-up. The default run keeps one through the
# finder (every submodule, old pickles) and one through flax's module
# __getattr__; the others run with -m slow.
QUICK_SPELLINGS = ('every_submodule_and_private_class',
                   'import_flax_then_attribute')


@pytest.mark.parametrize('spelling', [
    spelling if spelling in QUICK_SPELLINGS
    else pytest.param(spelling, marks=pytest.mark.slow)
    for spelling in sorted(SPELLINGS)])
def test_spelling_works_without_importing_legacy_optim(spelling, tmp_path):
  code = _PRELUDE + textwrap.dedent(SPELLINGS[spelling]) + _SAME_OBJECTS
  assert_ok(run_python(code, tmp_path))


def test_startup_imports_nothing_heavy(tmp_path):
  result = run_python("""
      import sys
      heavy = sorted(m for m in ('jax', 'flax', 'optax', 'numpy',
                                 'legacy_optim', 'compat',
                                 '_flax_optim_compat_hook')
                     if m in sys.modules)
      assert not heavy, heavy
      assert type(sys.meta_path[0]).__name__ == 'LazyFinder', sys.meta_path
      import flax.linen  # the first flax import swaps in the real finder
      assert type(sys.meta_path[0]).__name__ == '_FlaxOptimFinder'
      assert not any(type(f).__name__ == 'LazyFinder' for f in sys.meta_path)
      print('OK')
  """, tmp_path)
  assert_ok(result)


def test_pth_file_is_installed_in_site_packages():
  with open(os.path.join(REPO, 'flax_optim_compat.pth'), encoding='utf-8') as f:
    expected = f.read()
  found = [os.path.join(d, 'flax_optim_compat.pth')
           for d in site.getsitepackages()
           if os.path.exists(os.path.join(d, 'flax_optim_compat.pth'))]
  assert found, ('flax_optim_compat.pth is not installed; reinstall with '
                 '`pip install -e .` (setup.cfg [options.data_files]).')
  with open(found[0], encoding='utf-8') as f:
    assert f.read() == expected


def test_environment_variable_switches_alias_off(tmp_path):
  # (The accepted spellings of "off" are checked in-process below.)
  result = run_python("""
      import sys
      try:
        from flax import optim
      except ImportError:
        pass
      else:
        raise AssertionError('flax.optim imported with the hook switched off')
      import flax
      assert not hasattr(flax, 'optim')
      import legacy_optim  # does not activate it either
      try:
        import flax.optim
      except ImportError:
        pass
      else:
        raise AssertionError('import legacy_optim activated the hook')
      from compat import importer
      importer.install()  # explicit installation ignores the variable
      import flax.optim
      assert flax.optim is legacy_optim
      print('OK')
  """, tmp_path, **{hook.ENV_VAR: 'off'})
  assert_ok(result)


def test_explicit_import_legacy_optim_activates_alias(tmp_path):
  result = run_python("""
      import sys
      # Simulate an interpreter without the start-up hook.
      sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__
                          not in ('_FlaxOptimFinder', 'LazyFinder')]
      import legacy_optim
      from flax.optim.momentum import _MomentumParamState
      assert _MomentumParamState is legacy_optim.momentum._MomentumParamState
      print('OK')
  """, tmp_path)
  assert_ok(result)


def _write_fake_flax(root, with_optim):
  pkg = root / 'flax'
  pkg.mkdir()
  (pkg / '__init__.py').write_text('FAKE = True\n')
  if with_optim:
    (pkg / 'optim').mkdir()
    (pkg / 'optim' / '__init__.py').write_text("MARK = 'real old flax.optim'\n")
    (pkg / 'optim' / 'adam.py').write_text("MARK = 'real old adam'\n")


def test_never_shadows_a_real_flax_optim(tmp_path):
  _write_fake_flax(tmp_path, with_optim=True)
  result = run_python("""
      import sys
      import flax
      assert flax.FAKE
      assert flax.optim.MARK == 'real old flax.optim'
      from flax.optim import adam
      assert adam.MARK == 'real old adam'
      import flax.optim as optim
      assert optim.__file__.startswith(flax.__path__[0])
      assert 'legacy_optim' not in sys.modules
      print('OK')
  """, tmp_path, PYTHONPATH=str(tmp_path))
  assert_ok(result)


def test_real_flax_optim_wins_when_imported_directly(tmp_path):
  _write_fake_flax(tmp_path, with_optim=True)
  result = run_python("""
      import sys
      from flax import optim
      assert optim.MARK == 'real old flax.optim'
      assert 'legacy_optim' not in sys.modules
      print('OK')
  """, tmp_path, PYTHONPATH=str(tmp_path))
  assert_ok(result)


# --------------------------------------------------------------------------
# In-process unit tests of the finder (no flax.optim import needed).


def test_install_is_idempotent_and_uninstall_removes_it():
  was_installed = importer.is_installed()
  try:
    importer.install()
    importer.install()
    assert sum(f is hook._FINDER for f in sys.meta_path) == 1
    importer.uninstall()
    assert not importer.is_installed()
  finally:
    if was_installed:
      importer.install()


def test_startup_stub_steps_aside_for_the_real_finder(monkeypatch):
  monkeypatch.setattr(sys, 'meta_path', [f for f in sys.meta_path
                                         if f is not hook._FINDER])
  assert startup.activate() and startup.activate()  # idempotent
  assert [type(f) for f in sys.meta_path].count(startup.LazyFinder) == 1
  stub = sys.meta_path[0]
  assert stub.find_spec('numpy') is None and sys.meta_path[0] is stub
  assert importer.is_installed()
  assert stub.find_spec('flax.linen') is None  # not ours; but now loaded
  assert sys.meta_path[0] is hook._FINDER
  assert not any(isinstance(f, startup.LazyFinder) for f in sys.meta_path)
  monkeypatch.setenv(hook.ENV_VAR, 'off')
  assert not startup.activate()
  assert not any(isinstance(f, startup.LazyFinder) for f in sys.meta_path)


def test_flax_getattr_chains_an_existing_module_getattr():
  module = types.ModuleType('fakeflax')
  module.__getattr__ = lambda name: f'previous:{name}'
  hook._patch_flax(module)
  hook._patch_flax(module)  # idempotent: does not wrap itself
  assert module.other == 'previous:other'
  assert module.__getattr__.previous('x') == 'previous:x'
  hook._unpatch_flax(module)
  assert module.other == 'previous:other'
  assert not getattr(module.__getattr__, '_flax_optim_compat', False)


def test_flax_getattr_raises_attribute_error_for_unknown_names():
  module = types.ModuleType('fakeflax')
  hook._patch_flax(module)
  with pytest.raises(AttributeError, match="no attribute 'nothing'"):
    module.nothing  # noqa: B018  (the attribute access is the test)
  assert not hasattr(module, 'nothing')
  hook._unpatch_flax(module)
  assert '__getattr__' not in vars(module)


@pytest.mark.parametrize('value,expected', [
    (None, True), ('1', True), ('yes', True), ('0', False), (' Off ', False),
    ('false', False), ('NO', False)])
def test_enabled_by_environment(value, expected):
  environ = {} if value is None else {hook.ENV_VAR: value}
  assert hook.enabled_by_environment(environ) is expected


def test_finder_ignores_unrelated_names():
  for name in ('numpy', 'flaxlib', 'flax_optim_compat', 'flax.linen',
               'flax.training.train_state'):
    assert hook._FINDER.find_spec(name, None) is None, name


@pytest.mark.slow
def test_regular_wheel_install(tmp_path):
  """Builds a wheel, installs it into a fresh venv, imports flax.optim."""
  wheel_dir = tmp_path / 'wheels'
  subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '-q',
                  '-w', str(wheel_dir), REPO], check=True)
  venv = tmp_path / 'venv'
  subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
  py = venv / 'bin' / 'python'
  venv_site = subprocess.run(
      [py, '-c', 'import site; print(site.getsitepackages()[0])'],
      check=True, capture_output=True, text=True).stdout.strip()
  # Dependencies come from this interpreter's site-packages (a plain path
  # entry: its own .pth files, e.g. the editable install's, are not run).
  deps = [p for p in site.getsitepackages() if os.path.isdir(p)]
  with open(os.path.join(venv_site, 'deps.pth'), 'w', encoding='utf-8') as f:
    f.write('\n'.join(deps) + '\n')
  wheel = next(wheel_dir.glob('flax_optim_compat-*.whl'))
  with zipfile.ZipFile(wheel) as archive:
    names = archive.namelist()
    entry_points = archive.read(next(
        n for n in names if n.endswith('.dist-info/entry_points.txt')))
  # The wheel carries the license and the guide, and no pytest plugin entry.
  assert any(n.endswith('.dist-info/licenses/LICENSE') for n in names), names
  assert 'compat/migration_guide.md' in names, names
  assert b'pytest11' not in entry_points, entry_points
  # --ignore-installed: the deps' site-packages may hold an install of ours.
  subprocess.run([py, '-m', 'pip', 'install', '--no-deps', '--ignore-installed',
                  '-q', str(wheel)],
                 check=True)
  guide = subprocess.run([venv / 'bin' / 'flax-optim-compat', 'guide',
                          '--path'], cwd=tmp_path, env=_clean_env(),
                         capture_output=True, text=True, check=True)
  assert guide.stdout.strip() == os.path.join(
      venv_site, 'compat', 'migration_guide.md'), guide.stdout
  result = subprocess.run(
      [py, '-c', _PRELUDE + 'from flax import optim\n'
       'assert optim.__file__.startswith(%r), optim.__file__\n' % venv_site
       + _SAME_OBJECTS],
      cwd=tmp_path, env=_clean_env(), capture_output=True, text=True)
  assert_ok(result)
