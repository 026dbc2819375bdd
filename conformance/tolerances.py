"""The float32 tolerances, from measurement: the worst error over the zoo per backend, times a stated factor.

``python -m conformance.tolerances REPORT [REPORT ...]`` reads reports of the default tier (``make run`` writes
``out/conformance.json``; ``make compat`` one per stack) and prints, per backend, the largest absolute error among
outputs whose eager values lie within [-1, 1] (what the absolute part of a tolerance must cover) and the largest
error relative to the output's scale (``max|eager|``) among larger outputs (what the relative part must cover),
each with the row that gave it, and the tolerance ``FACTOR`` times those. An output passes when ``max abs error <=
atol + rtol * scale``: with ``atol = FACTOR * A`` and ``rtol = FACTOR * R`` every measured output passes with
``FACTOR`` to spare (an output within [-1, 1] by its absolute error, a larger one by its relative error).
``pytest_hfexport.compare`` holds the result; ``docs/plugin.md`` ("Tolerances") quotes the table. Only passing
rows count: a failing row's error may be the fault it caught.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Headroom over the worst error measured on the zoo: float32 sums reordered by another thread count, CPU or
# kernel library move errors by small multiples; a fault inside a layer moves them by orders of magnitude.
FACTOR = 10.0


@dataclass
class Worst:
    """The largest value of one error measure over rows, with the row that gave it."""

    value: float = 0.0
    row: str = "-"

    def see(self, value: Any, row: Mapping[str, Any]) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value) and value > self.value:
            self.value, self.row = float(value), f"{row['model']}/{row['check']}"


@dataclass
class BackendErrors:
    backend: str
    rows: int = 0
    absolute: Worst = field(default_factory=Worst)  # over outputs within [-1, 1]
    relative: Worst = field(default_factory=Worst)  # over outputs beyond [-1, 1], against their scale

    @property
    def atol(self) -> float:
        return round_up(FACTOR * self.absolute.value)

    @property
    def rtol(self) -> float:
        return round_up(FACTOR * self.relative.value)


def round_up(value: float, digits: int = 2) -> float:
    """Up to ``digits`` significant digits, never below ``value`` (a tolerance must keep its margin)."""
    if value <= 0:
        return 0.0
    exponent = math.floor(math.log10(value)) - digits + 1
    return float(f"{math.ceil(value / 10**exponent)}e{exponent}")


def measure(rows: Iterable[Mapping[str, Any]]) -> dict[str, BackendErrors]:
    """Per backend: the worst errors over passing rows that compared an artifact with eager (``compared`` > 0)."""
    out: dict[str, BackendErrors] = {}
    for row in rows:
        if not row.get("compared") or row.get("status") != "pass":
            continue
        errors = out.setdefault(str(row["backend"]), BackendErrors(str(row["backend"])))
        errors.rows += 1
        errors.absolute.see(row.get("max_abs_small_scale"), row)
        errors.relative.see(row.get("max_rel_large_scale"), row)
    return dict(sorted(out.items()))


def read_rows(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        rows += data.get("rows", []) if isinstance(data, dict) else data
    return rows


def table(measured: Mapping[str, BackendErrors], current: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
    """Markdown: per backend, the worst errors with their rows, the tolerance they give, and the one in force."""
    head = [
        "backend",
        "rows compared",
        "worst abs error, outputs within [-1, 1]",
        "worst rel error, larger outputs",
        f"atol = {FACTOR:g} x",
        f"rtol = {FACTOR:g} x",
    ]
    if current:
        head.append("in force (atol, rtol)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for backend, errors in measured.items():
        cells = [
            backend,
            str(errors.rows),
            f"{errors.absolute.value:.2e} ({errors.absolute.row})",
            f"{errors.relative.value:.2e} ({errors.relative.row})",
            f"{errors.atol:.2g}",
            f"{errors.rtol:.2g}",
        ]
        if current:
            atol, rtol = current.get(backend, (float("nan"), float("nan")))
            cells.append(f"{atol:.2g}, {rtol:.2g}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.tolerances", description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="reports of default-tier runs (--hfexport-report)")
    args = parser.parse_args(argv)
    from pytest_hfexport.compare import FP32_ATOL, FP32_RTOL

    measured = measure(read_rows(args.reports))
    if not measured:
        print("no row compared an artifact with eager (reports written before rows carried their errors?)")
        return 1
    print(f"float32, {len(args.reports)} report(s): {', '.join(map(str, args.reports))}")
    current = {b: (FP32_ATOL.get(b, float("nan")), FP32_RTOL.get(b, float("nan"))) for b in measured}
    for line in table(measured, current):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
