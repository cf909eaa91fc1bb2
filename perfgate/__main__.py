"""``python -m perfgate``: the same as the ``perfgate`` command."""

import sys

from perfgate.adapters.cli import main

if __name__ == "__main__":
    sys.exit(main())
