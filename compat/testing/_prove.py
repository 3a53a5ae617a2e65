"""What ``migrate --prove`` compares: what two runs left behind.

``python -m compat.testing._prove ORIGINAL MIGRATED [--rtol R]`` reads, under
the two work directories, every trajectory file ``compat.testing`` recorded
(``record_trajectory``: any name, told by its first bytes) and every
checkpoint (a file or directory named ``<prefix>_<step>`` or ``<step>``, as
flax's ``save_checkpoint`` and Orbax's managers name them, read through
``compat.read_checkpoint``), pairs them by their path relative to their work
directory, and compares them leaf by leaf with ``compat.testing``'s rules
(``_compare``: bit-identical by default). Trajectories come first: they
hold every step, so their first difference is the earliest one. It prints
one line per file and exits 0 when all agree, 1 at the first difference
(named: file, step, leaf, how many values, by how much).

A trajectory holds the params after every update (step 0: the initial
ones) and digests of the batches; both runs must have fed the same batches
(else the program, not the optimizer, differs). Steps recorded as digests
only are compared by digest (bit-identity), and skipped within a tolerance.

The two sides store the same numbers in different layouts: flax.optim's
``Optimizer`` (``target``, ``state.step``, ``state.param_states`` with the
rule's fields per parameter) and a TrainState (``params``, ``step``,
``opt_state`` with the fields per parameter, and its ``count``). Both are
read as the same names: ``params/<path>``, ``step``,
``opt_state/<field>/<path>`` and ``opt_state/count`` (flax.optim's
``state.step`` is both the TrainState's step and the rule's count); the
indices of a chain of transforms are dropped from the names. Integer leaves
(steps, counts) compare as int64: flax.optim stored its step as int32.
Where the migrated program runs a stock Optax transform (``--tier stock``),
flax.optim's fields are read by the stock names the catalogue gives
(``grad_ema`` -> ``mu``; ``-trace``: the negated value).
"""

import argparse
import os
import re
import sys

import numpy as np

from compat.checkpoints import api as checkpoints
from compat.testing import _compare
from compat.testing import _record_core as trajectories
from legacy_optim import catalogue

LABELS = ('original', 'migrated')
# flax's save_checkpoint names its entries <prefix><step> ('checkpoint_5'),
# Orbax's CheckpointManager <step>.
_ENTRY = re.compile(r'(?:[A-Za-z][\w.-]*?_)?(\d+)')
# The order names are compared in: params first, they matter most.
_RANK = {'params': 0, 'step': 1, 'opt_state': 2}


def find_checkpoints(workdir: str) -> dict:
  """Path relative to ``workdir`` -> the checkpoint entry's step."""
  found = {}
  for root, dirs, files in os.walk(workdir):
    for name in sorted(dirs + files):
      match = _ENTRY.fullmatch(name)
      path = os.path.join(root, name)
      if match and not trajectories.is_trajectory_file(path):
        found[os.path.relpath(path, workdir)] = int(match.group(1))
    dirs[:] = [d for d in dirs if not _ENTRY.fullmatch(d)]
  return found


def find_trajectories(workdir: str) -> list:
  """Paths relative to ``workdir`` of the trajectory files in it (none
  inside a checkpoint entry)."""
  found = []
  for root, dirs, files in os.walk(workdir):
    dirs[:] = sorted(d for d in dirs if not _ENTRY.fullmatch(d))
    found += [os.path.relpath(os.path.join(root, name), workdir)
              for name in sorted(files)
              if trajectories.is_trajectory_file(os.path.join(root, name))]
  return found


def _flatten(tree, prefix: str) -> dict:
  if isinstance(tree, dict):
    leaves = {}
    for key, value in tree.items():
      leaves.update(_flatten(value, f'{prefix}/{key}' if prefix else key))
    return leaves
  if isinstance(tree, (list, tuple)):
    return _flatten({str(i): v for i, v in enumerate(tree)}, prefix)
  if tree is None:  # an empty state (optax.EmptyState) as stored
    return {}
  array = np.asarray(tree)
  if np.issubdtype(array.dtype, np.integer):
    array = array.astype(np.int64)
  return {prefix: array}


def _is_optimizer(node) -> bool:
  return (isinstance(node, dict) and set(node) == {'target', 'state'} and
          isinstance(node['state'], dict) and 'param_states' in node['state'])


def _is_train_state(node) -> bool:
  return isinstance(node, dict) and {'params', 'opt_state'} <= set(node)


def _join(prefix: str, name: str) -> str:
  return f'{prefix}/{name}' if prefix else name


def _optimizer_leaves(node, prefix: str) -> dict:
  leaves = _flatten(node['target'], _join(prefix, 'params'))
  step = _flatten(node['state']['step'], '')['']
  leaves[_join(prefix, 'step')] = step
  leaves[_join(prefix, 'opt_state/count')] = step
  for path, value in _flatten(node['state']['param_states'], '').items():
    param, _, field = path.rpartition('/')
    leaves[_join(prefix, f'opt_state/{field}/{param}')] = value
  return leaves


def _train_state_leaves(node, prefix: str) -> dict:
  leaves = {}
  for key, value in node.items():
    if key == 'opt_state':
      for path, leaf in _flatten(value, '').items():
        name = '/'.join(p for p in path.split('/') if not p.isdigit())
        leaves[_join(prefix, f'opt_state/{name}')] = leaf
    elif key != 'apply_fn':
      leaves.update(_flatten(value, _join(prefix, key)))
  return leaves


def canonical_leaves(tree, prefix: str = '') -> list:
  """``[(name, array)]`` of a checkpoint, named alike in either layout."""
  if _is_optimizer(tree):
    leaves = _optimizer_leaves(tree, prefix)
  elif _is_train_state(tree):
    leaves = _train_state_leaves(tree, prefix)
  elif isinstance(tree, dict):
    leaves = {}
    for key, value in tree.items():
      leaves.update(dict(canonical_leaves(value, _join(prefix, str(key)))))
  else:
    leaves = _flatten(tree, prefix)
  return sorted(leaves.items(), key=_order)


def _order(item):
  return _RANK.get(item[0].split('/')[0], 3), item[0]


def _field_at(path: str):
  """``(index, field)`` of the optimizer-state field in a leaf's name, or
  None (params, steps, counts)."""
  parts = path.split('/')
  if 'opt_state' not in parts[:-1]:
    return None
  index = parts.index('opt_state') + 1
  return None if parts[index] == 'count' else (index, parts[index])


def _fields(leaves) -> set:
  return {found[1] for found in map(_field_at, (p for p, _ in leaves))
          if found}


def in_stock_names(old, new):
  """``old``'s leaves with flax.optim's state fields renamed to the stock
  Optax ones ``new`` has (the catalogue's ``stock_state`` of a rule whose
  fields both fit), or None where no rule fits."""
  legacy, stock = _fields(old), _fields(new)
  for algorithm in catalogue.BUILT_INS:
    mapping = dict(algorithm.stock_state)
    if not mapping or set(mapping) != legacy or {
        v.lstrip('-') for v in mapping.values()} != stock:
      continue
    renamed = []
    for path, value in old:
      found = _field_at(path)
      if found:
        index, field = found
        target = mapping[field]
        parts = path.split('/')
        parts[index] = target.lstrip('-')
        path = '/'.join(parts)
        value = -value if target.startswith('-') else value
      renamed.append((path, value))
    return sorted(renamed, key=_order)
  return None


_COUNT = 'opt_state/count'


def without_uncounted_steps(old, new):
  """``old`` without the counts that only repeat its step where ``new``
  has no count there: flax.optim's step is also its rule's count (read
  twice, ``_optimizer_leaves``), and a transform that does not count
  (``optax.sgd``'s trace) keeps only the TrainState's step."""
  names, values = {p for p, _ in new}, dict(old)

  def repeats_step(path, value):
    step = values.get(path[:-len(_COUNT)] + 'step')
    return step is not None and np.array_equal(step, value)

  return [(p, v) for p, v in old
          if not (p.endswith(_COUNT) and p not in names and
                  repeats_step(p, v))]


def compare_checkpoint(original: str, migrated: str, shown: str, step: int,
                       rtol: float):
  """None if the two agree, else the first difference as a sentence."""
  old = canonical_leaves(checkpoints.read_checkpoint(original))
  new = canonical_leaves(checkpoints.read_checkpoint(migrated))
  where = f'{shown} (step {step})'
  old = without_uncounted_steps(in_stock_names(old, new) or old, new)
  problem = _compare.structure_diff([p for p, _ in old], [p for p, _ in new],
                                    LABELS)
  # The values of the leaves both have first (params lead): a stock
  # transform names its state otherwise, but its params tell how far.
  names = dict(new)
  diffs = _compare.compare_leaves(
      [(p, v) for p, v in old if p in names],
      [(p, names[p]) for p, _ in old if p in names], rtol, 0.0, LABELS)
  if diffs:
    more = f'; {len(diffs) - 1} more leaves differ' if len(diffs) > 1 else ''
    also = f'; the leaves differ too: {problem}' if problem else ''
    return f'{where}: leaf {diffs[0].path}: {diffs[0].detail}{more}{also}'
  return f'{where}: the leaves differ: {problem}' if problem else None


# ------------------------------------------------------------ trajectories


def _tolerance(rtol: float) -> str:
  return f'within rtol={rtol!r}' if rtol else 'bit-identical'


def _digest_diffs(old, new, k: int) -> list:
  return [_compare.LeafDiff(path, 'digest', 'its digests differ (only '
                            'digests were recorded at this step: no numbers)')
          for path, a, b in zip(old.paths, old.digests[k], new.digests[k])
          if a != b]


def _step_diffs(old, new, k: int, rtol: float):
  """The leaves that differ at step ``k``, or None where it cannot be
  compared (only digests recorded, and a tolerance allowed)."""
  if old.values[k] is not None and new.values[k] is not None:
    return _compare.compare_leaves(
        list(zip(old.paths, old.values[k])),
        list(zip(new.paths, new.values[k])), rtol, 0.0, LABELS)
  return None if rtol else _digest_diffs(old, new, k)


def _first_batch_difference(old, new):
  return next((k for k, (a, b) in enumerate(
      zip(old.batch_digests, new.batch_digests), 1) if a != b), None)


def _trajectory_input_problem(old, new):
  """What keeps two trajectories from being compared step by step."""
  if old.steps != new.steps:
    return (f'the original run recorded {old.steps} updates, the migrated '
            f'one {new.steps}')
  batch = _first_batch_difference(old, new)
  if batch is not None:
    return (f'batch {batch} differs between the runs: the program fed them '
            'other data, so their params cannot be compared')
  problem = _compare.structure_diff(old.paths, new.paths, LABELS)
  return f'the params have other leaves: {problem}' if problem else None


def compare_trajectory(original: str, migrated: str, shown: str,
                       rtol: float):
  """``(problem, line)``: the first difference of two trajectory files as
  a sentence (None if they agree), and what was compared."""
  old = trajectories.read_trajectory(original)
  new = trajectories.read_trajectory(migrated)
  problem = _trajectory_input_problem(old, new)
  if problem:
    return f'{shown} (trajectory): {problem}', None
  skipped = []
  for k in range(old.steps + 1):
    diffs = _step_diffs(old, new, k, rtol)
    if diffs is None:
      skipped.append(k)
    elif diffs:
      more = (f'; {len(diffs) - 1} more leaves differ at this step'
              if len(diffs) > 1 else '')
      return (f'{shown} (trajectory, step {k} of {old.steps}): leaf '
              f'params{diffs[0].path}: {diffs[0].detail}{more}'), None
  unseen = (f' (steps {", ".join(map(str, skipped))} recorded as digests '
            'only: not compared within a tolerance)' if skipped else '')
  return None, (f'{shown} (trajectory): params at steps 0 to {old.steps} '
                f'{_tolerance(rtol)}{unseen}')


# ---------------------------------------------------------------- both runs


def _only_one_side(old, new) -> list:
  return [f'{shown}: only the {side} run left it'
          for shown, side in [(p, LABELS[0]) for p in old if p not in new] +
          [(p, LABELS[1]) for p in new if p not in old]]


def _compare_each(shown_paths, compare):
  """``(problem, lines)``: ``compare(shown)`` -> ``(problem, line)`` for
  each path in turn, up to the first problem (an unreadable file is one)."""
  lines = []
  for shown in shown_paths:
    try:
      problem, line = compare(shown)
    except (OSError, ValueError) as e:  # TrajectoryFileError included
      return f'{shown}: could not be read: {e}', lines
    if problem:
      return problem, lines
    lines.append(line)
  return None, lines


def compare_workdirs(original: str, migrated: str, rtol: float = 0.0):
  """``(proven, lines)``: every trajectory and checkpoint of the two runs
  compared, trajectories first."""
  old_runs = find_trajectories(original)
  new_runs = find_trajectories(migrated)
  old, new = find_checkpoints(original), find_checkpoints(migrated)
  if not (old or new or old_runs or new_runs):
    return False, [f'nothing to compare: the command left no checkpoint or '
                   f'trajectory in {original} or {migrated}']
  lines = _only_one_side(old_runs, new_runs) + _only_one_side(old, new)
  if lines:
    return False, lines

  def trajectory(shown):
    return compare_trajectory(os.path.join(original, shown),
                              os.path.join(migrated, shown), shown, rtol)

  def checkpoint(shown):
    step = old[shown]
    return compare_checkpoint(
        os.path.join(original, shown), os.path.join(migrated, shown), shown,
        step, rtol), (f'{shown} (step {step}): params, step and optimizer '
                      f'state {_tolerance(rtol)}')

  for shown_paths, compare in ((old_runs, trajectory), (old, checkpoint)):
    problem, compared = _compare_each(shown_paths, compare)
    if problem:
      return False, [problem]
    lines += compared
  return True, lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m compat.testing._prove')
  parser.add_argument('original')
  parser.add_argument('migrated')
  parser.add_argument('--rtol', type=float, default=0.0)
  args = parser.parse_args(argv)
  proven, lines = compare_workdirs(args.original, args.migrated, args.rtol)
  print('\n'.join(lines))
  return 0 if proven else 1


if __name__ == '__main__':
  sys.exit(main())
