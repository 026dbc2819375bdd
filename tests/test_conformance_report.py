"""``python -m conformance.report`` merges a run with later re-runs: a re-run's rows replace the first run's
rows for the tests it ran, totals count each test once, and the table lists every merged run."""

from __future__ import annotations

import json

from conformance import report


def _report(created: str, command: str, rows: list[tuple[str, str]]) -> dict:
    return {
        "implementation": "impl",
        "created": created,
        "command": command,
        "backends": ["dynamo"],
        "rows": [
            {"nodeid": nodeid, "status": status, "model": "m", "backend": "dynamo", "check": "export"}
            for nodeid, status in rows
        ],
    }


def test_later_runs_replace_the_rows_of_the_tests_they_ran(tmp_path, capsys):
    first = _report("2026-01-01T00:00:00", "python -m pytest conformance", [("t::a", "fail"), ("t::b", "pass")])
    rerun_ids = " ".join(f"'conformance/t.py::case{i}'" for i in range(20))
    rerun = _report("2026-01-02T00:00:00", f"python -m pytest {rerun_ids}", [("t::a", "pass")])
    paths = []
    for name, data in (("first.json", first), ("rerun.json", rerun)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(data))
    merged = report.merge([first, rerun])
    assert sorted((r["nodeid"], r["status"]) for r in merged["rows"]) == [("t::a", "pass"), ("t::b", "pass")]
    assert merged["summary"] == {"pass": 2}
    report.main([str(p) for p in paths] + ["--markdown"])
    text = capsys.readouterr().out
    assert "merges 2 runs" in text
    assert "measured 2026-01-01T00:00:00, 2 tests (1 fail, 1 pass)" in text
    assert "measured 2026-01-02T00:00:00, 1 tests (1 pass)" in text
    assert "(20 test ids in the report)" in text and "case19" not in text


def test_wall_time_rounds_into_the_next_minute():
    from conformance.report import totals

    assert "wall time 6 min 0 s;" in totals({"wall_s": 359.6})  # not "5 min 60 s"


def test_totals_sum_each_backend_s_test_seconds():
    from conformance.report import totals

    rows = [{"model": "m", "check": "export", "backend": b, "status": "pass", "seconds": s}
            for b, s in [("onnx", 1.4), ("dynamo", 2.0), ("onnx", 0.3)]]
    assert totals({"rows": rows}).endswith("test-seconds 4 (dynamo 2, onnx 2)")
    assert "wall time 18 min 38 s;" in totals({"wall_s": 1117.9})
