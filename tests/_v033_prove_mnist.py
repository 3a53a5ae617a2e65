"""``CMD`` of ``migrate --prove`` on flax v0.3.3's mnist (copied into the
example as prove_run.py by tests/test_migrate_examples.py, and migrated with
it): mnist's own ``train_and_evaluate``, one epoch of 5 steps on synthetic
images (its tensorflow_datasets stood in for), then a checkpoint of the
optimizer it returns.

  python prove_run.py WORKDIR
"""

import sys

import _v033_driver

sys.meta_path.insert(0, _v033_driver.StandInFinder())

from configs import default  # noqa: E402 - after the stand-ins
from flax.training import checkpoints  # noqa: E402
import numpy as np  # noqa: E402
import train  # noqa: E402

STEPS, BATCH = 5, 4


def images(count, seed):
  rng = np.random.RandomState(seed)
  return {'image': rng.rand(count, 28, 28, 1).astype(np.float32),
          'label': rng.randint(0, 10, count)}


def main(workdir):
  train.get_datasets = lambda: (images(STEPS * BATCH, 0), images(BATCH, 1))
  config = default.get_config()
  config.batch_size, config.num_epochs = BATCH, 1
  optimizer = train.train_and_evaluate(config, workdir)
  checkpoints.save_checkpoint(workdir, optimizer, STEPS)


if __name__ == '__main__':
  main(sys.argv[1])
