"""Whether a call gives a definition made by a project factory
(``_factories.returns_def``) is asked of every call of every module the
project's model reads (89,904 times on a 3,232-file tree of real JAX
code): a call's function is resolved once for it, and the methods a call
may run are looked up only where a factory has that method's name."""

import ast

from compat.codemod import _names
from compat.codemod import _project

_OPTS = '''from flax import optim


def make_opt(rate):
  return optim.Adam(rate)


class Trainer:

  def build(self):
    return optim.Momentum(0.1)

  def fit(self, data):
    return data
'''

_MAIN = '''import jax.numpy as jnp
import opts


def run(trainer, data):
  definition = opts.make_opt(0.1)
  other = trainer.build()
  trainer.fit(data)
  return jnp.sum(data), definition, other
'''


def _model():
  parsed = [(path, source.encode(), ast.parse(source))
            for path, source in (('opts.py', _OPTS), ('main.py', _MAIN))]
  return _project.Model(parsed, {'opts.py': ['opts'], 'main.py': ['main']},
                        {})


def _calls(model) -> dict:
  return {ast.unparse(node.func): node
          for node in ast.walk(model.trees['main.py'])
          if isinstance(node, ast.Call)}


def test_a_method_is_looked_up_only_where_a_factory_has_its_name(
    monkeypatch):
  model = _model()
  names = model.names['main.py']
  calls = _calls(model)
  looked_up = []
  candidates = type(model)._method_candidates

  def noting(self, call):
    looked_up.append(ast.unparse(call.func))
    return candidates(self, call)

  monkeypatch.setattr(type(model), '_method_candidates', noting)
  given = {func: model.returns_def(call, names)
           for func, call in calls.items()}
  assert given == {'opts.make_opt': True, 'trainer.build': True,
                   'trainer.fit': False, 'jnp.sum': False}
  assert looked_up == ['trainer.build']


def test_a_calls_function_is_resolved_once(monkeypatch):
  model = _model()
  names = model.names['main.py']
  resolved = []
  resolve = _names.ModuleNames.resolve

  def noting(self, node, at=None):
    resolved.append(ast.unparse(node))
    return resolve(self, node, at)

  monkeypatch.setattr(_names.ModuleNames, 'resolve', noting)
  for func, call in _calls(model).items():
    resolved.clear()
    model.returns_def(call, names)
    assert resolved == [func]
