"""Every speed target in one run: export time against the peer per backend, decode loops against eager
``generate()``, the suite cold and warm, start-up seconds and the highest export RSS, each beside its target.

Each step runs one of this folder's benchmarks in a child process with its own output folder under ``--out``
(so no step overwrites another's JSON), then this script reads the JSON files back and prints one table: the
figure, the measured value (a ratio: hfexport / peer for export time, loop / eager for decode, cold / warm for
the suite), the target, and whether it holds. It writes ``targets.json`` and ``targets.png`` beside them.

    python benchmarks/targets.py                          # every step (about an hour on 2 cores)
    python benchmarks/targets.py --steps export,startup   # some steps
    python benchmarks/targets.py --read out/targets       # print the table of an earlier run, run nothing

The steps and their commands are ``STEPS``; the figures read from their results and the targets are ``FIGURES``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = REPO / "out" / "targets"

# step -> (benchmark script and arguments, the JSON file it writes into its --out folder)
STEPS: dict[str, tuple[list[str], str]] = {
    "export": (["export_time.py", "--models", "all", "--backends", "dynamo,onnx", "--repeat", "2"], "export_time"),
    "export_executorch": (["export_time.py", "--models", "llama,gemma3,bert,t5", "--backends", "executorch",
                           "--repeat", "2"], "export_time"),
    "generation": (["export_time.py", "--generation", "--models", "llama,gemma3,t5",
                    "--backends", "dynamo,onnx,executorch", "--repeat", "2"], "export_time_generation"),
    "decode": (["decode_throughput.py", "--repeat", "5"], "decode_throughput"),
    "startup": (["startup.py", "--repeat", "3"], "startup"),
    "suite": (["suite_time.py", "conformance", "--cache-speedup", "--", "--dist", "loadgroup", "-p",
               "no:cacheprovider"], "suite_time"),
}


@dataclass(frozen=True)
class Figure:
    name: str
    step: str
    read: Callable[[dict[str, Any]], float | None]
    target: float
    higher_is_better: bool
    unit: str = "x"

    def holds(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.target if self.higher_is_better else value <= self.target


def _median_ratio(backend: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda result: result.get("median_ratio_by_backend", {}).get(backend)


def _decode(runner: str) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        rows = [r for r in result.get("rows", []) if r.get("runner") == f"{runner} decode loop"]
        return rows[0].get("speedup_vs_eager") if rows else None

    return read


def _decode_spread(result: dict[str, Any]) -> float | None:
    """The ExecuTorch loop's spread over its timed runs ((max - min) / median) over eager ``generate()``'s in the
    same run: at most 1 where the loop varies no more than eager does on this machine."""
    spreads = {r.get("runner"): r.get("spread") for r in result.get("rows", [])}
    loop, eager = spreads.get("executorch decode loop"), spreads.get("eager generate (static cache)")
    return loop / eager if loop is not None and eager else None


def _startup(name: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda result: result.get("results", {}).get(name, {}).get("median")


def _suite(index: int | None) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        runs = result.get("runs", [])
        if len(runs) != 2:
            return None
        walls = [r["wall_s"] for r in runs]
        return walls[0] / walls[1] if index is None else walls[index]

    return read


def _peak_rss(result: dict[str, Any]) -> float | None:
    return result.get("max_peak_rss_mib")


FIGURES: tuple[Figure, ...] = (
    Figure("Dynamo export, hfexport / peer (median over the zoo)", "export", _median_ratio("dynamo"), 0.8, False),
    Figure("ONNX export, hfexport / peer (median over the zoo)", "export", _median_ratio("onnx"), 0.8, False),
    Figure("ExecuTorch export, hfexport / peer (median)", "export_executorch", _median_ratio("executorch"), 0.8,
           False),
    Figure("Dynamo export_for_generation, hfexport / peer", "generation", _median_ratio("dynamo"), 0.8, False),
    Figure("ONNX export_for_generation, hfexport / peer", "generation", _median_ratio("onnx"), 0.8, False),
    Figure("ExecuTorch export_for_generation, hfexport / peer", "generation", _median_ratio("executorch"), 0.8,
           False),
    Figure("Dynamo decode loop / eager generate()", "decode", _decode("dynamo"), 1.0, True),
    Figure("ONNX Runtime decode loop / eager generate()", "decode", _decode("onnx"), 2.0, True),
    Figure("ExecuTorch decode loop / eager generate()", "decode", _decode("executorch"), 1.5, True),
    Figure("ExecuTorch decode loop spread / eager generate() spread", "decode", _decode_spread, 1.0, False),
    Figure("suite cold / warm (second run, unchanged tree)", "suite", _suite(None), 3.0, True),
    Figure("suite cold wall seconds (default tier, 2 workers)", "suite", _suite(0), 900.0, False, " s"),
    Figure("start-up: hfexport --help", "startup", _startup("hfexport --help"), 1.5, False, " s"),
    Figure("start-up: import pytest_hfexport", "startup", _startup("import pytest_hfexport"), 1.5, False, " s"),
    Figure("start-up: pytest --help", "startup", _startup("pytest --help (plugin installed)"), 1.5, False, " s"),
    Figure("highest export RSS, plain exports (MiB)", "export", _peak_rss, 2048.0, False, " MiB"),
    Figure("highest export RSS, ExecuTorch exports (MiB)", "export_executorch", _peak_rss, 2048.0, False, " MiB"),
    Figure("highest export RSS, export_for_generation (MiB)", "generation", _peak_rss, 2048.0, False, " MiB"),
)


def run_step(step: str, out: Path) -> int:
    argv, _ = STEPS[step]
    folder = out / step
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(HERE / argv[0]), *argv[1:]]
    separator = command.index("--") if "--" in command else len(command)
    command[separator:separator] = ["--out", str(folder)]
    print(f"[{time.strftime('%H:%M:%S')}] {step}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    code = subprocess.run(command, cwd=REPO).returncode
    print(f"[{time.strftime('%H:%M:%S')}] {step}: exit {code} after {time.perf_counter() - started:.0f} s", flush=True)
    return code


def read_results(out: Path) -> dict[str, dict[str, Any]]:
    results = {}
    for step, (_, name) in STEPS.items():
        path = out / step / f"{name}.json"
        if path.exists():
            results[step] = json.loads(path.read_text())
    return results


def _shown(figure: Figure, value: float | None) -> str:
    if value is None:
        return "not run"
    return f"{value:.3f}{figure.unit}" if figure.unit == "x" else f"{value:.{3 if value < 10 else 0}f}{figure.unit}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma list of {', '.join(STEPS)} (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results folder (default {DEFAULT_OUT})")
    parser.add_argument("--read", type=Path, default=None, help="print the table of an earlier run's folder")
    args = parser.parse_args(argv)
    out = args.read or args.out
    codes: dict[str, int] = {}
    if args.read is not None and (out / "targets.json").exists():  # a re-read keeps the run's exit codes
        codes = json.loads((out / "targets.json").read_text()).get("step_exit_codes", {})
    if args.read is None:
        steps = [s for s in args.steps.split(",") if s]
        unknown = sorted(set(steps) - set(STEPS))
        if unknown:
            parser.error(f"unknown steps {unknown}; steps are {', '.join(STEPS)}")
        codes = {step: run_step(step, out) for step in steps}
    results = read_results(out)
    rows, payload = [], []
    for figure in FIGURES:
        result = results.get(figure.step)
        value = figure.read(result) if result else None
        holds = figure.holds(value)
        when = result.get("when", "") if result else ""
        sign = ">=" if figure.higher_is_better else "<="
        target = f"{sign} {figure.target:g}{figure.unit}"
        rows.append([figure.name, _shown(figure, value), target, {True: "yes", False: "NO", None: "-"}[holds], when])
        payload.append({"figure": figure.name, "step": figure.step, "value": value, "target": figure.target,
                        "higher_is_better": figure.higher_is_better, "holds": holds, "when": when})
    print(_common.table(["figure", "measured", "target", "holds", "measured at"], rows))
    path = _common.write_json(out, "targets", {"figures": payload, "step_exit_codes": codes})
    ratios = [p for p, f in zip(payload, FIGURES) if p["value"] is not None and f.unit == "x"]
    png = _common.bar_plot(out, "targets", "measured / target (export, spread: <= 1 holds; decode, suite: >= 1)",
                           [p["figure"].split(",")[0].split(" / ")[0] for p in ratios],
                           {"measured / target": [p["value"] / p["target"] for p in ratios]}, "measured / target")
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
