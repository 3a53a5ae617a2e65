"""Command line: ``flax-optim-compat COMMAND ...``.

Also ``python -m flax_optim_compat COMMAND ...``, which finds the same
modules (see ``flax_optim_compat.__main__``); ``python -m compat`` still
works but runs a project's own ``compat`` instead when the current directory
has one. Each command lives in its own module as ``main(argv) -> exit
status``; this module only dispatches, so ``--help``, ``--version`` and the
commands stay cheap to start.

The package holds the commands that are not a subsystem's own (``check`` and
its configurations, ``guide``, ``run``); the others are found in the table
below. It sits on top: it may import every other part of ``compat``, none
imports it.
"""

import importlib
import importlib.metadata
import os
import sys

PROG = 'flax-optim-compat'
DISTRIBUTION = 'flax-optim-compat'

# What a process killed by SIGPIPE reports to the shell (128 + 13).
EXIT_BROKEN_PIPE = 141

COMMANDS = {
    'check': ('compat.cli.check', 'Train a small model through the legacy path '
              'and every new path; print where they differ.'),
    'scan': ('compat.codemod.scan', 'Find flax.optim usages in source files.'),
    'convert': ('compat.checkpoints.api', 'Convert a flax.optim checkpoint to '
                'Optax/TrainState/nnx (Orbax) or back.'),
    'migrate': ('compat.codemod.migrate', 'Rewrite flax.optim code to Optax/'
                'TrainState code (--diff, --write, --out DIR).'),
    'guide': ('compat.cli.guide',
              'Print the migration guide (or where it is).'),
    'run': ('compat.cli.run', 'Run an old program unchanged, with the jax/'
            'flax names removed next to flax.optim served (SCRIPT or -m '
            'MODULE).'),
}


def version() -> str:
  """The installed distribution's version."""
  try:
    return importlib.metadata.version(DISTRIBUTION)
  except importlib.metadata.PackageNotFoundError:
    return 'unknown (not installed)'


def _usage() -> str:
  lines = [f'usage: {PROG} [--version] COMMAND [ARGS...]', '', 'commands:']
  lines += [f'  {name:<8} {doc}' for name, (_, doc) in COMMANDS.items()]
  lines += ['', f'Run "{PROG} COMMAND --help" for its options.']
  return '\n'.join(lines)


def _dispatch(argv) -> int:
  if not argv or argv[0] in ('-h', '--help'):
    print(_usage())
    return 0 if argv else 2
  if argv[0] in ('-V', '--version'):
    print(f'{PROG} {version()}')
    return 0
  name, rest = argv[0], argv[1:]
  if name not in COMMANDS:
    print(f'unknown command {name!r}; expected one of: '
          f'{", ".join(COMMANDS)}\n\n{_usage()}', file=sys.stderr)
    return 2
  module = importlib.import_module(COMMANDS[name][0])
  return int(module.main(rest) or 0)


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    status = _dispatch(argv)
    sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    return status
  except BrokenPipeError:
    # The reader went away (`... | head`): stop quietly, as `cat` does.
    # Python would flush stdout again at exit and report the same error, so
    # point it at devnull first.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE
