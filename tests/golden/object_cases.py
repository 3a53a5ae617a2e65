"""The Optimizer-object cases: flax 0.5.3's pytrees, pickles and prefix trees.

Importable with Python, NumPy and JAX (any version), in both environments:
the oracle venv
(real flax 0.5.3, ``generate_objects.py`` writes ``objects.json``,
``objects.npz`` and ``objects_pickles.npz``) and today's stack
(``tests/test_legacy_objects.py`` reads them). Optimizer specs are those of
``cases.py`` (built by ``cases.build_optimizer_def``).

The neutral form of a pytree, the same whatever JAX calls its keys:

  path        list of steps from the root: ``['attr', name]`` (a dataclass
              field), ``['key', k]`` (a dict key), ``['index', i]`` (a list
              or tuple position).
  node_types  the class ``__name__`` of every node the path passes through
              (root first), one per step.
  leaves      ``{'path', 'node_types', 'dtype', 'shape'}`` in flatten order.
  empty       ``{'path', 'node_types', 'type'}`` for nodes without children
              (``None``, ``()``, ``{}``), in flatten order: they hold no leaf
              but are part of the structure.
"""

import jax
import jax.numpy as jnp
import numpy as np

from golden import cases


class Leaf:
  """An array leaf of a tree spec (``shape`` only; values are made here)."""

  __slots__ = ('shape',)

  def __init__(self, *shape):
    self.shape = shape


# A dict with a list and a tuple inside; 2-D, 1-D and scalar leaves. Few
# distinct shapes: the test steps op by op, compiling each op once per shape.
TREE = {
    'dense': {'kernel': Leaf(3, 2), 'bias': Leaf(2)},
    'blocks': [Leaf(3, 2), (Leaf(2), Leaf())],
    'scale': Leaf(),
}
# flax 0.5.3's WeightNorm fails on scalar leaves (IndexError on shape[-1]), so
# its cases use rank >= 1 leaves only: 2-D (normalized) and 1-D (kept as is).
WN_TREE = {
    'dense': {'kernel': Leaf(3, 2), 'bias': Leaf(2)},
    'blocks': [Leaf(3, 2), (Leaf(2), Leaf(3, 2))],
}


def _case(name, optimizer, tree='TREE', focus=None, pickle=False,
          vmap=False):
  return {'name': name, 'optimizer': optimizer, 'tree': tree, 'focus': focus,
          'pickle': pickle, 'vmap': vmap}


_opt = cases.opt
KERNELS = cases.path_contains('kernel')
BIASES = cases.path_contains('bias')

CASES = [
    _case('sgd', _opt('GradientDescent', learning_rate=0.1), pickle=True),
    _case('momentum', _opt('Momentum', learning_rate=0.1, beta=0.9),
          pickle=True),
    _case('momentum_nesterov',
          _opt('Momentum', learning_rate=0.1, beta=0.8, nesterov=True)),
    _case('adam', _opt('Adam', learning_rate=0.01), pickle=True, vmap=True),
    _case('adabelief', _opt('AdaBelief', learning_rate=0.01)),
    _case('adadelta', _opt('Adadelta', learning_rate=1.0)),
    # min_dim_size_to_factor lowered so that the small 2-D leaves factor.
    _case('adafactor_factored',
          _opt('Adafactor', learning_rate=0.01, min_dim_size_to_factor=2),
          pickle=True),
    _case('adafactor_unfactored',
          _opt('Adafactor', learning_rate=0.01, factored=False)),
    _case('adafactor_momentum',
          _opt('Adafactor', learning_rate=0.01, beta1=0.9,
               min_dim_size_to_factor=2)),
    _case('adagrad', _opt('Adagrad', learning_rate=0.1)),
    _case('lamb', _opt('LAMB', learning_rate=0.01)),
    _case('lars', _opt('LARS', learning_rate=0.1)),
    _case('rmsprop', _opt('RMSProp', learning_rate=0.01)),
    _case('rmsprop_centered',
          _opt('RMSProp', learning_rate=0.01, centered=True), pickle=True),
    _case('weightnorm_adam',
          cases.weight_norm(_opt('Adam', learning_rate=0.01), wn_decay=1e-3),
          tree='WN_TREE', pickle=True, vmap=True),
    _case('weightnorm_momentum',
          cases.weight_norm(_opt('Momentum', learning_rate=0.05)),
          tree='WN_TREE'),
    # 'blocks' and 'scale' are owned by no sub-optimizer.
    _case('multi_adam_momentum',
          cases.multi((KERNELS, _opt('Adam', learning_rate=0.01)),
                      (BIASES, _opt('Momentum', learning_rate=0.1))),
          vmap=True),
    _case('multi_sgd_rmsprop',
          cases.multi((KERNELS, _opt('GradientDescent', learning_rate=0.1)),
                      (cases.path_contains('bias', 'scale'),
                       _opt('RMSProp', learning_rate=0.01)))),
    _case('focus_adam', _opt('Adam', learning_rate=0.01), focus=KERNELS,
          vmap=True),
    _case('focus_momentum', _opt('Momentum', learning_rate=0.1),
          focus=BIASES),
]
CASES_BY_NAME = {case['name']: case for case in CASES}
if len(CASES_BY_NAME) != len(CASES):
  raise ValueError('duplicate case names in object_cases.CASES')


def _values(tree, offset: float, counter: list):
  if isinstance(tree, Leaf):
    index = counter[0]
    counter[0] += 1
    size = int(np.prod(tree.shape, dtype=np.int64))
    # Distinct, non-zero, well-scaled values; no RNG stream to drift.
    flat = (np.arange(size, dtype=np.float64) % 5 - 1.7) * 0.3
    return (flat + offset * (index + 1)).astype(np.float32).reshape(tree.shape)
  if isinstance(tree, dict):
    return {key: _values(tree[key], offset, counter) for key in tree}
  return type(tree)(_values(sub, offset, counter) for sub in tree)


TREES = {'TREE': TREE, 'WN_TREE': WN_TREE}


def params(case) -> dict:
  """The case's tree with float32 NumPy leaves: the target it starts from."""
  return _values(TREES[case['tree']], 0.11, [0])


def grads(case, step: int) -> dict:
  """The case's fixed gradient of step ``step`` (0 or 1)."""
  return _values(TREES[case['tree']], -0.05 - 0.2 * step, [0])


def descriptor(node) -> str:
  """What an ``is_leaf``-stopped ``tree_map`` function receives, in words."""
  if hasattr(node, '__dataclass_fields__'):
    return f'{type(node).__name__}({",".join(node.__dataclass_fields__)})'
  if hasattr(node, 'shape') and hasattr(node, 'dtype'):
    return f'array{list(node.shape)}'
  return type(node).__name__


def is_param_state(node) -> bool:
  """The ``is_leaf`` of the recorded ``tree_map``: per-parameter states."""
  return type(node).__name__.endswith('ParamState')


def batched_state(created, stepped):
  """``stepped.state`` with every per-parameter leaf stacked with ``created``'s
  on a new axis 0; the step stays unbatched."""
  param_states = jax.tree_util.tree_map(
      lambda a, b: jnp.stack([a, b]), created.state.param_states,
      stepped.state.param_states)
  return stepped.state.replace(param_states=param_states)


def vmapped(state):
  """The recorded ``jax.vmap``: an ``OptimizerState(None, 0)`` prefix tree
  maps over param_states and broadcasts the step."""
  def per_example(s):
    return jax.tree_util.tree_map(lambda x: jnp.sum(x * x) + s.step,
                                  s.param_states)
  in_axes = (type(state)(step=None, param_states=0),)
  return jax.vmap(per_example, in_axes=in_axes)(state)


def is_empty_node(node) -> bool:
  """Nodes with no children: ``None`` and empty containers."""
  return node is None or (isinstance(node, (dict, list, tuple)) and
                          len(node) == 0)


def at_path(tree, path):
  """The node of ``tree`` at a neutral ``path``."""
  node = tree
  for kind, key in path:
    node = getattr(node, key) if kind == 'attr' else node[key]
  return node


def node_types(tree, path) -> list:
  """Class names of the nodes ``path`` passes through, root first."""
  names = []
  node = tree
  for step in path:
    names.append(type(node).__name__)
    node = at_path(node, [step])
  return names


def paths(form) -> list:
  """Every path of a neutral form, leaves then empty nodes."""
  return [entry['path'] for entry in form['leaves'] + form['empty']]


def flat_key(case_name: str, kind: str, index: int) -> str:
  """Key of one leaf array in ``objects.npz``."""
  return f'{case_name}|{kind}|{index}'
