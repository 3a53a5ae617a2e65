"""Checkpoints for flax v0.3.3's mnist, which has none of its own: what a
user of the example would add, with flax's generic save and restore. The
resume test places it in a copy of the example (as ``checkpointing.py``)
before migrating, so ``migrate`` rewrites its restore as a user's."""

from flax.training import checkpoints
import train


def create_or_restore_optimizer(params, workdir):
  optimizer = train.create_optimizer(params, learning_rate=0.1, beta=0.9)
  optimizer = checkpoints.restore_checkpoint(workdir, optimizer)
  return optimizer


def save_optimizer(optimizer, step, workdir):
  checkpoints.save_checkpoint(workdir, optimizer, step)
