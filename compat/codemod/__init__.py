"""The codemod: ``scan`` finds flax.optim usages, ``migrate`` rewrites them.

Analysis (``_names`` per module, ``_flow`` per module's bindings,
``_project`` across the project's modules: definition factories, fields,
the links a flow must keep whole), the table of removals (``_removals``),
the rewrite plan and the report. Standard library and LibCST only: never jax,
flax or the bridges (it reads ``legacy_optim.catalogue`` without importing
``legacy_optim``); of ``compat`` only the shared helpers (``_atomic``,
``_lazy``).
"""
