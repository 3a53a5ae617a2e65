"""The benchmark workloads: parameter trees as NumPy arrays.

Pure NumPy, so the same trees are built in today's environment and in the
flax 0.5.3 oracle environment (numpy < 2, jax 0.4.13).

* ``resnet50``: the 161 parameter arrays of ResNet-50 (convolution kernels,
  batch-norm scales and biases, the classifier), 25.6M float32 params.
* ``small2000``: 2,000 small leaves (0.3M params): per-leaf overheads.
* ``big64m``: one 8192 x 8192 leaf (67.1M params): memory bandwidth.
* ``small1k``, ``small4k``, ``small10k``: 1,000 to 10,000 leaves of 16 x 16,
  for the first eager step.
"""

import numpy as np

WORKLOADS = ('resnet50', 'small2000', 'big64m')


def _conv_bn(shapes, name, kh, kw, cin, cout):
  shapes[name] = {'kernel': (kh, kw, cin, cout)}
  shapes[name + '_bn'] = {'scale': (cout,), 'bias': (cout,)}


def resnet50_shapes():
  """Nested dict of ResNet-50 parameter shapes (bottleneck v1.5 layout)."""
  shapes = {}
  _conv_bn(shapes, 'stem', 7, 7, 3, 64)
  cin = 64
  for stage, (blocks, width) in enumerate(
      zip((3, 4, 6, 3), (64, 128, 256, 512))):
    for block in range(blocks):
      unit = {}
      _conv_bn(unit, 'conv1', 1, 1, cin, width)
      _conv_bn(unit, 'conv2', 3, 3, width, width)
      _conv_bn(unit, 'conv3', 1, 1, width, 4 * width)
      if block == 0:
        _conv_bn(unit, 'proj', 1, 1, cin, 4 * width)
      shapes[f'stage{stage + 1}_block{block + 1}'] = unit
      cin = 4 * width
  shapes['head'] = {'kernel': (cin, 1000), 'bias': (1000,)}
  return shapes


def small2000_shapes():
  cycle = ((64,), (16, 16), (8, 24), (128,), (4, 4, 8))
  return {f'leaf{i:04d}': cycle[i % len(cycle)] for i in range(2000)}


def big64m_shapes():
  return {'w': (8192, 8192)}


def small_shapes(count):
  """``count`` leaves of 16 x 16 (a notebook's many small layers)."""
  return lambda: {f'leaf{i:05d}': (16, 16) for i in range(count)}


SHAPES = {
    'resnet50': resnet50_shapes,
    'small2000': small2000_shapes,
    'big64m': big64m_shapes,
    # First eager steps (``eager_first_step.py``).
    'small1k': small_shapes(1000),
    'small4k': small_shapes(4000),
    'small10k': small_shapes(10000),
}


def _map_shapes(fn, shapes):
  if isinstance(shapes, dict):
    return {k: _map_shapes(fn, v) for k, v in shapes.items()}
  return fn(shapes)


def make(name, seed):
  """A float32 tree of the workload's shapes, standard normal, 0.01-scaled."""
  rng = np.random.default_rng(seed)
  return _map_shapes(
      lambda shape: (rng.standard_normal(shape, dtype=np.float32)
                     * np.float32(0.01)),
      SHAPES[name]())


def leaves(tree):
  if isinstance(tree, dict):
    return [x for k in sorted(tree) for x in leaves(tree[k])]
  return [tree]


def describe(name):
  shapes = leaves(_map_shapes(lambda s: s, SHAPES[name]()))
  n_params = sum(int(np.prod(s)) for s in shapes)
  return len(shapes), n_params
