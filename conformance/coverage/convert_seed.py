"""One-off: the peer's committed sweep of the former runner (a store file: one record per cell with its checks)
written as the pytest JSON report the sweep now produces, so the report and the baseline gate read it like a run.

    python -m conformance.coverage.convert_seed OLD.json NEW.json

Each measured cell becomes its ``export`` row and, for generative heads, its ``generation`` row, with the node id
the collection gives that test; the message keeps the former record's, led by the stage (and ``SAMPLE_OK`` where
the export matched at its sample), as ``cells.CellFailure`` writes it. A generation the former runner did not try
because the plain export produced no program is a ``fail`` row that says so (it was counted as not passing then
too); a cell lost to a timeout or a crash is its ``export`` row. Cells not buildable are left out: the
committed build verdicts (``builds.json``) hold them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .cells import SAMPLE_OK
from .rows import SWEEP_FILE

STATUS = {"pass": "pass", "fail": "fail", "unsupported": "unsupported", "not_buildable": "skip"}


def _row(cell: dict[str, Any], check: str, result: dict[str, Any], impl: str) -> dict[str, Any]:
    status = STATUS.get(result["status"], "fail")
    stage, message = result.get("stage") or "", result.get("message") or ""
    if result["status"] == "skipped":
        stage, message = cell.get("stage") or "export", "not run: the plain export produced no program"
    text = ""
    if status == "fail":
        text = f"AssertionError: {stage}: " + (SAMPLE_OK if result.get("sample_ok") else "") + message
    elif status == "skip":
        text = f"not buildable: {stage}: {message}"
    return {
        "model": cell["arch"],
        "backend": cell["backend"],
        "check": check,
        "status": status,
        "stage": stage or None,
        "max_abs": result.get("max_abs"),
        "seconds": result.get("seconds", 0.0),
        "nodeid": f"{SWEEP_FILE}::test_{check}[{cell['backend']}-{cell['arch']}]",
        "message": text[:300],
        "implementation": impl,
        "versions": cell.get("versions", {}),
    }


def convert(old: dict[str, Any], source: str) -> dict[str, Any]:
    impl = old["impl"]
    rows = [
        _row(cell, check, result, impl)
        for cell in old["cells"].values()
        if cell["status"] != "not_buildable"
        # A cell the former runner lost (timeout, crash) has no checks: its own verdict is the export's.
        for check, result in (cell.get("checks") or {"export": cell}).items()
    ]
    runs = old.get("runs", [])
    versions = {k: v for k, v in (runs[-1]["versions"] if runs else {}).items() if k not in ("impl", "sweep")}
    return {
        "created": max((r["started"] for r in runs), default=None),
        "command": "; ".join(r["command"] for r in runs),
        "implementation": impl,
        "versions": versions,
        "wall_s": round(sum(r["seconds"] for r in runs), 1),
        "converted_from": source,
        "summary": {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "unsupported", "skip")},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    old, new = (argv if argv is not None else sys.argv[1:])[:2]
    Path(new).write_text(json.dumps(convert(json.loads(Path(old).read_text()), old), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
