"""The opt-in layer that lets old programs run unchanged: jax/flax names
removed next to flax.optim, served from today's equivalents.

The public face is ``compat.legacy_jax``; this module lives here, in the
uniquely named package, because it runs inside any program (the start-up
hook loads it at the first ``jax``/``flax`` import when
``LEGACY_OPTIM_JAX_ALIASES=1``) and must not put a package named ``compat``
into ``sys.modules`` ahead of the program's own. For the same reason it reads
the table of removals (``compat/codemod/_removals.py``, stdlib only) by path.

Contract:

* Nothing happens until :func:`install` (or the variable, or
  ``flax-optim-compat run``); installing imports nothing of jax or flax: each
  module is patched right after the program itself imports it.
* Only what is missing is added, never an override: an attribute goes through
  the module's ``__getattr__`` (consulted only for names the module lacks,
  after any ``__getattr__`` it had), a module is served only when no other
  finder finds it. The one exception is documented in the table
  (``ROUTE_MASK``): a call that today would take a mask for values.
* Each use warns once per call site (``RemovedJaxApiWarning``, at the
  user's line, with ``migrate``'s fix) and is listed by
  ``legacy_optim.usage_report()``; ``LEGACY_OPTIM_STRICT=1`` raises instead.
"""

import functools
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types

import _flax_optim_compat_hook as _hook
from _flax_optim_compat_startup import JAX_ALIASES_ENV_VAR  # noqa: F401

_TABLE_NAME = 'compat.codemod._removals'
_TABLE_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    *_TABLE_NAME.split('.')) + '.py'


@functools.lru_cache(maxsize=None)
def table() -> types.ModuleType:
  """The table of removals; the already imported module when there is one."""
  loaded = sys.modules.get(_TABLE_NAME)
  if loaded is not None and os.path.abspath(
      getattr(loaded, '__file__', '')) == _TABLE_PATH:
    return loaded
  spec = importlib.util.spec_from_file_location(
      '_flax_optim_compat_removals', _TABLE_PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def resolve(path: str):
  """The object at dotted ``path``, importing modules along it as needed."""
  parts = path.split('.')
  found = importlib.import_module(parts[0])
  for end, name in enumerate(parts[1:], 2):
    try:
      found = getattr(found, name)
    except AttributeError:
      found = importlib.import_module('.'.join(parts[:end]))
  return found


def _warn(alias, served_as=None) -> None:
  # Imported on first use: legacy_optim imports jax (already there by then).
  from legacy_optim import deprecation
  deprecation.warn_removed_api(alias.old, served_as or alias.new, alias.fix)


# ---------------------------------------------------------------------------
# What each kind of removal does to the module it lives in.


def _add_attributes(module, aliases) -> None:
  """Gives ``module`` a ``__getattr__`` serving the missing ``aliases``."""
  by_name = {a.old.rpartition('.')[2]: a for a in aliases}
  previous = module.__dict__.get('__getattr__')

  def __getattr__(name):
    alias = by_name.get(name)
    if previous is not None:
      try:
        return previous(name)
      except AttributeError:
        if alias is None:
          raise
    if alias is None:
      raise AttributeError(
          f'module {module.__name__!r} has no attribute {name!r}')
    if alias.kind == table().AT_METHOD:
      return _at_method(alias)
    _warn(alias)
    return resolve(alias.new)

  __getattr__.previous = previous  # type: ignore[attr-defined]
  module.__getattr__ = __getattr__
  _undo.append(functools.partial(_restore_getattr, module, __getattr__))


def _at_method(alias):
  """``jax.ops.index_update`` and kin: ``jnp.asarray(x).at[idx].<new>``."""

  def index_function(x, idx, y, indices_are_sorted=False,
                     unique_indices=False):
    _warn(alias, f'jnp.asarray(x).at[idx].{alias.new}(y)')
    import jax.numpy as jnp
    method = getattr(jnp.asarray(x).at[idx], alias.new)
    return method(y, indices_are_sorted=indices_are_sorted,
                  unique_indices=unique_indices)

  index_function.__name__ = alias.old.rpartition('.')[2]
  return index_function


def _restore_getattr(module, added) -> None:
  if module.__dict__.get('__getattr__') is added:
    if added.previous is None:
      del module.__getattr__
    else:
      module.__getattr__ = added.previous


def _add_no_op(alias) -> None:
  owner_path, _, name = alias.old.rpartition('.')
  owner = resolve(owner_path)
  if hasattr(owner, name):
    return

  def no_op(*args, **kwargs):
    del args, kwargs
    _warn(alias, 'a call that does nothing')

  setattr(owner, name, no_op)
  _undo.append(functools.partial(delattr, owner, name))


def _add_module_attribute(alias) -> None:
  """A module ``old``'s parent (missing) holding the object at ``new``."""
  module_name, _, name = alias.old.rpartition('.')
  if module_name in sys.modules or importlib.util.find_spec(
      module_name) is not None:
    return
  # Put into sys.modules directly: imported through a loader, the import
  # system would bind it on its parent, over today's object of that name.
  stand_in = types.ModuleType(module_name, f'{alias.old} for old programs '
                              '(flax-optim-compat\'s legacy jax layer)')
  stand_in.__spec__ = importlib.machinery.ModuleSpec(module_name, None)

  def __getattr__(attribute):
    if attribute != name:
      raise AttributeError(
          f'module {module_name!r} has no attribute {attribute!r}')
    _warn(alias)
    return resolve(alias.new)

  stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
  sys.modules[module_name] = stand_in
  _undo.append(functools.partial(sys.modules.pop, module_name, None))


def _set_flax_config(flax_module, aliases) -> None:
  """Sets the flag the FLAX_CONFIG rows name, unless the environment set it
  (flax reads ``FLAX_<FLAG>``); each row warns once, at the import."""
  for path in sorted({a.new for a in aliases}):
    config = flax_module.config
    flag = path.rpartition('.')[2]
    rows = [a for a in aliases if a.new == path]
    if not hasattr(config, flag):
      for alias in rows:
        _warn(alias, f'nothing (this flax has no {flag}): rewrite it')
      continue
    if flag.upper() in os.environ:
      continue
    before = getattr(config, flag)
    config.update(flag, True)
    _undo.append(functools.partial(config.update, flag, before))
    for alias in rows:
      _warn(alias, f'{path}=True for this program')


def _route_positional_mask(alias) -> None:
  """The old ``(inputs_q, inputs_kv, mask[, deterministic])`` call of
  ``new``: a third positional argument with one more dimension than the
  keys is a mask (``[batch..., heads, q_length, kv_length]``), which as
  values would fail; it goes to ``mask=``. Every other call is unchanged."""
  cls = resolve(alias.new)
  original = cls.__call__

  def __call__(self, inputs_q, inputs_k=None, inputs_v=None, *args, **kw):
    if (inputs_v is not None and len(args) <= 1 and 'mask' not in kw and
        _ndim(inputs_v) is not None and _ndim(inputs_k) is not None and
        _ndim(inputs_v) == _ndim(inputs_k) + 1):
      _warn(alias, 'the mask passed as mask=')
      if args:
        kw.setdefault('deterministic', args[0])
      return original(self, inputs_q, inputs_k, mask=inputs_v, **kw)
    return original(self, inputs_q, inputs_k, inputs_v, *args, **kw)

  functools.update_wrapper(__call__, original)
  cls.__call__ = __call__
  _undo.append(functools.partial(setattr, cls, '__call__', original))


def _ndim(value):
  return getattr(value, 'ndim', None)


# ---------------------------------------------------------------------------
# When: each alias is applied right after the module it lives in is loaded.


def _module_of(alias) -> str:
  """The module whose import applies ``alias``."""
  rows = table()
  if alias.kind in (rows.ATTRIBUTE, rows.AT_METHOD):
    return alias.old.rpartition('.')[0]
  if alias.kind == rows.ROUTE_MASK:
    return alias.new.rpartition('.')[0]
  if alias.kind == rows.FLAX_CONFIG:
    return alias.new.partition('.')[0]
  return alias.old.partition('.')[0]  # NO_OP, MODULE_ATTRIBUTE


@functools.lru_cache(maxsize=None)
def _plan():
  """(module name -> aliases applied after it loads, dotted module name ->
  the alias an import of it is served by)."""
  rows = table()
  after_import: dict[str, list] = {}
  served: dict[str, object] = {}
  for alias in rows.runtime_aliases():
    if alias.kind in (rows.MODULE, rows.REFUSE):
      served[alias.old] = alias
    else:
      after_import.setdefault(_module_of(alias), []).append(alias)
  return after_import, served


def _apply(module) -> None:
  rows = table()
  aliases = _plan()[0].get(module.__name__, ())
  attributes = [a for a in aliases
                if a.kind in (rows.ATTRIBUTE, rows.AT_METHOD)]
  if attributes:
    _add_attributes(module, attributes)
  flax_config = [a for a in aliases if a.kind == rows.FLAX_CONFIG]
  if flax_config:
    _set_flax_config(module, flax_config)
  for alias in aliases:
    if alias.kind == rows.NO_OP:
      _add_no_op(alias)
    elif alias.kind == rows.MODULE_ATTRIBUTE:
      _add_module_attribute(alias)
    elif alias.kind == rows.ROUTE_MASK:
      _route_positional_mask(alias)


# The packages whose modules the table names.
_ROOTS = ('jax', 'flax')


class _ServedModule:
  """Loads a removed module as today's (``sys.modules`` holds that one)."""

  def __init__(self, alias):
    self._alias = alias

  def create_module(self, spec):
    del spec
    return None

  def exec_module(self, module):
    sys.modules[module.__name__] = resolve(self._alias.new)
    _warn(self._alias)


class _Finder:
  """Wraps the loaders of the modules the layer patches; serves removed
  modules that no other finder finds."""

  def __init__(self):
    self._busy = threading.local()

  def find_spec(self, fullname, path=None, target=None):
    if fullname.partition('.')[0] not in _ROOTS:  # every import asks
      return None
    after_import, served = _plan()
    alias = served.get(fullname) or next(
        (served[name] for name in served
         if served[name].kind == table().REFUSE and
         fullname.startswith(name + '.')), None)
    if fullname not in after_import and alias is None:
      return None
    busy = getattr(self._busy, 'names', None)
    if busy is None:
      busy = self._busy.names = set()
    if fullname in busy:  # asked again by the finders asked below
      return None
    busy.add(fullname)
    try:
      spec = _hook.other_finders_spec(self, fullname, path, target)
    finally:
      busy.discard(fullname)
    if spec is not None or alias is None:
      return _hook.run_after_import(spec, _apply)
    if alias.kind == table().REFUSE:
      raise ImportError(f'{alias.old} was removed and the legacy jax layer '
                        f'does not serve it: {alias.fix}', name=fullname)
    return importlib.machinery.ModuleSpec(fullname, _ServedModule(alias))

  def __repr__(self):
    return f'<{__name__}: removed jax/flax names for old programs>'


_FINDER = _Finder()
find_spec = _FINDER.find_spec
_undo: list = []


def install() -> None:
  """Turns the layer on in this process (idempotent): modules imported
  from now on are patched as they load, those already imported at once."""
  if _FINDER in sys.meta_path:
    return
  _plan()  # reads the table before the finder can see its imports
  sys.meta_path.insert(0, _FINDER)
  for name in _plan()[0]:
    module = sys.modules.get(name)
    if module is not None:
      _apply(module)


def uninstall() -> None:
  """Turns the layer off: removes what it added (modules it served stay
  imported)."""
  if _FINDER in sys.meta_path:
    sys.meta_path.remove(_FINDER)
  while _undo:
    _undo.pop()()


def is_installed() -> bool:
  return _FINDER in sys.meta_path
