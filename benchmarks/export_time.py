"""Export time per model and backend: hfexport against the peer ``transformers.exporters``, same run.

Both implementations export the same zoo model (same weights, same sample inputs, the same
``dynamic`` setting) in the same process, so machine load and library versions are shared.
Before timing, each implementation x backend exports the first model once untimed (one-time
costs such as registry set-up and first-use imports would otherwise land on whoever runs
first), and within a row the order alternates. Each time is the fastest of ``--repeat`` runs.
``ratio`` is hfexport / peer: below 1 means hfexport exports faster.

Only this benchmark imports ``transformers.exporters``: it is the peer being measured.

    python benchmarks/export_time.py                       # llama, bert, vit x dynamo, onnx
    python benchmarks/export_time.py --models all --repeat 2  # every zoo entry x dynamo, onnx
    python benchmarks/export_time.py --models llama,t5 --backends dynamo,onnx,executorch --repeat 3
    python benchmarks/export_time.py --generation --models llama,gemma3 --backends executorch
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common

BACKENDS = ("dynamo", "onnx", "executorch")


def hfexport_export(backend: str, dynamic: bool, stack_traces: bool = False,
                    generation: bool = False) -> Callable[[Any, dict], Any]:
    from hfexport import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": dynamic, "stack_traces": stack_traces})
    exporter = AutoHfExporter.from_config(config)
    if generation:
        return lambda model, inputs: exporter.export_for_generation(model, inputs, config)
    return lambda model, inputs: exporter.export(model, inputs, config)


def peer_export(backend: str, dynamic: bool, generation: bool = False) -> Callable[[Any, dict], Any]:
    """The peer's exporter for ``backend``; its export() returns an ExportedModel wrapper (program inside)."""
    import transformers.exporters as peer

    classes = {"dynamo": (peer.DynamoExporter, peer.DynamoConfig), "onnx": (peer.OnnxExporter, peer.OnnxConfig),
               "executorch": (peer.ExecutorchExporter, peer.ExecutorchConfig)}
    exporter_cls, config_cls = classes[backend]
    exporter, config = exporter_cls(), config_cls(dynamic=dynamic)
    if generation:
        return lambda model, inputs: exporter.export_for_generation(model, inputs, config)
    return lambda model, inputs: exporter.export(model, inputs, config).program


def measure(fn: Callable[[Any, dict], Any], model: Any, inputs: dict,
            repeat: int) -> tuple[float | None, str | None, float | None]:
    """(fastest seconds, error, peak RSS in MiB during the exports: the process's RSS at its highest)."""
    best, error, peak = None, None, None
    for _ in range(repeat):
        try:
            with contextlib.redirect_stdout(sys.stderr), _common.PeakRss() as rss:  # stdout is the table
                seconds, _ = _common.timed(lambda: fn(model, copy.deepcopy(inputs)))
        except Exception as exc:  # a failure is a result of this row, not the end of the benchmark
            return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}", None
        best = seconds if best is None else min(best, seconds)
        peak = rss.peak_mib if peak is None else max(peak, rss.peak_mib)
        gc.collect()
    return best, error, peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="llama,bert,vit", help="comma list of conformance zoo entries, or "
                        "'all' for every entry (default: llama,bert,vit)")
    parser.add_argument("--backends", default="dynamo,onnx", help=f"comma list of {', '.join(BACKENDS)} "
                        "(default: dynamo,onnx)")
    parser.add_argument("--repeat", type=int, default=1, help="timed exports per row; the fastest counts (default 1)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed first export per backend")
    parser.add_argument("--static", action="store_true", help="export with dynamic=False (default: dynamic=True)")
    parser.add_argument("--generation", action="store_true", help="time export_for_generation (every component "
                        "generate() needs) instead of the plain export; models without the generation check are "
                        "left out")
    parser.add_argument("--stack-traces", action="store_true", help="hfexport records each node's source lines "
                        "(stack_traces=True, as the peer always does; default: off, hfexport's default)")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT, help="folder for export_time.json/.png")
    args = parser.parse_args(argv)
    _common.quiet_logs()

    from conformance.zoo import ZOO, get

    backends = [b for b in args.backends.split(",") if b]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; choose from {list(BACKENDS)}")
    try:
        names = list(ZOO) if args.models == "all" else args.models.split(",")
        entries = [get(name) for name in names if name]
    except KeyError as exc:
        parser.error(str(exc))
    if args.generation:
        entries = [e for e in entries if "generation" in e.checks]
    dynamic = not args.static

    impls: dict[str, dict[str, Any]] = {"hfexport": {}, "peer": {}}
    setup_errors: dict[tuple[str, str], str] = {}
    for backend in backends:
        factories = (("hfexport", lambda b, d: hfexport_export(b, d, args.stack_traces, args.generation)),
                     ("peer", lambda b, d: peer_export(b, d, args.generation)))
        for impl, factory in factories:
            try:
                impls[impl][backend] = factory(backend, dynamic)
            except Exception as exc:  # e.g. a backend whose packages are missing
                setup_errors[(impl, backend)] = f"{type(exc).__name__}: {exc}"

    models = {}
    for entry in entries:
        model = entry.model()
        models[entry.name] = (model, entry.sample_inputs(model))

    if not args.no_warmup and entries:
        model, inputs = models[entries[0].name]
        for backend in backends:
            for impl in ("hfexport", "peer"):
                if backend in impls[impl]:
                    print(f"warm-up: {impl} {backend} on {entries[0].name}", file=sys.stderr, flush=True)
                    measure(impls[impl][backend], model, inputs, 1)

    rows = []
    for i, entry in enumerate(entries):
        model, inputs = models[entry.name]
        for j, backend in enumerate(backends):
            row: dict[str, Any] = {"model": entry.name, "backend": backend}
            order = ("hfexport", "peer") if (i + j) % 2 == 0 else ("peer", "hfexport")
            for impl in order:
                if backend not in impls[impl]:
                    row[f"{impl}_s"], row[f"{impl}_error"] = None, setup_errors[(impl, backend)]
                    row[f"{impl}_peak_mib"] = None
                    continue
                print(f"{entry.name}/{backend}: {impl} ...", file=sys.stderr, flush=True)
                row[f"{impl}_s"], row[f"{impl}_error"], row[f"{impl}_peak_mib"] = measure(
                    impls[impl][backend], model, inputs, args.repeat)
            h, p = row["hfexport_s"], row["peer_s"]
            row["ratio"] = h / p if h is not None and p else None
            row["first"] = order[0]
            rows.append(row)

    peaks = [r[f"{impl}_peak_mib"] for r in rows for impl in ("hfexport", "peer") if r[f"{impl}_peak_mib"]]
    summary = {"max_peak_rss_mib": max(peaks, default=None), "median_ratio": _common.median(r["ratio"] for r in rows),
               "median_ratio_by_backend": {b: _common.median(r["ratio"] for r in rows if r["backend"] == b)
                                           for b in backends}}
    print(_common.table(
        ["model", "backend", "hfexport s", "peer s", "ratio h/p", "hfexport peak RSS MiB", "peer peak RSS MiB", "note"],
        [[r["model"], r["backend"], r["hfexport_s"], r["peer_s"], r["ratio"],
          r["hfexport_peak_mib"], r["peer_peak_mib"],
          "; ".join(f"{k.split('_')[0]}: {v}" for k, v in r.items() if k.endswith("_error") and v)[:100]]
         for r in rows]))
    med = summary["median_ratio"]
    print(f"highest process RSS during an export: {summary['max_peak_rss_mib'] or 0:.0f} MiB (limit 2048)")
    print(f"median ratio hfexport/peer: {'-' if med is None else f'{med:.3f}'}  by backend: " + ", ".join(
        f"{b} {'-' if v is None else f'{v:.3f}'}" for b, v in summary["median_ratio_by_backend"].items()))

    payload = {"dynamic": dynamic, "generation": args.generation, "stack_traces": args.stack_traces,
               "repeat": args.repeat, "warmup": not args.no_warmup, "rows": rows, **summary}
    name = "export_time_generation" if args.generation else "export_time"
    path = _common.write_json(args.out, name, payload)
    labels = [f"{r['model']}/{r['backend']}" for r in rows]
    png = _common.bar_plot(args.out, name, "export time (s), lower is better", labels,
                           {"hfexport": [r["hfexport_s"] for r in rows],
                            "transformers.exporters": [r["peer_s"] for r in rows]},
                           "seconds")
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    print(_common.json.dumps({"rows": rows, **summary}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
