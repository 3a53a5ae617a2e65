"""pytest plugin (``-p _example_tests_plugin``) for an example's own tests.

Installs the stand-ins of tests/_v033_driver.py for the pipeline-only
modules before the example's test modules import them, and, with
``FLAX_OPTIM_BLOCK_SHIM=1``, refuses this library's modules (what a
migrated copy must run without; tests/_v033_driver.py's ShimBlocker).
"""

import os
import sys

import _v033_driver

sys.meta_path.insert(0, _v033_driver.StandInFinder())
if os.environ.get('FLAX_OPTIM_BLOCK_SHIM') == '1':
  sys.meta_path.insert(0, _v033_driver.ShimBlocker())
