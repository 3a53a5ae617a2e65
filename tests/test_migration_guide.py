"""Every ```python block of migration_guide.md runs, in order per section.

Blocks of one ``## `` section (its ``###`` subsections included) share a
namespace and run in order; each section starts afresh. Sections whose code
needs an API that is not there yet are listed in PENDING and expected to fail
(strictly: once the API lands, the entry must go).
"""

import json
import os
import re
import warnings

import pytest

from legacy_optim import catalogue
from legacy_optim import deprecation

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), 'migration_guide.md')

# Section title -> why its code cannot run yet.
PENDING = {}


def read_guide():
  with open(GUIDE, encoding='utf-8') as f:
    return f.read()


def sections_with_code():
  """[(section title, [(first line number, code), ...])] in guide order."""
  sections, current, block, start = [], None, None, 0
  for lineno, line in enumerate(read_guide().splitlines(), 1):
    if block is not None:
      if line.startswith('```'):
        current[1].append((start, '\n'.join(block) + '\n'))
        block = None
      else:
        block.append(line)
    elif line.startswith('```python'):
      assert current is not None, f'line {lineno}: code before any section'
      block, start = [], lineno + 1
    elif line.startswith('## '):
      current = (line[3:].strip(), [])
      sections.append(current)
  assert block is None, 'unterminated code block'
  return [s for s in sections if s[1]]


SECTIONS = sections_with_code()


def test_guide_has_the_expected_steps_and_runnable_code():
  titles = [title for title, _ in SECTIONS]
  for step in range(6):
    assert any(t.startswith(f'Step {step}:') for t in titles), (step, titles)
  assert sum(len(blocks) for _, blocks in SECTIONS) >= 20


def uses_nnx(blocks):
  return any(re.search(r'\bnnx\b', code) for _, code in blocks)


@pytest.mark.parametrize('title', [
    pytest.param(title, marks=pytest.mark.nnx) if uses_nnx(blocks) else title
    for title, blocks in SECTIONS])
def test_section_code_runs(title, tmp_path, monkeypatch):
  if title in PENDING:
    pytest.xfail(f'pending: {PENDING[title]}')
  blocks = dict(SECTIONS)[title]
  monkeypatch.chdir(tmp_path)
  for var in (deprecation.STRICT_ENV_VAR, 'LEGACY_OPTIM_IMPORT_HOOK'):
    monkeypatch.delenv(var, raising=False)
  deprecation.reset()
  namespace = {'__name__': '__guide__'}
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', deprecation.LegacyOptimDeprecationWarning)
    for start, code in blocks:
      # Leading newlines make tracebacks show the guide's own line numbers.
      exec(compile('\n' * (start - 1) + code, GUIDE, 'exec'), namespace)


def test_pending_entries_name_real_sections():
  assert set(PENDING) <= {t for t, _ in SECTIONS}


def _format(value):
  return '0 (bit-identical)' if value == 0 else f'{value:.2g}'


def test_deviation_table_matches_the_measured_results():
  with open(catalogue.DEVIATION_FILE, encoding='utf-8') as f:
    results = json.load(f)['results']
  rows = re.findall(r'^\| `(\w+)` \| [^|]+ \| `(optax\.[^`]+)` \| ([^|]+) \| '
                    r'([^|]+) \|$', read_guide(), re.MULTILINE)
  measured = {k for k, r in results.items() if r['rel_err'] is not None}
  assert {key for key, *_ in rows} == measured
  for key, stock, typical, small in rows:
    by_scale = results[key]['rel_err_by_grad_scale']
    assert (typical.strip(), small.strip()) == (
        _format(by_scale['typical']), _format(by_scale['small'])), key
    # Same Optax call as measured (the guide names hyper-params, not values).
    assert stock.split('(')[0] == results[key]['stock'].split('(')[0], key


def test_every_section_the_code_cites_is_a_heading():
  headings = {line.lstrip('#').strip() for line in read_guide().splitlines()
              if line.startswith('#')}
  assert set(catalogue.SECTIONS) <= headings, sorted(
      set(catalogue.SECTIONS) - headings)
