"""A name bound to one of several modules, chosen where the program runs.

Training scripts pick the helpers of a model by its config::

  if config.model_type == 'deterministic':
    model_utils = deterministic_utils
  elif config.model_type == 'batchensemble':
    model_utils = batchensemble_utils
  update_fn = model_utils.create_update_fn(model, config)

``model_utils.create_update_fn`` runs one of the modules' functions of
that name: a call through it is a call of each (``callees``), so each
one's flow and the caller's are linked and proven together.

A name is such an alias only where nothing else can reach it: every
binding of it in the module is a plain ``name = <module>`` assignment of
an imported module, and every read of it is the value of an attribute
(``model_utils.f``), so no other code is handed the alias and calls what
migrate does not see. Stdlib only.
"""

import ast

from compat.codemod import _walk


def module_aliases(tree, names, is_module) -> dict:
  """``{name: (dotted module, ...)}`` of the module ``tree`` (its
  ``_names.ModuleNames`` ``names``); ``is_module(dotted)``: the project
  has a module of that name."""
  nodes = _walk.nodes(tree)
  chosen: dict = {}
  for node in nodes:  # the assignments of a module to a plain name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and (
        isinstance(node.targets[0], ast.Name)) and isinstance(
            node.value, (ast.Name, ast.Attribute)):
      dotted = names.resolve(node.value)
      if dotted is not None and is_module(dotted):
        modules = chosen.setdefault(node.targets[0].id, ())
        if dotted not in modules:
          chosen[node.targets[0].id] = modules + (dotted,)
  if not chosen:
    return {}
  return {name: modules for name, modules in chosen.items()
          if name not in _spoiled(nodes, _walk.parents(tree), names,
                                  is_module, set(chosen))}


def _spoiled(nodes, parents, names, is_module, wanted) -> set:
  """The names of ``wanted`` bound otherwise than to a module, or read
  otherwise than as an attribute's value."""
  spoiled = wanted & set(names.bindings)  # imported at the top level
  for node in nodes:
    spoiled |= wanted & _other_bindings(node)
    if not isinstance(node, ast.Name) or node.id not in wanted:
      continue
    parent = parents.get(node)
    if isinstance(node.ctx, ast.Load):
      if not (isinstance(parent, ast.Attribute) and parent.value is node):
        spoiled.add(node.id)  # the alias goes where it is not followed
      continue
    dotted = names.resolve(parent.value) if isinstance(
        parent, ast.Assign) and parent.targets == [node] else None
    if dotted is None or not is_module(dotted):
      spoiled.add(node.id)
  return spoiled


def _other_bindings(node) -> set:
  """The names ``node`` binds otherwise than by an assignment."""
  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                       ast.ClassDef)):
    return {node.name}
  if isinstance(node, ast.arguments):
    return {a.arg for a in node.posonlyargs + node.args + node.kwonlyargs +
            [node.vararg, node.kwarg] if a is not None}
  if isinstance(node, ast.alias):
    return {(node.asname or node.name).partition('.')[0]}
  if isinstance(node, (ast.Global, ast.Nonlocal)):
    return set(node.names)
  if isinstance(node, ast.ExceptHandler) and node.name:
    return {node.name}
  if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
    return {node.name}
  if isinstance(node, ast.MatchMapping) and node.rest:
    return {node.rest}
  return set()
