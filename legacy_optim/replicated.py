"""ReplicatedOptimizer: data parallelism the flax.optim way (deprecated).

Gradients are averaged over the pmap axis ``axis_name`` before the wrapped
optimizer's rule runs, as ``psum(grad) / psum(1)`` (the legacy arithmetic).
"""

from flax import jax_utils
import jax
import optax

from legacy_optim import base


def cross_replica_mean(axis_name: str) -> optax.GradientTransformation:
  """Averages updates over the named (pmap) axis: ``psum(u) / psum(1)``."""

  def init_fn(params):
    del params
    return optax.EmptyState()

  def update_fn(updates, state, params=None):
    del params
    axis_size = jax.lax.psum(1, axis_name=axis_name)
    return jax.tree_util.tree_map(
        lambda u: jax.lax.psum(u, axis_name=axis_name) / axis_size,
        updates), state

  return optax.GradientTransformation(init_fn, update_fn)


@base.register_wrapper
class ReplicatedOptimizer(base.OptimizerDef):
  """Wraps an OptimizerDef so gradients are averaged across replicas.

  Use inside ``jax.pmap(..., axis_name=axis_name)``. ``state_dict`` keeps one
  replica's copy; ``restore_state`` replicates it again.
  """

  def __init__(self, optimizer_def, devices=None, axis_name='batch'):
    super().__init__(optimizer_def.hyper_params)
    self.optimizer_def = optimizer_def
    self.devices = jax.local_devices() if devices is None else devices
    self.axis_name = axis_name

  def update_hyper_params(self, **hyper_param_overrides):
    return self.optimizer_def.update_hyper_params(**hyper_param_overrides)

  def init_state(self, params):
    return self.optimizer_def.init_state(params)

  def _native_transform(self, hyper_params):
    return optax.chain(cross_replica_mean(self.axis_name),
                       self.optimizer_def._transform(hyper_params))

  def _to_native_state(self, state, params):
    return (optax.EmptyState(),
            self.optimizer_def._transform_state(state, params))

  def _from_native_state(self, opt_state, params):
    return self.optimizer_def._state_from_transform(opt_state[1], params)

  def state_dict(self, target, state):
    state_dict = self.optimizer_def.state_dict(target, state)
    return jax.tree_util.tree_map(lambda x: x[0], state_dict)

  def restore_state(self, opt_target, opt_state, state_dict):
    state_dict = jax_utils.replicate(state_dict, devices=self.devices)
    return self.optimizer_def.restore_state(opt_target, opt_state, state_dict)
