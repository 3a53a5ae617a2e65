"""The way out of flax.optim: bridges to Optax, TrainState and nnx.Optimizer.

Four subsystems, each a package that imports only those below it:
``cli`` (the command line) over ``codemod`` (``scan``, ``migrate``) and
``checkpoints``; ``checkpoints`` over ``bridges``; ``bridges`` over
``legacy_optim`` and ``flax_optim_rules``. ``codemod`` needs no bridge and
no jax. Beside them: ``testing`` (proving a migration), ``importer`` (the
``flax.optim`` alias) and the helpers the subsystems share (``_atomic``,
``_lazy``).

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

# Modules that moved into the subpackages keep their old names (``import
# compat.scan``, ``from compat import optax_bridge``).
_MOVED = {
    'optax_bridge': 'compat.bridges.optax_bridge',
    'train_state': 'compat.bridges.train_state',
    'nnx': 'compat.bridges.nnx',
    'stock_exit': 'compat.bridges.stock_exit',
    'sharding': 'compat.bridges.sharding',
    'scan': 'compat.codemod.scan',
    'migrate': 'compat.codemod.migrate',
    'check': 'compat.cli.check',
    'guide': 'compat.cli.guide',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals(), _MOVED)
