"""``CMD`` of ``migrate --prove`` on flax v0.3.3's vae (copied into the
example as prove_run.py by tests/test_migrate_examples.py, and migrated with
it): vae's own model and train step, 5 Adam steps on synthetic binarized
images, then a checkpoint. The optimizer is made by main's own line; main
itself reads tensorflow datasets, which are not installed.

  python prove_run.py WORKDIR
"""

import sys

import _v033_driver

sys.meta_path.insert(0, _v033_driver.StandInFinder())

from flax import optim  # noqa: E402 - after the stand-ins
from flax.training import checkpoints  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import train  # noqa: E402

STEPS = 5


def main(workdir):
  train.FLAGS(['vae'])
  key = jax.random.PRNGKey(0)
  params = train.model().init(key, np.ones((4, 784), np.float32),
                              key)['params']
  optimizer = optim.Adam(learning_rate=train.FLAGS.learning_rate).create(
      params)
  rng = np.random.RandomState(0)
  for step in range(STEPS):
    batch = (rng.rand(4, 784) > 0.5).astype(np.float32)
    optimizer = train.train_step(optimizer, batch,
                                 jax.random.PRNGKey(step + 1))
  checkpoints.save_checkpoint(workdir, optimizer, STEPS)


if __name__ == '__main__':
  main(sys.argv[1])
