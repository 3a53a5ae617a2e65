"""How ``migrate`` applies a plan's edits to the source bytes.

Edits compose inside out; an edit that cannot be applied is reported, never
dropped silently (a flow with one link left out would be a broken program).
"""

import itertools

import pytest

from compat.codemod import _rewrite_plan
from compat.codemod import migrate

SOURCE = b'y = opt.target + 1\n'
OPT = (4, 7)  # `opt`
TARGET_EXPR = (4, 14)  # `opt.target`


def _edit(span, template, parts=(), construct='optimizer_use'):
  return _rewrite_plan.Edit(span[0], span[1], template, tuple(parts), 1,
                            construct)


def test_a_wrapper_of_the_same_span_composes_in_any_order():
  rename = _edit(TARGET_EXPR, 'state.params')
  wrapper = _edit(TARGET_EXPR, 'jnp.asarray({x})', [('x', TARGET_EXPR)])
  for edits in itertools.permutations([rename, wrapper]):
    rendered, dropped = _rewrite_plan.render(SOURCE, list(edits))
    assert (rendered, dropped) == (b'y = jnp.asarray(state.params) + 1\n', [])


def test_two_different_edits_of_one_span_are_reported():
  first = _edit(TARGET_EXPR, 'state.params')
  second = _edit(TARGET_EXPR, 'other.params')
  rendered, dropped = _rewrite_plan.render(SOURCE, [first, second])
  assert len(dropped) == 1
  kept = ({first, second} - set(dropped)).pop()
  assert rendered == SOURCE.replace(b'opt.target',
                                    kept.template.encode())


def test_edits_nested_in_parts_apply_and_ones_replaced_whole_do_not_count():
  receiver = _edit(OPT, 'state')
  attribute = _edit(TARGET_EXPR, '{r}.params', [('r', OPT)])
  statement = _edit((0, len(SOURCE) - 1), 'pass')  # the line removed whole
  assert _rewrite_plan.render(SOURCE, [receiver, attribute]) == (
      b'y = state.params + 1\n', [])
  assert _rewrite_plan.render(SOURCE, [statement, receiver, attribute]) == (
      b'pass\n', [])


def test_edits_that_overlap_without_nesting_are_reported():
  left = _edit((4, 10), 'a')  # `opt.ta`
  right = _edit((8, 16), 'b')  # `target +`
  rendered, dropped = _rewrite_plan.render(SOURCE, [left, right])
  assert (rendered, dropped) == (b'y = arget + 1\n', [right])


@pytest.mark.parametrize('construct, rolled_back', [('optimizer_use', True),
                                                     ('removed_api', False)])
def test_a_flow_edit_left_out_rolls_the_file_back(monkeypatch, construct,
                                                  rolled_back):
  source = (b'from flax import optim\n'
            b'opt = optim.Adam(1e-3).create({"w": 1.0})\n'
            b'y = opt.target\n')
  real_render = _rewrite_plan.render

  def render_dropping_one(src, edits):
    rendered, dropped = real_render(src, edits)
    return rendered, dropped + [_edit((0, 1), 'x', construct=construct)]

  monkeypatch.setattr(_rewrite_plan, 'render', render_dropping_one)
  new, plan = migrate.migrate_source(source, 'train.py')
  assert (new == source) is rolled_back
  assert any(l.construct == 'self_check' for l in plan.leftovers) is (
      rolled_back)
