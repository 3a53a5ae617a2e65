import sys

from compat import cli

sys.exit(cli.main())
