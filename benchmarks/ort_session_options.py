"""ONNX Runtime decode loop under different session options: where its run-to-run variance comes from.

Exports the ``decode_throughput.py`` llama (``--hidden``/``--layers``, 512-slot static cache) to ONNX once,
then runs ``OrtDecodeLoop`` with three ``onnxruntime.SessionOptions``: ORT's defaults (an intra-op thread per
core, spinning between parallel sections), one intra-op thread, and spinning off; the loops take turns, one
generation each per round, so every option sees the same machine. ``--load N`` runs N busy-looping processes
beside them, as a concurrent test job would.

    python benchmarks/ort_session_options.py                        # hidden 256, 4 layers, quiet
    python benchmarks/ort_session_options.py --load 2               # beside two busy processes
    python benchmarks/ort_session_options.py --hidden 1024 --layers 8
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import tempfile
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import _common
import decode_throughput


def _busy() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` busy-looping processes for the duration of the block (the load of a concurrent test job)."""
    busy = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(count)]
    for process in busy:
        process.start()
    try:
        yield
    finally:
        for process in busy:
            process.terminate()


def loop_arguments(description: str | None) -> argparse.ArgumentParser:
    """The options every decode-loop variance benchmark takes: the model's size, the run and the load beside it."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--load", type=int, default=0, help="busy-looping processes run beside (default 0)")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    return parser


def session_options() -> dict[str, Any]:
    import onnxruntime as ort

    def make(threads: int = 0, spinning: bool = True) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return options

    return {"ORT defaults": make(), "1 intra-op thread": make(1), "no spinning": make(0, False)}


def main(argv: list[str] | None = None) -> int:
    args = loop_arguments(__doc__).parse_args(argv)
    _common.quiet_logs()

    import torch

    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.runtime.onnxruntime import OrtDecodeLoop, OrtRunner

    model = decode_throughput.build_model(args.hidden, args.layers, 1024, 512)
    torch.manual_seed(1)
    prompt = torch.randint(3, 1024, (1, 16))
    config = AutoExportConfig.from_dict({"export_format": "onnx", "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        programs = exporter.export_for_generation(
            model, {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}, config,
            generation_config=decode_throughput.generation_config(512), multi_token_decode=True)
        path = str(Path(tmp) / "decode.onnx")
        exporter.save(programs["decode"], path)
        loops = {name: OrtDecodeLoop(OrtRunner(path, session_options=options), max_cache_len=512)
                 for name, options in session_options().items()}
        for loop in loops.values():
            loop.generate(prompt, 8)  # warm-up
        runs: dict[str, list[float]] = {name: [] for name in loops}
        with busy_processes(args.load):
            for _ in range(args.repeat):
                for name, loop in loops.items():
                    runs[name].append(loop.generate(prompt, args.new_tokens).tokens_per_s)
    base = statistics.median(runs["ORT defaults"])
    for name, values in runs.items():
        rows.append({"options": name, "tokens_per_s": statistics.median(values), "min": min(values),
                     "max": max(values), "x ORT defaults": statistics.median(values) / base})
    print(f"llama hidden {args.hidden} x {args.layers} layers, cache 512, {args.new_tokens} tokens, "
          f"{args.load} busy processes beside, {args.repeat} rounds")
    print(_common.table(["session options", "tokens/s", "min", "max", "x ORT defaults"],
                        [[r["options"], r["tokens_per_s"], r["min"], r["max"], r["x ORT defaults"]] for r in rows]))
    name = f"ort_session_options_h{args.hidden}x{args.layers}_load{args.load}"
    print(f"wrote {_common.write_json(args.out, name, {'args': vars(args) | {'out': str(args.out)}, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
