"""flax-optim-compat's uniquely named entry points.

The library itself lives in ``legacy_optim`` (the flax.optim API) and
``compat`` (the way off it). ``compat`` is a common name for a project's own
module, so everything that runs in a user's environment without being asked
by name goes through this package instead, which no project shadows:

* ``python -m flax_optim_compat COMMAND`` is the ``flax-optim-compat``
  command (``__main__``);
* ``flax_optim_compat.pytest_plugin`` is the opt-in pytest plugin
  (``pytest -p flax_optim_compat.pytest_plugin``).

Importing this package imports nothing else.
"""
