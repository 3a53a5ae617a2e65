"""Names resolve in the scope they are read in (Python's rules): an import
inside a function binds for that function and the functions nested in it,
a name a function binds otherwise hides the module's import of it, and a
class body's names are not its methods'. ``scan`` and ``migrate`` read
flax.optim only where the name is flax.optim there."""

import ast

from compat.codemod import _names
from compat.codemod import migrate
from compat.codemod import scan


def _resolved_at_line(source: str, line: int) -> list:
  """What each outermost name/attribute chain read on ``line`` resolves
  to, left to right."""
  tree = ast.parse(source)
  names = _names.ModuleNames(tree)
  found = [(node.col_offset, dotted)
           for node, _, dotted in _names.references(tree, names)
           if node.lineno == line]
  return [dotted for _, dotted in sorted(found)]


def _lines_found(source: bytes) -> set:
  return {(f.line, f.construct) for f in scan.scan_source(source, 'x.py')}


# ``optim`` is flax.optim at the module level; one function imports Optax
# under the same name.
_LOCAL_OPTAX = b'''from flax import optim

def make():
  return optim.Adam(1e-3)

def other():
  import optax as optim
  return optim.adam(1e-3)
'''


def test_a_function_import_binds_only_in_that_function():
  source = _LOCAL_OPTAX.decode()
  assert _resolved_at_line(source, 4) == ['flax.optim.Adam']
  assert _resolved_at_line(source, 8) == ['optax.adam']


def test_scan_finds_the_module_name_a_function_import_does_not_hide():
  assert (4, 'optimizer_def') in _lines_found(_LOCAL_OPTAX)
  assert not any(line == 8 for line, _ in _lines_found(_LOCAL_OPTAX))


def test_migrate_rewrites_the_definition_and_keeps_the_local_optax():
  new, _ = migrate.migrate_source(_LOCAL_OPTAX, 'x.py')
  text = new.decode()
  assert 'optim.Adam' not in text and 'flax import optim' not in text
  assert 'import optax as optim\n  return optim.adam(1e-3)' in text


# flax.optim is imported inside ``main`` only; the module's own ``optim``
# is the user's library (with an ``Adam`` of its own).
_LOCAL_FLAX = b'''from mylib import optim

def main(params):
  from flax import optim
  return optim.Adam(1e-3).create(params)

def helper():
  return optim.Adam(1e-3)
'''


def test_a_module_name_is_not_what_one_function_imports():
  assert _resolved_at_line(_LOCAL_FLAX.decode(), 8) == ['mylib.optim.Adam']
  assert not any(line == 8 for line, _ in _lines_found(_LOCAL_FLAX))


def test_migrate_rewrites_the_function_and_leaves_the_module_name():
  new, plan = migrate.migrate_source(_LOCAL_FLAX, 'x.py')
  text = new.decode()
  assert text.startswith('from mylib import optim\n')
  assert 'from flax import optim' not in text
  assert 'return optim.Adam(1e-3).create' not in text
  assert text.endswith('def helper():\n  return optim.Adam(1e-3)\n')
  assert not any(l.line == 8 for l in plan.leftovers)


def test_a_parameter_hides_the_module_import():
  source = (b'from flax import optim\n\n'
            b'def make(optim):\n  return optim.Adam(1)\n')
  assert _resolved_at_line(source.decode(), 4) == []
  assert not any(line == 4 for line, _ in _lines_found(source))
  new, _ = migrate.migrate_source(source, 'x.py')
  assert b'return optim.Adam(1)' in new


def test_nested_functions_see_the_enclosing_function_import():
  source = ('import optax as optim\n'
            'def outer():\n'
            '  from flax import optim\n'
            '  def inner():\n'
            '    return optim.Adam(1)\n'
            '  return inner\n'
            'rule = optim.adam(1)\n')
  assert _resolved_at_line(source, 5) == ['flax.optim.Adam']
  assert _resolved_at_line(source, 7) == ['optax.adam']


def test_a_class_body_import_is_not_its_methods():
  source = ('import optax as optim\n'
            'class Trainer:\n'
            '  from flax import optim\n'
            '  rule = optim.Adam(1)\n'
            '  def make(self):\n'
            '    return optim.adam(1)\n')
  assert _resolved_at_line(source, 4) == ['flax.optim.Adam']
  assert _resolved_at_line(source, 6) == ['optax.adam']


def test_a_default_and_a_decorator_are_read_outside_the_function():
  source = ('from flax import optim\n'
            '@optim.Adam\n'
            'def make(rule=optim.Adam(1)):\n'
            '  import optax as optim\n'
            '  return optim.adam(1)\n')
  assert _resolved_at_line(source, 2) == ['flax.optim.Adam']
  assert _resolved_at_line(source, 3) == ['flax.optim.Adam']
  assert _resolved_at_line(source, 5) == ['optax.adam']


def test_a_global_import_in_a_function_binds_the_module_name():
  source = ('def setup():\n'
            '  global optim\n'
            '  from flax import optim\n'
            'def make():\n'
            '  return optim.Adam(1)\n'
            'def later():\n'
            '  def deeper():\n'
            '    import optax as optim\n'
            '    return optim.adam(1)\n')
  assert _resolved_at_line(source, 5) == ['flax.optim.Adam']
  assert _resolved_at_line(source, 9) == ['optax.adam']
