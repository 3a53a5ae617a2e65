"""clu's ``checkpoint`` module, its TensorFlow calls served by Python's files.

clu's ``Checkpoint`` writes the flax state itself (``flax.serialization``'s
``to_bytes`` into ``ckpt-N.flax``, ``from_bytes`` back) and leaves to
TensorFlow only the bookkeeping: which numbered checkpoints exist
(``tf.train.CheckpointManager``), the save counter and the state of
TensorFlow objects (a dataset iterator; the corpus recipes give none).
TensorFlow is not installed here, so ``use_files(module)`` gives clu's own
module (as installed, its code unchanged) a ``tf`` that keeps that
bookkeeping in marker files ``ckpt-N.index``: every byte of the program's
state still goes through clu's save and restore.
"""

import glob
import importlib
import os
import re
import sys
import types
from unittest import mock


class _Counter:

  def __init__(self):
    self.value = 0

  def numpy(self):
    return self.value


class _Checkpoint:
  """``tf.train.Checkpoint`` of no TensorFlow objects: its save counter."""

  def __init__(self, **trackables):
    assert not trackables, 'no TensorFlow state in the corpus recipes'
    self.save_counter = _Counter()

  def restore(self, prefix):
    self.save_counter.value = _number(prefix)


class _CheckpointManager:
  """``tf.train.CheckpointManager``: ``{directory}/{name}-N`` prefixes,
  numbered by the save counter, the oldest beyond ``max_to_keep`` gone."""

  def __init__(self, checkpoint, directory, max_to_keep, checkpoint_name):
    self.checkpoint, self.directory = checkpoint, directory
    self.max_to_keep, self.name = max_to_keep, checkpoint_name

  @property
  def checkpoints(self):
    markers = glob.glob(os.path.join(self.directory, f'{self.name}-*.index'))
    return sorted((m[:-len('.index')] for m in markers), key=_number)

  @property
  def latest_checkpoint(self):
    return (self.checkpoints or [None])[-1]

  def save(self):
    self.checkpoint.save_counter.value += 1
    prefix = os.path.join(self.directory,
                          f'{self.name}-{self.checkpoint.save_counter.value}')
    with open(f'{prefix}.index', 'wb'):
      pass
    for stale in self.checkpoints[:-self.max_to_keep]:
      os.remove(f'{stale}.index')
    return prefix


def _number(prefix) -> int:
  return int(re.search(r'-(\d+)$', prefix).group(1))


TENSORFLOW = types.SimpleNamespace(
    io=types.SimpleNamespace(gfile=types.SimpleNamespace(
        exists=os.path.exists,
        makedirs=lambda path: os.makedirs(path, exist_ok=True),
        GFile=open, glob=glob.glob, remove=os.remove)),
    train=types.SimpleNamespace(Checkpoint=_Checkpoint,
                                CheckpointManager=_CheckpointManager))


def use_files(clu_checkpoint_module) -> None:
  """Serves ``clu.checkpoint``'s ``tf`` calls with Python's files."""
  clu_checkpoint_module.tf = TENSORFLOW


def clu_checkpoint_module() -> types.ModuleType:
  """``clu.checkpoint`` imported with ``TENSORFLOW`` as its ``tf`` (put in
  ``sys.modules`` only while it imports: flax.io reads its presence as
  TensorFlow's)."""
  module = types.ModuleType('tensorflow')
  module.io, module.train = TENSORFLOW.io, TENSORFLOW.train
  with mock.patch.dict(sys.modules, {'tensorflow': module}):
    return importlib.import_module('clu.checkpoint')
