"""``scan --format github|sarif``: findings where CI systems show them.

``github``: one GitHub Actions workflow command per finding
(``::warning file=P,line=L,col=C,title=CODE::message``), which the runner
turns into an annotation on the pull request; unparseable files become
``::error`` lines. ``sarif``: a SARIF 2.1.0 log (GitHub code scanning,
GitLab, Azure DevOps read it) with one rule per selected code, its title,
its guide section as ``helpUri``, and the replacement in each result's
message. The text table and ``json`` stay in ``scan``. Stdlib only.
"""

import importlib.metadata
import urllib.parse

from compat.codemod import _codes

SARIF_SCHEMA = 'https://json.schemastore.org/sarif-2.1.0.json'
TOOL = 'flax-optim-compat'


def message(finding) -> str:
  """What a finding says in an annotation: the construct, the code's title
  and the replacement."""
  title = _codes.BY_CODE[finding.rule].title
  likely = (' (likely: judged by names)' if finding.confidence == 'likely'
            else '')
  return (f'{finding.construct}{likely}: {title}. Replacement: '
          f'{finding.replacement} [guide: {finding.guide_section}]')


# ---------------------------------------------------------------------------
# GitHub Actions workflow commands.


def _escape_data(text: str) -> str:
  return text.replace('%', '%25').replace('\r', '%0D').replace('\n', '%0A')


def _escape_property(text: str) -> str:
  return _escape_data(text).replace(':', '%3A').replace(',', '%2C')


def github(result) -> str:
  """One workflow command per finding and per unparseable file."""
  lines = []
  for f in result.findings:
    lines.append(
        f'::warning file={_escape_property(f.path)},line={f.line},'
        f'col={f.column},title={f.rule}::{_escape_data(message(f))}')
  for e in result.errors:
    location = f',line={e.line}' if e.line else ''
    lines.append(f'::error file={_escape_property(e.path)}{location},'
                 f'title=unparseable::{_escape_data(e.message)}')
  return '\n'.join(lines)


# ---------------------------------------------------------------------------
# SARIF 2.1.0.


def _version() -> str:
  try:
    return importlib.metadata.version(TOOL)
  except importlib.metadata.PackageNotFoundError:
    return 'unknown'


def _rule(code: _codes.Code) -> dict:
  return {
      'id': code.code,
      'name': ''.join(p.capitalize() for p in code.construct.split('_')),
      'shortDescription': {'text': code.title},
      'fullDescription': {'text': f'{code.title} (guide section: '
                                  f'{code.section})'},
      'helpUri': _codes.help_uri(code.code),
      'help': {'text': f'See the migration guide, section "{code.section}" '
                       f'(flax-optim-compat guide).'},
      'defaultConfiguration': {'level': 'warning'},
  }


def _location(path: str, line, column=None) -> dict:
  region = {'startLine': line or 1}
  if column:
    region['startColumn'] = column
  return {'physicalLocation': {
      'artifactLocation': {'uri': urllib.parse.quote(path),
                           'uriBaseId': '%SRCROOT%'},
      'region': region}}


def sarif(result, chosen) -> dict:
  """The SARIF log of ``result``; ``chosen``: the selected codes (one rule
  each, in code order)."""
  rules = [c for c in _codes.CODES if c.code in chosen]
  index = {c.code: i for i, c in enumerate(rules)}
  results = [{
      'ruleId': f.rule,
      'ruleIndex': index[f.rule],
      'level': 'warning',
      'message': {'text': message(f)},
      'locations': [_location(f.path, f.line, f.column)],
      'properties': {'construct': f.construct, 'confidence': f.confidence},
  } for f in result.findings]
  notifications = [{
      'level': 'error',
      'message': {'text': f'unparseable: {e.message}'},
      'locations': [_location(e.path, e.line)],
  } for e in result.errors]
  return {
      '$schema': SARIF_SCHEMA,
      'version': '2.1.0',
      'runs': [{
          'tool': {'driver': {'name': TOOL, 'version': _version(),
                              'rules': [_rule(c) for c in rules]}},
          'invocations': [{'executionSuccessful': True,
                           'toolExecutionNotifications': notifications}],
          'results': results,
      }],
  }
