"""The ``hfexport`` console script's entry point, outside the ``hfexport`` package on purpose.

``import hfexport`` imports torch and transformers (it registers every ``Cache`` class as a pytree so
``torch.export.load`` can rebuild cache inputs), which takes seconds. The command line needs none of that
to parse its arguments, print ``--help`` or refuse bad usage, so the console script marks the launch before
importing the package: ``hfexport`` then defers its public API (and that registration) to the first name a
command uses. ``python -m hfexport`` and ``import hfexport`` keep the eager behaviour.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# Read by hfexport/__init__.py: a console-script launch imports the API on first use.
DEFER_API = True


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hfexport`` command line (see ``hfexport.cli``) and return its exit code."""
    from hfexport.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
