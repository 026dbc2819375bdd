"""Where an ExecuTorch decode step's time goes: hfexport's program against export_llama's, op by op, from ETDump.

Both tools export the same random-weight model of a real model's shape (``realsize.py``'s MODELS, ``--layers``
decoder layers: 6 by default, so that the two exports take minutes, not a quarter of an hour) at one precision,
with the same ``--cache`` slots; each program is loaded with ExecuTorch's event tracer on and generates
``--new-tokens`` greedy tokens from the same prompt. Printed per tool: the decode steps' mean milliseconds, and the
runtime's events over those steps by time per step and share of the step: ``DELEGATE_CALL`` (all XNNPACK
subgraphs) and ``OPERATOR_CALL`` (all portable or optimized kernels) are totals, and the rows named after an XNNPACK
operator (``Fully Connected (NC, F32) GEMM #1``: its first fully-connected operator type) or a kernel
(``native_call_mm.out``) are parts of them. The prompt's call is left out.

    python benchmarks/profile_executorch_step.py
    python benchmarks/profile_executorch_step.py --layers 30 --precision 8da4w --rows 20
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common
import realsize
import realsize_export
import specialists


class TracedRuntime:
    """Every program ExecuTorch's ``Runtime`` loads while this is active is loaded with ETDump on."""

    def __init__(self) -> None:
        self.programs: list[Any] = []

    def __enter__(self) -> TracedRuntime:
        from executorch.runtime import Runtime

        self._original = original = Runtime.load_program

        def load_program(runtime: Any, data: Any, **kwargs: Any) -> Any:
            program = original(runtime, data, **{**kwargs, "enable_etdump": True, "debug_buffer_size": 0})
            self.programs.append(program)
            return program

        Runtime.load_program = load_program  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        from executorch.runtime import Runtime

        Runtime.load_program = self._original  # type: ignore[method-assign]


def decode_events(etdump: Path, skip: int) -> tuple[list[float], dict[str, tuple[int, float]]]:
    """(milliseconds of each method call after the first ``skip``; per event name over those calls: how many
    events of that name one call runs, and their total milliseconds)."""
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=str(etdump))
    steps: list[float] = []
    counts: dict[str, int] = collections.Counter()
    totals: dict[str, float] = collections.defaultdict(float)
    for block in inspector.event_blocks:
        for event in block.events:
            if not event.perf_data:
                continue
            runs = event.perf_data.raw[skip:]
            if event.name == "Method::execute":
                steps += runs
            else:
                counts[event.name] += 1
                totals[event.name] += sum(runs)
    return steps, {name: (counts[name], total) for name, total in totals.items()}


def report(tool: str, steps: list[float], events: dict[str, tuple[int, float]], rows: int) -> str:
    step = sum(steps) / len(steps)
    lines = [f"{tool}: {len(steps)} decode steps, {step:.2f} ms each ({1000 / step:.1f} tok/s under the tracer)"]
    for name, (count, total) in sorted(events.items(), key=lambda kv: -kv[1][1])[:rows]:
        lines.append(
            f"  {name:44s} x{count:<4d} {total / len(steps):8.3f} ms/step  {100 * total / sum(steps):5.1f}%"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", choices=list(realsize.MODELS))
    parser.add_argument("--layers", type=int, default=6, help="decoder layers (default 6)")
    parser.add_argument("--precision", default="float32", choices=list(specialists.EXECUTORCH_QMODES))
    parser.add_argument("--cache", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=17)
    parser.add_argument("--rows", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    _common.quiet_logs()

    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    from hfexport.runtime.decode import decode_loop

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    _unsafe_reset_threadpool(threads)
    model = realsize.build_model(args.model, args.layers)
    prompt = realsize.seeded_prompt(model)
    with tempfile.TemporaryDirectory(prefix="profile-et-") as tmp:
        work = Path(tmp)
        checkpoint = work / "checkpoint"
        specialists.save_checkpoint(model, checkpoint)
        run = realsize.Run(args.model, model.config.model_type, checkpoint, work, prompt, args.new_tokens,
                           args.cache, 1, threads)
        del model
        loops: dict[str, Any] = {}
        spec, result = realsize_export.export_spec(run, "executorch", realsize.PRECISIONS[args.precision]["executorch"],
                                            work / "hf")
        subprocess.run(realsize_export.export_child_command(spec), check=True)
        loops["hfexport"] = lambda: decode_loop(json.loads(result.read_text())["artifact"], "executorch",
                                                max_cache_len=args.cache)
        weights, params = specialists.executorch_checkpoint(checkpoint, work / "executorch-checkpoint")
        pte = work / "export-llama" / "model.pte"
        pte.parent.mkdir()
        command = specialists.executorch_command(weights, params, pte, args.precision, args.cache,
                                                 realsize.GROUP_SIZE, run.model_type)
        subprocess.run(command, check=True, capture_output=True)
        loops["executorch export_llama"] = lambda: specialists.ExecutorchLlamaLoop(pte)
        for tool, load in loops.items():
            with TracedRuntime() as traced:
                loop = load()
            loop.generate(prompt, args.new_tokens)
            etdump = work / f"{tool.replace(' ', '-')}.etdp"
            traced.programs[-1].write_etdump_result_to_file(str(etdump), str(work / "debug.bin"))
            steps, events = decode_events(etdump, skip=1)
            print(report(tool, steps, events, args.rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
