"""Report rows: one per model x backend x check. JSON file, terminal matrix, baseline gate.

Rows are built on the controller from test reports (``pytest_runtest_logreport``). Under
pytest-xdist each worker attaches the row's facts to the report (``report.hfexport``, a plain
dict that xdist serialises with the report), so the controller sees every worker's rows and
writes one file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .gate import GateResult, compare, load_rows

STATUSES = ("pass", "fail", "xfail", "xpass", "skip", "unsupported", "error")
# Worse first: when several tests report the same model/backend/check, the worst status is the cell's.
_SEVERITY = {"error": 0, "fail": 1, "xpass": 2, "xfail": 3, "unsupported": 4, "skip": 5, "pass": 6}
BAD = ("fail", "error", "xfail")
SYMBOL = {
    "pass": "ok",
    "fail": "FAIL",
    "xfail": "xfail",
    "xpass": "XPASS",
    "skip": "skip",
    "unsupported": "n/a",
    "error": "ERROR",
}


@dataclass
class Row:
    model: str
    backend: str
    check: str
    status: str = "pass"
    stage: str | None = None
    max_abs: float | str | None = None
    max_rel: float | str | None = None
    worst_output: str | None = None
    # Over the row's comparisons: the largest abs error among outputs within [-1, 1] and rel error among larger
    # outputs (what a tolerance's atol and rtol must cover: ``conformance.tolerances``), the worst output's error
    # over what its tolerance allows (below 1 passes) and that tolerance.
    max_abs_small_scale: float | str | None = None
    max_rel_large_scale: float | str | None = None
    ratio: float | str | None = None
    tolerance: str | None = None
    compared: int = 0  # how many comparisons with eager the row's tests made
    # After a mismatch: the first module whose output the artifact computes differently from eager
    # (``pytest_hfexport.localise``); None when nothing mismatched or the locator could name none.
    first_divergence: str | None = None
    seconds: float = 0.0
    nodeid: str = ""
    message: str = ""
    implementation: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.model, self.backend, self.check)


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


def status_of(report: Any) -> str | None:
    """The row status a phase report settles, or None when the phase settles nothing (setup passed...)."""
    wasxfail = hasattr(report, "wasxfail")
    if report.when == "setup":
        if report.failed:
            return "error"
        if report.skipped:
            return "xfail" if wasxfail else "unsupported" if "unsupported: " in _reason(report) else "skip"
        return None
    if report.when == "call":
        if report.passed:
            return "xpass" if wasxfail else "pass"
        if report.skipped:
            return "xfail" if wasxfail else "unsupported" if "unsupported: " in _reason(report) else "skip"
        return "xpass" if "[XPASS(strict)]" in _reason(report) else "fail"
    if report.when == "teardown" and report.failed:
        return "error"
    return None


class Recorder:
    """Controller side: rows by nodeid, then the file, the matrix and the baseline comparison."""

    def __init__(self, implementation: str, versions: Mapping[str, str | None], meta: Mapping[str, Any]) -> None:
        self.implementation = implementation
        self.versions = dict(versions)
        self.meta = dict(meta)
        self.rows: dict[str, Row] = {}
        self.gate: GateResult | None = None  # set by compare_baseline
        self.declared_gaps: dict[str, str] = {}
        self.started: float | None = None
        self.wall_s: float | None = None

    def start(self) -> None:
        self.started = time.time()

    def finish(self) -> None:
        """The session is over: its wall time."""
        if self.started is not None:
            self.wall_s = round(time.time() - self.started, 1)

    def add(self, report: Any) -> None:
        facts = getattr(report, "hfexport", None)
        if not facts:
            return
        self.declared_gaps.update(facts.get("declared_gaps") or {})
        status = status_of(report)
        if status is None:
            return
        row = self.rows.get(report.nodeid)
        if row is None:
            row = self.rows[report.nodeid] = Row(
                facts["model"],
                facts["backend"],
                facts["check"],
                status,
                nodeid=report.nodeid,
                implementation=self.implementation,
                versions=self.versions,
            )
        elif report.when == "teardown" and row.status not in ("pass",):
            return  # a teardown error after a failure keeps the failure
        row.status = status
        row.seconds = round(row.seconds + float(getattr(report, "duration", 0.0)), 4)
        measurements = facts.get("measurements") or []
        comparisons = facts.get("comparisons") or []
        if measurements or comparisons:
            _record_errors(row, measurements, comparisons)
        divergences = facts.get("divergences") or []
        named = [d for d in divergences if d.get("module")]
        if named:
            row.first_divergence = named[0]["module"]
        if status in ("fail", "error", "xfail", "xpass"):
            row.stage = facts.get("stage")
            row.message = (facts.get("message") or _first_line(report))[:300]
        if status in ("skip", "unsupported"):  # why no verdict: "not buildable: ...", "unsupported: ..."
            reason = _reason(report).removeprefix("Skipped: ")
            if status == "unsupported":  # the exception's class name comes first in pytest's skip reason
                reason = "unsupported: " + reason.partition("unsupported: ")[2]
            row.message = reason[:300]
        if status in ("fail", "xfail") and not row.stage:
            row.stage = "test"  # failed outside any export stage (an assertion of the test itself)
        if status == "error" and not row.stage:
            row.stage = "setup" if report.when == "setup" else "teardown"

    # -- results ---------------------------------------------------------------------------------
    def merged(self) -> dict[tuple[str, str, str], Row]:
        out: dict[tuple[str, str, str], Row] = {}
        for row in self.rows.values():
            current = out.get(row.key)
            if current is None or _SEVERITY[row.status] < _SEVERITY[current.status]:
                out[row.key] = row
        return out

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in STATUSES}
        for row in self.rows.values():
            counts[row.status] += 1
        return counts

    def by_stage(self) -> dict[str, int]:
        stages: dict[str, int] = {}
        for row in self.rows.values():
            if row.status in ("fail", "error", "xfail"):
                stages[row.stage or "?"] = stages.get(row.stage or "?", 0) + 1
        return dict(sorted(stages.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **self.meta,
            "implementation": self.implementation,
            "versions": self.versions,
            "wall_s": self.wall_s,
            "summary": self.counts(),
            "by_stage": self.by_stage(),
            "declared_gaps": self.declared_gaps,
            "regressions": [list(c.key) for c in self.gate.regressions] if self.gate else [],
            "gate": self.gate.to_json() if self.gate else None,
            "rows": [asdict(r) for r in self.rows.values()],
        }

    def write(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, default=str))
        tmp.replace(path)

    def compare_baseline(self, baseline: Mapping[tuple[str, str, str], dict]) -> GateResult:
        """The gate (``gate.compare``): a row that passed there and does not pass now is a regression (it fails,
        errors, xfails, is unsupported or skipped, or was not run at all); failed there and passes now, an
        improvement; rows new and gone are listed apart."""
        self.gate = compare({key: asdict(row) for key, row in self.merged().items()}, baseline)
        return self.gate

    # -- terminal --------------------------------------------------------------------------------
    def matrix_lines(self, backends: Iterable[str]) -> list[str]:
        merged = self.merged()
        if not merged:
            return []
        backends = list(dict.fromkeys([*backends, *(k[1] for k in merged)]))
        backends = [b for b in backends if any(k[1] == b for k in merged)]
        lines_keys = sorted({(k[0], k[2]) for k in merged})
        w_model = max(5, *(len(m) for m, _ in lines_keys))
        w_check = max(5, *(len(c) for _, c in lines_keys))

        def cell(row: Row | None) -> str:
            if row is None:
                return ""
            return SYMBOL[row.status] + (f"({row.stage})" if row.stage and row.status in BAD else "")

        widths = [max([len(b)] + [len(cell(merged.get((m, b, c)))) for m, c in lines_keys]) for b in backends]
        head = f"{'model':<{w_model}}  {'check':<{w_check}}  " + "  ".join(
            f"{b:<{w}}" for b, w in zip(backends, widths)
        )
        out = [head, "-" * len(head)]
        for model, check in lines_keys:
            cells = []
            for b, w in zip(backends, widths):
                cells.append(f"{cell(merged.get((model, b, check))):<{w}}")
            out.append(f"{model:<{w_model}}  {check:<{w_check}}  " + "  ".join(cells))
        return out


COUNTED = ("pass", "fail", "xfail", "unsupported")


def merge_statuses(rows: Iterable[Mapping[str, Any] | Row]) -> dict[tuple[str, str, str], str]:
    """(model, backend, check) -> the worst status among the rows (JSON dicts or Rows) for that cell."""
    merged: dict[tuple[str, str, str], str] = {}
    for row in rows:
        values = row if isinstance(row, Mapping) else asdict(row)
        key = (str(values["model"]), str(values["backend"]), str(values["check"]))
        status = str(values["status"])
        if key not in merged or _SEVERITY[status] < _SEVERITY[merged[key]]:
            merged[key] = status
    return merged


def count_table(rows: Iterable[Mapping[str, Any] | Row], markdown: bool = False) -> list[str]:
    """Counts per check (rows) and backend (columns): ``pass/fail/xfail/unsupported``, merged per
    model x backend x check (worst status wins); error and xpass count as fail, skip as unsupported."""
    merged = merge_statuses(rows)
    if not merged:
        return []
    fold = {"error": "fail", "xpass": "fail", "skip": "unsupported"}
    backends = sorted({k[1] for k in merged})
    checks = sorted({k[2] for k in merged})
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for (_model, backend, check), status in merged.items():
        for key in ((check, backend), ("all", backend)):
            cell = counts.setdefault(key, {s: 0 for s in COUNTED})
            cell[fold.get(status, status)] += 1

    def text(check: str, backend: str) -> str:
        c = counts.get((check, backend))
        return "" if c is None else "/".join(str(c[s]) for s in COUNTED)

    head = ["check", *backends]
    body = [[check, *(text(check, b) for b in backends)] for check in [*checks, "all"]]
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = lambda r: "  ".join(f"{v:<{w}}" for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return [f"counts per check and backend: {'/'.join(COUNTED)}", fmt(head), "-" * len(fmt(head))] + [
        fmt(r) for r in body
    ]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _finite(value: float | None) -> float | str | None:
    """JSON-safe: inf and nan as text (a shape mismatch has an infinite error)."""
    if value is None:
        return None
    return value if value == value and abs(value) != float("inf") else str(value)


def _record_errors(row: Row, measurements: list[dict], comparisons: list[dict]) -> None:
    """The row's errors over every comparison its tests made (``compare.observing``) and every harness measurement:
    the largest, and the worst output by error over tolerance (a failing stage's output first)."""
    every = [*measurements, *comparisons]

    def largest(key: str) -> float | str | None:
        values = [v for v in (_number(m.get(key)) for m in every) if v is not None]
        return _finite(max(values)) if values else next((m[key] for m in every if m.get(key)), None)

    row.max_abs, row.max_rel = largest("max_abs"), largest("max_rel")
    row.max_abs_small_scale = largest("max_abs_small_scale")
    row.max_rel_large_scale = largest("max_rel_large_scale")
    row.compared += len(comparisons)
    failing = [m for m in measurements if m.get("stage")]
    rated = [m for m in comparisons if _number(m.get("ratio")) is not None]
    if failing:
        pick = failing[0]
    elif rated:
        pick = max(rated, key=lambda m: (not m.get("ok", True), m["ratio"]))
    else:
        pick = max(every, key=lambda m: _number(m.get("max_abs")) or 0.0)
    row.worst_output = pick.get("worst_output")
    if rated:
        worst = max(rated, key=lambda m: m["ratio"])
        row.ratio, row.tolerance = _finite(worst["ratio"]), worst.get("tolerance")


def _first_line(report: Any) -> str:
    text = _reason(report) if report.longrepr is not None else ""
    crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
    return (crash or text).splitlines()[0] if (crash or text) else ""


def load_baseline(path: str | Path) -> dict[tuple[str, str, str], dict]:
    """Rows of an earlier report keyed by model/backend/check (``gate.load_rows``)."""
    return load_rows(path)
