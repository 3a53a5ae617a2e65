"""A flax TrainState that steps every pytree flax.optim stepped.

flax.optim's ``Optimizer`` took any pytree as its target, one bare array or
number included (a temperature ``log_alpha = jnp.zeros(1)``, a Lagrange
multiplier). flax's ``TrainState`` asks ``OVERWRITE_WITH_GRADIENT in
params`` in ``create`` and ``... in grads`` in ``apply_gradients`` first, a
question a jax array, a tracer or a number refuses (``TypeError``). Code
migrated off such an optimizer uses this ``TrainState`` instead::

  from flax_optim_rules import train_state as rules_train_state
  state = rules_train_state.TrainState.create(apply_fn=None,
                                              params=jnp.zeros(1), tx=tx)
  state = state.apply_gradients(grads=jnp.ones(1))

A mapping (a dict, a FrozenDict) goes through flax's own code, unchanged
(overwrite-with-gradient collections included); anything else is stepped
as flax does a tree without that collection. Its fields, pytree and
checkpoint layout are flax's ``TrainState``'s.

The one module of this package that imports flax (it subclasses flax's
class): ``flax_optim_rules`` itself does not import it, so the rules stay
on jax and optax alone.
"""

from collections.abc import Mapping

from flax.training import train_state
import optax


class TrainState(train_state.TrainState):
  """flax's ``TrainState``, also over a bare array, a number or any other
  pytree that is not a mapping (where flax's mapping check would raise)."""

  def apply_gradients(self, *, grads, **kwargs):
    if isinstance(grads, Mapping):
      return super().apply_gradients(grads=grads, **kwargs)
    # flax's step of a tree with no overwrite-with-gradient collection.
    updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
    return self.replace(step=self.step + 1,
                        params=optax.apply_updates(self.params, updates),
                        opt_state=opt_state, **kwargs)

  @classmethod
  def create(cls, *, apply_fn, params, tx, **kwargs):
    if isinstance(params, Mapping):
      return super().create(apply_fn=apply_fn, params=params, tx=tx, **kwargs)
    return cls(step=0, apply_fn=apply_fn, params=params, tx=tx,
               opt_state=tx.init(params), **kwargs)
