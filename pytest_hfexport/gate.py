"""The baseline gate: a run's rows against an earlier run's, written for a user who just bumped a version.

A bump that breaks one thing upstream (a keyword renamed, a guard tightened) fails hundreds of rows with the
same first line. The gate therefore groups regressions by cause (the first line of the message with numbers,
backend names and quoted values folded), most rows first, with one example each, before it lists every row with
its stage and message. Rows new in this run and rows gone from it are listed apart. A row that passes both
times but whose error grew more than ``DRIFT_FACTOR``-fold is a warning (``DRIFT``), not a failure: an export
drifting toward its tolerance.

Importable without pytest: the plugin's terminal summary, ``make compat`` and ``python -m pytest_hfexport.gate``
(exit 0: no regression; 1: regressions; 2: the files cannot be read) all use ``compare``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Key = tuple[str, str, str]
PASSED = ("pass", "xpass")
BAD = ("fail", "error", "xfail")
BACKEND_WORDS = ("dynamo", "onnx", "executorch")

# A number standing alone (not the digits of a name such as float32 or cu126); a sign is kept as written.
_NUMBER = re.compile(r"(?<![A-Za-z_0-9])(0x[0-9a-fA-F]+|\d+(\.\d+)?([eE][-+]?\d+)?)(?![A-Za-z_])")
_BACKEND = re.compile(r"\b(" + "|".join(BACKEND_WORDS) + r")\b", re.IGNORECASE)
_LIST = re.compile(r"\[('[^']*'(, )?)+\]")
_SPACE = re.compile(r"\s+")
# A passing row whose max abs error grows more than this many times is reported as drifting; errors below
# float32's machine epsilon (rounding of values near 1) count as that epsilon, so 0 -> 1e-8 is no drift.
DRIFT_FACTOR = 10.0
FLOAT32_EPS = 1.1920928955078125e-07


def normalise(message: str) -> str:
    """The cause a message stands for: its first line, numbers as ``N``, backend names as ``<backend>``, lists of
    quoted names as ``[...]`` (the example row keeps them)."""
    lines = [line for line in (message or "").splitlines() if line.strip()]
    first = lines[0].strip() if lines else "(no message)"
    first = _BACKEND.sub("<backend>", first)
    first = _NUMBER.sub("N", first)
    first = _LIST.sub("[...]", first)
    return _SPACE.sub(" ", first)[:200]


def key_of(row: Mapping[str, Any]) -> Key:
    return (str(row.get("model")), str(row.get("backend")), str(row.get("check", "export")))


def label(key: Key) -> str:
    return "/".join(key)


@dataclass
class Change:
    """One row that moved: its baseline row and its row now (None: not run now)."""

    key: Key
    before: Mapping[str, Any] | None
    now: Mapping[str, Any] | None

    @property
    def status_now(self) -> str:
        return str(self.now.get("status")) if self.now is not None else "not run"

    @property
    def stage(self) -> str:
        return str((self.now or {}).get("stage") or "")

    @property
    def message(self) -> str:
        if self.now is None:
            return "the row was not run (its test is gone, deselected or not collected)"
        return str(self.now.get("message") or f"status {self.status_now}")

    def line(self, kind: str) -> str:
        before = (self.before or {}).get("status")
        text = f"{kind} {label(self.key)}: {before} -> {self.status_now}"
        if self.stage:
            text += f" [{self.stage}]"
        if self.now is not None and self.now.get("nodeid"):
            text += f" {self.now['nodeid']}"
        if kind == "REGRESSION":
            text += f": {self.message.splitlines()[0] if self.message else ''}"
            if self.now is not None and self.now.get("first_divergence"):
                text += f" (first diverging module: {self.now['first_divergence']})"
        return text


def _error(row: Mapping[str, Any] | None) -> float | None:
    value = (row or {}).get("max_abs")
    return float(value) if isinstance(value, (int, float)) else None


def drift_factor(before: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> float | None:
    """How many times the row's max abs error grew (errors under float32's epsilon count as the epsilon)."""
    was, is_ = _error(before), _error(now)
    if was is None or is_ is None:
        return None
    return max(is_, FLOAT32_EPS) / max(was, FLOAT32_EPS)


def drift_line(change: Change) -> str:
    now = change.now or {}
    text = (
        f"DRIFT {label(change.key)}: max abs error {_error(change.before):.2e} -> {_error(now):.2e} "
        f"(x{drift_factor(change.before, now):.0f})"
    )
    if now.get("tolerance"):
        text += f", tolerance {now['tolerance']}"
    if isinstance(now.get("ratio"), (int, float)):
        text += f" ({now['ratio']:.1%} of it)"
    if now.get("worst_output"):
        text += f", output {now['worst_output']!r}"
    return text


@dataclass
class Cause:
    text: str
    changes: list[Change] = field(default_factory=list)

    @property
    def stages(self) -> list[str]:
        return sorted({c.stage or "-" for c in self.changes})

    @property
    def backends(self) -> list[str]:
        return sorted({c.key[1] for c in self.changes})


@dataclass
class GateResult:
    regressions: list[Change] = field(default_factory=list)  # passed there; fails, xfails, is skipped or not run now
    improvements: list[Change] = field(default_factory=list)  # failed there, passes now
    new: list[Change] = field(default_factory=list)  # rows of this run the baseline does not have
    drift: list[Change] = field(default_factory=list)  # pass both times; error grew more than DRIFT_FACTOR-fold

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    @property
    def gone(self) -> list[Change]:
        return [c for c in self.regressions if c.now is None]

    def causes(self) -> list[Cause]:
        """Regressions grouped by their normalised first line, most rows first."""
        groups: dict[str, Cause] = {}
        for change in self.regressions:
            text = normalise(change.message)
            groups.setdefault(text, Cause(text)).changes.append(change)
        return sorted(groups.values(), key=lambda c: (-len(c.changes), c.text))

    def summary_lines(self) -> list[str]:
        causes = self.causes()
        out = [
            f"{len(self.regressions)} regression(s) from {len(causes)} cause(s); {len(self.improvements)} "
            f"improvement(s); {len(self.new)} new row(s); {len(self.gone)} gone; {len(self.drift)} drifting "
            f"(error grew more than {DRIFT_FACTOR:.0f}x, still passing)"
        ]
        if causes:
            out.append("regressions by cause (first line of the message, numbers and backends folded):")
        for cause in causes:
            example = cause.changes[0]
            out.append(
                f"  {len(cause.changes):4d} x {cause.text}  [stage {', '.join(cause.stages)}; "
                f"{', '.join(cause.backends)}]"
            )
            out.append(
                f"         e.g. {label(example.key)} ({example.now.get('nodeid') if example.now else 'not run'})"
            )
        return out

    def row_lines(self) -> list[tuple[str, str]]:
        """(colour, line) per row: every regression, improvement and new row."""
        out = [("red", c.line("REGRESSION")) for c in self.regressions]
        out += [("green", c.line("improvement")) for c in self.improvements]
        out += [("", f"new {label(c.key)}: {c.status_now}") for c in self.new]
        out += [("yellow", drift_line(c)) for c in self.drift]
        return out

    def count_line(self) -> str:
        return f"{len(self.regressions)} regression(s), {len(self.improvements)} improvement(s)"

    def to_json(self) -> dict[str, Any]:
        return {
            "regressions": len(self.regressions),
            "improvements": [list(c.key) for c in self.improvements],
            "new": [list(c.key) for c in self.new],
            "gone": [list(c.key) for c in self.gone],
            "drift": [
                {
                    "row": label(c.key),
                    "before": _error(c.before),
                    "now": _error(c.now),
                    "tolerance": (c.now or {}).get("tolerance"),
                }
                for c in self.drift
            ],
            "causes": [
                {
                    "cause": cause.text,
                    "rows": len(cause.changes),
                    "stages": cause.stages,
                    "backends": cause.backends,
                    "example": label(cause.changes[0].key),
                    "example_message": cause.changes[0].message[:300],
                }
                for cause in self.causes()
            ],
        }


def compare(now: Mapping[Key, Mapping[str, Any]], baseline: Mapping[Key, Mapping[str, Any]]) -> GateResult:
    """A row that passed in ``baseline`` and does not pass now (fails, errors, xfails, is unsupported or skipped,
    or was not run) is a regression; failed there and passes now, an improvement; absent there, new; passing both
    times with an error more than ``DRIFT_FACTOR`` times larger, drift (a warning)."""
    result = GateResult()
    for key, before in baseline.items():
        row = now.get(key)
        status = None if row is None else row.get("status")
        if before.get("status") in PASSED and status not in PASSED:
            result.regressions.append(Change(key, before, row))
        elif row is not None and before.get("status") in BAD and status in PASSED:
            result.improvements.append(Change(key, before, row))
        elif before.get("status") in PASSED and (drift_factor(before, row) or 0.0) > DRIFT_FACTOR:
            result.drift.append(Change(key, before, row))
    result.new = [Change(key, None, row) for key, row in now.items() if key not in baseline]
    return result


_SEVERITY = {"error": 0, "fail": 1, "xpass": 2, "xfail": 3, "unsupported": 4, "skip": 5, "pass": 6}


def load_rows(path: str | Path) -> dict[Key, dict]:
    """Rows of a report (this plugin's JSON, or a bare list of rows such as ``conformance.matrix --json`` writes;
    rows without a check count as ``export``), one per model/backend/check: the worst status of its tests."""
    data = json.loads(Path(path).read_text())
    rows = data.get("rows", []) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a report with 'rows' or a list of rows")
    out: dict[Key, dict] = {}
    for row in rows:
        key = key_of(row)
        current = out.get(key)
        if current is None or _SEVERITY.get(str(row.get("status")), 9) < _SEVERITY.get(str(current.get("status")), 9):
            out[key] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_hfexport.gate",
        description="Gate a report against a baseline report. Exit 0: no regression; 1: regressions; 2: a file "
        "cannot be read.",
    )
    parser.add_argument("report", help="the report of the run to gate (--hfexport-report of that run)")
    parser.add_argument("baseline", help="the report of the run it must not fall behind")
    parser.add_argument("--rows", action="store_true", help="also list every row, not only the causes")
    parser.add_argument("--json", metavar="FILE", help="write the causes, improvements, new and gone rows as JSON")
    args = parser.parse_args(argv)
    try:
        result = compare(load_rows(args.report), load_rows(args.baseline))
    except (OSError, ValueError, KeyError) as exc:
        print(f"gate: {exc}", file=sys.stderr)
        return 2
    for line in result.summary_lines():
        print(line)
    if args.rows:
        for _, line in result.row_lines():
            print(line)
    print(result.count_line())
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2))
    return 1 if result.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
