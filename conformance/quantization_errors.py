"""The errors the quantization checks' bars come from: ``python -m conformance.quantization_errors``.

For every zoo entry with a plain export and every (scheme, backend) of ``pytest_hfexport.quantized_reference``,
the implementation under test (``--impl``, hfexport by default, through its adapter) exports the entry quantized;
its saved artifact runs every input set of the entry. Printed per cell: the largest error against eager with the
same quantization (absolute among outputs within [-1, 1], relative to the output's scale among larger ones), the
lowest SQNR of the first output against eager float32 ("SQNR"), against eager with the same quantization
("agree"), and of that eager against itself with each linear's input moved by an ulp or two (``NUDGE``; "nudge":
how far such a difference carries). Then the bars: ``TOLERANCE`` of
``pytest_hfexport.quantized_reference`` per (scheme, backend) whose errors exceed a tenth of the backend's float32
tolerance (``FACTOR`` times the worst errors, as ``conformance.tolerances`` sets the float32 ones, never below
the float32 one), ``SQNR_FLOOR`` of ``conformance/test_quantization.py`` per (scheme, entry): the lowest SQNR
less 3 dB, and its ``AGREEMENT_FLOOR`` for the cells judged by agreement (``judged_by_agreement``; left out of
``TOLERANCE``): the lowest agreement less 3 dB.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from conformance.test_quantization import judged_by_agreement
from conformance.tolerances import FACTOR, round_up
from conformance.zoo import select
from pytest_hfexport.compare import Tolerance, default_tolerance
from pytest_hfexport.naming import flat_named
from pytest_hfexport.quantized_reference import SCHEMES, first_output, quantized_copy, sqnr_db
from pytest_hfexport.reference import graph_kwargs, reference_call

SQNR_MARGIN_DB = 3.0


def measure(adapter: Any, entry: Any, scheme: str, backend: str, folder: Path) -> dict[str, float]:
    """Worst absolute error (outputs within [-1, 1]), worst relative error (larger outputs) against eager with
    the same quantization, and the lowest first-output SQNR against eager float32, over the entry's input sets."""
    import torch

    model = entry.model()
    inputs = entry.sample_inputs(model)
    exporter = adapter.exporter(backend)
    config = adapter.config(backend, dynamic=True, quantization=scheme)
    program = adapter.export(exporter, model, inputs, config)
    runner = adapter.load(adapter.save(exporter, program, folder, "model"))
    reference = quantized_copy(model, scheme)
    worst = {"abs": 0.0, "rel": 0.0, "sqnr": math.inf, "agree": math.inf, "nudge": math.inf}
    for call in entry.input_sets(model).values():
        expected = reference_call(reference, call)
        got = flat_named(runner(**copy.deepcopy(graph_kwargs(call))))
        for name, value in expected.items():
            if name not in got or not torch.is_floating_point(torch.as_tensor(value)):
                continue
            value, other = torch.as_tensor(value).double(), torch.as_tensor(got[name]).double()
            error, scale = (value - other).abs().max().item(), value.abs().max().item()
            if scale <= 1.0:
                worst["abs"] = max(worst["abs"], error)
            else:
                worst["rel"] = max(worst["rel"], error / scale)
        name, floating = first_output(reference_call(model, call))
        worst["sqnr"] = min(worst["sqnr"], sqnr_db(floating, got[name]))
        worst["agree"] = min(worst["agree"], sqnr_db(expected[name], got[name]))
        worst["nudge"] = min(worst["nudge"], sqnr_db(expected[name], nudged_call(reference, call)[name]))
    return worst


NUDGE = 2.0**-22  # relative: an ulp or two of a float32 value, what two runtimes' float sums differ by


def nudged_call(model: Any, call: Any) -> dict[str, Any]:
    """``model``'s outputs with each ``nn.Linear``'s input scaled by ``1 + NUDGE`` and ``1 - NUDGE`` alternately,
    before any quantization of it: how far eager itself moves when its float sums differ by an ulp or two."""
    import torch

    def nudge(module: Any, args: Any) -> Any:
        x = args[0]
        sign = (torch.arange(x.numel(), device=x.device).reshape(x.shape) % 2) * 2 - 1
        return (x * (1 + NUDGE * sign), *args[1:])

    hooks = [
        module.register_forward_pre_hook(nudge, prepend=True)
        for module in model.modules()
        if isinstance(module, torch.nn.Linear)
    ]
    try:
        return reference_call(model, call)
    finally:
        for hook in hooks:
            hook.remove()


def nudge_only(entries: list[Any], schemes: list[str]) -> None:
    """The "nudge" column alone, from eager (no export): per entry and scheme, the lowest SQNR over the input sets
    of eager with the scheme against itself nudged."""
    print(f"{'entry':24s} {'scheme':6s} {'nudge dB':>9s}")
    for entry in entries:
        model = entry.model()
        for scheme in schemes:
            reference = quantized_copy(model, scheme)
            lowest = math.inf
            for call in entry.input_sets(model).values():
                name, expected = first_output(reference_call(reference, call))
                lowest = min(lowest, sqnr_db(expected, nudged_call(reference, call)[name]))
            print(f"{entry.name:24s} {scheme:6s} {lowest:9.1f}", flush=True)


def known_failures(impl: str) -> set[str]:
    """The test ids the suite holds as known failures of the implementation under test
    (``conformance/known_failures/<impl>.toml``): a quantization cell among them has an error that says what the
    failure is, not what the bar should be."""
    import tomllib

    from conformance.conftest import known_failures_file

    path = known_failures_file(impl)
    return set(tomllib.loads(path.read_text())) if path.exists() else set()


def quantization_test_id(scheme: str, backend: str, entry: str) -> str:
    return f"conformance/test_quantization.py::test_{scheme}_export_matches_eager_{scheme}[{backend}-{entry}]"


def main(argv: list[str] | None = None) -> int:
    from pytest_hfexport.adapters import resolve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="hfexport")
    parser.add_argument("--entries", help="comma list of zoo entries (default: every entry with a plain export)")
    parser.add_argument("--schemes", help="comma list of schemes (default: all)")
    parser.add_argument("--backends", help="comma list of backends (default: every backend of each scheme)")
    parser.add_argument("--nudge-only", action="store_true", help="eager's nudge column alone, no export")
    args = parser.parse_args(argv)
    entries = select(args.entries.split(",")) if args.entries else select(check="export")
    schemes = args.schemes.split(",") if args.schemes else list(SCHEMES)
    if args.nudge_only:
        nudge_only(entries, schemes)
        return 0
    adapter = resolve(args.impl)
    cells: dict[tuple[str, str], list[tuple[str, dict[str, float]]]] = {}
    agreements: dict[tuple[str, str], float] = {}
    floors: dict[tuple[str, str], float] = {}
    columns = ("abs", "rel", "SQNR dB", "agree dB", "nudge dB")
    print(f"{'entry':24s} {'scheme':6s} {'backend':11s} " + " ".join(f"{c:>9s}" for c in columns))
    with tempfile.TemporaryDirectory() as tmp:
        for entry in entries:
            for scheme in schemes:
                for backend in SCHEMES[scheme].backends:
                    if args.backends and backend not in args.backends.split(","):
                        continue
                    folder = Path(tmp) / f"{entry.name}-{scheme}-{backend}"
                    folder.mkdir()
                    try:
                        worst = measure(adapter, entry, scheme, backend, folder)
                    except Exception as exc:  # one cell's failure is printed; the others are still measured
                        print(
                            f"{entry.name:24s} {scheme:6s} {backend:11s} failed: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:160]}",
                            flush=True,
                        )
                        continue
                    if judged_by_agreement(scheme, entry):
                        lowest = agreements.get((scheme, entry.name), math.inf)
                        agreements[scheme, entry.name] = min(lowest, worst["agree"])
                    else:
                        cells.setdefault((scheme, backend), []).append((entry.name, worst))
                    floors[scheme, entry.name] = min(floors.get((scheme, entry.name), math.inf), worst["sqnr"])
                    print(
                        f"{entry.name:24s} {scheme:6s} {backend:11s} {worst['abs']:9.2e} {worst['rel']:9.2e} "
                        f"{worst['sqnr']:9.1f} {worst['agree']:9.1f} {worst['nudge']:9.1f}",
                        flush=True,
                    )
    print("\nTOLERANCE (pytest_hfexport/quantized_reference.py), the suite's known failures left out:")
    known = known_failures(args.impl)
    for (scheme, backend), rows in cells.items():
        left_out = [name for name, _ in rows if quantization_test_id(scheme, backend, name) in known]
        rows = [(name, worst) for name, worst in rows if name not in left_out]
        if left_out:
            print(f"  ({scheme}, {backend}: {', '.join(left_out)} left out)")
        if not rows:
            continue
        worst_abs = max(w["abs"] for _, w in rows)
        worst_rel = max(w["rel"] for _, w in rows)
        float32 = default_tolerance(backend, "float32")
        if worst_abs <= float32.atol / FACTOR and worst_rel <= float32.rtol / FACTOR:
            bar = f"the {backend} float32 tolerance ({float32})"
        else:
            atol, rtol = round_up(FACTOR * worst_abs), round_up(FACTOR * worst_rel)
            bar = str(Tolerance(max(float32.atol, atol), max(float32.rtol, rtol)))
        print(f"  TOLERANCE[{scheme!r}, {backend!r}]: {bar}  (worst abs {worst_abs:.2e}, rel {worst_rel:.2e})")
    print("\nSQNR (dB) of the first output against eager float32, per scheme over the entries:")
    for scheme in schemes:
        values = {name: value for (s, name), value in floors.items() if s == scheme}
        if values:
            low, high = min(values, key=values.get), max(values, key=values.get)
            print(
                f"  {scheme}: {values[low]:.1f} ({low}) to {values[high]:.1f} ({high}), "
                f"median {statistics.median(values.values()):.1f}"
            )
    print("\nSQNR_FLOOR (conformance/test_quantization.py): the lowest SQNR less 3 dB")
    for (scheme, name), lowest in floors.items():
        print(f"    ({scheme!r}, {name!r}): {math.floor(lowest - SQNR_MARGIN_DB)},")
    if agreements:
        print("\nAGREEMENT_FLOOR (conformance/test_quantization.py): the lowest agreement less 3 dB")
        for (scheme, name), lowest in agreements.items():
            print(f"    ({scheme!r}, {name!r}): {math.floor(lowest - SQNR_MARGIN_DB)},")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
