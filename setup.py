"""setuptools entry point; all metadata lives in setup.cfg.

One packaging detail needs code: setuptools' ``editable_wheel`` installs data
files only when the distribution answers ``has_data()`` (it looks up
``has_<category>``), but ``Distribution`` names it ``has_data_files()``. Without
this alias ``pip install -e .`` would skip ``flax_optim_compat.pth`` (see
``[options.data_files]``), i.e. the zero-change ``flax.optim`` import alias.
"""

import setuptools
from setuptools import dist


class _Distribution(dist.Distribution):

  def has_data(self):
    return self.has_data_files()


setuptools.setup(distclass=_Distribution)
