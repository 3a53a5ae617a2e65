"""``python -m compat scan``: static detection of flax.optim usages.

The fixture tree (tests/fixtures/scan_tree) marks every line the scanner must
report with ``# expect: construct[?], ...`` (``?``: confidence 'likely'); the
markers are written by hand, the scanner's output is compared to them.
"""

import ast
import contextlib
import gc
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from compat.codemod import _project
from compat.codemod import _walk
from compat.codemod import scan

TREE = os.path.join(os.path.dirname(__file__), 'fixtures', 'scan_tree')
GUIDE = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                     'migration_guide.md')
_MARKER = re.compile(r'#\s*expect:\s*(.+)$')


def expected_from_markers(root):
  expected = set()
  for dirpath, _, files in os.walk(root):
    for name in files:
      if not name.endswith('.py'):
        continue
      path = os.path.join(dirpath, name)
      with open(path, 'rb') as f:
        text = f.read().decode('utf-8', 'replace')
      for lineno, line in enumerate(text.splitlines(), 1):
        match = _MARKER.search(line)
        if match:
          for item in match.group(1).split(','):
            item = item.strip()
            expected.add((path.replace(os.sep, '/'), lineno, item.rstrip('?'),
                          'likely' if item.endswith('?') else 'certain'))
  return expected


def run_main(argv):
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    status = scan.main(argv)
  return status, out.getvalue()


def test_fixture_tree_findings_match_hand_written_markers():
  result = scan.scan_paths([TREE])
  found = {(f.path, f.line, f.construct, f.confidence)
           for f in result.findings}
  expected = expected_from_markers(TREE)
  assert found == expected, (
      f'missed: {sorted(expected - found)}\n'
      f'unexpected: {sorted(found - expected)}')


def test_modern_code_has_no_findings():
  result = scan.scan_paths([os.path.join(TREE, 'modern')])
  assert result.files_scanned == 1
  assert result.findings == [] and result.errors == []


def test_unparseable_files_are_reported_not_fatal():
  result = scan.scan_paths([os.path.join(TREE, 'broken')])
  assert result.files_scanned == 2
  assert [(os.path.basename(e.path), e.line) for e in result.errors] == [
      ('bad_syntax.py', 3), ('binary_garbage.py', 2)]
  assert 'invalid syntax' in result.errors[0].message
  assert 'line 2 holds a NUL byte' in result.errors[1].message
  err = io.StringIO()
  with contextlib.redirect_stderr(err):
    status, out = run_main([os.path.join(TREE, 'broken')])
  assert status == scan.EXIT_UNPARSEABLE
  assert 'bad_syntax.py:3  not scanned: syntax error' in err.getvalue()
  assert '2 file(s) or directories could not be read' in out


def test_exit_status():
  assert run_main([TREE])[0] == scan.EXIT_FOUND
  assert run_main([os.path.join(TREE, 'modern')])[0] == scan.EXIT_CLEAN
  assert run_main([os.path.join(TREE, 'does_not_exist')])[0] == (
      scan.EXIT_USAGE)
  assert run_main(['--format', 'xml', TREE])[0] == scan.EXIT_USAGE


def test_json_output_schema_and_summary():
  status, out = run_main(['--format', 'json', TREE])
  assert status == scan.EXIT_FOUND
  data = json.loads(out)
  assert set(data) == {'version', 'files_scanned', 'findings', 'errors',
                       'summary'}
  assert data['version'] == 1 and data['files_scanned'] == 12
  keys = {'path', 'line', 'column', 'construct', 'code', 'replacement',
          'guide_section', 'confidence', 'rule'}
  assert all(set(f) == keys for f in data['findings'])
  assert all(set(e) == {'path', 'line', 'message'} for e in data['errors'])
  counted = {}
  for f in data['findings']:
    counted[f['construct']] = counted.get(f['construct'], 0) + 1
  assert data['summary'] == counted
  # (a line may hold two findings of one construct: two definitions)
  assert len({(f['path'], f['line'], f['construct'])
              for f in data['findings']}) == len(expected_from_markers(TREE))


def test_output_order_is_stable_and_independent_of_walk_order(tmp_path):
  copy = tmp_path / 'tree'
  shutil.copytree(TREE, copy)
  first = run_main(['--format', 'json', str(copy)])[1]
  # Re-create the files in reverse order (different directory order).
  for path in sorted(copy.rglob('*.py'), reverse=True):
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
  second = run_main(['--format', 'json', str(copy)])[1]
  assert first == second
  findings = json.loads(first)['findings']
  keys = [(f['path'], f['line'], f['column'], f['construct'])
          for f in findings]
  assert keys == sorted(keys)


def test_table_lists_location_construct_replacement_and_section():
  status, out = run_main([os.path.join(TREE, 'lm1b')])
  assert status == scan.EXIT_FOUND
  row = next(l for l in out.splitlines() if 'train.py:43' in l)
  assert 'optimizer_def' in row
  # The stock expression is filled in from the call's own arguments.
  assert ('optax.adamw(FLAGS.learning_rate, b1=0.9, b2=0.98, eps=1e-09, '
          'weight_decay=FLAGS.weight_decay)') in row
  assert '[Step 2: Swap each optimizer definition' in row
  assert out.splitlines()[-1].startswith('9 flax.optim usage(s) in 1 file')


@pytest.mark.parametrize('source,construct,replacement_part', [
    ('from flax import optim\nx = optim.Adagrad(0.1)\n', 'optimizer_def',
     'optax.adagrad(0.1, initial_accumulator_value=0.0, eps=1e-08)'),
    ('from flax import optim\nx = optim.LARS(lr, weight_decay=wd)\n',
     'optimizer_def', 'trust ratio'),
    ('from flax import optim\nx = optim.RMSProp(0.1, 0.95, 1e-6, True)\n',
     'optimizer_def', 'decay=0.95, eps=1e-06, eps_in_sqrt=False, '
     'centered=True'),
    ('import flax.optim.dynamic_scale as ds\nd = ds.DynamicScale('
     'growth_interval=10)\n', 'dynamic_scale',
     'flax.training.dynamic_scale.DynamicScale(growth_interval=10)'),
    ('from flax.optim import GradientDescent as GD\nGD(0.1).create(p)\n',
     'create', 'TrainState.create'),
])
def test_single_constructs(source, construct, replacement_part):
  findings = [f for f in scan.scan_source(source, 'x.py')
              if f.construct == construct]
  assert len(findings) == 1, scan.scan_source(source, 'x.py')
  assert replacement_part in findings[0].replacement


@pytest.mark.parametrize('source', [
    'import optax\ntx = optax.adam(1e-3)\n',
    'from flax.training import train_state\n'
    'state = train_state.TrainState.create(apply_fn=f, params=p, tx=tx)\n'
    'state = state.apply_gradients(grads=g)\n',
    'from flax import jax_utils\nstate = jax_utils.replicate(state)\n',
    'from flax.training import checkpoints\n'
    'checkpoints.save_checkpoint(d, state, 0)\n',
    'import flax.linen as nn\nimport flax\nm = flax.linen.Dense(3)\n',
    'from flax.training import dynamic_scale\nds = '
    'dynamic_scale.DynamicScale()\n',
])
def test_no_false_positives_on_modern_code(source):
  assert scan.scan_source(source, 'x.py') == []


def test_every_guide_section_the_scanner_cites_exists():
  with open(GUIDE, encoding='utf-8') as f:
    headings = {l.lstrip('#').strip() for l in f if l.startswith('#')}
  sections = {section for _, section in scan._FIXED.values()}
  sections |= {f.guide_section for f in scan.scan_paths([TREE]).findings}
  assert sections <= headings, sorted(sections - headings)


def test_cli_entry_point_does_not_import_jax():
  code = ('import sys\nfrom compat import cli\n'
          f'status = cli.main(["scan", {os.path.join(TREE, "modern")!r}])\n'
          'assert status == 0, status\n'
          'assert "jax" not in sys.modules and "legacy_optim" not in '
          'sys.modules, sorted(m for m in sys.modules if "jax" in m)\n'
          'print("OK")\n')
  result = subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 0 and result.stdout.strip().endswith('OK'), (
      result.stdout + result.stderr)


def test_reexports_are_followed_only_within_the_scanned_project():
  user = os.path.join(TREE, 'reexport', 'user.py')
  alone = {(f.line, f.construct) for f in scan.scan_paths([user]).findings}
  # Scanned alone, mylib's re-export is invisible: its names resolve to
  # nothing, while the direct alias and the factory still do.
  assert (24, 'optimizer_def') not in alone
  assert (5, 'import') not in alone
  assert (23, 'create') in alone and (3, 'import') in alone
  together = {(f.line, f.construct) for f in scan.scan_paths(
      [os.path.join(TREE, 'reexport')]).findings if f.path.endswith(
          'user.py')}
  assert {(24, 'optimizer_def'), (5, 'import'), (6, 'import')} <= together


def test_a_module_name_two_files_share_resolves_to_neither(tmp_path):
  for package in ('a', 'b'):
    (tmp_path / package / 'mylib').mkdir(parents=True)
    (tmp_path / package / 'mylib' / '__init__.py').write_text(
        'from flax import optim as optimizers\n' if package == 'a' else '')
  (tmp_path / 'user.py').write_text(
      'from mylib import optimizers\n'
      'opt_def = optimizers.Adam(learning_rate=0.1)\n')
  found = {(f.path.rsplit('/', 1)[-1], f.construct)
           for f in scan.scan_paths([str(tmp_path)]).findings}
  assert found == {('__init__.py', 'import')}


_RECURSIVE_RETURNS = '''\
from flax import optim

def get_mesh(sharding):  # flax 0.12.8 core/spmd.py's shape
  if sharding is None:
    return None
  return get_mesh(sharding.sharding)

def ping(value):
  return pong(value)

def pong(value):
  return ping(value)

def take_steps(optimizer, count):
  if count == 0:
    return optimizer
  return take_steps(optimizer.apply_gradient(count), count - 1)

optimizer = optim.Adam(0.1).create({})
mesh = get_mesh(optimizer)
looped = ping(optimizer)
stepped = take_steps(optimizer, 3)
print(mesh.target, looped.target, stepped.target)
'''


def test_results_that_flow_back_into_their_function_end_the_walk():
  # Before the fix: RecursionError. Neither recursive function is proven to
  # return an optimizer (the last line's .target uses stay unproven), and
  # the rest of the module is still scanned.
  findings = scan.scan_source(_RECURSIVE_RETURNS.encode(), 'recursive.py')
  certain = {(f.line, f.construct) for f in findings
             if f.confidence == 'certain'}
  assert (17, 'apply_gradient') in certain
  assert (19, 'create') in certain
  assert not any(f.line == 23 for f in findings if f.construct ==
                 'optimizer_use' and f.confidence == 'certain')


def test_statistics_count_the_findings_per_code(tmp_path, capsys):
  (tmp_path / 'train.py').write_text(
      'from flax import optim\n'
      'a = optim.Adam(0.1)\n'
      'b = optim.Momentum(0.1)\n'
      'opt = a.create({})\n')
  assert scan.main(['--statistics', str(tmp_path)]) == 1
  lines = capsys.readouterr().out.splitlines()
  assert [line.split()[:2] for line in lines[:-1]] == [
      ['2', 'FOC103'], ['1', 'FOC101'], ['1', 'FOC108']], lines
  assert lines[-1].startswith('4 flax.optim usage(s) in 1 file(s)'), lines
  assert scan.main(['--statistics', '--format', 'json', str(tmp_path)]) == 2


def test_nothing_of_the_project_stays_alive_after_a_scan(tmp_path):
  """A scan's project model (every tree it read) goes with the scan: kept
  by a table of the last modules' typed names, it stayed alive after it,
  and each later collection of the process walked all of it (seconds on
  a large tree)."""
  (tmp_path / 'model.py').write_text(
      'from flax import optim\n\n\n'
      'class Holder:\n'
      '  def __init__(self, params):\n'
      '    self.optimizer = optim.Adam(0.1).create(params)\n\n'
      '  def step(self, grads):\n'
      '    self.optimizer = self.optimizer.apply_gradient(grads)\n\n\n'
      'def train(holder: Holder, grads):\n'
      '  holder.step(grads)\n'
      '  return holder.optimizer.apply_gradient(grads)\n')
  (tmp_path / 'main.py').write_text(
      'import model\n\n\n'
      'def run(holder: model.Holder, grads):\n'
      '  return holder.optimizer.apply_gradient(grads)\n')
  assert scan.scan_paths([str(tmp_path)], jobs=1).findings
  gc.collect()
  assert not [model for model in gc.get_objects()
              if isinstance(model, _project.Model) and any(
                  path.startswith(str(tmp_path)) for path in model.sources)]


def test_a_scan_leaves_nothing_in_cycles_for_the_collector(tmp_path):
  """What a scan made is freed by reference counting as it ends, none of
  it left in a cycle for the collector's next run to walk (on the speed
  tree 2.5M objects, every tree the run kept: a second of CPU): an
  unreadable notebook's error kept the frames that read it (the scan's
  file list among them), and the flows asked what another module's class
  holds kept the model."""
  (tmp_path / 'model.py').write_text(
      'from flax import optim\n\n\n'
      'def make(params):\n'
      '  return optim.Adam(0.1).create(params)\n\n\n'
      'class Trainer:\n'
      '  def __init__(self, params):\n'
      '    self.optimizer = optim.Adam(0.1).create(params)\n')
  (tmp_path / 'main.py').write_text(
      'import model\n\n\n'
      'def run(params, grads):\n'
      '  return model.make(params).apply_gradient(grads)\n\n\n'
      'class Mine(model.Trainer):\n'
      '  def step(self, grads):\n'
      '    self.optimizer = self.optimizer.apply_gradient(grads)\n')
  (tmp_path / 'broken.ipynb').write_text('{"cells": [')
  gc.collect()
  enabled = gc.isenabled()
  gc.disable()
  try:
    result = scan.scan_paths([str(tmp_path)], jobs=1)
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    left = sorted({type(o).__name__ for o in gc.garbage if isinstance(
        o, (ast.AST, _project.Model, scan.ScanError, Exception))})
  finally:
    gc.set_debug(0)
    gc.garbage.clear()
    if enabled:
      gc.enable()
  assert result.findings and result.errors
  assert not left


def test_a_walked_module_is_visited_in_its_walks_order_without_recursion():
  """Where a tree's shared walk is made (the project's model walked every
  module it read), scan calls each node's check in the walk's order,
  none recursing: a 1,500-term expression is scanned (the recursive
  visit ran out of stack), and each fixture module's findings are those
  of the recursive visit of a tree not walked."""
  source = 'import jax\nx = jax.tree_map(f, y)' + ' + a' * 1500 + '\n'
  tree = ast.parse(source)
  _walk.nodes(tree)
  found = scan.scan_source(source, 'm.py', tree=tree)
  assert [(f.line, f.construct) for f in found] == [(2, 'removed_api')]
  fixtures = os.path.join(os.path.dirname(__file__), 'fixtures')
  checked = 0
  for directory in ('scan_tree', 'migrate'):
    for dirpath, _, files in os.walk(os.path.join(fixtures, directory)):
      for name in sorted(f for f in files if f.endswith('.py')):
        with open(os.path.join(dirpath, name), 'rb') as f:
          text = f.read()
        try:
          recursive = scan.scan_source(text, name)
        except SyntaxError:
          continue  # the fixtures' broken files
        tree = ast.parse(text)
        _walk.nodes(tree)
        assert scan.scan_source(text, name, tree=tree) == recursive, name
        checked += bool(recursive)
  assert checked >= 15


# Modules that cannot name flax.optim, each with findings where the words
# the prefilter finds are spelled other than plainly: through an import's
# alias, in a decorator, across lines, in a compound statement's header
# or nested deep in its bodies, on a line shared by two statements.
_QUIET_SOURCES = (
    'from jax.ops import index_update as u\nx = 1\ny = u(x, 1, 2)\n',
    'def f(x):\n  from jax.ops import index_add as a\n  return a(x, 0, 1)\n',
    'import jax\n\n\n@jax.partial(jax.jit, static_argnums=0)\n'
    'def f(x):\n  return x\n',
    'import jax\nx = (jax.\n     tree_map(f, y))\nz = jax . \\\n  host_id()\n',
    'import jax\r\nx = 1\r\ny = jax.tree_map(f, x)\rz = jax.host_id()\r\n',
    'import jax\nx = 1; y = jax.tree_map(f, x)\n',
    'import compat as c\ntx = c.to_optax(d)\n'
    'from compat import (\n  from_optax)\n',
    'from flax import nn as fnn\ny = fnn.relu(x)\nz = fnn.Dense(3)\n',
    'from flax import nn\nm = nn.Dense\nimport flax\nr = flax.nn.relu(x)\n',
    'import flax.linen as nn\nimport flax\nx = nn.Dense(3)\ny = flax.nn.elu\n',
    'from flax.training.checkpoints import save_checkpoint as sc\n'
    'sc(d, opt_state, 1)\n',
    'import pickle as p\nwith open(f) as g:\n  p.dump(my_opt, g)\n',
    'from flax.traverse_util import ModelParamTraversal as T\n'
    't = T(lambda p, _: True)\n',
    'from flax.linen import MultiHeadDotProductAttention as A\n'
    'y = A(num_heads=2)(q, kv, m)\n',
    'from jax.config import config as c\nc.enable_omnistaging()\n'
    'from jax.config import config\n',
    'state = state.apply_gradient(g)\nopt = opt.replicate()\n'
    'x = opt.compute_gradient(loss)\n',
    'from flax.training import lr_schedule\n'
    'import flax.training.lr_schedule as s\n'
    'f = s.create_constant_learning_rate_schedule(1, 2)\n',
    'from jax.experimental import optimizers, stax\n'
    'from jax.experimental.stax import Dense\n',
    'rest, params = variables.pop("params")\nv = variables.copy({"a": 1})\n',
    # every compound statement, each holding a finding in its header or
    # body
    'import jax\n'
    'class K(Base, metaclass=jax.tree_multimap):\n'
    '  """A removed name: jax.tree_map."""\n'
    '  @staticmethod\n'
    '  def m(a=jax.host_id(), *, b: jax.numpy.DeviceArray = None):\n'
    '    try:\n'
    '      pass\n'
    '    except jax.random.KeyArray:\n'
    '      y = 1\n'
    '    else:\n'
    '      rest, params = v.pop("params")\n'
    '    finally:\n'
    '      w = x.copy({"a": 1})\n'
    '    with jax.partial(f) as g, open(h):\n'
    '      for i in jax.tree_leaves(t):\n'
    '        while jax.host_count():\n'
    '          if jax.tree_flatten(x):\n'
    '            pass\n'
    '          elif jax.tree_structure(y):\n'
    '            pass\n'
    '          else:\n'
    '            jax.tree_unflatten(a, b)\n'
    '        else:\n'
    '          z = [jax.tree_all(q) for q in r]\n'
    '    match x:\n'
    '      case {"a": 1} if jax.host_ids():\n'
    '        pass\n'
    '      case _:\n'
    '        f = lambda: jax.ops.index_min(x, 1, 2)\n'
    '  async def n(self):\n'
    '    async with jax.tree_reduce(f, t) as r:\n'
    '      async for i in r:\n'
    '        await jax.tree_transpose(i, j, k)\n',
)


def _quiet_fixtures():
  """The fixture modules that cannot name flax.optim, and
  ``_QUIET_SOURCES``."""
  fixtures = os.path.join(os.path.dirname(__file__), 'fixtures')
  found = []
  for dirpath, _, files in sorted(os.walk(fixtures)):
    for name in sorted(f for f in files if f.endswith('.py')):
      with open(os.path.join(dirpath, name), 'rb') as f:
        text = f.read()
      if not scan.may_name_flax_optim(text.decode('utf-8', 'replace'), {}):
        found.append((os.path.join(dirpath, name), text))
  return found + [(f'quiet{i}.py', text.encode())
                  for i, text in enumerate(_QUIET_SOURCES)]


def test_a_module_that_cannot_name_flax_optim_is_visited_where_its_words_are(
    monkeypatch):
  """A module in which no name can resolve to flax.optim (and that no
  project's model read) has only findings at the words the prefilter
  found there: scan checks the nodes on their lines, not the whole
  module (a removal check of each of its nodes before), none
  recursing."""
  from compat.codemod import _removals
  asked = []
  match = _removals.match
  monkeypatch.setattr(_removals, 'match',
                      lambda node, names: asked.append(node) or match(
                          node, names))
  source = ('import jax\n' + ''.join(f'y{i} = f(x.a{i}, z)\n'
                                     for i in range(300)) +
            'def g(v):\n  return jax.tree_map(h, v)\n')
  found = scan.scan_source(source, 'm.py')
  assert [(f.line, f.construct) for f in found] == [(303, 'removed_api')]
  assert len(asked) <= 5, len(asked)
  # none recursing, in a tree not walked too (the recursive visit ran out
  # of stack)
  source = 'import jax\nx = jax.tree_map(f, y)' + ' + a' * 1500 + '\n'
  found = scan.scan_source(source, 'm.py')
  assert [(f.line, f.construct) for f in found] == [(2, 'removed_api')]


def test_a_quiet_modules_findings_are_those_of_its_whole_visit(monkeypatch):
  """What scan finds visiting only the statements on the lines spelling
  the prefilter's words, in a tree walked or not, is what it finds
  visiting every node (``_lines_spelling`` giving None)."""
  chosen = {}
  for name, text in _quiet_fixtures():
    try:
      chosen[name] = scan.scan_source(text, name)
    except SyntaxError:
      continue  # the fixtures' broken files
    tree = ast.parse(text)
    _walk.nodes(tree)
    assert scan.scan_source(text, name, tree=tree) == chosen[name], name
  monkeypatch.setattr(scan, '_lines_spelling', lambda *_: None)
  checked = 0
  for name, text in _quiet_fixtures():
    if name in chosen:
      assert scan.scan_source(text, name) == chosen[name], name
      checked += len(chosen[name])
  assert checked >= 60, checked
