"""``migrate``'s cost grows with the file, not faster (issue 41, fault 7).

The speed itself is measured side by side in benchmarks/migrate_speed.py;
here, the structure that keeps it linear: LibCST's import visitors see a
skeleton whose size does not grow with the statements that cannot matter to
them, and the line alignment finds exactly ``difflib``'s blocks without
pairing every two equal lines.
"""

import difflib
import random

import pytest

from compat.codemod import _line_match
from compat.codemod import _skeleton
from compat.codemod import migrate

_HEAD = 'from flax import optim\nimport jax.numpy as jnp\n'
_USAGE = '\n\ndef make(params):\n  return optim.Adam(0.1).create(params)\n'


def _helpers(count: int) -> str:
  return ''.join(f'\n\n@jnp.vectorize\ndef helper_{i}(x):\n  # why {i}\n'
                 f'  return x + {i}\n' for i in range(count))


def test_the_skeleton_libcst_sees_does_not_grow_with_other_statements():
  small = _HEAD + _helpers(10) + _USAGE + _helpers(10)
  large = _HEAD + _helpers(2000) + _USAGE + _helpers(2000)
  skeletons = [_skeleton.Skeleton(code, {'optim'}) for code in (small, large)]
  assert len(skeletons[0].code) == len(skeletons[1].code)
  assert skeletons[1].code.count('\n') < 20
  for skeleton, code in zip(skeletons, (small, large)):
    assert skeleton.restore(skeleton.code) == code


def test_a_module_of_many_statements_is_migrated():
  # Below a docstring, LibCST's matchers recursed once per top-level
  # statement: past about a thousand the file was "not migrated:
  # RecursionError".
  source = ('"""A module."""\n' + _HEAD +
            ''.join(f'v_{i} = {i}\n' for i in range(1500)) +
            _USAGE).encode()
  new, plan = migrate.migrate_source(source, 'many.py')
  assert b'optim.Adam' not in new and plan.edits
  assert new.count(b'\nv_') == 1500


@pytest.mark.parametrize('between, kept', [
    # An indented comment below a block is that block's (LibCST): the
    # block stays in the skeleton, so the import after it keeps it.
    ('\n  # the block\'s\n', True),
    ('\n# the import\'s\n', False),
])
def test_a_comment_stays_with_what_libcst_gives_it_to(between, kept):
  code = ('import os\n\ndef f():\n  return 1\n' + between +
          'from flax import optim\n')
  skeleton = _skeleton.Skeleton(code, {'optim'})
  assert ('def f():' in skeleton.code) == kept
  assert skeleton.restore(skeleton.code) == code


def test_a_name_inside_a_longer_identifier_is_no_read_of_it():
  # ``optim`` in ``optimizer`` or ``self._optim`` reads nothing an import
  # of ``optim`` binds: such statements are elided (t5x's modules spell
  # ``optimizer`` throughout, and LibCST saw nearly all of them).
  code = ('from flax import optim\n\ndef step(optimizer):\n'
          '  return optimizer.target\n\nclass Holder:\n  def f(self):\n'
          '    return self._optim, optimé\n\nx = [optim, "optim.Adam"]\n')
  skeleton = _skeleton.Skeleton(code, {'optim'})
  assert 'def step' not in skeleton.code
  assert 'class Holder' not in skeleton.code
  assert 'x = [optim' in skeleton.code
  assert skeleton.restore(skeleton.code) == code


@pytest.mark.parametrize('read', [
    'y = optim', 'y = (optim)', "y: 'optim.Adam'", "__all__ = ['optim']",
    'y = f(optim=1) + optim', 'def g():\n  return optim'])
def test_a_statement_naming_the_word_stays(read):
  code = f'from flax import optim\n\nx = 1\n\n{read}\n'
  skeleton = _skeleton.Skeleton(code, {'optim'})
  assert read in skeleton.code and 'x = 1' not in skeleton.code


def test_a_changed_placeholder_gives_no_result():
  code = 'import os\n\nx = 1\n\ny = optim\n'
  skeleton = _skeleton.Skeleton(code, {'optim'})
  assert 'x = 1' not in skeleton.code
  assert skeleton.restore(skeleton.code.replace('pass', 'pass;', 1)) is None


def test_line_alignment_is_difflibs():
  rng = random.Random(41)
  for _ in range(3000):
    a = [rng.randint(0, 3) for _ in range(rng.randint(0, 25))]
    b = list(a)
    for _ in range(rng.randint(0, 4)):
      at = rng.randint(0, len(b))
      b[at:at + rng.randint(0, 3)] = [rng.randint(0, 5)
                                      for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.3:
      b = [rng.randint(0, 3) for _ in range(rng.randint(0, 25))]
    expected = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    assert _line_match.opcodes(a, b) == expected.get_opcodes(), (a, b)
