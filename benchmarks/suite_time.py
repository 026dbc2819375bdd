"""Wall time of the test suite under pytest-xdist: ``python -m pytest -n N PATH``.

Runs the suite as CI runs it, in a child process, and records the wall time, the exit code,
pytest's own summary counts and its slowest tests (``--durations``), so a claim such as
"the suite runs in X minutes on two cores" has a JSON file and a plot behind it.

    python benchmarks/suite_time.py                      # tests/ with -n 2
    python benchmarks/suite_time.py tests/test_cli.py -n 2 --repeat 2
    python benchmarks/suite_time.py tests/ -- -m "not hfexport_slow"    # extra pytest arguments after --
    python benchmarks/suite_time.py conformance --cache-speedup -- --dist loadgroup   # cold vs warm artifact cache

``--cache-speedup`` runs twice over one fresh ``--hfexport-cache-dir``: the first run exports everything
(cold), the second reuses the saved artifacts (warm); the ratio cold / warm is printed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected|warnings?)")
DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)")


def run_suite(path: str, workers: int, extra: list[str], durations: int, timeout: float | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-n", str(workers), "-q", "-p", "no:cacheprovider",
           f"--durations={durations}", path, *extra]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    wall = time.perf_counter() - start
    counts: dict[str, int] = {}
    tail = "\n".join(out.strip().splitlines()[-3:])
    for n, kind in SUMMARY.findall(tail):
        kind = {"error": "errors", "warning": "warnings"}.get(kind, kind)
        counts[kind] = int(n)
    slowest = [{"seconds": float(s), "phase": phase, "test": test}
               for s, phase, test in (m.groups() for m in map(DURATION.match, out.splitlines()) if m)]
    return {"command": cmd, "exit_code": code, "wall_s": wall, "counts": counts, "slowest": slowest,
            "summary_line": tail.splitlines()[-1] if tail else "", "timed_out": code is None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default="tests/", help="what pytest collects (default: tests/)")
    parser.add_argument("-n", "--workers", type=int, default=2, help="pytest-xdist workers (default 2)")
    parser.add_argument("--repeat", type=int, default=1, help="runs; each is recorded (default 1)")
    parser.add_argument("--durations", type=int, default=15, help="slowest tests to record (default 15)")
    parser.add_argument("--timeout", type=float, default=None, help="give up on a run after this many seconds")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT, help="folder for suite_time.json/.png")
    parser.add_argument("--cache-speedup", action="store_true",
                        help="two runs over one fresh artifact cache (cold, then warm); prints cold / warm")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]

    if args.cache_speedup:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="hfexport-cache-") as cache:
            extra = [*extra, f"--hfexport-cache-dir={cache}"]
            runs = [run_suite(args.path, args.workers, extra, args.durations, args.timeout) for _ in range(2)]
        print(f"artifact cache: cold {runs[0]['wall_s']:.0f} s, warm {runs[1]['wall_s']:.0f} s, "
              f"cold / warm = {runs[0]['wall_s'] / max(runs[1]['wall_s'], 1e-9):.2f}x")
    else:
        runs = [run_suite(args.path, args.workers, extra, args.durations, args.timeout) for _ in range(args.repeat)]
    print(_common.table(["run", "wall s", "exit", "pytest summary"],
                        [[i + 1, r["wall_s"], r["exit_code"], r["summary_line"][:100]] for i, r in enumerate(runs)]))
    slowest = runs[-1]["slowest"][:10]
    if slowest:
        print("\nslowest (last run):")
        print(_common.table(["seconds", "phase", "test"], [[s["seconds"], s["phase"], s["test"]] for s in slowest]))
    payload = {"path": args.path, "workers": args.workers, "extra_args": extra, "runs": runs,
               "median_wall_s": _common.median(r["wall_s"] for r in runs)}
    path = _common.write_json(args.out, "suite_time", payload)
    top = runs[-1]["slowest"][: args.durations]
    png = _common.bar_plot(args.out, "suite_time",
                           f"pytest -n {args.workers} {args.path}: {runs[-1]['wall_s']:.0f}s wall; slowest tests",
                           [f"{s['test'].split('::')[-1][:40]} ({s['phase']})" for s in top],
                           {"seconds": [s["seconds"] for s in top]}, "seconds")
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    print(_common.json.dumps({k: v for k, v in payload.items() if k != "runs"} |
                             {"runs": [{k: v for k, v in r.items() if k != "slowest"} for r in runs]}, default=str))
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
