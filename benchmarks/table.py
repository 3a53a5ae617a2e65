"""The benchmark table: one row per measure, targets and whether they are met.

Ratios come from ``run.py``'s figures of one run; see its docstring.
"""

import statistics

import workloads

ADAM_BYTES_PER_PARAM = 7 * 4  # Reads p, g, m, v; writes p, m, v (float32).

# Acceptance targets.
TARGET_STEP = 1.02  # jitted step, shim / native
TARGET_COMPILE = 1.10  # trace + compile, shim / native
TARGET_MEMORY = 1.05  # peak RSS, shim / native
TARGET_EAGER = {'small2000': 10.0}  # flax 0.5.3 eager / shim eager (min).
TARGET_EAGER_OTHERS = 1.0
TARGET_BANDWIDTH = 0.60  # 64M Adam step / copy bandwidth


def paired(a, b):
  """Median of per-round ratios ``a[r] / b[r]``.

  Rounds interleave the variants, so the two figures of a round were taken
  seconds apart under the same load: on a shared machine their ratio is far
  steadier than a ratio of medians.
  """
  return statistics.median(x / y for x, y in zip(a, b))


def _row(rows, workload, measure, shim, ref_name, ref, ratio, target, ok):
  rows.append((workload, measure, shim, f'{ref_name} {ref}', ratio, target,
               '' if ok is None else ('yes' if ok else 'NO')))


def ratios(a, b):
  """``(median of paired ratios, ratio of minima)`` of two timing series.

  The computation is deterministic, so other load only adds time: the
  minimum is each variant's least disturbed figure (as ``timeit`` advises),
  and the targets are judged on the ratio of minima. The paired median is
  shown beside it as the typical figure under load.
  """
  return paired(a, b), min(a) / min(b)


def _show(pair):
  return f'{pair[0]:.3f} / {pair[1]:.3f}'


def report(results, config):
  rows = []
  for name in config['workloads']:
    res = results[name]
    leaves, n_params = workloads.describe(name)
    label = f'{name} ({leaves} leaves, {n_params / 1e6:.1f}M)'
    step, comp = res['jit']['step_s'], res['jit']['compile_s']
    rounds = res['jit']['step_rounds_s']
    pair = ratios(rounds['shim'], rounds['native'])
    _row(rows, label, 'jit step ms', f'{step["shim"] * 1e3:.2f}',
         'native', f'{step["native"] * 1e3:.2f}', _show(pair),
         f'<= {TARGET_STEP}', pair[1] <= TARGET_STEP)
    _row(rows, '', 'jit step ms', '', 'stock optax.adam',
         f'{step["stock"] * 1e3:.2f}',
         _show(ratios(rounds['stock'], rounds['native'])) + ' stock/native',
         '', None)
    repeats = res['jit']['compile_repeats_s']
    pair = ratios(repeats['shim'], repeats['native'])
    _row(rows, '', 'trace+compile s', f'{comp["shim"]:.2f}', 'native',
         f'{comp["native"]:.2f}', _show(pair), f'<= {TARGET_COMPILE}',
         pair[1] <= TARGET_COMPILE)
    temp = res['jit']['temp_bytes']
    if temp.get('shim') is not None:
      _row(rows, '', 'XLA temp bytes', f'{temp["shim"]}', 'native',
           f'{temp["native"]}', '', '', None)
    if 'memory' in res:
      mem = res['memory']
      ratio = mem['shim']['peak_mb'] / mem['native']['peak_mb']
      grow = lambda m: m['peak_mb'] - m['baseline_mb']
      _row(rows, '', 'peak RSS MB (donated)',
           f'{mem["shim"]["peak_mb"]:.0f} (+{grow(mem["shim"]):.0f})',
           'native',
           f'{mem["native"]["peak_mb"]:.0f} (+{grow(mem["native"]):.0f})',
           f'{ratio:.3f}', f'<= {TARGET_MEMORY}', ratio <= TARGET_MEMORY)
    eager = res['eager']
    oracle = (results.get('oracle') or {}).get(name)
    if oracle:
      speedup = oracle['step_s'] / eager['step_s']
      target = TARGET_EAGER.get(name, TARGET_EAGER_OTHERS)
      _row(rows, '', 'eager step ms', f'{eager["step_s"] * 1e3:.1f}',
           'flax 0.5.3', f'{oracle["step_s"] * 1e3:.1f}',
           f'{speedup:.1f}x faster', f'>= {target}x', speedup >= target)
      _row(rows, '', 'eager 1st call s', f'{eager["first_s"]:.2f}',
           'flax 0.5.3', f'{oracle["first_s"]:.2f}',
           f'{oracle["first_s"] / eager["first_s"]:.2f}x faster', '', None)
    _row(rows, '', 'eager op-by-op ms', f'{eager["op_by_op_s"] * 1e3:.1f}',
         'shim cached', f'{eager["step_s"] * 1e3:.1f}',
         f'{eager["op_by_op_s"] / eager["step_s"]:.1f}x', '', None)
    if 'copy' in step:
      copy_gbs = 8 * n_params / min(rounds['copy']) / 1e9
      for variant in ('shim', 'native'):
        gbs = ADAM_BYTES_PER_PARAM * n_params / min(rounds[variant]) / 1e9
        # (28 B/param / t_adam) / (8 B/param / t_copy), per round and best.
        pair = ratios([ADAM_BYTES_PER_PARAM * c for c in rounds['copy']],
                      [8 * a for a in rounds[variant]])
        pair = (pair[0], ADAM_BYTES_PER_PARAM * min(rounds['copy']) /
                (8 * min(rounds[variant])))
        _row(rows, '', f'Adam GB/s ({variant}, best)', f'{gbs:.2f}',
             'XLA copy GB/s', f'{copy_gbs:.2f}', _show(pair),
             f'>= {TARGET_BANDWIDTH}' if variant == 'shim' else '',
             pair[1] >= TARGET_BANDWIDTH if variant == 'shim' else None)
      bw = results['bandwidth']
      _row(rows, '', 'copy GB/s (NumPy, 1 thread)', f'{bw["numpy_gbs"]:.2f}',
           '', '', '', '', None)
  headers = ('workload', 'measure', 'shim', 'reference',
             'ratio: paired median / of minima', 'target', 'met')
  widths = [max(len(str(r[i])) for r in rows + [headers])
            for i in range(len(headers))]
  line = lambda r: ' | '.join(str(c).ljust(w) for c, w in zip(r, widths))
  print(line(headers))
  print('-+-'.join('-' * w for w in widths))
  for r in rows:
    print(line(r))
  print('ms/s: medians. ratio: the median of per-round ratios (variants '
        'interleaved in every round) / the ratio of the best rounds; targets '
        'are judged on the latter. Adam GB/s counts 28 B/param (p, g, m, v '
        'read; p, m, v written); copy: x + 1 in place, 8 B/element.')
