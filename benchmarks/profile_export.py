"""Where one export's time goes, hfexport beside the peer: ``cProfile`` over one export each (after an untimed one).

Prints, per implementation, the profiled total and the cumulative seconds and call counts of the stages both
implementations pass through: ``torch.export.export``, EXIR's ``to_edge_transform_and_lower`` with its
decomposition retraces (``run_decompositions``) and its per-partition XNNPACK ``preprocess``, ``to_executorch``,
torch.onnx's conversion, and torch's symbolic-shape arithmetic (``binary_magic_impl``, one call per operation on
a symbolic size), whose count says how much of the program is symbolic. Profiling slows everything about 2x;
compare the shares, not the seconds with ``export_time.py``'s.

    python benchmarks/profile_export.py                                  # llama, executorch
    python benchmarks/profile_export.py --model vit --backend dynamo
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import sys
from pathlib import Path
from typing import Any

import _common
import export_time

# (label, file suffix, function name): summed over every matching entry of the profile.
STAGES = (
    ("torch.export.export", "torch/export/__init__.py", "export"),
    ("to_edge_transform_and_lower", "executorch/exir/program/_program.py", "to_edge_transform_and_lower"),
    ("  run_decompositions", "torch/export/exported_program.py", "run_decompositions"),
    ("  XNNPACK preprocess", "executorch/backends/xnnpack/xnnpack_preprocess.py", "preprocess"),
    ("to_executorch", "executorch/exir/program/_program.py", "to_executorch"),
    ("torch.onnx conversion", "torch/onnx/_internal/exporter/_core.py", "_exported_program_to_onnx_program"),
    ("symbolic size arithmetic", "torch/fx/experimental/sym_node.py", "binary_magic_impl"),
)


def profile(fn: Any, model: Any, inputs: dict) -> tuple[float, dict[str, tuple[float, int]]]:
    fn(model, copy.deepcopy(inputs))  # one-time costs (imports, registries) stay out of the profile
    profiler = cProfile.Profile()
    profiler.enable()
    fn(model, copy.deepcopy(inputs))
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = max(entry[3] for entry in stats.values())
    found: dict[str, tuple[float, int]] = {}
    for label, suffix, name in STAGES:
        matches = [v for (path, _, func), v in stats.items() if path.endswith(suffix) and func == name]
        # cumulative time of the outermost call (recursive entries count once), primitive call count
        found[label] = (max((v[3] for v in matches), default=0.0), sum(v[0] for v in matches))
    return total, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama", help="a conformance zoo entry (default llama)")
    parser.add_argument("--backend", default="executorch", choices=export_time.BACKENDS)
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args(argv)
    _common.quiet_logs()
    model, inputs = _common.zoo_sample(args.model)
    results = {}
    for impl, factory in (("hfexport", export_time.hfexport_export), ("peer", export_time.peer_export)):
        print(f"profiling {impl} ...", file=sys.stderr, flush=True)
        results[impl] = profile(factory(args.backend, True), model, inputs)
    rows = []
    for label, _, _ in STAGES:
        row = [label]
        for impl in ("hfexport", "peer"):
            total, found = results[impl]
            seconds, calls = found[label]
            row += [seconds, f"{100 * seconds / total:.0f}%" if seconds else "-", calls]
        rows.append(row)
    rows.append(["profiled total", results["hfexport"][0], "100%", "", results["peer"][0], "100%", ""])
    print(f"{args.model} / {args.backend}, dynamic=True, one export each under cProfile")
    print(_common.table(["stage", "hfexport s", "share", "calls", "peer s", "share", "calls"], rows))
    payload = {"model": args.model, "backend": args.backend,
               "stages": {impl: {"total_s": total, **{k: {"s": s, "calls": c} for k, (s, c) in found.items()}}
                          for impl, (total, found) in results.items()}}
    print(f"wrote {_common.write_json(args.out, f'profile_export_{args.model}_{args.backend}', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
