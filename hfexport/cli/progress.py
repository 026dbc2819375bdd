"""Progress lines on stderr, and the logging set-up of one command line run.

stdout is left to results (see ``hfexport.cli.main``), so ``--json`` output stays parseable.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any


class Progress:
    """Progress for the slow steps (loading, tracing, lowering) on stderr.

    A spinner from ``rich`` when stderr is a terminal and rich is installed; plain
    ``[hfexport] ...`` lines otherwise (logs, CI, pipes), so a long export never looks hung.
    stdout is left to results, so ``--json`` output stays parseable.
    """

    def __init__(self, quiet: bool = False, stream: Any = None) -> None:
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.console = None
        if not quiet and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.console import Console

                self.console = Console(file=self.stream)
            except ImportError:
                self.console = None

    def line(self, message: str) -> None:
        if not self.quiet:
            print(f"[hfexport] {message}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[None]:
        if self.quiet:
            yield
            return
        start = time.perf_counter()
        try:
            if self.console is not None:
                with self.console.status(f"{label} ..."):
                    yield
            else:
                self.line(f"{label} ...")
                yield
        except BaseException:
            self.line(f"{label}: failed after {time.perf_counter() - start:.1f}s")
            raise
        self.line(f"{label}: done in {time.perf_counter() - start:.1f}s")


def configure_logging(args: argparse.Namespace) -> None:
    level = logging.INFO if args.verbose else (logging.ERROR if args.quiet else logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("hfexport").setLevel(level)
    if args.quiet:
        warnings.filterwarnings("ignore")
        with contextlib.suppress(Exception):
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
