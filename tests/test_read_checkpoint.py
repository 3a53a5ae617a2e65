"""``compat.read_checkpoint`` of an Orbax checkpoint named by a relative
path (Orbax itself reads arrays only by absolute paths)."""

from flax.training import checkpoints
import numpy as np

import compat


def test_an_orbax_checkpoint_is_read_by_a_relative_path(tmp_path,
                                                        monkeypatch):
  tree = {'params': {'w': np.arange(6.0, dtype=np.float32).reshape(2, 3)},
          'step': np.int32(5)}
  checkpoints.save_checkpoint(str(tmp_path / 'run'), tree, 5)
  assert (tmp_path / 'run' / 'checkpoint_5').is_dir()  # Orbax's layout
  monkeypatch.chdir(tmp_path)
  read = compat.read_checkpoint('run/checkpoint_5')
  np.testing.assert_array_equal(read['params']['w'], tree['params']['w'])
  assert int(read['step']) == 5
