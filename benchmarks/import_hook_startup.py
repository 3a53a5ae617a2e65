"""Start-up cost of the flax.optim import alias (its .pth file).

Builds a throwaway venv holding only the import alias (the .pth file, the
start-up stub and the finder module it loads lazily), then times
``python -c pass`` with and without the .pth file, interleaved, as child
CPU time (user + sys: less sensitive to other load on the machine than wall
time). Two cases:

* ``pyc``: the module's bytecode is cached, as after ``pip install`` of a
  wheel (pip compiles on install);
* ``source``: no bytecode cache (``PYTHONDONTWRITEBYTECODE=1``, e.g. an
  editable install in such an environment): the module compiles every start.

Run: ``python benchmarks/import_hook_startup.py [--runs 200]``.
"""

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_cpu_ms(python, env) -> float:
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  subprocess.run([python, '-c', 'pass'], env=env, check=True)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  return 1e3 * ((after.ru_utime - before.ru_utime) +
                (after.ru_stime - before.ru_stime))


def measure(python, site_dir, runs, env):
  pth = os.path.join(site_dir, 'flax_optim_compat.pth')
  samples = {'with': [], 'without': []}
  for _ in range(runs // 10):
    for mode in samples:
      if mode == 'without':
        os.rename(pth, pth + '.off')
      try:
        samples[mode] += [child_cpu_ms(python, env) for _ in range(10)]
      finally:
        if mode == 'without':
          os.rename(pth + '.off', pth)
  return {mode: statistics.median(v) for mode, v in samples.items()}


def hook_import_us(python, env, runs) -> float:
  """Fastest ``-X importtime`` figure of the start-up stub (microseconds)."""
  best = float('inf')
  for _ in range(runs):
    err = subprocess.run([python, '-X', 'importtime', '-c', 'pass'], env=env,
                         check=True, capture_output=True, text=True).stderr
    for line in err.splitlines():
      if line.rstrip().endswith('_flax_optim_compat_startup'):
        best = min(best, float(line.split('|')[1]))
  return best


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--runs', type=int, default=200)
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    venv = os.path.join(tmp, 'venv')
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv],
                   check=True)
    python = os.path.join(venv, 'bin', 'python')
    site_dir = subprocess.run(
        [python, '-c', 'import site; print(site.getsitepackages()[0])'],
        check=True, capture_output=True, text=True).stdout.strip()
    for name in ('flax_optim_compat.pth', '_flax_optim_compat_startup.py',
                 '_flax_optim_compat_hook.py'):
      shutil.copy(os.path.join(REPO, name), site_dir)
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'LEGACY_OPTIM_IMPORT_HOOK')}
    for name in ('_flax_optim_compat_startup.py', '_flax_optim_compat_hook.py'):
      compileall.compile_file(os.path.join(site_dir, name), quiet=1)
    cases = {'pyc': measure(python, site_dir, args.runs, env)}
    imports = {'pyc': hook_import_us(python, env, args.runs // 4)}
    shutil.rmtree(os.path.join(site_dir, '__pycache__'))
    env['PYTHONDONTWRITEBYTECODE'] = '1'
    cases['source'] = measure(python, site_dir, args.runs, env)
    imports['source'] = hook_import_us(python, env, args.runs // 4)
  print(f'python -c pass, median child CPU time over {args.runs} runs each:')
  for case, m in cases.items():
    print(f'  {case:<6}  without .pth {m["without"]:6.2f} ms   with .pth '
          f'{m["with"]:6.2f} ms   added {m["with"] - m["without"]:+.2f} ms '
          f'(ratio {m["with"] / m["without"]:.3f}); fastest -X importtime of '
          f'the start-up stub: {imports[case] / 1e3:.2f} ms')
  return 0


if __name__ == '__main__':
  sys.exit(main())
