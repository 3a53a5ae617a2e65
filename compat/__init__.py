"""The way out of flax.optim: bridges to Optax, TrainState and nnx.Optimizer.

Public names are resolved lazily, so ``import compat`` stays cheap (it must
not import jax or flax until a name is used).
"""

from compat import _lazy

_EXPORTS = {
    # Optax, TrainState and nnx bridges.
    'to_optax': 'compat.bridges.optax_bridge',
    'from_optax': 'compat.bridges.optax_bridge',
    'traversal_labels': 'compat.bridges.optax_bridge',
    'to_train_state': 'compat.bridges.train_state',
    'to_nnx_optimizer': 'compat.bridges.nnx',
    # The stock exit: stock Optax transforms and states, no shim needed.
    'to_stock_optax': 'compat.bridges.stock_exit',
    # Checkpoints.
    'load_legacy_checkpoint': 'compat.checkpoints.api',
    'convert_checkpoint': 'compat.checkpoints.api',
    'read_checkpoint': 'compat.checkpoints.api',
    'restore_checkpoint': 'compat.checkpoints.api',
    # Sharding.
    'state_shardings': 'compat.bridges.sharding',
    # Source scanner.
    'scan_paths': 'compat.codemod.scan',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals())
