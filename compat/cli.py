"""Command line: ``python -m compat COMMAND ...`` (also ``flax-optim-compat``).

Each command lives in its own module as ``main(argv) -> exit status``; this
module only dispatches, so ``--help`` and the commands stay cheap to start.
"""

import importlib
import sys

COMMANDS = {
    'check': ('compat.check', 'Train a small model through the legacy path '
              'and every new path; print where they differ.'),
    'scan': ('compat.scan', 'Find flax.optim usages in source files.'),
    'convert': ('compat.checkpoints', 'Convert a flax.optim checkpoint to '
                'Optax/TrainState/nnx (Orbax) or back.'),
    'migrate': ('compat.migrate', 'Rewrite flax.optim code to Optax/'
                'TrainState code (--diff, --write, --out DIR).'),
}


def _usage() -> str:
  lines = ['usage: python -m compat COMMAND [ARGS...]', '', 'commands:']
  lines += [f'  {name:<8} {doc}' for name, (_, doc) in COMMANDS.items()]
  lines += ['', 'Run "python -m compat COMMAND --help" for its options.']
  return '\n'.join(lines)


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ('-h', '--help'):
    print(_usage())
    return 0 if argv else 2
  name, rest = argv[0], argv[1:]
  if name not in COMMANDS:
    print(f'unknown command {name!r}; expected one of: '
          f'{", ".join(COMMANDS)}\n\n{_usage()}', file=sys.stderr)
    return 2
  module = importlib.import_module(COMMANDS[name][0])
  return int(module.main(rest) or 0)
