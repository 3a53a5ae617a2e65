"""Deprecation warnings for the legacy ``flax.optim`` entry points.

Every legacy entry point calls :func:`warn_legacy_use`. This module decides

* what to say: the concrete replacement with the caller's own
  hyper-parameter values -- the faithful transform (``opt_def.to_optax()`` /
  ``compat.to_optax(optimizer)``), the nearest stock Optax expression with its
  measured deviation from flax 0.5.3 (``scripts/stock_optax_deviation.py``),
  and the section of ``migration_guide.md``;
* where: at the user's line, found by walking out of ``legacy_optim``,
  ``compat`` and library (jax, flax, optax) frames, so it also lands right
  under ``jax.jit`` tracing;
* how often: once per (feature, call site), however often the line runs and
  whatever values it passes.

``LegacyOptimDeprecationWarning`` is a ``FutureWarning``: Python shows those
by default wherever the call sits (a ``DeprecationWarning`` is hidden outside
``__main__``, so a program whose flax.optim calls live in its own modules saw
nothing). A use inside an installed third-party package (site-packages,
dist-packages) is shown at the user's line that called into it, naming the
package. ``-W ignore::legacy_optim.LegacyOptimDeprecationWarning`` (or the
same in ``PYTHONWARNINGS``) silences it: Python reads ``-W`` before
site-packages is importable and drops an option naming this category, so this
module applies those options when it loads (:func:`_apply_dropped_options`).
``LEGACY_OPTIM_STRICT=1`` raises it as an error instead (for the CI of a
codebase that finished migrating). :func:`usage_report` lists every legacy use
this process made, with file:line and count, whatever the warning filters.
"""

import inspect
import os
import re
import sys
import threading
from typing import Any, NamedTuple
import warnings

from legacy_optim import catalogue as rep

STRICT_ENV_VAR = 'LEGACY_OPTIM_STRICT'
# usage_report's subject for a removed jax/flax name the layer served.
REMOVED_FROM_JAX = 'removed from jax/flax'
_TRUE_VALUES = ('1', 'true', 'yes', 'on')


# A FutureWarning, not a DeprecationWarning: the category Python documents for
# deprecations meant for the people running the code, and shown by its default
# filters (as pandas does; numpy's VisibleDeprecationWarning is a UserWarning
# for the same reason). A filter of our own for a DeprecationWarning would have
# to sit among the user's -W options and be lost on leaving catch_warnings.
class LegacyOptimDeprecationWarning(FutureWarning):
  """Raised when code uses the legacy ``flax.optim`` API through this shim."""


class RemovedJaxApiWarning(LegacyOptimDeprecationWarning):
  """A jax/flax name removed next to flax.optim, served to an old program
  by the opt-in layer (``compat.legacy_jax``)."""


# The names a -W option can give the categories by.
_CATEGORY_NAMES = {
    'legacy_optim.LegacyOptimDeprecationWarning': LegacyOptimDeprecationWarning,
    'legacy_optim.deprecation.LegacyOptimDeprecationWarning':
        LegacyOptimDeprecationWarning,
    'legacy_optim.deprecation.RemovedJaxApiWarning': RemovedJaxApiWarning,
}
_ACTIONS = ('default', 'always', 'ignore', 'module', 'once', 'error')


def _apply_dropped_options() -> None:
  """Applies the ``-W``/``PYTHONWARNINGS`` options naming our categories.

  Python parses them before site-packages is on ``sys.path``, cannot import
  ``legacy_optim`` then, and drops them ("Invalid -W option ignored"). Read
  as Python reads them (``action:message:category:module:lineno``, message
  and module literal), in order, so a later option wins as with ``-W``.
  """
  for option in sys.warnoptions:
    fields = [f.strip() for f in option.split(':')]
    if not 3 <= len(fields) <= 5 or fields[2] not in _CATEGORY_NAMES:
      continue
    action, message, category, module, lineno = fields + [''] * (
        5 - len(fields))
    action = 'always' if action == 'all' else next(
        (a for a in _ACTIONS if a.startswith(action)), '')
    if not action or not (lineno or '0').isdigit():
      continue  # Python reports a malformed option; nothing to apply
    warnings.filterwarnings(
        action,  # type: ignore[arg-type]  # one of _ACTIONS, checked above
        re.escape(message), _CATEGORY_NAMES[category],
        re.escape(module) + r'\Z' if module else '', int(lineno or 0))


# ----------------------------------------------------------------------------
# Where: the user's frame.

_LEGACY_DIR = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_DIRS = (
    _LEGACY_DIR + os.sep,
    os.path.join(os.path.dirname(_LEGACY_DIR), 'compat') + os.sep,
    # The opt-in layer's aliases (compat.legacy_jax).
    os.path.join(os.path.dirname(_LEGACY_DIR), 'flax_optim_compat') + os.sep,
)
# Frames of these packages sit between a user's line and our code (jax.jit
# tracing, tree_map callbacks, the import system); they are never the caller.
_LIBRARY_PACKAGES = frozenset(
    ('jax', 'jaxlib', 'flax', 'optax', 'chex', 'orbax', 'importlib',
     # the import hooks (top-level modules, stdlib only)
     '_flax_optim_compat_hook', '_flax_optim_compat_startup'))


def _is_internal(frame) -> bool:
  if frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
    return True
  module = frame.f_globals.get('__name__') or ''
  return module.partition('.')[0] in _LIBRARY_PACKAGES


def _outside(frame, is_inside):
  """The first frame from ``frame`` outwards that ``is_inside`` rejects, or
  None when every frame up to the outermost is inside."""
  while frame is not None and is_inside(frame):
    frame = frame.f_back
  return frame


def _outermost(frame):
  while frame.f_back is not None:
    frame = frame.f_back
  return frame


# Where pip installs packages; code there is a third party's, not the user's.
_INSTALLED_DIRS = ('site-packages', 'dist-packages')


def _package_of(frame) -> str:
  """The installed package ``frame`` runs in, or '' for the user's code."""
  parts = os.path.normpath(frame.f_code.co_filename).split(os.sep)
  if not any(d in parts for d in _INSTALLED_DIRS):
    return ''
  module = frame.f_globals.get('__name__') or ''
  return module.partition('.')[0] or os.path.basename(
      frame.f_code.co_filename)


class _Site(NamedTuple):
  """Where a legacy call is made, and where its warning is shown."""
  call: Any  # the frame that called the shim (past library frames)
  shown: Any  # the user's frame: ``call``, or the one that called into
  # ``package``
  package: str  # the installed third-party package ``call`` is in, or ''


def _site(start) -> _Site:
  """The call site of a legacy use made below ``start``.

  A call inside an installed package (which the user cannot edit) is shown
  at the user's line that led into it; the outermost frame stands in when
  there is none (a console script of that package).
  """
  call = _outside(start, _is_internal) or _outermost(start)
  package = _package_of(call)
  if not package:
    return _Site(call, call, '')
  shown = _outside(call, lambda f: _is_internal(f) or _package_of(f))
  return _Site(call, shown or call, package)


def _third_party_note(site: _Site) -> str:
  if not site.package:
    return ''
  where = f'{site.call.f_code.co_filename}:{site.call.f_lineno}'
  shown = ('shown at your line that calls into it'
           if site.shown is not site.call else 'no code of yours called it')
  return (f"\n(This call is in the installed package '{site.package}' "
          f'({where}), not in your code: upgrade {site.package} or ask its '
          f'maintainers; {shown}.)')


# ----------------------------------------------------------------------------
# How often, and the usage report.


class LegacyUse(NamedTuple):
  """One legacy feature used at one call site."""
  feature: str  # the entry point, e.g. 'OptimizerDef', 'create'
  subject: str  # the class involved, e.g. 'Adam', 'ModelParamTraversal'
  filename: str
  lineno: int
  count: int  # type: ignore[assignment]  # times this process went through it


class UsageReport(tuple):
  """A tuple of ``LegacyUse``; ``str()`` renders a table."""

  def __str__(self):
    if not self:
      return 'No legacy flax.optim use recorded in this process.'
    rows = [('count', 'feature', 'subject', 'location')]
    rows += [(str(u.count), u.feature, u.subject, f'{u.filename}:{u.lineno}')
             for u in self]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return '\n'.join(
        f'{r[0]:>{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  '
        f'{r[3]}' for r in rows)


_lock = threading.Lock()
_uses: dict[tuple[str, str, str, int], int] = {}
_warned_sites: set[tuple[str, str, int]] = set()


def usage_report() -> UsageReport:
  """Which legacy features this process used, from where and how often.

  Sorted by location, then feature. Recorded whether or not the warnings
  were shown. ``print(legacy_optim.usage_report())`` gives a table.
  """
  with _lock:
    items = sorted(_uses.items(), key=lambda kv: (kv[0][2], kv[0][3],
                                                  kv[0][0], kv[0][1]))
  return UsageReport(LegacyUse(f, s, fn, ln, n) for (f, s, fn, ln), n in items)


def reset() -> None:
  """Forgets recorded uses, so each call site warns again (for tests)."""
  with _lock:
    _uses.clear()
    _warned_sites.clear()


def strict_mode() -> bool:
  return os.environ.get(STRICT_ENV_VAR, '').strip().lower() in _TRUE_VALUES


def warn_legacy_use(feature, obj=None, **details):
  """Reports one use of a legacy feature.

  Args:
    feature: a short key naming the legacy entry point, e.g. ``'OptimizerDef'``,
      ``'create'``, ``'apply_gradient_overrides'``.
    obj: the object the feature was used on (an OptimizerDef, a Traversal...),
      so the message can name the concrete replacement.
    **details: extra facts for the message (e.g. ``overrides=`` the override
      dict, ``focus=`` the traversal given to ``create``).

  Raises:
    LegacyOptimDeprecationWarning: in strict mode (``LEGACY_OPTIM_STRICT=1``).
  """
  subject = '' if obj is None else type(obj).__name__
  _report(feature, subject, lambda: describe(feature, obj, **details),
          LegacyOptimDeprecationWarning)


def warn_removed_api(old: str, served_as: str, fix: str) -> None:
  """Reports one use of a jax/flax name removed next to flax.optim that the
  opt-in layer (``compat.legacy_jax``) serves: once per call site, at the
  user's line, as a ``RemovedJaxApiWarning``; listed by :func:`usage_report`
  (feature ``old``, subject ``removed from jax/flax``).

  Raises:
    RemovedJaxApiWarning: in strict mode (``LEGACY_OPTIM_STRICT=1``).
  """
  def message():
    return (f'{old} was removed from jax/flax; the legacy layer serves it as '
            f'{served_as}. Fix: {fix.rstrip(".")} (`flax-optim-compat '
            'migrate` makes the mechanical fixes).')

  _report(old, REMOVED_FROM_JAX, message, RemovedJaxApiWarning)


def _report(feature: str, subject: str, message, category) -> None:
  """Records one use; warns (or raises, strict) at the first use of each
  call site. ``message()`` gives the text, built only when shown."""
  site = _site(sys._getframe(1))
  where = (site.call.f_code.co_filename, site.call.f_lineno)
  with _lock:
    key = (feature, subject) + where
    _uses[key] = _uses.get(key, 0) + 1
    first = (feature,) + where not in _warned_sites
    _warned_sites.add((feature,) + where)
  strict = strict_mode()
  if not (first or strict):
    return
  text = message() + _third_party_note(site)
  if strict:
    raise category(
        f'{text}\n({STRICT_ENV_VAR}=1 makes legacy flax.optim use an '
        f'error; unset it to run legacy code.)')
  # Explicit, not warn(stacklevel=): warn skips the import system's frames
  # when it counts, so a use during an import would land past the stack.
  shown = site.shown
  warnings.warn_explicit(
      text, category, shown.f_code.co_filename, shown.f_lineno,
      module=shown.f_globals.get('__name__'),
      registry=shown.f_globals.setdefault('__warningregistry__', {}))


# ----------------------------------------------------------------------------
# What: the messages.

# The built-ins without a stock replacement -> the catalogue's replacement;
# '' stands for a user's own OptimizerDef.
_NO_STOCK = {'ReplicatedOptimizer': 'replicate',
             'MultiOptimizer': 'multi_optimizer',
             'WeightNorm': 'weight_norm', '': 'optimizer_def_subclass'}


def _builtin_base(obj) -> str:
  """The legacy_optim built-in ``obj`` is (or derives from), or ''."""
  for cls in type(obj).__mro__:
    if cls.__module__.startswith('legacy_optim.') and (
        cls.__name__ in rep.BY_NAME or cls.__name__ in _NO_STOCK):
      return cls.__name__
  return ''


def _migrate_call(name: str, obj, values: dict[str, Any],
                  inject: bool = False) -> str:
  """What ``migrate`` writes for this definition had the user's source
  passed the values that differ from the defaults (``rep.migrate_call``)."""
  try:
    parameters = inspect.signature(type(obj).__init__).parameters.values()
    defaults = {p.name: p.default for p in parameters
                if p.default is not inspect.Parameter.empty}
  except (TypeError, ValueError):
    defaults = {}
  given = {}
  for key, value in values.items():
    if key in defaults:
      try:
        if value is defaults[key] or bool(value == defaults[key]):
          continue
      except Exception:
        pass  # arrays, traced values: show them
    given[key] = rep.literal(value)
  return rep.migrate_call(name, given, {k: rep.literal(v)
                                        for k, v in defaults.items()}, inject)


def _see(section: str) -> str:
  return f'See {rep.guide_ref(section)}.'


def _replace(head: str, feature: str, example: str = '', **values) -> str:
  """``head`` + 'Replace it with <the catalogue's text>.' + ``example``."""
  text, section = rep.REPLACEMENTS[feature]
  if values:
    text = text.format(**values)
  return f'{head} Replace it with {text}.{example} ' + _see(section)


def _optimizer_def_message(obj) -> str:
  name = type(obj).__name__
  base = _builtin_base(obj)
  legacy = f'flax.optim.{name}' if base == name else (
      f'{name} (a flax.optim.{base} subclass)' if base else
      f'{name} (a custom flax.optim.OptimizerDef)')
  head = f'{legacy} is deprecated (served by legacy_optim).'
  if base in _NO_STOCK:
    return _replace(head, _NO_STOCK[base])
  values = rep.hyper_param_values(obj.hyper_params)
  # Without a rate, the code sets one per step: migrate injects it.
  per_step = values.get('learning_rate', 0) is None
  if base == name:
    lines = [head, f'Replace it with what `{rep.MIGRATE}` writes (same '
             'numbers as flax 0.5.3; jax and optax only):',
             f'  {_migrate_call(name, obj, values, inject=per_step)}',
             '  and the Optimizer it creates with a flax TrainState (migrate '
             'rewrites both; an existing Optimizer: '
             'compat.to_train_state(optimizer, apply_fn))']
  else:
    lines = [head, 'Replace it with:',
             '  same numbers as flax 0.5.3: opt_def.to_optax() (an '
             'Optimizer: tx, opt_state = compat.to_optax(optimizer))']
  stock = rep.stock_optax(base, values)
  if stock.expression:
    detail = rep.deviation_phrase(stock.variant)
    if stock.note:
      detail += f'; {stock.note}'
    if base != name:
      detail += f'; if {name} keeps the {base} rule'
    else:
      detail += f'; `{rep.MIGRATE} --tier stock` writes it'
    lines.append(f'  nearest stock Optax: {stock.expression} ({detail})')
  if per_step:
    lines.append('  (no learning rate given: migrate injects the one '
                 'apply_gradient passes per step; or give the transform a '
                 'schedule)')
  lines.append(_see(rep.SECTION_ALGORITHMS))
  return '\n'.join(lines)


def _create_message(obj, focus=None, **unused) -> str:
  del unused
  name = type(obj).__name__ if obj is not None else 'OptimizerDef'
  text = _replace(f'{name}.create(target) is deprecated.', 'create')
  if focus:
    text += (' focus= becomes optax.partition labels (compat.traversal_labels'
             '(params, focus)), with optax.set_to_zero() for the rest. '
             + _see(rep.SECTION_TRAVERSALS))
  return text


def _overrides_message(obj, overrides=None, **unused) -> str:
  del unused
  overrides = dict(overrides or {})
  names = ', '.join(f'{k}={rep.literal(v)}' for k, v in overrides.items())
  example = ''
  name = type(obj).__name__ if obj is not None else ''
  if name in rep.RULE_NAMES and _builtin_base(obj) == name and list(
      overrides) == ['learning_rate']:
    values = rep.hyper_param_values(obj.hyper_params)
    example = (f' For this definition `{rep.MIGRATE}` writes '
               f'{_migrate_call(name, obj, values, inject=True)}.')
  return _replace(
      f'Optimizer.apply_gradient(grads, {names}) overrides are deprecated.',
      'apply_gradient_overrides', example)


def _dynamic_scale_args(obj) -> str:
  if obj is None:
    return ''
  return ', '.join(
      f'{k}={rep.literal(getattr(obj, k))}'
      for k in ('growth_factor', 'backoff_factor', 'growth_interval')
      if hasattr(obj, k))


# feature -> (the legacy use, the catalogue's replacement).
_HEADS = {
    'compute_gradient': (
        'Optimizer.compute_gradient(loss_fn) is deprecated.',
        'compute_gradient'),
    'optimize': ('Optimizer.optimize(loss_fn) is deprecated.', 'optimize'),
    'replicate': ('Optimizer.replicate() is deprecated.', 'replicate'),
    'restore_checkpoint': (
        'flax.training.checkpoints.restore_checkpoint(dir, target=optimizer) '
        'restores a flax.optim Optimizer (served by legacy_optim). Its Orbax '
        'backend fills what the checkpoint lacks from the target and casts '
        "dtypes to the target's; restore with compat.restore_checkpoint(dir, "
        'target) instead: it checks every path, shape and dtype against the '
        'file and raises naming each difference. To leave flax.optim, '
        'convert the checkpoint once.', 'checkpoint'),
}


def describe(feature: str, obj=None, **details) -> str:
  """The warning text for one use of ``feature`` (see warn_legacy_use)."""
  if feature in ('OptimizerDef', 'WeightNorm') and obj is not None:
    return _optimizer_def_message(obj)
  if feature == 'create':
    return _create_message(obj, **details)
  if feature == 'apply_gradient_overrides':
    return _overrides_message(obj, **details)
  if feature == 'Traversal':
    name = type(obj).__name__ if obj is not None else 'Traversal'
    return _replace(f'flax.traverse_util.{name} (legacy traversals) is '
                    'deprecated.', 'traversal')
  if feature == 'DynamicScale':
    return _replace('flax.optim.DynamicScale is deprecated.', 'dynamic_scale',
                    args=_dynamic_scale_args(obj))
  if feature in _HEADS:
    return _replace(*_HEADS[feature])
  return (f'flax.optim {feature} is deprecated (served by legacy_optim). '
          + _see(rep.SECTION_ALGORITHMS))


_apply_dropped_options()
