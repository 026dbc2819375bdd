"""``python -m conformance.coverage``: see ``conformance.coverage.cli``."""

import sys

from conformance.coverage.cli import main

if __name__ == "__main__":
    sys.exit(main())
