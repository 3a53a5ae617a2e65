"""Counting XLA compilations in tests, through jax.monitoring."""

import jax


class CompileCounter:
  """Counts XLA compilations while active (independent of legacy_optim)."""

  def __init__(self):
    self.count = 0

  def __call__(self, event, duration, **kwargs):
    del duration, kwargs
    if event == '/jax/core/compile/backend_compile_duration':
      self.count += 1

  def __enter__(self):
    jax.monitoring.register_event_duration_secs_listener(self)
    return self

  def __exit__(self, *exc):
    jax.monitoring.unregister_event_duration_listener(self)
