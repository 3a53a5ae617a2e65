"""migrate's import fix runs LibCST's import visitors only where they can
change something (``_skeleton.imports_to_add``, ``_skeleton.may_remove``),
and gives what they give on the whole plan where it does."""

import libcst
from libcst import codemod
from libcst.codemod import visitors
import pytest

from compat.codemod import _rewrite_plan
from compat.codemod import migrate


def _plan(imports=(), removed=()):
  return _rewrite_plan.Plan([], [], [], list(imports), list(removed), (),
                            frozenset(), frozenset())


def _visitors_answer(code: str, plan) -> str:
  """Both visitors run with the whole plan (as migrate did before)."""
  module = libcst.parse_module(code)
  context = codemod.CodemodContext()
  for module_name, obj, asname in plan.imports:
    visitors.AddImportsVisitor.add_needed_import(context, module_name, obj,
                                                 asname)
  for module_name, obj, asname in plan.removed_imports:
    visitors.RemoveImportsVisitor.remove_unused_import(context, module_name,
                                                       obj, asname)
  module = visitors.AddImportsVisitor(context).transform_module(module)
  module = visitors.RemoveImportsVisitor(context).transform_module(module)
  return module.code


@pytest.fixture
def runs(monkeypatch):
  """The visitors' classes that ran."""
  ran = []
  for visitor in (visitors.AddImportsVisitor, visitors.RemoveImportsVisitor):
    def transform(self, module, original=visitor.transform_module):
      ran.append(type(self).__name__)
      return original(self, module)
    monkeypatch.setattr(visitor, 'transform_module', transform)
  return ran


_JAX = [('jax', None, None)]
_OPTIM = [('flax', 'optim', None), ('legacy_optim', 'optim', None)]


@pytest.mark.parametrize('code, imports, removed', [
    ('"""Doc."""\nimport jax\n\nx = jax.numpy.zeros(1)\n', _JAX, ()),
    # (a semicolon in a comment joins no statements: licence headers)
    ('# Licensed under the License;\n"""Doc."""  # a; b\nimport jax  # ;\n'
     '\nx = jax.numpy.zeros(1)\n', _JAX, ()),
    ('import os\nimport jax\n\nx = jax.numpy.zeros(1)\n', _JAX, ()),
    ('from flax.training import train_state\n\nx = 1\n',
     [('flax.training', 'train_state', None)], ()),
    ('from flax.training import *\n\nx = 1\n',
     [('flax.training', 'train_state', None)], ()),
    ('import jax\n\ndef f():\n  from flax import linen\n', _JAX, _OPTIM),
])
def test_no_visitor_runs_where_it_would_change_nothing(code, imports,
                                                       removed, runs):
  plan = _plan(imports, removed)
  assert migrate._libcst_fix_imports(code, plan) == code
  assert runs == []


@pytest.mark.parametrize('code, imports, removed', [
    # Imported, but not where the visitor looks (LibCST adds it again):
    # after two strings, one docstring only in ``ast``'s eyes,
    ('"a" "b"\nimport jax\n\nx = jax\n', _JAX, ()),
    # on a line shared with another statement,
    ('import os; import jax\n\nx = jax\n', _JAX, ()),
    ('"""Doc."""; import jax\n\nx = jax\n', _JAX, ()),
    # below another statement, inside a function, as an alias,
    ('x = 1\nimport jax\n', _JAX, ()),
    ('def f():\n  import jax\n', _JAX, ()),
    ('import jax as jax\n\nx = jax\n', _JAX, ()),
    ('from . import train_state\n', [('flax.training', 'train_state', None)],
     ()),
    # the object under another name or from another module.
    ('from flax.training import train_state as ts\n',
     [('flax.training', 'train_state', None)], ()),
    ('from flax import training\n', [('flax.training', 'train_state', None)],
     ()),
    # What is dropped: an import of one of the modules, anywhere.
    ('import jax\nfrom flax import optim\n\nx = 1\n', _JAX, _OPTIM),
    ('import jax\n\ndef f():\n  from flax import optim\n  return 1\n', _JAX,
     _OPTIM),
    ('import jax\nfrom . import optim\n', _JAX, _OPTIM),
    ('import flax.optim\n', (), [('flax.optim', None, None)]),
    # Unsure: the visitor decides.
    ('__strict__ = True\nimport jax\n', _JAX, ()),
])
def test_the_visitors_still_decide_where_an_import_may_change(
    code, imports, removed, runs):
  plan = _plan(imports, removed)
  fixed = migrate._libcst_fix_imports(code, plan)
  assert runs
  assert fixed == _visitors_answer(code, plan)


def test_a_missing_import_is_added_beside_one_already_there(runs):
  code = '"""Doc."""\nimport jax\n\nx = optax.sgd(1)\n'
  plan = _plan(_JAX + [('optax', None, None)], _OPTIM)
  fixed = migrate._libcst_fix_imports(code, plan)
  assert runs == ['AddImportsVisitor']
  assert fixed == _visitors_answer(code, plan)
  assert fixed.count('import jax\n') == 1 and 'import optax\n' in fixed
