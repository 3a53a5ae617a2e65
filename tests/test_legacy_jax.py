"""The opt-in layer for old programs (compat.legacy_jax): one old-code
fixture per alias of the table, each run as a file so the warning's line is
checked; what exists is never replaced; off by default (fresh interpreters)."""

import os
import subprocess
import sys
import textwrap
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compat import legacy_jax
from compat.codemod import _removals
from legacy_optim import deprecation

# alias.old -> (old code, the line that uses the alias (1-based), a check of
# the names the code bound). The code is what a 2021 program wrote.
_DEFAULT_CHECK = None


def _tree_map_check(ns):
  assert ns['result'] == {'a': 2}


def _same(expected):
  def check(ns):
    assert ns['result'] is expected()
  return check


def _mask_check(ns):
  assert np.array_equal(ns['result'], ns['expected'])


FIXTURES = {
    'jax.tree_map': ('import jax\n'
                     "result = jax.tree_map(lambda x: x + 1, {'a': 1})\n",
                     2, _tree_map_check),
    'jax.tree_multimap': (
        'import jax\n'
        "result = jax.tree_multimap(lambda x, y: x + y, {'a': 1}, {'a': 1})\n",
        2, _tree_map_check),
    'jax.tree_leaves': ('import jax\nresult = jax.tree_leaves([1, (2,)])\n', 2,
                        lambda ns: ns['result'] == [1, 2] or 1 / 0),
    'jax.tree_flatten': ('import jax\nresult = jax.tree_flatten([1])\n', 2,
                         lambda ns: ns['result'][0] == [1] or 1 / 0),
    'jax.tree_unflatten': (
        'import jax\n'
        'leaves, tree = jax.tree_util.tree_flatten([1, 2])\n'
        'result = jax.tree_unflatten(tree, [3, 4])\n', 3,
        lambda ns: ns['result'] == [3, 4] or 1 / 0),
    'jax.tree_structure': ('import jax\nresult = jax.tree_structure([1])\n', 2,
                           lambda ns: ns['result'].num_leaves == 1 or 1 / 0),
    'jax.tree_transpose': (
        'import jax\nt = jax.tree_util.tree_structure\n'
        'result = jax.tree_transpose(t([0, 0]), t((0,)), [(1,), (2,)])\n', 3,
        lambda ns: ns['result'] == ([1, 2],) or 1 / 0),
    'jax.tree_reduce': (
        'import operator, jax\n'
        'result = jax.tree_reduce(operator.add, [1, 2, 3])\n', 2,
        lambda ns: ns['result'] == 6 or 1 / 0),
    'jax.tree_all': ('import jax\nresult = jax.tree_all([True, 1])\n', 2,
                     lambda ns: ns['result'] is True or 1 / 0),
    'jax.tree_util.tree_multimap': (
        'from jax import tree_util\n'
        'result = tree_util.tree_multimap(lambda x, y: x * y, [2], [3])\n', 2,
        lambda ns: ns['result'] == [6] or 1 / 0),
    'jax.profiler.StepTraceContext': (
        'import jax\n'
        "with jax.profiler.StepTraceContext('train', step_num=1):\n"
        '  result = 1\n', 2, _DEFAULT_CHECK),
    'jax.numpy.DeviceArray': (
        'import jax.numpy as jnp\n'
        'result = isinstance(jnp.ones(2), jnp.DeviceArray)\n', 2,
        lambda ns: ns['result'] is True or 1 / 0),
    'jax.interpreters.xla.DeviceArray': (
        'from jax.interpreters import xla\nresult = xla.DeviceArray\n', 2,
        _same(lambda: jax.Array)),
    'jax.random.KeyArray': (
        'import jax\nresult = jax.random.KeyArray\n', 2,
        _same(lambda: jax.Array)),
    'jax.config.config': ('from jax.config import config\nresult = config\n',
                          1, _same(lambda: jax.config)),
    'jax.config.enable_omnistaging': (
        'import jax\nresult = jax.config.enable_omnistaging()\n', 2,
        lambda ns: ns['result'] is None or 1 / 0),
    'jax.partial': ('import jax\nresult = jax.partial(divmod, 7)(2)\n', 2,
                    lambda ns: ns['result'] == (3, 1) or 1 / 0),
    'jax.ops.index': ('import jax\nresult = jax.ops.index[1:, 0]\n', 2,
                      lambda ns: ns['result'] == (slice(1, None), 0) or 1 / 0),
    'jax.ops.index_update': (
        'import jax, numpy as np\n'
        'result = jax.ops.index_update(np.zeros(3), 1, 5.)\n', 2,
        lambda ns: np.array_equal(ns['result'], [0., 5., 0.]) or 1 / 0),
    'jax.ops.index_add': (
        'import jax, jax.numpy as jnp\n'
        'result = jax.ops.index_add(jnp.ones(3), (jnp.array([0, 0]),), 2.)\n',
        2, lambda ns: np.array_equal(ns['result'], [5., 1., 1.]) or 1 / 0),
    'jax.ops.index_mul': (
        'import jax, jax.numpy as jnp\n'
        'result = jax.ops.index_mul(jnp.full(2, 3.), 0, 2.)\n', 2,
        lambda ns: np.array_equal(ns['result'], [6., 3.]) or 1 / 0),
    'jax.ops.index_min': (
        'import jax, jax.numpy as jnp\n'
        'result = jax.ops.index_min(jnp.full(2, 3.), 1, -1.)\n', 2,
        lambda ns: np.array_equal(ns['result'], [3., -1.]) or 1 / 0),
    'jax.ops.index_max': (
        'import jax, jax.numpy as jnp\n'
        'result = jax.ops.index_max(jnp.full(2, 3.), 1, -1.)\n', 2,
        lambda ns: np.array_equal(ns['result'], [3., 3.]) or 1 / 0),
    'jax.experimental.optimizers': (
        'from jax.experimental import optimizers\n'
        'init, update, get = optimizers.sgd(0.5)\n'
        'result = get(update(0, 2., init(1.)))\n', 1,
        lambda ns: ns['result'] == 0. or 1 / 0),
    'jax.experimental.stax': (
        'from jax.experimental.stax import Relu\nresult = Relu\n', 1,
        _same(lambda: __import__('jax.example_libraries.stax').
              example_libraries.stax.Relu)),
    _removals._POSITIONAL_MASK: (
        'import jax, jax.numpy as jnp\n'
        'import flax.linen as nn\n'
        'mha = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=4)\n'
        'q = jnp.arange(24.).reshape(1, 3, 8) / 24\n'
        'mask = jnp.tril(jnp.ones((1, 1, 3, 3), bool))\n'
        'variables = mha.init(jax.random.PRNGKey(0), q, q, mask=mask)\n'
        'result = mha.apply(variables, q, q, mask)\n'
        'expected = mha.apply(variables, q, q, mask=mask)\n', 7, _mask_check),
}
# Rows served at the flax import (a configuration, no call site of its own):
# checked by test_flax_init_returns_frozendict_again.
AT_IMPORT = (_removals._POP_UNPACKING, _removals._FROZEN_COPY)
# Rows the supported jax releases still have (the layer adds nothing).
PRESENT = ('jax.host_id', 'jax.host_count', 'jax.host_ids')
PRESENT_MODULES = (_removals.LR_SCHEDULE,)  # flax 0.12 still has it
REFUSED = ('flax.nn',)  # test_flax_nn_is_refused_naming_the_way_forward


def test_every_alias_has_a_fixture():
  rows = {a.old for a in _removals.runtime_aliases()}
  covered = set(FIXTURES) | set(AT_IMPORT) | set(PRESENT) | set(
      PRESENT_MODULES) | set(REFUSED)
  assert rows == covered, rows ^ covered


@pytest.fixture
def layer():
  assert not legacy_jax.is_installed()
  original_call = nn.MultiHeadDotProductAttention.__call__
  legacy_jax.install()
  deprecation.reset()
  yield
  legacy_jax.uninstall()
  deprecation.reset()
  for alias in _removals.runtime_aliases():  # served modules stay imported
    if alias.kind == _removals.MODULE and alias.old not in PRESENT_MODULES:
      sys.modules.pop(alias.old, None)
  assert nn.MultiHeadDotProductAttention.__call__ is original_call
  assert not hasattr(jax, 'tree_map')
  assert 'jax.config' not in sys.modules


def _run_old_code(tmp_path, code):
  path = tmp_path / 'old_program.py'
  path.write_text(code)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    namespace = {'__name__': 'old_program', '__file__': str(path)}
    exec(compile(code, str(path), 'exec'), namespace)  # noqa: S102
  ours = [w for w in caught
          if issubclass(w.category, deprecation.RemovedJaxApiWarning)]
  return namespace, ours, str(path)


@pytest.mark.parametrize('old', sorted(FIXTURES))
def test_old_code_runs_and_warns_at_its_line(old, layer, tmp_path):
  code, line, check = FIXTURES[old]
  namespace, warned, path = _run_old_code(tmp_path, code)
  if check is not None:
    check(namespace)
  assert [(w.filename, w.lineno) for w in warned] == [(path, line)], [
      str(w.message) for w in warned]
  alias = next(a for a in _removals.runtime_aliases() if a.old == old)
  message = str(warned[0].message)
  assert old in message and alias.fix.rstrip('.') in message
  assert issubclass(warned[0].category,
                    deprecation.LegacyOptimDeprecationWarning)
  report = deprecation.usage_report()
  assert [(u.feature, u.filename, u.lineno) for u in report] == [
      (old, path, line)]


def test_once_per_call_site_and_listed_with_count(layer, tmp_path):
  code = ('import jax\nfor _ in range(3):\n'
          '  jax.tree_map(abs, [-1])\njax.tree_map(abs, [-1])\n')
  _, warned, path = _run_old_code(tmp_path, code)
  assert [w.lineno for w in warned] == [3, 4]
  assert [(u.lineno, u.count) for u in deprecation.usage_report()] == [
      (3, 3), (4, 1)]


def test_strict_mode_raises(layer, tmp_path, monkeypatch):
  monkeypatch.setenv(deprecation.STRICT_ENV_VAR, '1')
  with pytest.raises(deprecation.RemovedJaxApiWarning,
                     match='jax.tree_util.tree_map'):
    _run_old_code(tmp_path, 'import jax\njax.tree_map(abs, [1])\n')


def test_a_name_jax_has_is_never_replaced(layer):
  for old in PRESENT:
    module_name, _, name = old.rpartition('.')
    module = sys.modules[module_name]
    assert name in vars(module), old  # found before any __getattr__
  for old in PRESENT_MODULES:
    assert __import__(old, fromlist=['_']).__name__ == old
  assert jnp.ones is jnp.__dict__['ones']
  # A new-style (q, k, v) call is not routed: values of the keys' rank.
  mha = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=4)
  q = jnp.ones((1, 3, 4))
  variables = mha.init(jax.random.PRNGKey(0), q, q, q)
  with warnings.catch_warnings():
    warnings.simplefilter('error', deprecation.RemovedJaxApiWarning)
    mha.apply(variables, q, q, q * 2)
  assert not deprecation.usage_report()


def test_a_positional_mask_routed_changes_the_result_from_no_mask(layer,
                                                                 tmp_path):
  namespace, _, _ = _run_old_code(tmp_path, FIXTURES[
      _removals._POSITIONAL_MASK][0] + 'unmasked = mha.apply(variables, q)\n')
  assert not np.allclose(namespace['result'], namespace['unmasked'])


def test_flax_nn_is_refused_naming_the_way_forward(layer):
  with pytest.raises(ImportError, match='port the model to flax.linen'):
    __import__('flax.nn')


# The module is imported and flax too in this process: the configuration row
# and the start-up switch are checked in fresh interpreters.
def _python(code, **env):
  environ = dict(os.environ, JAX_PLATFORMS='cpu', **env)
  environ.pop(deprecation.STRICT_ENV_VAR, None)
  run = subprocess.run([sys.executable, '-W', 'default', '-c',
                        textwrap.dedent(code)], env=environ,
                       capture_output=True, text=True, timeout=300,
                       check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  return run


_OLD_INIT = '''
    import jax, jax.numpy as jnp
    import flax.linen as nn
    class Model(nn.Module):
      @nn.compact
      def __call__(self, x):
        x = nn.BatchNorm(use_running_average=False)(x)
        return nn.Dense(2)(x)
    variables = Model().init(jax.random.PRNGKey(0), jnp.ones((2, 3)))
    model_state, params = variables.pop('params')
    new_state = model_state.copy({'batch_stats': model_state['batch_stats']})
    print(sorted(params), sorted(new_state))
'''


def test_flax_init_returns_frozendict_again():
  run = _python(_OLD_INIT, LEGACY_OPTIM_JAX_ALIASES='1')
  assert run.stdout == "['BatchNorm_0', 'Dense_0'] ['batch_stats']\n"
  assert 'FrozenDict.pop unpacking' in run.stderr
  assert 'flax.core.pop(variables, key)' in run.stderr


def test_off_by_default_nothing_of_jax_or_flax_is_touched():
  run = _python('''
    import sys
    assert not any('legacy_jax' in name for name in sys.modules)
    import jax, jax.numpy as jnp, flax, flax.linen as nn
    print(hasattr(jax, 'tree_map'), hasattr(jnp, 'DeviceArray'),
          'jax.config' in sys.modules, flax.config.flax_return_frozendict,
          nn.MultiHeadDotProductAttention.__call__.__module__,
          any('legacy_jax' in name for name in sys.modules))
  ''')
  assert run.stdout.split() == ['False', 'False', 'False', 'False',
                                'flax.linen.attention', 'False']


def test_the_variable_turns_it_on_at_the_first_jax_import_only():
  run = _python('''
    import sys
    before = 'jax' in sys.modules or 'flax_optim_compat._legacy_jax' in (
        sys.modules)
    import jax
    print(before, jax.tree_map(abs, [-2]))
  ''', LEGACY_OPTIM_JAX_ALIASES='1')
  assert run.stdout.split('\n')[0] == 'False [2]'
  assert 'RemovedJaxApiWarning' in run.stderr


def test_run_command_runs_a_script_as_python_would(tmp_path):
  script = tmp_path / 'old.py'
  script.write_text('import sys, jax\n'
                    'print(sys.argv[1:], __name__, jax.tree_leaves([1, [2]]))'
                    '\nsys.exit(3)\n')
  environ = dict(os.environ, JAX_PLATFORMS='cpu')
  run = subprocess.run([sys.executable, '-m', 'flax_optim_compat', 'run',
                        str(script), 'a', '--b'], env=environ,
                       capture_output=True, text=True, timeout=300,
                       check=False)
  assert run.returncode == 3, run.stderr
  assert run.stdout == "['a', '--b'] __main__ [1, 2]\n"
  assert f'{script}:2: RemovedJaxApiWarning' in run.stderr


def test_run_command_runs_a_module_as_python_m_would(tmp_path):
  (tmp_path / 'old_module.py').write_text(
      'import sys, jax\nprint(sys.argv[1:], __name__, jax.tree_leaves([3]))\n')
  environ = dict(os.environ, JAX_PLATFORMS='cpu')
  run = subprocess.run([sys.executable, '-m', 'flax_optim_compat', 'run',
                        '-m', 'old_module', 'x'], env=environ, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       check=False)
  assert run.returncode == 0, run.stderr
  assert run.stdout == "['x'] __main__ [3]\n"
  assert 'old_module.py:2: RemovedJaxApiWarning' in run.stderr


@pytest.mark.parametrize('line, warned', [
    ('jax.numpy.ones(2).sum()', ''),
    ('jax.tree_map(abs, [-1])', 'jax.tree_map'),  # the layer warns: no flax
])
def test_run_imports_no_flax_for_a_script_that_imports_none(
    tmp_path, line, warned):
  # The layer's warning went through legacy_optim, which imported flax; the
  # FrozenDict rows then warned about a program that has no FrozenDict.
  script = tmp_path / 'jax_only.py'
  script.write_text(f'import sys, jax, jax.numpy\n{line}\n'
                    "print('flax' in sys.modules)\n")
  environ = dict(os.environ, JAX_PLATFORMS='cpu')
  environ.pop(deprecation.STRICT_ENV_VAR, None)
  run = subprocess.run([sys.executable, '-W', 'default', '-m',
                        'flax_optim_compat', 'run', str(script)], env=environ,
                       capture_output=True, text=True, timeout=300,
                       check=False)
  assert run.returncode == 0, run.stderr
  assert run.stdout == 'False\n'
  warnings_shown = [l for l in run.stderr.splitlines() if 'Warning' in l]
  assert [warned in l for l in warnings_shown] == ([True] if warned else []), (
      run.stderr)
