"""Acceptance: leave the shim mid-run with the stock exit, continue where it
is not installed.

Legacy Adam, Momentum, RMSProp, Adafactor and a MultiOptimizer (Adam on
matrices, Momentum on the bias) train 3 steps on the fixed gradients of
``scripts/stock_optax_deviation.py`` (the data the catalogue's figures were
measured on), are saved as flax.optim msgpack checkpoints and converted with
``convert_checkpoint(..., stock=True)``. A child interpreter whose
site-packages see jax/flax/optax/orbax but NOT this repository (it asserts
``import legacy_optim``, ``import compat`` and ``from flax import optim``
fail) restores each into the stock template the guide shows
(``TrainState.create(apply_fn, params, tx=optax.adam(1e-3))``) and continues
to step 100. Its deviation from the legacy continuation (the same metric as
the catalogue) EQUALS the exit figure the converter reported
(``report.stock.exit_rel_err``) at the precision it prints (2 significant
digits): that figure is ``exit_rel_err`` of
``legacy_optim/stock_optax_deviation.json``, which the deviation script
measures the same way on this stack (this library's legacy run to step 3,
``to_stock_optax``, stock vs legacy to step 100). It is not the flax 0.5.3
figure (``rel_err``, the stock rule vs the original flax.optim on jax
0.4.13), which differs by the shim's fidelity floor (Adam 3.5e-07 here vs
3.6e-07 from flax 0.5.3; Adafactor 0 vs 1.9e-07).
"""

import importlib.metadata
import importlib.util
import json
import pathlib
import subprocess
import sys
import sysconfig
import textwrap
import warnings

from flax import serialization
import jax
import numpy as np
import pytest

import compat
import legacy_optim

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings('ignore::DeprecationWarning')]
ROOT = pathlib.Path(__file__).resolve().parent.parent
STEPS, EXIT_AT = 100, 3


def _measurement_script():
  spec = importlib.util.spec_from_file_location(
      '_stock_deviation', ROOT / 'scripts' / 'stock_optax_deviation.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# name -> (legacy definition, the stock transform as the user writes it in
# the library-free code; labels are built there with flax.traverse_util).
CASES = {
    'adam': (lambda o: o.Adam(learning_rate=1e-3), 'optax.adam(1e-3)'),
    'momentum': (lambda o: o.Momentum(learning_rate=0.1, beta=0.9),
                 'optax.sgd(0.1, momentum=0.9)'),
    'rmsprop': (lambda o: o.RMSProp(learning_rate=1e-3),
                'optax.rmsprop(1e-3, eps_in_sqrt=False)'),
    'adafactor': (lambda o: o.Adafactor(learning_rate=1e-2),
                  'optax.adafactor(1e-2)'),
    'multi': (lambda o: o.MultiOptimizer(
        (o.ModelParamTraversal(lambda path, _: not path.endswith('bias')),
         o.Adam(learning_rate=1e-3)),
        (o.ModelParamTraversal(lambda path, _: path.endswith('bias')),
         o.Momentum(learning_rate=0.1, beta=0.9))),
              "optax.partition({'0': optax.adam(1e-3), "
              "'1': optax.sgd(0.1, momentum=0.9), "
              "'frozen': optax.set_to_zero()}, "
              "traverse_util.path_aware_map(lambda path, _: "
              "'1' if path[-1] == 'bias' else '0', params))"),
}

CHILD = '''
import json, pathlib, sys
import numpy as np

for name in ('legacy_optim', 'compat'):
  try:
    __import__(name)
  except ImportError:
    pass
  else:
    raise SystemExit(f'{name} is importable in the library-free venv')
try:
  from flax import optim  # the shim's import alias must be absent too
except ImportError:
  pass
else:
  raise SystemExit('flax.optim is importable in the library-free venv')

import jax
import optax
import orbax.checkpoint as ocp
from flax import traverse_util
from flax.training import train_state

work = pathlib.Path(sys.argv[1])
cases = json.loads((work / 'cases.json').read_text())
data = np.load(work / 'data.npz')
out = {}
for key, expression in cases.items():
  params = {k: {n: data[f'{key}/p/{k}/{n}'] for n in names}
            for k, names in json.loads(data[f'{key}/names'].item()).items()}
  tx = eval(expression)
  abstract = train_state.TrainState.create(apply_fn=None, params=params, tx=tx)
  state = ocp.StandardCheckpointer().restore(
      (work / key / 'converted' / 'state').absolute(), abstract)
  assert int(state.step) == %(exit_at)d, int(state.step)
  step = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  for t in range(%(exit_at)d, %(steps)d):
    grads = {k: {n: data[f'{key}/g/{t}/{k}/{n}'] for n in names}
             for k, names in json.loads(data[f'{key}/names'].item()).items()}
    state = step(state, grads)
  for k, layer in state.params.items():
    for n, value in layer.items():
      out[f'{key}/{k}/{n}'] = np.asarray(value)
np.savez(work / 'stock_final.npz', **out)
''' % {'exit_at': EXIT_AT, 'steps': STEPS}


def _library_free_python(work: pathlib.Path) -> str:
  """A venv seeing this environment's packages (jax, flax, optax, orbax...)
  but none of this distribution's files, however it is installed (editable
  or not): its site-packages links every entry of this one except those
  the distribution's record names (packages, import hook, .pth files)."""
  venv = work / 'venv'
  subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)],
                 check=True)
  python = venv / 'bin' / 'python'
  child_site = pathlib.Path(subprocess.run(
      [str(python), '-I', '-c',
       'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
      check=True, capture_output=True, text=True).stdout.strip())
  site = pathlib.Path(sysconfig.get_paths()['purelib'])
  # The record installed in site-packages (not a build's egg-info in cwd).
  [installed] = [d for d in importlib.metadata.distributions(path=[str(site)])
                 if d.metadata['Name'] == 'flax-optim-compat']
  ours = {pathlib.PurePath(str(f)).parts[0] for f in installed.files or ()}
  for entry in site.iterdir():
    if entry.name not in ours and entry.name != '__pycache__':
      (child_site / entry.name).symlink_to(entry)
  return str(python)


def _legacy_runs(work: pathlib.Path, dev):
  """Converts every case at EXIT_AT; returns the legacy final params and
  the reported figures, and writes the child's data."""
  params, grads = dev.make_data(STEPS)
  data, legacy_final, figures, cases = {}, {}, {}, {}
  step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  for name, (make, expression) in CASES.items():
    for scale in dev.GRAD_SCALES:
      key = f'{name}_{scale}'
      cases[key] = expression
      nested = lambda t, scale=scale: dev.nest(
          {k: grads[f'{scale}/{k}'][t] for k in dev.SHAPES})
      with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        optimizer = make(legacy_optim).create(dev.nest(params))
      for t in range(EXIT_AT):
        optimizer = step(optimizer, nested(t))
      (work / key).mkdir()
      (work / key / 'checkpoint_3').write_bytes(
          serialization.to_bytes(optimizer))
      spec = {'adam': 'Adam(learning_rate=1e-3)',
              'momentum': 'Momentum(learning_rate=0.1, beta=0.9)',
              'rmsprop': 'RMSProp(learning_rate=1e-3)',
              'adafactor': 'Adafactor(learning_rate=1e-2)',
              'multi': None}[name]
      report = compat.convert_checkpoint(
          work / key / 'checkpoint_3', work / key / 'converted',
          optimizer=spec if spec else optimizer.optimizer_def, stock=True)
      figures[name] = report.stock.exit_rel_err
      start = jax.device_get(optimizer.target)
      for t in range(EXIT_AT, STEPS):
        optimizer = step(optimizer, nested(t))
      legacy_final[key] = dev.flatten(jax.device_get(optimizer.target))
      names = {k: sorted(v) for k, v in start.items()}
      data[f'{key}/names'] = np.asarray(json.dumps(names))
      for k, layer in start.items():
        for n, value in layer.items():
          data[f'{key}/p/{k}/{n}'] = value
          for t in range(EXIT_AT, STEPS):
            data[f'{key}/g/{t}/{k}/{n}'] = grads[f'{scale}/{k}/{n}'][t]
  np.savez(work / 'data.npz', **data)
  (work / 'cases.json').write_text(json.dumps(cases))
  return params, legacy_final, figures


def test_stock_exit_continues_without_the_library(tmp_path):
  dev = _measurement_script()
  # The exit figures were measured leaving at this step, to this step.
  assert (dev.EXIT_STEP, dev.STEPS) == (EXIT_AT, STEPS)
  p0, legacy_final, figures = _legacy_runs(tmp_path, dev)
  python = _library_free_python(tmp_path)
  (tmp_path / 'child.py').write_text(textwrap.dedent(CHILD))
  result = subprocess.run(
      [python, '-I', str(tmp_path / 'child.py'), str(tmp_path)],
      cwd=tmp_path, capture_output=True, text=True, check=False,
      env={'PATH': '/usr/bin:/bin', 'JAX_PLATFORMS': 'cpu'})
  assert result.returncode == 0, result.stdout + result.stderr
  stock = np.load(tmp_path / 'stock_final.npz')
  measured = {}
  for name in CASES:
    measured[name] = max(
        dev.relative_error(
            p0, legacy_final[f'{name}_{scale}'],
            {path: stock[f'{name}_{scale}/{path}'] for path in dev.SHAPES})
        for scale in dev.GRAD_SCALES)
  printed = lambda value: f'{value:.2g}'  # the converter's precision
  print({n: (printed(measured[n]), printed(figures[n])) for n in CASES})
  assert {n: printed(measured[n]) for n in CASES} == {
      n: printed(figures[n]) for n in CASES}
  # The stock rules really ran (not the legacy transform): they round
  # differently from flax.optim's Adam and RMSProp.
  assert measured['adam'] > 0 and measured['rmsprop'] > 0
