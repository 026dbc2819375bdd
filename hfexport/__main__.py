"""``python -m hfexport``: the same command line as the ``hfexport`` script (see hfexport.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
