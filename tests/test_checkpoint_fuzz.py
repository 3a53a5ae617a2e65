"""Corrupted checkpoints are rejected cleanly, never half-restored.

Hypothesis mutates the flax 0.5.3 fixtures (truncation, flipped bytes,
spliced garbage; or, one level up, a state dict with a leaf replaced by a
value of another type, shape or dtype) and checks every entry point:

* ``compat.checkpoints._safe_msgpack.decode`` and
  ``compat.load_legacy_checkpoint`` either succeed or raise ValueError
  (``CheckpointFormatError`` is one);
* ``flax.serialization.from_bytes(optimizer, data)`` either raises
  ValueError/TypeError, or returns an optimizer with exactly the template's
  structure, shapes and dtypes holding what the bytes say (the strict
  decoder reads the same values): flipped payload bits change values, which
  no format without checksums can notice, but never the optimizer's shape;
* nothing crashes or hangs (a per-example deadline), nothing is unpickled.

Budget: CHECKPOINT_FUZZ_EXAMPLES examples per test (default 25, a few
seconds); the ``slow`` variant runs 2000.
"""

import os
import pathlib
import sys
import warnings

from flax import serialization
import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / 'checkpoints'))
import fixture_lib as fx

import compat
from compat.checkpoints import _safe_msgpack
from legacy_optim import _restore

pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

EXAMPLES = int(os.environ.get('CHECKPOINT_FUZZ_EXAMPLES', '25'))
SLOW_EXAMPLES = 2000
DEADLINE_MS = 10_000
# Small fixtures covering None states, {} states, nested states, mixed
# dtypes and a container.
FUZZ_CASES = ['sgd_mixed_dtypes', 'momentum', 'multi', 'rmsprop',
              'weight_norm_adam', 'tuple_ema']
BARE = [c for c in FUZZ_CASES if c in fx.BARE_CASES]

_TEMPLATES = {}


def _template(name):
  if name not in _TEMPLATES:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      _TEMPLATES[name] = fx.template(name)
  return _TEMPLATES[name]


# ------------------------------------------------------------- mutations


@st.composite
def byte_mutations(draw, data: bytes) -> bytes:
  kind = draw(st.sampled_from(['truncate', 'flip', 'splice', 'insert']))
  if kind == 'truncate':
    return data[:draw(st.integers(0, len(data) - 1))]
  out = bytearray(data)
  if kind == 'flip':
    for _ in range(draw(st.integers(1, 6))):
      pos = draw(st.integers(0, len(out) - 1))
      out[pos] ^= draw(st.integers(1, 255))
    return bytes(out)
  start = draw(st.integers(0, len(out)))
  junk = draw(st.binary(min_size=1, max_size=16))
  if kind == 'splice':
    end = draw(st.integers(start, min(len(out), start + 16)))
    return bytes(out[:start] + junk + out[end:])
  return bytes(out[:start] + junk + out[start:])


def _nodes(tree, path=()):
  yield path
  if isinstance(tree, dict):
    for key, value in tree.items():
      yield from _nodes(value, path + (key,))


ODD_DTYPES = ['float32', 'float16', 'float64', 'int32', 'int64', 'uint8',
              'bool', 'complex64']

odd_values = st.one_of(
    st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(),
    st.text(max_size=5), st.just({}), st.dictionaries(
        st.text(max_size=3), st.integers(-2**31, 2**31), max_size=2),
    st.builds(lambda dtype, shape: np.zeros(shape, dtype),
              st.sampled_from(ODD_DTYPES),
              st.lists(st.integers(0, 5), max_size=3).map(tuple)))


@st.composite
def tree_mutations(draw, data: bytes) -> bytes:
  """A state dict with one node replaced, re-encoded like flax does."""
  tree = serialization.msgpack_restore(data)
  path = draw(st.sampled_from(list(_nodes(tree))[1:]))
  node = tree
  for key in path[:-1]:
    node = node[key]
  old = node[path[-1]]
  if isinstance(old, np.ndarray) and draw(st.booleans()):
    new = draw(st.sampled_from([
        old.astype(draw(st.sampled_from(ODD_DTYPES))),
        np.zeros(old.shape + (1,), old.dtype), old.reshape(-1)[:0],
        old.T.copy(), -np.ones_like(old)]))
  else:
    new = draw(odd_values)
  node[path[-1]] = new
  return serialization.msgpack_serialize(tree, in_place=True)


@st.composite
def corrupted(draw, cases):
  name = draw(st.sampled_from(cases))
  data = fx.checkpoint_bytes(name)
  mutation = draw(st.sampled_from([byte_mutations, tree_mutations]))
  return name, draw(mutation(data))


# ------------------------------------------------------------ properties


def _check_decoders(data: bytes, tmp_dir: pathlib.Path):
  try:
    decoded = _safe_msgpack.decode(data)
  except _safe_msgpack.CheckpointFormatError as e:
    assert str(e)
    decoded = None
  path = tmp_dir / 'checkpoint_3'
  path.write_bytes(data)
  try:
    ckpt = compat.load_legacy_checkpoint(path)
  except ValueError as e:
    assert str(e)
  else:
    assert decoded is not None
    fx.assert_identical(decoded, ckpt.state_dict)
    assert ckpt.step >= 0
  return decoded


def _signature(tree):
  """Structure + kind of number/shape of a state dict (values ignored): a
  restore may change precision (float16 into float32, as flax 0.5.3 did),
  never the kind."""
  if isinstance(tree, dict):
    return {k: _signature(v) for k, v in tree.items()}
  if tree is None:
    return None
  return (_restore._number_kind(np.asarray(tree)), np.shape(tree))


def _check_from_bytes(name: str, data: bytes, decoded):
  template = _template(name)
  try:
    restored = serialization.from_bytes(template, data)
  except (ValueError, TypeError, SyntaxError):
    # flax's own decoder runs first here; some msgpack errors it lets
    # through carry no message (e.g. FormatError()): their type says it.
    # A corrupted dtype name reaches numpy's parser of comma strings
    # (np.dtype('...,')), which raises SyntaxError: flax's rejection too
    # (this library's reader, checked above, names the field instead).
    return
  # Accepted: it must be the template's optimizer, holding the file's values.
  restored_sd = serialization.to_state_dict(restored)
  assert _signature(restored_sd) == _signature(
      serialization.to_state_dict(template))
  if decoded is not None:
    fx.assert_identical(decoded, restored_sd)
  # else: the strict reader rejects something flax tolerates (numpy reads a
  # negative dimension as "infer it"); the restored values still fit.
  assert int(np.asarray(restored.state.step)) >= 0


def _settings(examples):
  return hypothesis.settings(
      max_examples=examples, deadline=DEADLINE_MS, database=None,
      suppress_health_check=[hypothesis.HealthCheck.too_slow,
                             hypothesis.HealthCheck.function_scoped_fixture,
                             hypothesis.HealthCheck.data_too_large])


def _run(case_and_data, tmp_path, check_restore):
  name, data = case_and_data
  decoded = _check_decoders(data, tmp_path)
  if check_restore:
    _check_from_bytes(name, data, decoded)


@_settings(EXAMPLES)
@hypothesis.given(corrupted(BARE))
def test_corrupted_optimizer_checkpoints(tmp_path, case_and_data):
  _run(case_and_data, tmp_path, check_restore=True)


@_settings(EXAMPLES)
@hypothesis.given(corrupted(['tuple_ema']))
def test_corrupted_container_checkpoints_read_without_template(
    tmp_path, case_and_data):
  _run(case_and_data, tmp_path, check_restore=False)


@pytest.mark.slow
@_settings(SLOW_EXAMPLES)
@hypothesis.given(corrupted(FUZZ_CASES))
def test_corrupted_checkpoints_long(tmp_path, case_and_data):
  _run(case_and_data, tmp_path, check_restore=case_and_data[0] in BARE)


# ------------------------------------------------ targeted hostile inputs


def _array_ext(shape, dtype_name: bytes, payload: bytes):
  import msgpack
  inner = msgpack.packb((shape, dtype_name, payload), use_bin_type=True)
  return msgpack.packb({'x': msgpack.ExtType(1, inner)}, use_bin_type=True)


HOSTILE = {
    'empty file': b'',
    'object dtype': _array_ext([1], b'object', b'\0' * 8),
    'pickle-like payload': _array_ext([1], b'O', b'\x80\x04K\x01.'),
    'huge declared shape': _array_ext([2**40, 2**40], b'float32', b''),
    'short buffer': _array_ext([4], b'float32', b'\0' * 8),
    'negative dim': _array_ext([-1], b'float32', b''),
    'unknown ext type': b'\x81\xa1x\xc7\x01\x09\x00',
    'trailing bytes': fx.checkpoint_bytes('sgd') + b'\0',
    'deep nesting': b'\x81\xa1x' * 2000 + b'\xc0',
    'non-string key': b'\x81\x01\xc0',
}


@pytest.mark.parametrize('what', sorted(HOSTILE))
def test_hostile_inputs_are_rejected_with_a_format_error(what, tmp_path):
  data = HOSTILE[what]
  with pytest.raises(_safe_msgpack.CheckpointFormatError):
    _safe_msgpack.decode(data)
  path = tmp_path / 'checkpoint_1'
  path.write_bytes(data)
  with pytest.raises(ValueError):
    compat.load_legacy_checkpoint(path)
  with pytest.raises((ValueError, TypeError)):
    serialization.from_bytes(_template('sgd'), data)


def test_nothing_is_unpickled(monkeypatch, tmp_path):
  import pickle

  def forbidden(*args, **kwargs):
    raise AssertionError('pickle was called')

  monkeypatch.setattr(pickle, 'loads', forbidden)
  monkeypatch.setattr(pickle, 'load', forbidden)
  monkeypatch.setattr(pickle, 'Unpickler', forbidden)
  for name in FUZZ_CASES:
    compat.load_legacy_checkpoint(fx.checkpoint_path(name))
  with pytest.raises(_safe_msgpack.CheckpointFormatError):
    _safe_msgpack.decode(HOSTILE['pickle-like payload'])
