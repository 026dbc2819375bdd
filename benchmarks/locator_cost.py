"""What the locator costs a passing run: the same conformance tests, cold, on two fresh clones.

The locator (``pytest_hfexport.localise``) runs only after a mismatch, so a run with no fault should take as
long as it did before the locator existed. This clones the repository twice, at ``--before`` (default: the
commit before the locator) and at ``--after`` (default: HEAD), collects the tests the selection picks in both,
and runs exactly those node ids in each clone, cold (no artifact cache), alternating before / after for
``--rounds`` rounds so that both see the same machine. It prints every run's wall time, the after / before
ratio of the means, and the noise: the largest difference between two runs of the same tree.

    python benchmarks/locator_cost.py                       # llama, bert and t5 on every backend, 2 rounds
    python benchmarks/locator_cost.py -k "llama" --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

REPO = Path(__file__).resolve().parents[1]
BEFORE_LOCATOR = "3ba64cc^"  # "Locator: the first module whose output an artifact computes differently ..."


def clone(revision: str, folder: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(REPO), str(folder)], check=True)
    subprocess.run(["git", "checkout", "-q", revision], cwd=folder, check=True)
    return folder


def collect(folder: Path, selection: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "--collect-only", "-q", "-p", "no:cacheprovider", "-k",
         selection],
        cwd=folder, capture_output=True, text=True, env=_env(folder),
    )
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def _env(folder: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(folder)}


def run(folder: Path, ids: list[str], workers: int) -> tuple[float, str]:
    shutil.rmtree(folder / ".pytest_cache", ignore_errors=True)  # cold: no saved artifacts
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", str(workers), "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
         *ids],
        cwd=folder, capture_output=True, text=True, env=_env(folder),
    )
    wall = time.perf_counter() - start
    lines = (done.stdout + done.stderr).strip().splitlines()
    return wall, lines[-1] if lines else f"exit {done.returncode}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE_LOCATOR)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("-k", dest="selection", default="llama or bert or t5")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-n", dest="workers", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hfexport-locator-cost-") as tmp:
        trees = {name: clone(rev, Path(tmp) / name) for name, rev in (("before", args.before), ("after", args.after))}
        ids = sorted(collect(trees["before"], args.selection) & collect(trees["after"], args.selection))
        print(f"{len(ids)} tests collected in both trees ({args.before} and {args.after}), -k {args.selection!r}")
        walls: dict[str, list[float]] = {"before": [], "after": []}
        for round_ in range(1, args.rounds + 1):
            for name, folder in trees.items():
                wall, summary = run(folder, ids, args.workers)
                walls[name].append(wall)
                print(f"round {round_} {name:6s} {wall:7.1f} s  {summary}", flush=True)
    means = {name: statistics.mean(values) for name, values in walls.items()}
    noise = max(max(v) - min(v) for v in walls.values()) if args.rounds > 1 else float("nan")
    ratio = means["after"] / means["before"]
    print(f"after / before (mean wall): {ratio:.3f}; difference {means['after'] - means['before']:+.1f} s; "
          f"noise (largest spread between runs of one tree): {noise:.1f} s")
    _common.write_json(
        Path(args.out), "locator_cost", {"tests": len(ids), "walls": walls, "ratio": ratio, "noise_s": noise}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
