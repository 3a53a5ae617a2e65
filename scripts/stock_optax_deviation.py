"""How far is each stock Optax alias from real flax.optim (flax 0.5.3)?

For every legacy algorithm (and the variants whose stock alias differs, e.g.
with weight decay) this runs 100 steps on the same fixed gradient sequence
twice:

* real ``flax.optim`` from flax 0.5.3, in the oracle venv (a subprocess);
* the nearest stock Optax expression, in this venv; the expression is exactly
  the one the deprecation warnings print (``legacy_optim.catalogue``, which
  also lists what is measured).

and reports the relative error of the accumulated update,
``|(p_100 - p_0)_optax - (p_100 - p_0)_flax| / |(p_100 - p_0)_flax|`` per leaf,
maximised over leaves (``rel_err``: what the stock rule differs from the
original flax.optim).

It also measures the stock EXIT on this stack (``exit_rel_err``, no oracle):
this library's legacy optimizer runs steps 0..2, ``compat.to_stock_optax``
converts it, and the stock transform continues to step 100 next to the
legacy continuation; the same metric between the two is what continuing with
the stock state changes in a legacy run (the figure the converter reports
for the exit). Results go to ``legacy_optim/stock_optax_deviation.json``
(read by the warnings and the stock exit, quoted in migration_guide.md).

Run (about a minute)::

  /opt/venvs/dev/bin/python scripts/stock_optax_deviation.py \
      [--oracle-python /opt/venvs/oracle/bin/python] [--steps 100] [--out PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SEED = 0
STEPS = 100
EXIT_STEP = 3  # the stock exit is measured leaving the legacy run here
ORACLE_PYTHON = '/opt/venvs/oracle/bin/python'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, 'legacy_optim', 'stock_optax_deviation.json')

# A few leaves (flax 0.5.3 compiles per leaf): a small dense layer and a
# matrix large enough for Adafactor to factor (both dims >= 128).
SHAPES = {
    'Dense_0/kernel': (16, 8),
    'Dense_0/bias': (8,),
    'Embed_0/embedding': (128, 136),
}

# The bias that ``Stock.zero_bias`` measurements start at exactly 0.
ZERO_BIAS = 'Dense_0/bias'


def configs():
  """(result key, legacy class, constructor kwargs, leaves set to zero) of
  every measurement that ``legacy_optim.catalogue`` lists."""
  rows = []
  for algorithm in _catalogue().RULES:
    for stock in algorithm.stock:
      kwargs = dict(stock.measured_with)
      rows.append((stock.variant, algorithm.name, kwargs, ()))
      if stock.zero_bias:
        rows.append((f'{stock.variant}_zero_bias', algorithm.name, kwargs,
                     (ZERO_BIAS,)))
  return tuple(rows)


def _catalogue():
  """legacy_optim.catalogue (stdlib only, so the oracle venv can read it),
  without running legacy_optim/__init__ (with the rule table it imports)."""
  if ROOT not in sys.path:  # (the oracle venv has no copy of this repo)
    sys.path.insert(0, ROOT)
  from compat import _lazy
  return _lazy.module_without_package('legacy_optim', 'catalogue')


# Gradient sequences: name -> factor applied to the 'typical' sequence
# (per-entry std about 0.05).
GRAD_SCALES = {'typical': 1.0, 'small': 2e-3}

def make_data(steps: int):
  """Initial params and one fixed gradient sequence per gradient scale.

  Gradients are a per-entry drift plus noise; the 'small' sequence is the
  'typical' one scaled down (late training, rarely updated embedding rows),
  where eps placement matters most.
  """
  rng = np.random.default_rng(SEED)
  params, grads = {}, {}
  for path, shape in SHAPES.items():
    params[path] = rng.normal(0.0, 0.5, shape).astype(np.float32)
    drift = rng.normal(0.0, 0.02, shape)
    noise = rng.normal(0.0, 0.05, (steps,) + shape)
    for scale, factor in GRAD_SCALES.items():
      grads[f'{scale}/{path}'] = (factor * (drift + noise)).astype(np.float32)
  return params, grads


def nest(flat):
  tree = {}
  for path, value in flat.items():
    module, name = path.split('/')
    tree.setdefault(module, {})[name] = value
  return tree


def flatten(tree):
  return {f'{m}/{n}': v for m, sub in tree.items() for n, v in sub.items()}


def initial_params(params, zero_leaves):
  return {k: (np.zeros_like(v) if k in zero_leaves else v)
          for k, v in params.items()}


# --------------------------------------------------------------- oracle side
def run_oracle(data_path: str, out_path: str) -> None:
  """Runs every config with real flax.optim (flax 0.5.3)."""
  import dataclasses
  import warnings
  warnings.simplefilter('ignore')
  from flax import optim
  import jax

  warnings.simplefilter('ignore')  # flax.optim turned its own warnings on.

  data = np.load(data_path)
  steps = int(data['steps'])
  params = {k: data['p/' + k] for k in SHAPES}
  final, hyper = {}, {}
  step_fn = jax.jit(lambda opt, g: opt.apply_gradient(g))
  for key, cls, kwargs, zero_leaves in configs():
    opt_def = getattr(optim, cls)(**kwargs)
    for scale in GRAD_SCALES:
      opt = opt_def.create(nest(initial_params(params, zero_leaves)))
      for t in range(steps):
        opt = step_fn(opt, nest(
            {k: data[f'g/{scale}/{k}'][t] for k in SHAPES}))
      for path, value in flatten(opt.target).items():
        final[f'{key}/{scale}/{path}'] = np.asarray(value)
    hyper[key] = {f.name: _plain(getattr(opt_def.hyper_params, f.name))
                  for f in dataclasses.fields(opt_def.hyper_params)}
  np.savez(out_path, **final)
  import flax
  with open(out_path + '.json', 'w', encoding='utf-8') as f:
    json.dump({'hyper_params': hyper,
               'versions': {'flax': flax.__version__,
                            'jax': jax.__version__}}, f)


def _plain(value):
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  return float(value)


# ------------------------------------------------------------------ dev side
def run_stock(params, grads, steps: int, scale: str, expression: str,
              zero_leaves):
  import jax
  import optax
  tx = eval(expression, {'optax': optax})
  p = nest(initial_params(params, zero_leaves))
  state = tx.init(p)

  @jax.jit
  def step(p, state, g):
    updates, state = tx.update(g, state, p)
    return optax.apply_updates(p, updates), state

  for t in range(steps):
    p, state = step(p, state,
                    nest({k: grads[f'{scale}/{k}'][t] for k in SHAPES}))
  return {k: np.asarray(v) for k, v in flatten(p).items()}


def run_exit(params, grads, steps: int, scale: str, cls: str, kwargs,
             zero_leaves):
  """(legacy final, stock final): this library's ``cls(**kwargs)`` runs
  EXIT_STEP steps, then continues both as itself and as the stock transform
  ``compat.to_stock_optax`` converts it to."""
  import warnings

  import jax
  import optax

  import compat
  import legacy_optim

  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # the deprecation warnings
    optimizer = getattr(legacy_optim, cls)(**kwargs).create(
        nest(initial_params(params, zero_leaves)))
  legacy_step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  grad = lambda t: nest({k: grads[f'{scale}/{k}'][t] for k in SHAPES})
  for t in range(EXIT_STEP):
    optimizer = legacy_step(optimizer, grad(t))
  tx, state, _ = compat.to_stock_optax(optimizer, closest=True)
  p = optimizer.target

  @jax.jit
  def stock_step(p, state, g):
    updates, state = tx.update(g, state, p)
    return optax.apply_updates(p, updates), state

  for t in range(EXIT_STEP, steps):
    optimizer = legacy_step(optimizer, grad(t))
    p, state = stock_step(p, state, grad(t))
  return ({k: np.asarray(v) for k, v in flatten(optimizer.target).items()},
          {k: np.asarray(v) for k, v in flatten(p).items()})


def relative_error(p0, flax_final, optax_final) -> float:
  """max over leaves of |dp_optax - dp_flax| / max(|dp_flax|, |dp_optax|).

  The larger norm in the denominator keeps the number finite (at most 2) when
  one side does not move at all (LAMB on a zero parameter); when both agree
  it is the plain relative error.
  """
  worst = 0.0
  for path in SHAPES:
    ref = flax_final[path].astype(np.float64) - p0[path]
    got = optax_final[path].astype(np.float64) - p0[path]
    denom = max(np.linalg.norm(ref), np.linalg.norm(got))
    if denom > 0:
      worst = max(worst, float(np.linalg.norm(got - ref) / denom))
  return worst


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--oracle-python', default=ORACLE_PYTHON)
  parser.add_argument('--steps', type=int, default=STEPS)
  parser.add_argument('--out', default=DEFAULT_OUT)
  parser.add_argument('--oracle', nargs=2, metavar=('DATA', 'OUT'),
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.oracle:
    run_oracle(*args.oracle)
    return 0

  import jax
  import optax
  catalogue = _catalogue()

  params, grads = make_data(args.steps)
  with tempfile.TemporaryDirectory() as tmp:
    data_path = os.path.join(tmp, 'data.npz')
    out_path = os.path.join(tmp, 'flax.npz')
    np.savez(data_path, steps=args.steps,
             **{'p/' + k: v for k, v in params.items()},
             **{'g/' + k: v for k, v in grads.items()})
    subprocess.run([args.oracle_python, os.path.abspath(__file__), '--oracle',
                    data_path, out_path], check=True)
    flax_final = dict(np.load(out_path))
    with open(out_path + '.json', encoding='utf-8') as f:
      oracle = json.load(f)

  results = {}
  for key, cls, kwargs, zero_leaves in configs():
    hp = oracle['hyper_params'][key]
    stock = catalogue.stock_optax(cls, hp)
    p0 = initial_params(params, zero_leaves)
    per_scale, exit_per_scale = {}, {}
    for scale in GRAD_SCALES:
      optax_final = run_stock(params, grads, args.steps, scale,
                              stock.expression, zero_leaves)
      per_scale[scale] = relative_error(
          p0, {k: flax_final[f'{key}/{scale}/{k}'] for k in SHAPES},
          optax_final)
      exit_per_scale[scale] = relative_error(
          p0, *run_exit(params, grads, args.steps, scale, cls, kwargs,
                        zero_leaves))
    results[key] = {
        'hyper_params': hp,
        'stock': stock.expression,
        'rel_err': max(per_scale.values()),
        'rel_err_by_grad_scale': per_scale,
        'exit_rel_err': max(exit_per_scale.values()),
        'exit_rel_err_by_grad_scale': exit_per_scale,
        'note': stock.note,
        'zero_initialised': list(zero_leaves),
    }
  for algorithm in catalogue.BUILT_INS:
    if not algorithm.stock:
      results[algorithm.module] = {
          'hyper_params': None, 'stock': None, 'rel_err': None,
          'rel_err_by_grad_scale': None, 'exit_rel_err': None,
          'exit_rel_err_by_grad_scale': None, 'zero_initialised': [],
          'note': catalogue.REPLACEMENTS[algorithm.module].text}

  report = {
      'description': (
          'Relative error of the accumulated update |dp_optax - dp_flax| / '
          'max(|dp_flax|, |dp_optax|) (dp = p_final - p_0, per leaf, max over '
          'leaves) of the nearest stock Optax expression vs real flax.optim, '
          'float32, on fixed gradient sequences; rel_err is the max over the '
          'gradient scales. exit_rel_err: the same metric between this '
          "library's legacy run and its stock exit (legacy steps before "
          'exit_step, compat.to_stock_optax, then stock vs legacy to the last '
          'step) on the stock versions below: what continuing with the stock '
          'state changes. Written by scripts/stock_optax_deviation.py.'),
      'steps': args.steps,
      'exit_step': EXIT_STEP,
      'seed': SEED,
      'shapes': {k: list(v) for k, v in SHAPES.items()},
      'grad_scales': GRAD_SCALES,
      'versions': {'oracle': oracle['versions'],
                   'stock': {'optax': optax.__version__,
                             'jax': jax.__version__}},
      'results': results,
  }
  with open(args.out, 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1, sort_keys=True)
    f.write('\n')
  width = max(map(len, results))
  print(f'{"variant":<{width}}  ' + '  '.join(
      f'{column:>8}' for column in (*GRAD_SCALES, 'exit')) +
        '  stock Optax expression')
  for key, r in results.items():
    errs = r['rel_err_by_grad_scale'] or dict.fromkeys(GRAD_SCALES)
    cells = '  '.join(_cell(e) for e in (*errs.values(), r['exit_rel_err']))
    print(f'{key:<{width}}  {cells}  {r["stock"] or r["note"]}')
  print(f'wrote {args.out}')
  return 0


def _cell(error) -> str:
  return '     n/a' if error is None else f'{error:8.2g}'


if __name__ == '__main__':
  sys.exit(main())
