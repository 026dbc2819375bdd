"""Where an ExecuTorch export's wall time goes, hfexport beside the peer: seconds per stage, no profiler.

Each stage function is wrapped with a timer for the run (``profile_export.py`` gives call-level detail under
cProfile, which doubles every time; this one gives the real seconds). The stages:

- ``trace``: torch.export's trace (``torch.export._trace._export``, both the training-IR and the one-trace entry);
- ``decomposition retraces``: ``ExportedProgram.run_decompositions`` calls that ran. hfexport's lowering skips
  the ones that would change nothing (``hfexport/executorch/speedups/retraces.py``), so only the calls its skip
  let through count here;
- ``edge dialect``: EXIR's conversion of the decomposed program to its edge dialect (``_generate_edge_program``);
- ``to_backend``: partitioning and lowering to XNNPACK, of which ``XNNPACK preprocess`` is the per-partition
  pass pipeline and serialisation;
- ``to_executorch``: memory planning and emission.

Two more rows count across the stages (their seconds overlap the rows above): the EXIR pass retraces that ran
(``ExportPass.call``) and the pass-manager checks that ran (``ExportedProgramPassManager.check``). hfexport's
lowering patches wrap these from outside, so a retrace or check they skip is not counted.

A third column, ``two-pass``, is hfexport with its one trace, its retrace skips and its remembered checks taken
out (torch.export's training-IR trace, lowered by EXIR's own way): what those changes save, in the same run.

Each implementation exports once untimed, then ``--repeat`` times; the fastest total counts, with its stages.

    python benchmarks/export_stages.py                       # llama, plain export
    python benchmarks/export_stages.py --model gemma3 --generation
"""

from __future__ import annotations

import argparse
import collections
import copy
import functools
import sys
import time
from pathlib import Path
from typing import Any

import _common
import export_time

TIMES: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()


def _timed(owner: Any, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TIMES[label] += time.perf_counter() - start
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def install_timers() -> list[str]:
    """Wrap every stage function; returns the stage labels in print order."""
    import executorch.exir.program._program as exir
    import torch.export._trace as trace
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir.pass_base import ExportPass
    from executorch.exir.pass_manager import ExportedProgramPassManager
    from torch.export import ExportedProgram

    stages = [(trace, "_export", "trace"),
              (ExportedProgram, "run_decompositions", "decomposition retraces"),
              (exir, "_generate_edge_program", "edge dialect"),
              (exir.EdgeProgramManager, "to_backend", "to_backend"),
              (XnnpackBackend, "preprocess", "  XNNPACK preprocess"),
              (exir.EdgeProgramManager, "to_executorch", "to_executorch"),
              (ExportPass, "call", "(EXIR pass retraces, all stages)"),
              (ExportedProgramPassManager, "check", "(pass-manager checks, all stages)")]
    for owner, name, label in stages:
        _timed(owner, name, label)
    return [label for _, _, label in stages]


def two_pass_export(generation: bool) -> Any:
    """hfexport's ExecuTorch export as it was before its one trace: the training-IR trace, every retrace and
    every pass-manager check run."""
    import dataclasses

    from hfexport import ExecutorchExporter
    from hfexport.executorch import checks as executorch_checks
    from hfexport.executorch.speedups import retraces as executorch_retraces
    from hfexport.patching.registry import PATCHES

    fn = export_time.hfexport_export("executorch", True, generation=generation)

    def export(model: Any, inputs: dict) -> Any:
        patches, one_trace = PATCHES[executorch_retraces.LOWERING], ExecutorchExporter.tracer
        skips = (executorch_retraces.__name__, executorch_checks.__name__)
        PATCHES[executorch_retraces.LOWERING] = [p for p in patches if p.factory.__module__ not in skips]
        ExecutorchExporter.tracer = dataclasses.replace(one_trace, decompositions=None)
        try:
            return fn(model, inputs)
        finally:
            PATCHES[executorch_retraces.LOWERING], ExecutorchExporter.tracer = patches, one_trace

    return export


def measure(fn: Any, model: Any, inputs: dict, repeat: int) -> tuple[float, dict[str, tuple[float, int]]]:
    fn(model, copy.deepcopy(inputs))  # one-time costs (imports, EXIR's pattern graphs) stay out
    best: tuple[float, dict[str, tuple[float, int]]] | None = None
    for _ in range(repeat):
        TIMES.clear()
        CALLS.clear()
        seconds, _ = _common.timed(lambda: fn(model, copy.deepcopy(inputs)))
        if best is None or seconds < best[0]:
            best = (seconds, {k: (TIMES[k], CALLS[k]) for k in TIMES})
    assert best is not None
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama", help="a conformance zoo entry (default llama)")
    parser.add_argument("--generation", action="store_true", help="time export_for_generation instead")
    parser.add_argument("--repeat", type=int, default=2, help="timed exports per implementation (default 2)")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args(argv)
    _common.quiet_logs()
    model, inputs = _common.zoo_sample(args.model)
    labels = install_timers()
    results = {}
    impls = {"hfexport": export_time.hfexport_export("executorch", True, generation=args.generation),
             "peer": export_time.peer_export("executorch", True, generation=args.generation),
             "two-pass": two_pass_export(args.generation)}
    for impl, fn in impls.items():
        print(f"timing {impl} ...", file=sys.stderr, flush=True)
        results[impl] = measure(fn, model, inputs, args.repeat)
    rows = []
    for label in labels:
        row: list[Any] = [label]
        for impl in impls:
            seconds, calls = results[impl][1].get(label, (0.0, 0))
            row += [seconds, calls]
        rows.append(row)
    rows.append(["total"] + [x for impl in impls for x in (results[impl][0], "")])
    kind = "export_for_generation" if args.generation else "export"
    print(f"{args.model} / executorch {kind}, dynamic=True, fastest of {args.repeat}; "
          f"hfexport / peer = {results['hfexport'][0] / results['peer'][0]:.3f}, "
          f"two-pass / peer = {results['two-pass'][0] / results['peer'][0]:.3f}")
    print(_common.table(["stage", "hfexport s", "calls", "peer s", "calls", "two-pass s", "calls"], rows))
    payload = {"model": args.model, "generation": args.generation, "repeat": args.repeat,
               "totals": {impl: total for impl, (total, _) in results.items()},
               "stages": {impl: {k: {"s": s, "calls": c} for k, (s, c) in stages.items()}
                          for impl, (_, stages) in results.items()}}
    name = f"export_stages_{args.model}" + ("_generation" if args.generation else "")
    png = _common.bar_plot(args.out, name, f"{args.model} ExecuTorch {kind}: seconds per stage", labels + ["total"],
                           {impl: [r[1 + 2 * i] for r in rows] for i, impl in enumerate(impls)},
                           "seconds")
    print(f"wrote {_common.write_json(args.out, name, payload)}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
