"""The quick export-only table: every zoo model on every available backend, seconds and max error.

For each model x backend: export with dynamic=True through the implementation's
adapter, save the artifact, load it back, run it at the sample shape and at a
left-padded batch of another length, and compare every output with eager PyTorch
(``pytest_hfexport.compare``). Exit status 1 when a row fails its backend's tolerance.

    python -m conformance.matrix [--models llama,bert] [--backends dynamo,onnx] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pytest_hfexport.backends import available as available_backends
from pytest_hfexport.compare import compare
from pytest_hfexport.naming import flat_named


@dataclass
class Row:
    model: str
    backend: str
    status: str = "pass"  # pass | fail | error | xfail | xpass
    stage: str = ""
    export_s: float = 0.0
    err_sample: float | None = None
    err_other: float | None = None
    shapes: list[str] = field(default_factory=list)
    message: str = ""


def describe(inputs: dict[str, Any]) -> str:
    """'batch x sequence' of the main input ('batch x HxW' for images)."""
    for key in ("input_ids", "input_features", "pixel_values"):
        t = inputs.get(key)
        if isinstance(t, torch.Tensor):
            if key == "pixel_values" and t.dim() == 4:
                return f"{t.shape[0]}x{t.shape[2]}px"
            return f"{t.shape[0]}x{t.shape[-1] if key == 'input_features' else t.shape[1]}"
    t = next(v for v in inputs.values() if isinstance(v, torch.Tensor))
    return "x".join(str(d) for d in t.shape[:2])


def measure(entry: Any, backend: str, workdir: Path, impl: str = "hfexport") -> Row:
    """Export ``entry`` through the implementation's adapter, run the saved artifact at the sample and at a
    padded batch of another length, and judge it with the suite's one comparison."""
    from pytest_hfexport.adapters import resolve

    adapter = resolve(impl)
    row = Row(entry.name, backend)
    try:
        model = entry.model()
        sets = entry.input_sets(model, ("sample", "batch"))
        row.stage = "export"
        exporter = adapter.exporter(backend)
        start = time.perf_counter()
        program = adapter.export(exporter, model, sets["sample"], adapter.config(backend, dynamic=True))
        row.export_s = time.perf_counter() - start
        row.stage = "save"
        path = adapter.save(exporter, program, workdir, entry.name)
        row.stage = "load"
        run = adapter.load(path)
        for which, inputs in zip(("sample", "other"), sets.values()):
            row.stage = "run"
            with torch.no_grad():
                expected = flat_named(model(**inputs))
                got = flat_named(run(**inputs))
            row.stage = "compare"
            result = compare(expected, got, backend, label=which)
            setattr(row, f"err_{which}", result.max_abs)
            row.shapes.append(describe(inputs))
            if not result.ok:
                row.status, row.message = "fail", f"{which}: " + "; ".join(result.failures())[:200]
        if row.status == "pass":
            row.stage = ""
    except Exception as exc:  # a row records the failure; the matrix goes on
        row.status = "error"
        row.message = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        logging.getLogger(__name__).debug("%s/%s failed:\n%s", entry.name, backend, traceback.format_exc())
    return row


KNOWN_FAILURES = Path(__file__).parent / "known_failures" / "hfexport.toml"


def apply_known_failures(rows: list[Row], path: Path = KNOWN_FAILURES) -> None:
    """Strict: a known failure that fails is xfail (with its reason); one that passes is xpass (a failure)."""
    from pytest_hfexport import xfails

    entries = xfails.load(path) if path.exists() else {}
    for row in rows:
        hit = xfails.find(entries, "", (row.model, row.backend, "export"))
        if hit is None:
            continue
        if row.status == "pass":
            row.status, row.message = "xpass", f"known failure now passes; remove {hit[0]!r} from {path.name}"
        else:
            row.status, row.message = "xfail", f"{row.message} | known: {hit[1][:80]}"


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'model':<11} {'backend':<10} {'status':<6} {'export s':>8} {'err@sample':>11} {'err@other':>10}  "
        "shapes      note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        fmt = lambda e: "-" if e is None else f"{e:.1e}"  # noqa: E731
        lines.append(
            f"{r.model:<11} {r.backend:<10} {r.status:<6} {r.export_s:>8.2f} {fmt(r.err_sample):>11} "
            f"{fmt(r.err_other):>10}  {','.join(r.shapes):<11} {(r.stage + ': ' if r.stage else '') + r.message}"
        )
    counts = {status: sum(r.status == status for r in rows) for status in ("pass", "xfail")}
    failed = len(rows) - counts["pass"] - counts["xfail"]
    lines.append(
        f"{counts['pass']} passed, {failed} failed, {counts['xfail']} xfailed (known failures: "
        f"{KNOWN_FAILURES.relative_to(Path(__file__).parent.parent)})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from conformance.zoo import select

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma list of zoo entries (default: all)")
    parser.add_argument("--backends", help="comma list (default: every installed backend)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--impl", default="hfexport", help="implementation under test (as --hfexport-impl)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    backends = args.backends.split(",") if args.backends else available_backends()
    entries = select(args.models.split(",") if args.models else None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in entries:
            for backend in backends:
                row = measure(entry, backend, Path(tmp), args.impl)
                print(
                    f"  {row.model}/{row.backend}: {row.status} ({row.export_s:.1f}s) {row.message}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)
    apply_known_failures(rows)
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0 if all(r.status in ("pass", "xfail") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
