"""Records flax 0.5.3's Optimizer objects (``object_cases.py``) as data.

Run with the oracle interpreter (jax 0.4.13, flax 0.5.3, numpy<2)::

  $ORACLE_PYTHON tests/golden/generate_objects.py

For every case: the neutral form (see ``object_cases``) of the created
``Optimizer`` (checked to be that of the once-stepped one too), the stepped
optimizer's flat leaves, what
an ``is_leaf``-stopped ``tree_map`` over its state receives, and for some
cases a ``jax.vmap`` over a batched state with an ``OptimizerState(None, 0)``
prefix tree and pickles of the stepped optimizer (NumPy leaves and jax
leaves) with flax 0.5.3's result of one more ``apply_gradient``. Writes
``objects.json``, ``objects.npz`` (arrays) and ``objects_pickles.npz``
(pickle bytes) next to this file.

flax 0.5.3 registers its struct dataclasses' flatten without key names
(``register_pytree_node``), so the paths come from walking the dataclass
fields here. The walk is checked against jax's ``tree_leaves`` order (also
with empty nodes stopped as leaves) and against the attribute names flax
0.5.3 gave jax 0.4.13 separately (``register_keypaths``).
"""

import dataclasses
import json
import os
import pickle
import platform
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
warnings.simplefilter('ignore', DeprecationWarning)
warnings.simplefilter('ignore', FutureWarning)

import flax
from flax import optim
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from golden import cases
from golden import object_cases

HERE = os.path.dirname(os.path.abspath(__file__))
OBJECTS_JSON = os.path.join(HERE, 'objects.json')
OBJECTS_NPZ = os.path.join(HERE, 'objects.npz')
PICKLES_NPZ = os.path.join(HERE, 'objects_pickles.npz')


# ---------------------------------------------------------------- walking
def _children(node):
  """``[(step, child)]`` in jax's flatten order, or None for a leaf."""
  if isinstance(node, dict):
    return [(['key', key], node[key]) for key in sorted(node)]
  if isinstance(node, (list, tuple)) and not hasattr(node, '_fields'):
    return [(['index', i], child) for i, child in enumerate(node)]
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    return [(['attr', field.name], getattr(node, field.name))
            for field in dataclasses.fields(node)
            if field.metadata.get('pytree_node', True)]
  return None


def walk(tree):
  """(leaves, empty nodes, leaf objects, empty-node objects) in order."""
  leaves, empty, leaf_objects, ordered = [], [], [], []

  def visit(node, path, types):
    if node is None:
      children = []
    else:
      children = _children(node)
    if children is None:
      leaves.append({'path': path, 'node_types': types,
                     'dtype': np.asarray(node).dtype.name,
                     'shape': list(np.shape(node))})
      leaf_objects.append(node)
      ordered.append(node)
      return
    if not children:
      empty.append({'path': path, 'node_types': types,
                    'type': type(node).__name__})
      ordered.append(node)
      return
    for step, child in children:
      visit(child, path + [step], types + [type(node).__name__])

  visit(tree, [], [])
  return leaves, empty, leaf_objects, ordered


def _same_objects(left, right) -> bool:
  return len(left) == len(right) and all(a is b for a, b in zip(left, right))


def _jax_key_step(key):
  """A jax 0.4.13 key-path entry as a neutral step."""
  name = type(key).__name__
  if name == 'AttributeKeyPathEntry':  # what register_keypaths yields
    return ['attr', key.key]
  if name == 'DictKey':
    return ['key', key.key]
  if name == 'SequenceKey':
    return ['index', key.idx]
  raise ValueError(f'unexpected key {key!r}')


def neutral(tree) -> dict:
  """The neutral form of ``tree``, checked against jax's own flatten."""
  leaves, empty, leaf_objects, ordered = walk(tree)
  if not _same_objects(leaf_objects, jax.tree_util.tree_leaves(tree)):
    raise AssertionError('the field walk does not reproduce tree_leaves')
  with_empty = jax.tree_util.tree_leaves(
      tree, is_leaf=object_cases.is_empty_node)
  if not _same_objects(ordered, with_empty):
    raise AssertionError('the field walk misplaces empty nodes')
  # jax 0.4.13 also knows flax 0.5.3's attribute names (register_keypaths):
  # a second, independent source for the paths.
  jax_paths = [[_jax_key_step(k) for k in path] for path, _ in
               jax.tree_util.tree_flatten_with_path(tree)[0]]
  if jax_paths != [leaf['path'] for leaf in leaves]:
    raise AssertionError(f'paths differ from jax: {jax_paths}')
  return {'leaves': leaves, 'empty': empty}


# ---------------------------------------------------------------- records
def _host_leaves(tree) -> list:
  return [np.asarray(jax.device_get(leaf))
          for leaf in jax.tree_util.tree_leaves(tree)]


def _is_leaf_record(optimizer) -> dict:
  received = jax.tree_util.tree_map(object_cases.descriptor, optimizer.state,
                                    is_leaf=object_cases.is_param_state)
  leaves, empty, values, _ = walk(received)
  return {'leaves': [{'path': leaf['path'], 'node_types': leaf['node_types'],
                      'value': value} for leaf, value in zip(leaves, values)],
          'empty': empty}


def _pickles(name, stepped, grads, arrays, pickles) -> dict:
  host = jax.device_get(stepped)
  record = {}
  for kind, obj in (('numpy', host), ('jax', stepped)):
    try:
      data = pickle.dumps(obj, protocol=4)
    except Exception as error:
      record[kind] = f'{type(error).__name__}: {error}'
      continue
    if not _same_structure_and_values(pickle.loads(data), obj):
      raise AssertionError(f'{name}: flax 0.5.3 does not round-trip {kind}')
    pickles[f'{name}|{kind}'] = np.frombuffer(data, dtype=np.uint8)
    record[kind] = 'ok'
  following = host.apply_gradient(grads)
  # Same paths; dtypes recorded because flax 0.5.3 on NumPy 1.x turns a NumPy
  # int32 step into int64 here (NumPy's value-based casting of step + 1).
  record['next'] = neutral(following)
  if (object_cases.paths(record['next']) !=
      object_cases.paths(neutral(stepped))):
    raise AssertionError(f'{name}: one more step changed the structure')
  for i, leaf in enumerate(_host_leaves(following)):
    arrays[object_cases.flat_key(name, 'next', i)] = leaf
  return record


def _same_structure_and_values(left, right) -> bool:
  # Not the Optimizer itself: its treedef holds the optimizer_def, which
  # compares by identity.
  left, right = (left.state, left.target), (right.state, right.target)
  if jax.tree_util.tree_structure(left) != jax.tree_util.tree_structure(right):
    return False
  return all(np.array_equal(a, b) for a, b in
             zip(_host_leaves(left), _host_leaves(right)))


def record_case(case, arrays: dict, pickles: dict) -> dict:
  name = case['name']
  as_jax = lambda tree: jax.tree_util.tree_map(jnp.asarray, tree)
  opt_def = cases.build_optimizer_def(optim, traverse_util, case)
  focus = cases.build_focus(traverse_util, case)
  created = opt_def.create(as_jax(object_cases.params(case)), focus=focus)
  stepped = created.apply_gradient(as_jax(object_cases.grads(case, 0)))
  for i, leaf in enumerate(_host_leaves(stepped)):
    arrays[object_cases.flat_key(name, 'stepped', i)] = leaf
  structure = neutral(created)
  if neutral(stepped) != structure:
    raise AssertionError(f'{name}: apply_gradient changed the structure')
  entry = {
      'spec': {k: case[k] for k in ('optimizer', 'tree', 'focus')},
      'structure': structure,
      'is_leaf': _is_leaf_record(stepped),
  }
  if case['vmap']:
    result = object_cases.vmapped(
        object_cases.batched_state(created, stepped))
    for i, leaf in enumerate(_host_leaves(result)):
      arrays[object_cases.flat_key(name, 'vmap', i)] = leaf
    entry['vmap'] = neutral(result)
  if case['pickle']:
    entry['pickle'] = _pickles(name, stepped,
                               as_jax(object_cases.grads(case, 1)),
                               arrays, pickles)
  return entry


def _weight_norm_scalar_outcome() -> str:
  """What flax 0.5.3's WeightNorm does with a scalar leaf (recorded)."""
  try:
    optim.WeightNorm(optim.Adam(0.01)).create({'s': jnp.asarray(0.5)})
  except Exception as error:
    return type(error).__name__
  return 'ok'


def main() -> int:
  if flax.__version__ != '0.5.3':
    print(f'generate_objects.py needs flax 0.5.3, found {flax.__version__} '
          f'({sys.executable}).', file=sys.stderr)
    return 2
  warnings.simplefilter('ignore', DeprecationWarning)
  arrays, pickles, entries = {}, {}, {}
  for case in object_cases.CASES:
    entries[case['name']] = record_case(case, arrays, pickles)
    print(case['name'], flush=True)
  meta = {'flax': flax.__version__, 'jax': jax.__version__,
          'numpy': np.__version__, 'python': platform.python_version()}
  with open(OBJECTS_JSON, 'w') as f:
    json.dump({'generator': meta, 'cases': entries,
               'weight_norm_scalar_leaf': _weight_norm_scalar_outcome()},
              f, indent=None, separators=(',', ':'), sort_keys=True)
    f.write('\n')
  np.savez_compressed(OBJECTS_NPZ, **arrays)
  np.savez_compressed(PICKLES_NPZ, **pickles)
  sizes = {path: os.path.getsize(path)
           for path in (OBJECTS_JSON, OBJECTS_NPZ, PICKLES_NPZ)}
  print(', '.join(f'{os.path.basename(p)} {s / 1e3:.0f} kB'
                  for p, s in sizes.items()))
  return 0


if __name__ == '__main__':
  sys.exit(main())
