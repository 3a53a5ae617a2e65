"""Checkpoints: read flax.optim checkpoints strictly, restore, convert them.

``api`` holds the public functions and the ``convert`` command; the private
modules decode (``_safe_msgpack``), infer (``_infer``, ``_spec``) and write
Orbax (``_convert``). May import ``compat.bridges`` and below, never the
codemod or the command line. Names resolve lazily (no jax until used).
"""

from compat import _lazy

_EXPORTS = {
    name: 'compat.checkpoints.api'
    for name in ('FORMAT', 'MODERN', 'TARGETS', 'LegacyCheckpoint',
                 'checkpoint_file', 'convert_checkpoint', 'describe',
                 'is_converted_checkpoint', 'is_orbax_checkpoint',
                 'load_legacy_checkpoint', 'main', 'read_checkpoint',
                 'restore_checkpoint')
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals())
