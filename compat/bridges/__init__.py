"""Bridges: a legacy optimizer to Optax, TrainState, nnx and stock Optax.

Holds the converters (both ways), their state shardings and param paths.
May import ``legacy_optim``, ``flax_optim_rules``, jax, flax and optax; no
other part of ``compat``.
"""
