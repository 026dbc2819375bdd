"""ExecuTorch decode loop under different XNNPACK thread-pool sizes: where its run-to-run variance comes from.

Exports the ``decode_throughput.py`` llama (``--hidden``/``--layers``, 512-slot static cache owned by the
program, as ``decode_throughput.py``'s ExecuTorch row) once, then runs the decode loop with ExecuTorch's
thread pool at its default size (a thread per core) and at one thread; the sizes take turns, one generation
each per round, so both see the same machine. ``--load N`` runs N busy-looping processes beside them, as a
concurrent test job would. Prints median, min and max tokens/s per pool size.

The pool is process-wide and cannot be resized once a method with an XNNPACK delegate is loaded (resizing it
then corrupted the heap here), so each generation runs in a process of its own that sizes the pool first.

    python benchmarks/executorch_threads.py                 # hidden 256, 4 layers, quiet
    python benchmarks/executorch_threads.py --load 2        # beside two busy processes
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common
import decode_throughput
from ort_session_options import busy_processes, loop_arguments


def _child(path: str, threads: int, new_tokens: int) -> int:
    """One warm-up and one timed generation with a pool of ``threads``; prints the result as JSON."""
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    from hfexport.runtime.decode import decode_loop

    _unsafe_reset_threadpool(threads)  # before any method is loaded
    torch.manual_seed(1)
    prompt = torch.randint(3, 1024, (1, 16))
    loop = decode_loop(path, "executorch", max_cache_len=512)
    loop.generate(prompt, 8)
    result = loop.generate(prompt, new_tokens)
    print(json.dumps({"tokens_per_s": result.tokens_per_s, "tokens": result.tokens}))
    return 0


def _generation(path: str, threads: int, new_tokens: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", path, "--threads", str(threads), "--new-tokens", str(new_tokens)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"the {threads}-thread generation failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = loop_arguments(__doc__)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a saved decode program: run one generation
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _common.quiet_logs()
    if args.child:
        return _child(args.child, args.threads, args.new_tokens)

    import os

    import torch

    from hfexport import ExecutorchConfig, ExecutorchExporter

    model = decode_throughput.build_model(args.hidden, args.layers, 1024, 512)
    torch.manual_seed(1)
    prompt = torch.randint(3, 1024, (1, 16))
    exporter = ExecutorchExporter(cache_as_buffers=True)
    default_threads = os.cpu_count() or 1  # the pool's default: a thread per core
    pools = {f"{default_threads} threads (default)": default_threads, "1 thread": 1}
    with tempfile.TemporaryDirectory() as tmp:
        programs = exporter.export_for_generation(
            model, {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}, ExecutorchConfig(dynamic=True),
            generation_config=decode_throughput.generation_config(512), multi_token_decode=True)
        path = str(Path(tmp) / "decode.pte")
        exporter.save(programs["decode"], path)
        runs: dict[str, list[float]] = {name: [] for name in pools}
        tokens: dict[str, list[int]] = {}
        with busy_processes(args.load):
            for _ in range(args.repeat):
                for name, threads in pools.items():
                    result = _generation(path, threads, args.new_tokens)
                    runs[name].append(result["tokens_per_s"])
                    tokens[name] = result["tokens"]
    base = statistics.median(runs[next(iter(pools))])
    rows: list[dict[str, Any]] = [
        {"pool": name, "tokens_per_s": statistics.median(values), "min": min(values), "max": max(values),
         "x default": statistics.median(values) / base, "same tokens": tokens[name] == tokens[next(iter(pools))]}
        for name, values in runs.items()]
    print(f"llama hidden {args.hidden} x {args.layers} layers, cache 512 (program-owned), {args.new_tokens} tokens, "
          f"{args.load} busy processes beside, {args.repeat} rounds")
    print(_common.table(["thread pool", "tokens/s", "min", "max", "x default", "same tokens"],
                        [[r["pool"], r["tokens_per_s"], r["min"], r["max"], r["x default"], r["same tokens"]]
                         for r in rows]))
    name = f"executorch_threads_h{args.hidden}x{args.layers}_load{args.load}"
    print(f"wrote {_common.write_json(args.out, name, {'args': vars(args) | {'out': str(args.out)}, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
