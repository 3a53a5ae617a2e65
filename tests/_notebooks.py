"""Notebooks written by tests: code cells given as source text."""

import json


def notebook_of(*cells) -> str:
  """A notebook's JSON text whose code cells hold ``cells``, in order."""
  return json.dumps({'cells': [
      {'cell_type': 'code', 'execution_count': None, 'metadata': {},
       'outputs': [], 'source': cell.splitlines(keepends=True)}
      for cell in cells], 'metadata': {}, 'nbformat': 4,
      'nbformat_minor': 5}, indent=1)
