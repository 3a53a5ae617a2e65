"""Sharded optimizer state under jax.jit: compat.state_shardings.

The legacy ``Optimizer`` and its Optax state are plain pytrees that
``jax.jit`` places with ``NamedSharding``s, including optimizer state sharded
differently from the params (ZeRO-1: params replicated, state split over the
data axis). Multi-device cases run on 8 fake CPU devices in a child process
(see _devices.py); spec derivation and errors are checked here directly.
"""

import _devices
import chex
from flax import nnx
import jax
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax
import pytest

import compat
from compat.bridges import sharding
import legacy_optim as optim
from legacy_optim import traverse_util

N_DEVICES = 8
CASES = _devices.Cases(n_devices=N_DEVICES)


def _multi():
  kernels = traverse_util.ModelParamTraversal(lambda path, _: 'kernel' in path)
  others = traverse_util.ModelParamTraversal(
      lambda path, _: 'kernel' not in path)
  return optim.MultiOptimizer((kernels, optim.Adam(0.01)),
                              (others, optim.Momentum(0.1)))


ALGORITHMS = {
    'Momentum': lambda: optim.Momentum(0.1, beta=0.8, nesterov=True),
    'Adam': lambda: optim.Adam(0.01, weight_decay=1e-4),
    'Adafactor': lambda: optim.Adafactor(0.01, beta1=0.9,
                                         min_dim_size_to_factor=4),
    'LAMB': lambda: optim.LAMB(0.01, weight_decay=1e-3),
    'MultiOptimizer': _multi,
}


def _params():
  rng = np.random.default_rng(0)
  shapes = {'dense': {'kernel': (16, 24), 'bias': (24,)},
            'embed': (40, 8), 'odd': (5, 3)}
  return jax.tree_util.tree_map(
      lambda s: jnp.asarray(rng.standard_normal(s), jnp.float32), shapes,
      is_leaf=lambda x: isinstance(x, tuple))


def _grads(seed):
  rng = np.random.default_rng(100 + seed)
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), _params())


# Hand-derived ZeRO-1 specs over an 8-way axis: largest divisible dimension.
ZERO1_SPECS = {
    (16, 24): P(None, 'data'),  # 24 > 16, both divisible.
    (24,): P('data'),
    (40, 8): P('data'),
    (5, 3): P(),  # Nothing divisible by 8.
    (): P(),  # Step counts.
    (1,): P(),  # Adafactor's unused slots.
    (16,): P('data'),  # Adafactor row statistics of the kernel.
    (40,): P('data'),
    (8,): P('data'),  # Adafactor row statistics of the embedding.
}


def _data_mesh():
  return Mesh(np.array(jax.devices()), ('data',))


def _spec(sharding_):
  return P(*[e for e in sharding_.spec]) if sharding_.spec else P()


def _same_spec(a: P, b: P, ndim: int) -> bool:
  pad = lambda s: tuple(s) + (None,) * (ndim - len(s))
  return pad(a) == pad(b)


def _train(opt, steps=3, shardings=None):
  grad_sharding = None
  if shardings is not None:
    grad_sharding = jax.tree_util.tree_map(
        lambda _: NamedSharding(_data_mesh(), P()), _params())
  # Donating the sharded copy only: device_put may share buffers with the
  # unsharded optimizer it came from.
  step = jax.jit(lambda o, g: o.apply_gradient(g),
                 in_shardings=None if shardings is None else (
                     shardings, grad_sharding),
                 out_shardings=shardings,
                 donate_argnums=() if shardings is None else 0)
  for i in range(steps):
    opt = step(opt, _grads(i))
  return opt


@CASES.register(*ALGORITHMS)
def zero1_training_matches_unsharded(name):
  mesh = _data_mesh()
  opt = ALGORITHMS[name]().create(_params())
  shardings = compat.state_shardings(opt, mesh, 'zero1')
  placed = jax.device_put(opt, shardings)

  for leaf in jax.tree_util.tree_leaves(placed.target):
    assert leaf.sharding.is_fully_replicated
  state_bytes = device0_bytes = 0
  for leaf in jax.tree_util.tree_leaves(placed.state):
    expected = ZERO1_SPECS[leaf.shape]
    assert _same_spec(_spec(leaf.sharding), expected, leaf.ndim), (
        leaf.shape, leaf.sharding.spec)
    state_bytes += leaf.nbytes
    device0_bytes += sum(s.data.nbytes for s in leaf.addressable_shards
                         if s.device == jax.devices()[0])
  # Each split leaf keeps an eighth of its bytes on a device.
  expected_bytes = sum(
      leaf.nbytes // (N_DEVICES if ZERO1_SPECS[leaf.shape] != P() else 1)
      for leaf in jax.tree_util.tree_leaves(opt.state))
  assert device0_bytes == expected_bytes < state_bytes

  unsharded = _train(opt)
  sharded = _train(placed, shardings=shardings)
  for leaf, want in zip(jax.tree_util.tree_leaves(sharded),
                        jax.tree_util.tree_leaves(shardings)):
    assert leaf.sharding.is_equivalent_to(want, leaf.ndim)
  # Elementwise math is unchanged; norms (LAMB) sum in another order.
  chex.assert_trees_all_close(sharded.target, unsharded.target, rtol=1e-6,
                              atol=1e-6)
  chex.assert_trees_all_close(sharded.state, unsharded.state, rtol=1e-6,
                              atol=1e-6)


@CASES.register('Adam', 'Adafactor')
def zero1_optax_state_from_to_optax(name):
  """The raw Optax loop, state placed by state_shardings: same results."""
  mesh = _data_mesh()
  opt = ALGORITHMS[name]().create(_params())
  tx, opt_state = compat.to_optax(opt)
  state_sh = compat.state_shardings(opt_state, mesh, 'zero1')
  replicated = jax.tree_util.tree_map(
      lambda _: NamedSharding(mesh, P()), _params())

  def raw_step(p, s, g):
    updates, s = tx.update(g, s, p)
    return optax.apply_updates(p, updates), s

  raw_step = jax.jit(raw_step, in_shardings=(replicated, state_sh, replicated),
                     out_shardings=(replicated, state_sh))
  params, opt_state = _params(), jax.device_put(opt_state, state_sh)
  for i in range(3):
    params, opt_state = raw_step(params, opt_state, _grads(i))
  for leaf in jax.tree_util.tree_leaves(opt_state):
    assert _same_spec(_spec(leaf.sharding), ZERO1_SPECS[leaf.shape],
                      leaf.ndim), (leaf.shape, leaf.sharding.spec)
  legacy_sh = compat.state_shardings(opt, mesh, 'zero1')
  shim = _train(jax.device_put(opt, legacy_sh), shardings=legacy_sh)
  chex.assert_trees_all_close(params, shim.target, rtol=1e-6, atol=1e-6)


_TP_SPECS = {'dense': {'kernel': P(None, 'model'), 'bias': P('model')},
             'embed': P('model', None), 'odd': P()}


@CASES.register('Momentum', 'Adam', 'Adafactor', 'MultiOptimizer')
def state_follows_param_specs(name):
  """Tensor-parallel params (4 x 2 mesh): the state follows each param."""
  mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ('data', 'model'))
  opt = ALGORITHMS[name]().create(_params())
  shardings = compat.state_shardings(opt, mesh, _TP_SPECS)
  params_specs = jax.tree_util.tree_map(_spec, shardings.target)
  assert params_specs == _TP_SPECS
  for (path, leaf), sh in zip(
      jax.tree_util.tree_flatten_with_path(opt.state.param_states)[0],
      jax.tree_util.tree_leaves(shardings.state.param_states)):
    where = jax.tree_util.keystr(path)
    if where.startswith("['dense']['kernel']"):
      # (16, 24) kernel over 'model' on axis 1; Adafactor's rows (16,) drop
      # that axis, its columns (24,) keep it; unused (1,) slots replicate.
      want = {(16, 24): P(None, 'model'), (16,): P(),
              (24,): P('model'), (1,): P()}[leaf.shape]
    elif where.startswith("['dense']['bias']"):
      want = {(24,): P('model'), (1,): P()}[leaf.shape]
    elif where.startswith("['embed']"):
      want = {(40, 8): P('model', None), (40,): P('model'), (8,): P(),
              (1,): P()}[leaf.shape]
    else:
      want = P()
    assert _same_spec(_spec(sh), want, leaf.ndim), (where, sh.spec, want)
  sharded = jax.jit(lambda o, g: o.apply_gradient(g),
                    in_shardings=(shardings, None),
                    out_shardings=shardings)(jax.device_put(opt, shardings),
                                             _grads(0))
  chex.assert_trees_all_close(
      sharded.target, jax.jit(lambda o, g: o.apply_gradient(g))(
          opt, _grads(0)).target, rtol=1e-6, atol=1e-6)
  # The Optax state of the same optimizer pairs its leaves the same way.
  _, opt_state = compat.to_optax(opt)
  optax_sh = compat.state_shardings(opt_state, mesh, _TP_SPECS,
                                    params=opt.target)
  legacy_specs = sorted(
      (str(_spec(s)), l.shape) for s, l in zip(
          jax.tree_util.tree_leaves(shardings.state),
          jax.tree_util.tree_leaves(opt.state)))
  optax_specs = sorted(
      (str(_spec(s)), l.shape) for s, l in zip(
          jax.tree_util.tree_leaves(optax_sh),
          jax.tree_util.tree_leaves(opt_state)))
  if name != 'MultiOptimizer':  # Optax keeps one step count per sub-optimizer.
    assert legacy_specs == optax_specs


@CASES.register()
def callable_rule_places_chosen_leaves():
  mesh = _data_mesh()
  opt = optim.Adam(0.01).create(_params())

  def rule(path, leaf):
    if 'grad_sq_ema' in jax.tree_util.keystr(path) and leaf.shape[0] % 8 == 0:
      return P('data')
    return None

  shardings = compat.state_shardings(opt, mesh, rule)
  placed = jax.device_put(opt, shardings)
  for path, leaf in jax.tree_util.tree_flatten_with_path(placed)[0]:
    split = ('grad_sq_ema' in jax.tree_util.keystr(path) and
             leaf.shape[0] % 8 == 0)
    assert leaf.sharding.is_fully_replicated != split, path
  stepped = jax.jit(lambda o, g: o.apply_gradient(g), out_shardings=shardings)(
      placed, _grads(0))
  chex.assert_trees_all_close(
      stepped.target, jax.jit(lambda o, g: o.apply_gradient(g))(
          opt, _grads(0)).target, rtol=1e-6, atol=1e-6)


@CASES.register()
def create_directly_sharded_from_eval_shape():
  """No unsharded copy: jit(create) with out_shardings from eval_shape."""
  mesh = _data_mesh()
  opt_def = optim.Adam(0.01)
  create = lambda: opt_def.create(_params())
  shardings = compat.state_shardings(jax.eval_shape(create), mesh, 'zero1')
  opt = jax.jit(create, out_shardings=shardings)()
  for leaf in jax.tree_util.tree_leaves(opt.state):
    assert _same_spec(_spec(leaf.sharding), ZERO1_SPECS[leaf.shape],
                      leaf.ndim)


@CASES.register()
def train_state_zero1():
  mesh = _data_mesh()
  opt = optim.Adam(0.01).create(_params())
  state = compat.to_train_state(opt, apply_fn=None)
  shardings = compat.state_shardings(state, mesh, 'zero1')
  placed = jax.device_put(state, shardings)
  assert placed.step.sharding.is_fully_replicated
  for leaf in jax.tree_util.tree_leaves(placed.params):
    assert leaf.sharding.is_fully_replicated
  for leaf in jax.tree_util.tree_leaves(placed.opt_state):
    assert _same_spec(_spec(leaf.sharding), ZERO1_SPECS[leaf.shape],
                      leaf.ndim)
  stepped = jax.jit(lambda s, g: s.apply_gradients(grads=g),
                    out_shardings=shardings)(placed, _grads(0))
  chex.assert_trees_all_close(
      stepped.params, jax.jit(lambda o, g: o.apply_gradient(g))(
          opt, _grads(0)).target, rtol=1e-6, atol=1e-6)


# ------------------------------------------------- nnx.Optimizer, nnx.jit
class _NnxNet(nnx.Module):

  def __init__(self):
    self.linear = nnx.Linear(16, 24, rngs=nnx.Rngs(0))

  def __call__(self, x):
    return self.linear(x)


_NNX_X = jnp.asarray(np.random.default_rng(7).standard_normal((8, 16)),
                     jnp.float32)


def _nnx_run(place=None, steps=3):
  """Converts a legacy Adam run to nnx (``place(model)`` first, e.g. to put
  the params on a mesh, then ``place(model, nnx_opt)``) and steps it under
  nnx.jit; returns the model, optimizer and the params after each step."""
  dense = _params()['dense']
  legacy = optim.Adam(0.01, weight_decay=1e-4).create({'Dense_0': dense})
  legacy = jax.jit(lambda o, g: o.apply_gradient(g))(
      legacy, {'Dense_0': _grads(0)['dense']})
  model = _NnxNet()
  if place:
    place(model)
  nnx_opt = compat.to_nnx_optimizer(legacy, model,
                                    path_map={'Dense_0': 'linear'})
  if place:
    place(model, nnx_opt)

  @nnx.jit
  def step(model, nnx_opt):
    nnx_opt.update(model, nnx.grad(lambda m: jnp.mean(m(_NNX_X) ** 2))(model))

  trajectory = []
  for _ in range(steps):
    step(model, nnx_opt)
    trajectory.append(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  return model, nnx_opt, trajectory


# Measured over these 3 steps: 1.3e-6 (the partitioned gradient matmul sums
# in another order; the optimizer math itself is element-wise).
NNX_SHARDED_RTOL = 1e-5


def _assert_matches_unsharded(trajectory, expected, bit_identical):
  """Explicit-axis ZeRO-1 leaves the gradient computation as it was:
  bit-identical. Otherwise XLA may split the gradient matmul: within
  NNX_SHARDED_RTOL."""
  if bit_identical:
    chex.assert_trees_all_equal(trajectory, expected)
  else:
    chex.assert_trees_all_close(trajectory, expected, rtol=NNX_SHARDED_RTOL,
                                atol=1e-7)


@CASES.register('Explicit', 'Auto')
def nnx_zero1_under_nnx_jit(axis_type):
  _, _, expected = _nnx_run()
  mesh = jax.make_mesh((N_DEVICES,), ('data',),
                       axis_types=(getattr(AxisType, axis_type),))

  def zero1(model, nnx_opt=None):
    if nnx_opt is None:  # Params replicated on the mesh.
      nnx.update(model, jax.device_put(nnx.state(model),
                                       NamedSharding(mesh, P())))
      return
    state = nnx.as_pure(nnx.state(nnx_opt.opt_state))
    nnx.update(nnx_opt.opt_state, jax.device_put(
        state, compat.state_shardings(state, mesh, 'zero1')))

  with jax.set_mesh(mesh):
    model, nnx_opt, trajectory = _nnx_run(zero1)
  _assert_matches_unsharded(trajectory, expected,
                            bit_identical=axis_type == 'Explicit')
  assert model.linear.kernel[...].sharding.is_fully_replicated
  assert _spec(nnx_opt.opt_state.grad_ema['linear']['kernel'][...].sharding
              ) == P(None, 'data')


@CASES.register('Explicit', 'Auto')
def nnx_state_follows_sharded_params(axis_type):
  _, _, expected = _nnx_run()
  mesh = jax.make_mesh((N_DEVICES,), ('data',),
                       axis_types=(getattr(AxisType, axis_type),))
  specs = {'linear': {'kernel': P(None, 'data'), 'bias': P('data')}}

  def shard_params(model, nnx_opt=None):
    if nnx_opt is None:
      state = nnx.state(model, nnx.Param)
      nnx.update(model, jax.device_put(state, jax.tree_util.tree_map(
          lambda spec: NamedSharding(mesh, spec), nnx.State(specs))))

  with jax.set_mesh(mesh):
    model, nnx_opt, trajectory = _nnx_run(shard_params, steps=1)
    # Conversion keeps the params where they were and places the state so.
    for name, spec in specs['linear'].items():
      assert _spec(getattr(model.linear, name)[...].sharding) == spec
      for field in ('grad_ema', 'grad_sq_ema'):
        leaf = getattr(nnx_opt.opt_state, field)['linear'][name][...]
        assert _spec(leaf.sharding) == spec, (field, name, leaf.sharding)
    assert nnx_opt.opt_state.count[...].sharding.is_fully_replicated
    model, nnx_opt, trajectory = _nnx_run(shard_params)
  _assert_matches_unsharded(trajectory, expected, bit_identical=False)
  assert _spec(model.linear.kernel[...].sharding) == P(None, 'data')


# ZeRO-1 wherever the model's params start: off any mesh (as nnx.Rngs makes
# them), replicated on the mesh, or on another mesh; the state split either
# before the conversion (the legacy optimizer) or after it (the nnx state).
# The kernel is (24, 16): ZeRO-1 splits its rows, the dimension the forward
# matmul contracts, so params left split like the state fail the next step.
class _WideNet(nnx.Module):

  def __init__(self):
    self.linear = nnx.Linear(24, 16, rngs=nnx.Rngs(0))

  def __call__(self, x):
    return self.linear(x)


_WIDE_X = jnp.asarray(np.random.default_rng(8).standard_normal((8, 24)),
                      jnp.float32)


def _wide_legacy():
  rng = np.random.default_rng(3)
  params = {'Dense_0': {
      'kernel': jnp.asarray(rng.standard_normal((24, 16)), jnp.float32),
      'bias': jnp.zeros((16,), jnp.float32)}}
  legacy = optim.Adam(1e-3, weight_decay=1e-4).create(params)
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  for i in range(3):
    legacy = step(legacy, jax.tree_util.tree_map(
        lambda p, i=i: jnp.full_like(p, 0.1 * (i + 1)), params))
  return legacy


def _wide_run(mesh=None, params_at=None, order=None, steps=3):
  """Trains _WideNet from the legacy run with the cookbook nnx step; returns
  the model and the params after each step."""
  legacy = _wide_legacy()
  model = _WideNet()
  if params_at is not None:
    nnx.update(model, jax.device_put(nnx.state(model, nnx.Param),
                                     NamedSharding(params_at, P())))
  if order == 'shard_then_convert':
    legacy = jax.device_put(legacy,
                            compat.state_shardings(legacy, mesh, 'zero1'))
  nnx_opt = compat.to_nnx_optimizer(legacy, model,
                                    path_map={'Dense_0': 'linear'})
  if order == 'convert_then_shard':
    state = nnx.as_pure(nnx.state(nnx_opt.opt_state))
    nnx.update(nnx_opt.opt_state, jax.device_put(
        state, compat.state_shardings(state, mesh, 'zero1')))

  @nnx.jit
  def step(model, nnx_opt):
    _, grads = nnx.value_and_grad(
        lambda m: jnp.mean(m(_WIDE_X) ** 2))(model)
    nnx_opt.update(model, grads)

  trajectory = []
  for _ in range(steps):
    step(model, nnx_opt)
    trajectory.append(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  return model, trajectory


@CASES.register(*[f'{axes}-{at}-{order}'
                  for axes in ('Explicit', 'Auto')
                  for at in ('off_mesh', 'replicated', 'other_mesh')
                  for order in ('shard_then_convert', 'convert_then_shard')])
def nnx_zero1_keeps_the_params_where_they_are(variant):
  axes, at, order = variant.split('-')
  axis_type = getattr(AxisType, axes)
  mesh = jax.make_mesh((N_DEVICES,), ('data',), axis_types=(axis_type,))
  params_at = {'off_mesh': None, 'replicated': mesh,
               'other_mesh': Mesh(np.array(jax.devices()[:4]), ('data',),
                                  axis_types=(axis_type,))}[at]
  if at == 'other_mesh' and order == 'convert_then_shard':
    # jax refuses the step before it runs (the params' devices are not the
    # state's); neither the conversion nor state_shardings sees both.
    with pytest.raises(ValueError, match='incompatible devices|Mesh for all '
                       'inputs should be equal'):
      _wide_run(mesh, params_at, order, steps=1)
    return
  if variant == 'Auto-off_mesh-convert_then_shard':
    # Caught while the first step is traced, naming the param and the fix.
    with pytest.raises(ValueError, match=r'model param linear/\w+ is on no '
                       'mesh.*Put the params on the mesh before'):
      _wide_run(mesh, params_at, order, steps=1)
    return
  expected = _wide_run()[1]
  model, trajectory = _wide_run(mesh, params_at, order)
  # Off any mesh: the step (explicit axes) or the conversion (which writes
  # the legacy target, replicated by state_shardings) replicates them.
  before = NamedSharding(mesh if params_at is None else params_at, P())
  for leaf in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)):
    got = leaf[...].sharding
    assert got.is_equivalent_to(before, leaf.ndim), (got, before)
  # The first step of params off any mesh runs on other devices than the
  # later ones: within rounding there.
  _assert_matches_unsharded(
      trajectory, expected, bit_identical=axes == 'Explicit' and (
          at, order) != ('off_mesh', 'convert_then_shard'))


outcomes, test_on_8_devices = CASES.pytest_items(__file__)


# ------------------------------------------------ in process (one device)


@pytest.mark.parametrize('shape,axis_size,expected', [
    ((16, 24), 8, P(None, 'data')),
    ((24, 24), 8, P('data')),  # Ties: the first axis.
    ((40, 8), 8, P('data')),
    ((5, 3), 8, P()),
    ((), 8, P()),
    ((7, 16), 8, P(None, 'data')),
    ((16, 24), 1, P()),
])
def test_zero1_spec(shape, axis_size, expected):
  assert sharding.zero1_spec(shape, ('data',), axis_size) == expected


def test_zero1_spec_over_several_axes():
  assert sharding.zero1_spec((6, 32), ('data', 'model'), 8) == P(
      None, ('data', 'model'))


@pytest.mark.parametrize('param_shape,spec,shape,expected', [
    ((16, 24), P(None, 'model'), (16, 24), P(None, 'model')),
    ((16, 24), P(None, 'model'), (16,), P()),  # Axis 1 dropped.
    ((16, 24), P(None, 'model'), (24,), P('model')),  # Axis 0 dropped.
    ((16, 16), P(None, 'model'), (16,), P()),  # Ambiguous: replicate.
    ((16, 16), P('data', 'model'), (16,), P()),
    ((16, 24), P('model'), (24,), P()),  # Short spec: padded.
    ((16, 24), P(None, 'model'), (1,), P()),
    ((16, 24), P(None, 'model'), (), P()),
])
def test_mirrored_spec(param_shape, spec, shape, expected):
  assert sharding.mirrored_spec(param_shape, spec, shape) == expected


def _one_device_mesh():
  return Mesh(np.array(jax.devices()[:1]), ('data',))


def test_result_has_the_structure_of_the_input():
  opt = _multi().create(_params())
  mesh = _one_device_mesh()
  for rule in ('replicated', 'zero1', _TP_SPECS_1D, lambda p, x: None):
    result = compat.state_shardings(opt, mesh, rule)
    assert (jax.tree_util.tree_structure(result) ==
            jax.tree_util.tree_structure(opt))
    assert all(isinstance(s, NamedSharding)
               for s in jax.tree_util.tree_leaves(result))


_TP_SPECS_1D = {'dense': {'kernel': P(None, 'data'), 'bias': P('data')},
                'embed': P(), 'odd': P()}


def test_optax_state_pairs_leaves_with_params():
  opt = optim.Momentum(0.1).create(_params())
  _, opt_state = compat.to_optax(opt)
  result = compat.state_shardings(opt_state, _one_device_mesh(), _TP_SPECS_1D,
                                  params=opt.target)
  traces = result[1].trace
  assert jax.tree_util.tree_map(lambda s: s.spec, traces) == _TP_SPECS_1D
  assert result[2].count.spec == P()


def test_errors_name_the_problem():
  opt = optim.Momentum(0.1).create(_params())
  mesh = _one_device_mesh()
  with pytest.raises(ValueError, match="Unknown sharding rule 'zero3'"):
    compat.state_shardings(opt, mesh, 'zero3')
  with pytest.raises(ValueError, match="axis 'model' is not an axis"):
    compat.state_shardings(opt, mesh, 'zero1', axis='model')
  with pytest.raises(TypeError, match='shaped like the params'):
    compat.state_shardings(opt, mesh, {'dense': P()})
  with pytest.raises(TypeError,
                     match=r"\.target\['dense'\]\['bias'\].*got int"):
    compat.state_shardings(opt, mesh, lambda path, leaf: 3)
  _, opt_state = compat.to_optax(opt)
  with pytest.raises(ValueError, match='pass params='):
    compat.state_shardings(opt_state, mesh, _TP_SPECS_1D)


if __name__ == '__main__':
  CASES.main()
