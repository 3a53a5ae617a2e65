"""setuptools entry point; all metadata lives in setup.cfg.

Two packaging details need code:

* setuptools' ``editable_wheel`` installs data files only when the
  distribution answers ``has_data()`` (it looks up ``has_<category>``), but
  ``Distribution`` names it ``has_data_files()``. Without this alias ``pip
  install -e .`` would skip ``flax_optim_compat.pth`` (see
  ``[options.data_files]``), i.e. the zero-change ``flax.optim`` import alias.
* Warnings, ``scan`` and ``flax-optim-compat guide`` point users to
  ``migration_guide.md``, which lives at the repository's root (the README
  links it there). ``build_py`` copies it into the built ``compat`` package,
  so wheels carry it as ``compat/migration_guide.md``; an editable install
  reads the root file itself (``compat.cli.guide``).
"""

import os

import setuptools
from setuptools import dist
from setuptools.command import build_py

GUIDE = 'migration_guide.md'


class _Distribution(dist.Distribution):

  def has_data(self):
    return self.has_data_files()


class _BuildPy(build_py.build_py):
  """Also puts the migration guide into the built ``compat`` package."""

  def run(self):
    super().run()
    if not getattr(self, 'editable_mode', False):
      self.copy_file(GUIDE, os.path.join(self.build_lib, 'compat', GUIDE))

  def get_outputs(self, include_bytecode=True):
    outputs = super().get_outputs(include_bytecode)
    if getattr(self, 'editable_mode', False):
      return outputs
    return outputs + [os.path.join(self.build_lib, 'compat', GUIDE)]


setuptools.setup(distclass=_Distribution, cmdclass={'build_py': _BuildPy})
