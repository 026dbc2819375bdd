"""A model repo's downstream run: its matrix (model x check x backend), its wall time, and its gate on a fault.

The repo is ``tests/model_repo/repo_models.py`` (a tiny causal LM, a tiny encoder-decoder and a plain module,
every default check) copied into a temporary folder as a repo holds it. Two runs of ``pytest`` there, as the
repo's CI would run them:

1. ``--hfexport-backend=all --hfexport-report=before.json``: the matrix and the wall time of the whole run;
2. the same against ``faults.maskless_static_decode`` (the decode graph traced without its attention mask: plain
   exports right, generation wrong), gated by ``--hfexport-baseline=before.json``: the gate's verdict and the
   regressed rows.

    python benchmarks/downstream_matrix.py            # both runs
    python benchmarks/downstream_matrix.py --no-gate  # the matrix only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

ROOT = Path(__file__).resolve().parents[1]
FAULT = "faults.maskless_static_decode"
STATUS = {"pass": "ok", "xfail": "xfail", "fail": "FAIL", "error": "ERROR", "unsupported": "unsup"}


def run(repo: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_repo.py", *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done


def matrix(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    backends = sorted({r["backend"] for r in rows}, key=["dynamo", "onnx", "executorch"].index)
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        cells.setdefault((r["model"], r["check"]), {})[r["backend"]] = STATUS.get(r["status"], r["status"])
    body = [[model, check, *(by.get(b, "-") for b in backends)] for (model, check), by in sorted(cells.items())]
    return ["model", "check", *backends], body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-gate", action="store_true", help="only the matrix run")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        shutil.copy(ROOT / "tests" / "model_repo" / "repo_models.py", repo / "test_repo.py")
        wall, first = run(repo, "--hfexport-backend=all", "--hfexport-report=before.json")
        rows = json.loads((repo / "before.json").read_text())["rows"]
        headers, body = matrix(rows)
        print(_common.table(headers, body))
        summary = first.stdout.strip().splitlines()[-1] if first.stdout.strip() else ""
        print(f"\n{len(rows)} checks in {wall:.0f} s wall ({summary.strip('= ')}); exit {first.returncode}")
        payload: dict = {"matrix_wall_s": round(wall, 1), "rows": len(rows), "exit": first.returncode,
                         "summary": summary, "matrix": [dict(zip(headers, line)) for line in body]}
        if not args.no_gate:
            gate_wall, gated = run(repo, "--hfexport-backend=all", "--hfexport-baseline=before.json",
                                   "--hfexport-report=after.json", f"--hfexport-impl={FAULT}")
            regressed = [line for line in gated.stdout.splitlines() if line.startswith("REGRESSION ")]
            print(f"\ngate against {FAULT}: exit {gated.returncode}, {len(regressed)} regression(s), "
                  f"{gate_wall:.0f} s wall")
            print("\n".join(regressed))
            payload.update(gate_exit=gated.returncode, gate_wall_s=round(gate_wall, 1), regressions=regressed)
        payload["versions"] = _common.versions()
        _common.write_json(args.out, "downstream_matrix", payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
