"""``scan`` against ``ast.parse`` alone, side by side (BENCHMARKS.md).

Each measurement runs in a fresh process (no warm caches from another
variant), the variants alternate their order between runs, and the table
gives medians: files per second (wall), CPU seconds (the process and its
workers), and the ratios the issue asks for: ``scan -j 1`` CPU over
``ast.parse`` CPU (one core), and ``scan -j 1`` wall over ``scan -j 2``
wall. ``ast.parse`` reads and parses the same files (scan's own file walk;
a notebook: ``json.loads`` and its code cells joined, the least any parse
of them costs).

  python benchmarks/scan_speed.py --generate 10000 --runs 3
  python benchmarks/scan_speed.py --tree path/to/research/repo --runs 3
  python benchmarks/scan_speed.py --mirrors ../shared/mirrors --files 3000
  python benchmarks/scan_speed.py --each path/to/repositories --runs 1

``--mirrors DIR --files N`` measures a tree of real JAX code: the .py files
and notebooks of every mirror in DIR (``owner+name`` bare git directories,
their branch ``pinned`` or flax's tag ``v0.3.3``; tests/corpus), extracted
whole, copied again side by side until the tree holds N files (the mirrors
hold about 1,600: a copy's modules are the same code at other paths).
Its copies make every module name ambiguous, so no import resolves from
one module of a repository to another there and the project's model
(links, the givers' fixpoints) has little to do: ``--each DIR`` measures
each directory in DIR as its own project, as a user scans one repository
(``--each`` over the tree's first copy), and sums them.

``--generate N`` writes a tree of N modules of the kinds a JAX research
repository has (linen models, Optax training loops, configs, utilities;
one in twenty still on flax.optim and the removed jax names) into a
temporary directory, deterministically.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MODEL = '''\
"""Model {i}."""
import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp


class MlpBlock{i}(nn.Module):
  mlp_dim: int
  dropout_rate: float = 0.1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs, *, deterministic):
    x = nn.Dense(self.mlp_dim, dtype=self.dtype)(inputs)
    x = nn.gelu(x)
    x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=deterministic)
    output = nn.Dense(inputs.shape[-1], dtype=self.dtype)(x)
    return nn.Dropout(rate=self.dropout_rate)(output,
                                              deterministic=deterministic)


class Encoder{i}(nn.Module):
  num_layers: int
  mlp_dim: int
  num_heads: int
  attention_fn: Optional[Callable] = None

  @nn.compact
  def __call__(self, x, *, train: bool):
    for layer in range(self.num_layers):
      y = nn.LayerNorm(name=f'norm_{{layer}}')(x)
      y = nn.SelfAttention(num_heads=self.num_heads,
                           deterministic=not train)(y)
      x = x + y
      y = nn.LayerNorm()(x)
      y = MlpBlock{i}(mlp_dim=self.mlp_dim)(y, deterministic=not train)
      x = x + y
    return nn.LayerNorm(name='encoder_norm')(x)


def init_{i}(rng, shape):
  model = Encoder{i}(num_layers=2, mlp_dim=64, num_heads=4)
  variables = model.init(rng, jnp.zeros(shape), train=False)
  count = sum(x.size for x in jax.tree_util.tree_leaves(variables))
  return model, variables, functools.partial(model.apply, train=False), count
'''

_TRAIN = '''\
"""Training loop {i}."""
from absl import logging
from flax.training import checkpoints
from flax.training import train_state
import jax
import jax.numpy as jnp
import optax


def create_state_{i}(model, params, learning_rate):
  schedule = optax.warmup_cosine_decay_schedule(0., learning_rate, 100, 1000)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule))
  return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                       tx=tx)


@jax.jit
def train_step_{i}(state, batch):
  def loss_fn(params):
    logits = state.apply_fn({{'params': params}}, batch['image'])
    one_hot = jax.nn.one_hot(batch['label'], logits.shape[-1])
    return -jnp.mean(jnp.sum(one_hot * jax.nn.log_softmax(logits), -1))
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  grads = jax.tree_util.tree_map(lambda g: g / 2., grads)
  return state.apply_gradients(grads=grads), loss


def train_{i}(state, batches, workdir, steps=100):
  for step, batch in zip(range(steps), batches):
    state, loss = train_step_{i}(state, batch)
    if step % 10 == 0:
      logging.info('step %d loss %f', step, loss)
      checkpoints.save_checkpoint(workdir, state, step, keep=3)
  return state
'''

_CONFIG = '''\
"""Config {i}."""
import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.experiment_name = 'run_{i}'
  config.batch_size = {batch}
  config.num_training_epochs = 90
  config.log_eval_steps = 1000
  config.model = ml_collections.ConfigDict()
  config.model.hidden_size = 768
  config.model.num_heads = 12
  config.model.mlp_dim = 3072
  config.model.num_layers = 12
  config.lr_configs = ml_collections.ConfigDict()
  config.lr_configs.base_learning_rate = 1e-3
  config.lr_configs.warmup_steps = 10_000
  return config
'''

_UTILS = '''\
"""Utilities {i}."""
import numpy as np


def normalize_{i}(images, mean=(0.485, 0.456, 0.406)):
  images = np.asarray(images, np.float32) / 255.
  return (images - np.array(mean)) / np.array([0.229, 0.224, 0.225])


def batches_{i}(data, batch_size, *, shuffle=True, seed=0):
  order = np.random.RandomState(seed).permutation(len(data)) if shuffle \\
      else np.arange(len(data))
  for start in range(0, len(order) - batch_size + 1, batch_size):
    yield {{key: value[order[start:start + batch_size]]
           for key, value in data.items()}}
'''

_LEGACY = '''\
"""A training loop still on flax.optim ({i})."""
from flax import optim
import jax


def make_optimizer_{i}(params, learning_rate):
  opt_def = optim.Adam(learning_rate, weight_decay=1e-4)
  return opt_def.create(params)


def step_{i}(optimizer, grads):
  grads = jax.tree_map(lambda g: g * 0.5, grads)
  return optimizer.apply_gradient(grads)
'''

_KINDS = (_MODEL, _TRAIN, _CONFIG, _UTILS)


def generate(directory: str, count: int) -> None:
  """``count`` modules in packages of 50 under ``directory``."""
  for i in range(count):
    package = os.path.join(directory, f'project{i // 500}', f'lib{i // 50}')
    os.makedirs(package, exist_ok=True)
    template = _LEGACY if i % 20 == 19 else _KINDS[i % len(_KINDS)]
    with open(os.path.join(package, f'module_{i}.py'), 'w') as f:
      f.write(template.format(i=i, batch=32 * (1 + i % 8)))


def extract_mirrors(mirrors: str, directory: str, count: int) -> int:
  """Writes the Python files and notebooks of each mirror into
  ``directory``, in copies until there are ``count``; the number written."""
  trees = []
  for name in sorted(os.listdir(mirrors)):
    git_dir = os.path.join(mirrors, name)
    for ref in ('pinned', 'v0.3.3'):
      listing = subprocess.run(
          ['git', '--git-dir', git_dir, 'ls-tree', '-r', '-l', ref],
          capture_output=True, text=True, check=False)
      if listing.returncode == 0:
        # '<mode> blob <sha> <size>\t<path>'; no size ('-', 'BAD'): a blob
        # the mirror left out
        rows = [line.split('\t', 1) for line in listing.stdout.splitlines()]
        files = [path for meta, path in rows if path.endswith(
            ('.py', '.ipynb')) and meta.split()[-1].isdigit()]
        trees.append((git_dir, ref, name, files))
        break
  written = copy = 0
  while written < count and any(files for *_, files in trees):
    for git_dir, ref, name, files in trees:
      target = os.path.join(directory, f'copy{copy}', name)
      os.makedirs(target)
      archive = subprocess.run(
          ['git', '--git-dir', git_dir, 'archive', ref, '--', *files],
          capture_output=True, check=True)
      subprocess.run(['tar', '-x', '-C', target], input=archive.stdout,
                     check=True)
      written += len(files)
    copy += 1
  return written


_CHILD = r'''
import ast, json, os, resource, sys, time
sys.path.insert(0, {root!r})
from compat.codemod import scan
variant, paths = sys.argv[1], sys.argv[2:]

def cpu():
  own = resource.getrusage(resource.RUSAGE_SELF)
  workers = resource.getrusage(resource.RUSAGE_CHILDREN)
  return sum((own.ru_utime, own.ru_stime, workers.ru_utime, workers.ru_stime))

wall, start = time.perf_counter(), cpu()
if variant == 'ast.parse':
  files = 0
  for root in paths:
    for path in scan.iter_python_files([root], suffixes=scan.SOURCE_SUFFIXES):
      with open(path, 'rb') as f:
        source = f.read()
      try:
        if path.endswith('.ipynb'):  # the least a parse of its code costs
          source = '\n'.join(''.join(cell['source']) for cell in json.loads(
              source)['cells'] if cell['cell_type'] == 'code')
        ast.parse(source, filename=path)
      except (SyntaxError, ValueError, KeyError, TypeError):
        pass
      files += 1
  findings = None
else:
  result = scan.scan_paths(paths, jobs=int(variant.split()[-1]))
  files, findings = result.files_scanned, len(result.findings)
print(json.dumps({{'variant': variant, 'files': files, 'findings': findings,
                  'wall': time.perf_counter() - wall, 'cpu': cpu() - start}}))
'''

VARIANTS = ('ast.parse', 'scan -j 1', 'scan -j 2')


def measure(paths, runs: int) -> dict:
  """``{variant: [one dict per run]}``, variants alternating their order."""
  child = _CHILD.format(root=ROOT)
  results: dict = {v: [] for v in VARIANTS}
  for run in range(runs):
    order = VARIANTS[run % 3:] + VARIANTS[:run % 3]
    for variant in order:
      out = subprocess.run([sys.executable, '-c', child, variant, *paths],
                           check=True, capture_output=True, text=True)
      results[variant].append(json.loads(out.stdout))
  return results


def medians(results: dict) -> dict:
  """``{variant: {'wall': s, 'cpu': s}}``: the medians of ``measure``'s
  runs."""
  return {v: {k: statistics.median(r[k] for r in rows)
              for k in ('wall', 'cpu')} for v, rows in results.items()}


def table(name: str, results: dict) -> str:
  median = medians(results)
  files = results['ast.parse'][0]['files']
  lines = [f'{name}: {files} files, {len(results["ast.parse"])} runs, '
           f'load average {os.getloadavg()[0]:.1f}',
           'variant    | files/s (wall) | wall s | CPU s | CPU / ast.parse',
           '---------- | -------------- | ------ | ----- | ---------------']
  for variant in VARIANTS:
    m = median[variant]
    lines.append(f'{variant:<10} | {files / m["wall"]:>14,.0f} | '
                 f'{m["wall"]:>6.2f} | {m["cpu"]:>5.2f} | '
                 f'{m["cpu"] / median["ast.parse"]["cpu"]:.2f}x')
  findings = {r['findings'] for v in VARIANTS[1:] for r in results[v]}
  speedup = median['scan -j 1']['wall'] / median['scan -j 2']['wall']
  lines.append(f'scan -j 1 wall / scan -j 2 wall: {speedup:.2f}x; findings '
               f'in every scan run: {sorted(findings)}')
  return '\n'.join(lines)


def summed(trees: dict) -> str:
  """The line for ``trees`` each measured as its own project (``{tree:
  measure's results}``): each variant's median CPU summed over them, and
  ``scan -j 1``'s sum over ``ast.parse``'s."""
  total = {v: sum(medians(results)[v]['cpu'] for results in trees.values())
           for v in VARIANTS}
  return (f'{len(trees)} trees, each its own project: ' + ', '.join(
      f'{v} {total[v]:.2f} CPU s' for v in VARIANTS) +
          f'; scan -j 1 / ast.parse: '
          f'{total["scan -j 1"] / total["ast.parse"]:.2f}x')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--generate', type=int, metavar='N',
                      help='measure a generated tree of N modules')
  parser.add_argument('--tree', action='append', default=[],
                      help='measure this directory (repeatable)')
  parser.add_argument('--mirrors', metavar='DIR',
                      help='measure a tree of the mirrors\' real code')
  parser.add_argument('--files', type=int, default=3000,
                      help='with --mirrors: copies until this many files')
  parser.add_argument('--each', metavar='DIR',
                      help='measure each directory in DIR as its own '
                      'project (one repository at a time, as a user scans '
                      'it), then their sums')
  parser.add_argument('--runs', type=int, default=3)
  parser.add_argument('--json', metavar='FILE', help='write raw figures')
  args = parser.parse_args(argv)
  raw = {}
  if args.generate:
    with tempfile.TemporaryDirectory() as directory:
      generate(directory, args.generate)
      name = f'generated tree ({args.generate} modules)'
      raw[name] = measure([directory], args.runs)
      print(table(name, raw[name]), flush=True)
  if args.mirrors:
    with tempfile.TemporaryDirectory() as directory:
      files = extract_mirrors(args.mirrors, directory, args.files)
      name = f'mirrors\' real code ({files} files)'
      raw[name] = measure([directory], args.runs)
      print(table(name, raw[name]), flush=True)
  for tree in args.tree:
    raw[tree] = measure([tree], args.runs)
    print(table(tree, raw[tree]), flush=True)
  if args.each:
    each = {}
    for tree in sorted(e.path for e in os.scandir(args.each) if e.is_dir()):
      each[tree] = raw[tree] = measure([tree], args.runs)
      print(table(tree, each[tree]), flush=True)
    print(summed(each), flush=True)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(raw, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
