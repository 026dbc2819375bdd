"""Start-up seconds of the entry points a user waits on: the console script, the plugin, pytest itself.

Each command runs in a fresh interpreter ``--repeat`` times (first run untimed, so the OS file cache is
warm); min, median and max wall seconds are printed with the target (1.5 s) and written to
``benchmarks/results/startup.json``. ``import hfexport`` is listed as well, for reference: it imports torch
and transformers by contract (it registers the cache pytrees ``torch.export.load`` needs).

    python benchmarks/startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

TARGET_S = 1.5
BIN = Path(sys.executable).parent
COMMANDS: dict[str, tuple[list[str], float | None]] = {
    "hfexport --help": ([str(BIN / "hfexport"), "--help"], TARGET_S),
    "import pytest_hfexport": ([sys.executable, "-c", "import pytest_hfexport"], TARGET_S),
    "pytest --help (plugin installed)": ([sys.executable, "-m", "pytest", "--help"], TARGET_S),
    "import hfexport (torch + transformers)": ([sys.executable, "-c", "import hfexport"], None),
}


def wall(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args()
    rows, results = [], {}
    # From an empty folder, as in a downstream repository: no conftest.py of ours is read.
    with tempfile.TemporaryDirectory() as cwd:
        env_cwd = os.path.realpath(cwd)
        for name, (argv, target) in COMMANDS.items():
            wall(argv, env_cwd)
            times = [wall(argv, env_cwd) for _ in range(args.repeat)]
            med = statistics.median(times)
            ok = None if target is None else ("yes" if med <= target else "NO")
            rows.append([name, min(times), med, max(times), target, ok])
            results[name] = {"seconds": times, "median": med, "target": target}
    print(_common.table(["command", "min s", "median s", "max s", "target s", "within"], rows))
    path = _common.write_json(args.out, "startup", {"results": results})
    print(f"\nwritten: {path}")
    return 0 if all(r[5] != "NO" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
