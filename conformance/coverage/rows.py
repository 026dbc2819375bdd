"""The report's input: the pytest JSON reports of sweep runs (``--hfexport-report``), read back as one record per
architecture x backend (a *cell*) with its checks, the shape ``report`` renders.

A run's rows are the plugin's: one per architecture x backend x check, keyed by ``hfexport_case``. Several
reports of one implementation (shards, a rerun of ``--lf``) merge, the later row of a cell's check winning.
Statuses fold as the report reads them: ``pass``/``xpass`` pass; ``fail``/``error``/``xfail`` (a known failure
is still a failure of the export) fail; ``unsupported`` is a declared gap; ``skip`` is ``not buildable`` (the only
skip of the sweep, ``conformance/coverage/test_sweep.py``). Architectures held not buildable by the committed
verdicts (no test was collected) come from ``builds.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .cells import SAMPLE_OK

SWEEP_FILE = "conformance/coverage/test_sweep.py"
STATUS = {"pass": "pass", "xpass": "pass", "fail": "fail", "error": "fail", "xfail": "fail"}
STATUS.update(unsupported="unsupported", skip="not_buildable")


def load(paths: Iterable[Path]) -> dict[str, Any] | None:
    """The reports at ``paths`` merged: ``runs`` (each report's command, date, wall time, versions) and ``rows``
    (the sweep's rows only); None when no file exists."""
    runs: list[dict[str, Any]] = []
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in paths:
        if not Path(path).exists():
            continue
        data = json.loads(Path(path).read_text())
        keep = ("command", "created", "wall_s", "versions", "implementation", "summary", "converted_from")
        runs.append({"file": str(path), **{k: data.get(k) for k in keep}})
        for row in data.get("rows", []):
            if SWEEP_FILE in str(row.get("nodeid", "")):
                rows[(row["model"], row["backend"], row["check"])] = row
    return {"runs": runs, "rows": list(rows.values())} if runs else None


def _message(row: dict[str, Any]) -> tuple[str, bool]:
    """A row's message without the exception name and stage the sweep's failures lead with, and whether it
    says the export matched at its batch-1 sample."""
    text = str(row.get("message") or "").removeprefix("AssertionError: ")
    stage = str(row.get("stage") or "")
    if stage and text.startswith(stage + ": "):
        text = text[len(stage) + 2 :]
    return text.removeprefix(SAMPLE_OK), text.startswith(SAMPLE_OK)


def check_of(row: dict[str, Any]) -> dict[str, Any]:
    status = STATUS.get(str(row.get("status")), "fail")
    message, sample_ok = _message(row)
    return {
        "status": status,
        "stage": row.get("stage") or "",
        "message": message,
        "sample_ok": status == "pass" or sample_ok,
        "seconds": float(row.get("seconds") or 0.0),
    }


def cells(
    data: dict[str, Any] | None, heads: dict[str, str], unbuildable: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """``arch|head|backend`` -> the cell: status, stage, message (the plain export's, else generation's, with
    ``generation:`` before its stage), seconds and ``checks``. ``heads``: class name -> head; ``unbuildable``:
    the committed verdicts (``arch|head`` -> stage, message), recorded for every backend the run measured."""
    if not data:
        return {}
    by_cell: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in data["rows"]:
        by_cell.setdefault((row["model"], row["backend"]), {})[row["check"]] = check_of(row)
    out: dict[str, dict[str, Any]] = {}
    for (arch, backend), checks in by_cell.items():
        head = heads.get(arch, "?")
        record = {"arch": arch, "head": head, "backend": backend, "checks": checks, "stage": "", "message": ""}
        record["seconds"] = round(sum(c["seconds"] for c in checks.values()), 3)
        export = checks.get("export", {"status": "not_buildable"})
        failing = [(name, c) for name, c in checks.items() if c["status"] == "fail"]
        if export["status"] in ("not_buildable", "unsupported"):
            record.update(status=export["status"], stage=export["stage"], message=export["message"])
        elif failing:
            name, c = sorted(failing, key=lambda nc: nc[0] != "export")[0]
            stage = c["stage"] if name == "export" else f"{name}:{c['stage']}"
            record.update(status="fail", stage=stage, message=c["message"])
        else:
            record["status"] = "pass"
        out[f"{arch}|{head}|{backend}"] = record
    backends = sorted({b for _, b in by_cell})
    for key, verdict in unbuildable.items():
        arch, head = key.split("|", 1)
        for backend in backends:
            out.setdefault(
                f"{arch}|{head}|{backend}",
                {"arch": arch, "head": head, "backend": backend, "status": "not_buildable", "checks": {}, "seconds": 0}
                | {"stage": verdict.get("stage", ""), "message": verdict.get("message", "")},
            )
    return out
