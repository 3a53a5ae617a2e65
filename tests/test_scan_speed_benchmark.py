"""The per-project sums of benchmarks/scan_speed.py (``--each``): each
variant's median CPU, summed over the trees, and scan's ratio on the sums
(not a mean of the trees' ratios, which small trees would dominate)."""

import importlib.util
import os

# (loaded by its path: benchmarks/ on sys.path would put its run.py and
# table.py before any other module of those names)
_SPEC = importlib.util.spec_from_file_location(
    'scan_speed', os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), 'benchmarks', 'scan_speed.py'))
scan_speed = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scan_speed)


def _runs(*cpus):
  return [{'cpu': cpu, 'wall': cpu} for cpu in cpus]


def test_each_projects_medians_are_summed_and_the_ratio_taken_of_the_sums():
  trees = {
      'small': {'ast.parse': _runs(0.1, 0.3, 0.2),
                'scan -j 1': _runs(2.0, 9.0, 1.0),
                'scan -j 2': _runs(1.0, 1.0, 1.0)},
      'large': {'ast.parse': _runs(1.8, 1.8, 1.8),
                'scan -j 1': _runs(3.0, 4.0, 5.0),
                'scan -j 2': _runs(3.5, 3.5, 3.5)},
  }
  # medians: ast.parse 0.2 + 1.8 = 2.0; scan -j 1 2.0 + 4.0 = 6.0 (3.00x,
  # where the trees' own ratios, 10x and 2.2x, would average 6.1x);
  # scan -j 2 1.0 + 3.5 = 4.5
  assert scan_speed.summed(trees) == (
      '2 trees, each its own project: ast.parse 2.00 CPU s, scan -j 1 '
      '6.00 CPU s, scan -j 2 4.50 CPU s; scan -j 1 / ast.parse: 3.00x')
