"""``python -m conformance.coverage --report``: the coverage page from the sweeps' pytest JSON reports.

The sweep itself is a pytest run (``conformance/coverage/test_sweep.py``, docs/coverage.md):

    python -m pytest -n 2 --dist loadgroup conformance/coverage --hfexport-backend=dynamo,onnx \\
        --hfexport-report out/coverage/hfexport.json

The report reads hfexport's reports (``--hfexport``, several for shards or a rerun of the failures; by default every
``out/coverage/hfexport*.json``, oldest first, so the newest row of a cell wins) and the peer's (``--peer``; by default
its committed report ``docs/reports/coverage/transformers.json``, so the peer, a pinned release, is not measured
again), and writes ``--markdown`` (default ``out/coverage/report.md``) with its chart beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_HFEXPORT = Path("out/coverage")
DEFAULT_PEER = Path("docs/reports/coverage/transformers.json")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.coverage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--report", action="store_true", help="write the report (the only action)")
    parser.add_argument(
        "--hfexport",
        type=Path,
        action="append",
        help="hfexport's sweep report(s) (default out/coverage/hfexport*.json)",
    )
    parser.add_argument("--peer", type=Path, action="append", help=f"the peer's report(s) (default {DEFAULT_PEER})")
    parser.add_argument("--markdown", type=Path, default=Path("out/coverage/report.md"), help="where the page goes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.report:
        print(__doc__, file=sys.stderr)
        return 2
    from .report import write_report

    found = sorted(DEFAULT_HFEXPORT.glob("hfexport*.json"), key=lambda p: p.stat().st_mtime)
    reports = {"hfexport": args.hfexport or found, "transformers": args.peer or [DEFAULT_PEER]}
    print(f"report: {write_report(reports, args.markdown)}", file=sys.stderr)
    return 0
