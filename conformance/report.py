"""Print a conformance report (``--hfexport-report`` JSON): every figure of one run.

    python -m conformance.report out/conformance-hfexport.json [--markdown]

Prints the implementation, when and with which versions it was measured, the command, the session's wall time, the
totals per status (tests and model x backend x check cells), the counts per check and backend, the gaps the
implementation declares, the per-model matrix and the known failures with their reasons. ``--markdown`` prints the
same as markdown. ``--known-failures`` prints instead the known-failures file of that run: one strict xfail per
failed test, keyed by test id, whose reason is the measured message (run the suite with ``--hfexport-xfails``
pointing at an empty file to measure every failure)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_hfexport.report import COUNTED, SYMBOL, count_table, merge_statuses

COMMAND = (
    "python -m pytest -n 2 --dist loadgroup conformance -p no:cacheprovider --hfexport-impl={impl} "
    "--hfexport-backend=all --hfexport-report out/conformance-{impl}.json"
)


def model_matrix(rows: list[dict[str, Any]], markdown: bool) -> list[str]:
    """One line per model x check, one column per backend (worst status of the rows for that cell)."""
    cells = {(model, check, backend): status for (model, backend, check), status in merge_statuses(rows).items()}
    backends = sorted({k[2] for k in cells})
    lines = sorted({(k[0], k[1]) for k in cells})
    table = [[m, c, *(SYMBOL.get(cells.get((m, c, b), ""), "") for b in backends)] for m, c in lines]
    return _table(["model", "check", *backends], table, markdown)


def _table(head: list[str], body: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    return ["  ".join(f"{v:<{w}}" for v, w in zip(r, widths)).rstrip() for r in [head, *body]]


def totals(data: dict[str, Any]) -> str:
    """Tests per status, model x backend x check cells per counted status, the wall time and the test-seconds
    per backend (each test's own time summed: the work a run did, whatever the workers' overlap)."""
    rows = data.get("rows", [])
    tests = ", ".join(f"{n} {s}" for s, n in data.get("summary", {}).items() if n)
    fold = {"error": "fail", "xpass": "fail", "skip": "unsupported"}
    cells: dict[str, int] = {s: 0 for s in COUNTED}
    for status in merge_statuses(rows).values():
        cells[fold.get(status, status)] += 1
    wall = data.get("wall_s")
    wall_text = "{} min {} s".format(*divmod(round(wall), 60)) if isinstance(wall, (int, float)) else "not recorded"
    seconds: dict[str, float] = {}
    for row in rows:
        seconds[row["backend"]] = seconds.get(row["backend"], 0.0) + (row.get("seconds") or 0.0)
    spent = ", ".join(f"{backend} {round(s)}" for backend, s in sorted(seconds.items()))
    return (
        f"tests: {tests or 'none'}; cells (model x backend x check): "
        + ", ".join(f"{n} {s}" for s, n in cells.items())
        + f"; wall time {wall_text}; test-seconds {round(sum(seconds.values()))} ({spent or 'none'})"
    )


def render(data: dict[str, Any], markdown: bool) -> list[str]:
    rows = data.get("rows", [])
    impl = data.get("implementation", "?")
    versions = ", ".join(f"{k} {v}" for k, v in sorted(data.get("versions", {}).items()) if v)
    out = [f"### {impl}" if markdown else f"implementation: {impl}", ""]
    out += [f"Measured {data.get('created', '?')} on backends {','.join(data.get('backends', []))}; {versions}.", ""]
    out += [
        f"Command: `{data.get('command') or COMMAND.format(impl=impl)}`, then `python -m conformance.report "
        f"{' '.join(data.get('report_paths') or [f'out/conformance-{impl}.json'])} --markdown`"
        + (
            f". This table merges {data['merged_runs']} runs, in order; a later run's rows replace every row of "
            "the tests it ran:"
            if data.get("merged_runs")
            else "."
        ),
        "",
    ]
    for path, run in zip(data.get("report_paths") or [], data.get("runs") or []):
        out.append(
            f"{'- ' if markdown else '  '}`{path}`: measured {run['created']}, {run['tests']} tests"
            f"{' (' + run['summary'] + ')' if run['summary'] else ''}, `{run['command']}`"
        )
    if data.get("runs"):
        out.append("")
    out += [f"Totals: {totals(data)}.", ""]
    out += ["Counts per check and backend (cells), as pass/fail/xfail/unsupported:", ""]
    out += count_table(rows, markdown=markdown)[0 if markdown else 1 :]
    gaps = data.get("declared_gaps") or {}
    out += ["", "Gaps the implementation declares (the only source of `unsupported`):", ""]
    out += [f"- `{k}`: {v}" for k, v in sorted(gaps.items())] or ["- none"]
    out += ["", "Per model:", ""] + model_matrix(rows, markdown)
    xfails = sorted(
        {
            (r["model"], r["backend"], r["check"], (r.get("message") or "").splitlines()[0][:240])
            for r in rows
            if r["status"] == "xfail"
        }
    )
    if xfails:
        out += ["", "Known failures (measured messages):", ""]
        out += [f"- {m}/{b}/{c}: {msg}" for m, b, c, msg in xfails]
    return out


def _measured(message: str | None, limit: int = 400) -> str:
    """The head of a failure message: its first three non-empty lines (a first line often only announces the
    table that follows), whitespace collapsed, joined by " | ", cut at ``limit`` characters."""
    lines = [" ".join(line.split()) for line in (message or "").splitlines() if line.strip()][:3]
    text = " | ".join(lines) or "no message"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _brief_command(command: str, limit: int = 200) -> str:
    """A re-run's command lists every test id it ran; its head says what it was, the report keeps the rest."""
    if len(command) <= limit:
        return command
    return command[:limit].rsplit(" ", 1)[0] + f" ... ({command.count('::')} test ids in the report)"


def _run_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What one merged run contributed: when, by which command, how many tests with which outcomes."""
    by_test = {r.get("nodeid"): r.get("status", "?") for r in report.get("rows", [])}
    counts = {s: sum(1 for v in by_test.values() if v == s) for s in sorted(set(by_test.values()))}
    return {
        "created": report.get("created", "?"),
        "command": _brief_command(report.get("command") or "?"),
        "tests": len(by_test),
        "summary": ", ".join(f"{n} {s}" for s, n in counts.items()),
    }


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs: a later run's rows replace every row of the tests it ran (a targeted
    re-run after a fix, or the cases a zoo addition brought). Metadata comes from the first report."""
    merged = dict(reports[0])
    rows = list(reports[0].get("rows", []))
    merged["runs"] = [_run_summary(report) for report in reports]
    for later in reports[1:]:
        rerun = {r.get("nodeid") for r in later.get("rows", [])}
        rows = [r for r in rows if r.get("nodeid") not in rerun] + list(later.get("rows", []))
        merged["wall_s"] = (merged.get("wall_s") or 0) + (later.get("wall_s") or 0)
    merged["rows"] = rows
    if len(reports) > 1:
        merged["merged_runs"] = len(reports)
        by_test = {r.get("nodeid"): r.get("status", "?") for r in rows}
        merged["summary"] = {s: sum(1 for v in by_test.values() if v == s) for s in sorted(set(by_test.values()))}
    return merged


def known_failures(data: dict[str, Any]) -> list[str]:
    """A known-failures TOML for the run: each failed test, keyed by its id, with its measured message."""
    impl = data.get("implementation", "?")
    versions = ", ".join(
        f"{k} {v}"
        for k, v in sorted((data.get("versions") or {}).items())
        if k in ("torch", "transformers", "executorch", "onnxruntime", "onnxscript")
    )
    out = [
        f"# Known failures of {impl}, measured {str(data.get('created', ''))[:10]} ({versions}).",
        "# Written by: python -m conformance.report <report.json>... --known-failures, from a run of",
        f"# {COMMAND.format(impl=impl)}",
        "# Each failed test, and each strict xfail of the file that run applied, with the message of the exception",
        "# the run itself raised. Key: test id; value: the measured message (its first lines).",
        "# Applied strictly: an entry that starts passing is reported (XPASS) so it can be removed.",
        "",
    ]
    failed = sorted(
        {
            (r["nodeid"], _measured(r.get("message")))
            for r in data.get("rows", [])
            if r.get("status") in ("fail", "xfail") and r.get("nodeid")
        }
    )
    out += [f"{json.dumps(nodeid)} = {json.dumps(message)}" for nodeid, message in failed]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, nargs="+", help="one report, or a run and later targeted re-runs")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--known-failures", action="store_true", help="print the run's known-failures TOML")
    args = parser.parse_args(argv)
    data = merge([json.loads(path.read_text()) for path in args.report])
    data["report_paths"] = [str(path) for path in args.report]
    print("\n".join(known_failures(data) if args.known_failures else render(data, args.markdown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
