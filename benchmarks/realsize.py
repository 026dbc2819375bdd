"""Real-size export and generation: hfexport's three backends per precision, against eager transformers and the
specialist tool of each backend, on one random-weight model of a real model's shape (default: SmolLM2-135M).

Per backend x precision, for hfexport and for the specialist on the same weights:
  export s         wall time of the export as a child process, saved checkpoint in, artifact on disk out
                   (interpreter start, imports and checkpoint load included: the same for every tool)
  peak RSS MiB     that child's ru_maxrss, read by a small launcher process (see PEAK_RSS_LAUNCHER)
  artifact MiB     the files the runtime loads (the model builder's model.onnx + data; not the tokenizer)
  prefill tok/s    prompt tokens / the prompt's call up to the first greedy token
  decode tok/s     (new tokens - 1) / the one-token calls after it
  tokens = eager   the greedy tokens equal eager float32's ("yes"), else the first position that differs
Medians of --repeat timed runs after a warm-up, every runtime on --threads intra-op threads. Eager is
transformers ``generate`` with the same static cache (decode_throughput.py's GenerationConfig:
cache_implementation="static", no torch.compile); its prefill is t(1 new token) and its decode
(N - 1) / (t(N) - t(1)). Each figure is also printed as ratios: "x e" against eager float32 (artifact MiB: against
the float32 safetensors checkpoint), "x s" against the specialist row below it.

hfexport: ``export_for_generation(model, inputs, config, generation_config=<static>, multi_token_decode=True)``
(ExecuTorch: ``ExecutorchExporter(cache_as_buffers=True, max_length=<cache>)``), the precision through the config's
``quantization`` fields, decoded by ``hfexport.runtime.decode.decode_loop``. Specialists (specialists.py):
onnxruntime-genai's model builder (-p fp32/int4/int8, CPU, MatMulNBits at accuracy level 1: float32
activations, hfexport's arithmetic; int4 also at its CPU default, level 4, int8 activations, a row of its own) and
its Generator; ExecuTorch's export_llama
(XNNPACK, custom SDPA + KV cache, fp32 / -qmode 8da4w or int8, group size 32) run by executorch.runtime, from a
Meta-format copy of the checkpoint (converted once, not counted in its export time). dynamo has no specialist,
nor has 8da8w (export_llama's -qmode offers no 8da8w on XNNPACK; its int8 stores float32 weights).
A precision whose hfexport config field does not exist yet, or any tool that fails, is reported as
"unavailable: <reason>" and the rest still runs.

The model is built from its config with torch.manual_seed(0) (random weights, nothing downloaded) and saved once
with save_pretrained; every export reads that folder. The prompt is --prompt-len seeded random token ids.

    python benchmarks/realsize.py --threads 1       # smollm2 at full size, every backend and precision (~1 h here)
    python benchmarks/realsize.py --layers 2 --backends onnx --precisions float32,int4 --repeat 1   # quick check
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common
import specialists
from decode_throughput import generation_config
from realsize_export import export_child_command, export_spec
from realsize_parts import EAGER, MODELS, Child, Row, artifact_mib, failure, report, run_child, unavailable  # noqa: F401

BACKENDS = ("dynamo", "onnx", "executorch")
GROUP_SIZE = 32
# Precision -> the backends it applies to -> the hfexport config fields that ask for it.
PRECISIONS: dict[str, dict[str, dict[str, Any]]] = {
    "float32": {backend: {} for backend in BACKENDS},
    "int8": {backend: {"quantization": "int8"} for backend in BACKENDS},
    "int4": {"onnx": {"quantization": "int4", "quantization_group_size": GROUP_SIZE}},
    "8da4w": {"executorch": {"quantization": "8da4w", "quantization_group_size": GROUP_SIZE}},
    "8da8w": {"executorch": {"quantization": "8da8w"}},
}
@dataclass
class Run:
    """What every measurement of one model shares."""

    model: str
    model_type: str
    checkpoint: Path
    workdir: Path
    prompt: Any
    new_tokens: int
    cache: int
    repeat: int
    threads: int
    reference: list[int] = field(default_factory=list)
    executorch_checkpoint: tuple[Path, Path] | None = None  # export_llama's (weights, params.json), made once


def build_model(name: str, layers: int | None) -> Any:
    import torch
    import transformers

    config_class, kwargs = MODELS[name]
    config = getattr(transformers, config_class)(**{**kwargs, **({"num_hidden_layers": layers} if layers else {})})
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def seeded_prompt(model: Any, length: int = 16) -> Any:
    """The prompt every real-size figure decodes from: ``length`` token ids drawn after ``torch.manual_seed(1)``."""
    import torch

    torch.manual_seed(1)
    return torch.randint(3, model.config.vocab_size, (1, length))


class EagerLoop:
    """transformers ``generate`` over the static cache, timed for 1 and for N new tokens so that its prefill and
    decode split as the exported loops' do."""

    def __init__(self, model: Any, cache: int) -> None:
        self.model, self.cache = model, cache

    def _run(self, prompt: Any, new_tokens: int) -> tuple[float, list[int]]:
        import torch

        with torch.no_grad():
            seconds, out = _common.timed(
                lambda: self.model.generate(
                    input_ids=prompt,
                    attention_mask=torch.ones_like(prompt),
                    generation_config=generation_config(self.cache, new_tokens),
                )
            )
        return seconds, out[0, prompt.shape[1] :].tolist()

    def generate(self, prompt: Any, new_tokens: int) -> Any:
        from hfexport.runtime.decode import GenerationResult

        first_s, _ = self._run(prompt, 1)
        all_s, tokens = self._run(prompt, new_tokens)
        return GenerationResult(tokens, first_s, all_s - first_s, new_tokens - 1)


def time_generation(row: Row, loop: Any, run: Run) -> None:
    """Warm-up, then the medians of ``run.repeat`` runs; the tokens compared with eager float32's."""
    loop.generate(run.prompt, run.new_tokens)
    results = [loop.generate(run.prompt, run.new_tokens) for _ in range(run.repeat)]
    prompt_len = run.prompt.shape[1]
    row.prefill_tok_s = _common.median(prompt_len / r.prefill_s for r in results)
    row.decode_tok_s = _common.median(r.steps / r.decode_s for r in results)
    row.tokens = results[-1].tokens
    if run.reference and row.tokens != run.reference:
        row.first_mismatch = next(
            (i for i, (a, b) in enumerate(zip(row.tokens, run.reference)) if a != b),
            min(len(row.tokens), len(run.reference)),
        )


def measure(row: Row, command: list[str], artifact_dir: Path, load: Callable[[], Any], run: Run) -> Row:
    """Export in a child process, then load the artifact here and time its generation."""
    artifact_dir.mkdir(parents=True, exist_ok=True)
    print(f"{row.model} {row.backend} {row.precision} {row.tool}: export ...", file=sys.stderr, flush=True)
    child = run_child(command, artifact_dir.parent / f"{artifact_dir.name}.log")
    if child.returncode != 0:
        row.status = f"unavailable: export exited {child.returncode}: {failure(child.log)}"
        return row
    row.export_s, row.export_peak_rss_mib = child.wall_s, child.peak_rss_mib
    row.artifact_mib = artifact_mib(artifact_dir)
    print(f"  ... {child.wall_s:.0f} s; generate", file=sys.stderr, flush=True)
    try:
        time_generation(row, load(), run)
    except Exception as exc:  # a runtime that cannot load or run this artifact: report, keep going
        row.status = unavailable(exc)
    gc.collect()  # the loaded artifact, before the next export's child starts
    return row


def hfexport_row(run: Run, backend: str, precision: str) -> Row:
    import hfexport
    from hfexport.runtime.decode import decode_loop

    row = Row(run.model, "hfexport", backend, precision)
    fields = PRECISIONS[precision][backend]
    config_class = type(hfexport.AutoExportConfig.from_dict({"export_format": backend}))
    missing = sorted(set(fields) - {f.name for f in dataclasses.fields(config_class)})
    if missing:
        row.status = f"unavailable: {config_class.__name__} has no field {', '.join(missing)} yet"
        return row
    out = run.workdir / f"hfexport-{backend}-{precision}"
    spec_path, result = export_spec(run, backend, fields, out)

    def load() -> Any:
        row.detail.update(json.loads(result.read_text()))
        return decode_loop(row.detail["artifact"], backend, max_cache_len=run.cache)

    return measure(row, export_child_command(spec_path), out, load, run)


def ort_genai_row(run: Run, precision: str, default_level: bool = False) -> Row:
    """onnxruntime-genai's row at ``precision``: hfexport's arithmetic, or the builder's default accuracy level."""
    out = run.workdir / f"ort-genai-{precision}{'-default' if default_level else ''}"
    tool = "onnxruntime-genai, int8 activations" if default_level else "onnxruntime-genai"
    return measure(
        Row(run.model, tool, "onnx", precision),
        specialists.ort_genai_command(run.checkpoint, out, precision, default_level),
        out,
        lambda: specialists.OrtGenaiLoop(out, run.cache, run.threads),
        run,
    )


def specialist_rows(run: Run, backend: str, precision: str) -> list[Row]:
    """The specialist's rows for ``backend`` at ``precision``, the one at hfexport's arithmetic first; none where
    the backend has no specialist."""
    if backend == "onnx" and precision in specialists.ORT_GENAI_PRECISIONS:
        rows = [ort_genai_row(run, precision)]
        if precision in specialists.ORT_GENAI_DEFAULT_LEVEL:
            rows.append(ort_genai_row(run, precision, default_level=True))
        return rows
    if backend == "executorch" and precision in specialists.EXECUTORCH_QMODES:
        row = Row(run.model, "executorch export_llama", backend, precision)
        if run.executorch_checkpoint is None:  # its own checkpoint format: converted once, timed apart
            try:
                seconds, run.executorch_checkpoint = _common.timed(
                    lambda: specialists.executorch_checkpoint(run.checkpoint, run.workdir / "executorch-checkpoint")
                )
            except Exception as exc:
                row.status = unavailable(exc)
                return [row]
            row.detail["checkpoint_convert_s"] = seconds
        out = run.workdir / f"export-llama-{precision}"
        command = specialists.executorch_command(
            *run.executorch_checkpoint, out / "model.pte", precision, run.cache, GROUP_SIZE, run.model_type
        )
        return [measure(row, command, out, lambda: specialists.ExecutorchLlamaLoop(out / "model.pte"), run)]
    return []


def measure_model(name: str, args: argparse.Namespace, workdir: Path) -> list[Row]:
    model = build_model(name, args.layers)
    checkpoint = workdir / "checkpoint"
    specialists.save_checkpoint(model, checkpoint)
    prompt = seeded_prompt(model, args.prompt_len)
    run = Run(
        name,
        model.config.model_type,
        checkpoint,
        workdir,
        prompt,
        args.new_tokens,
        args.cache,
        args.repeat,
        args.threads,
    )

    print(f"{name}: eager generate ...", file=sys.stderr, flush=True)
    eager = Row(name, EAGER, "-", "float32", artifact_mib=artifact_mib(checkpoint))
    time_generation(eager, EagerLoop(model, args.cache), run)
    run.reference = eager.tokens or []
    del model
    gc.collect()

    rows = [eager]
    for backend in args.backends:
        for precision in args.precisions:
            if backend not in PRECISIONS[precision]:
                continue
            rows.append(hfexport_row(run, backend, precision))
            if not args.skip_specialists:
                rows.extend(specialist_rows(run, backend, precision))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2", help=f"comma list of {list(MODELS)} (default: smollm2)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list (default: all three)")
    parser.add_argument(
        "--precisions",
        default=",".join(PRECISIONS),
        help=f"comma list of {list(PRECISIONS)} (default: all; each runs on the backends it applies to)",
    )
    parser.add_argument("--new-tokens", type=int, default=32, help="greedy tokens generated per run (default 32)")
    parser.add_argument("--prompt-len", type=int, default=16, help="prompt tokens (default 16)")
    parser.add_argument("--cache", type=int, default=128, help="static cache slots, every tool (default 128)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs after a warm-up; medians (default 3)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op threads of every runtime: torch (eager, .pt2, and hfexport's ONNX Runtime session, which "
        "follows torch), onnxruntime-genai, ExecuTorch's XNNPACK pool (default: torch's, a thread per core; on a "
        "machine other jobs share, 1 keeps the pools from spinning against them)",
    )
    parser.add_argument("--layers", type=int, default=None, help="override the decoder layer count (development)")
    parser.add_argument("--skip-specialists", action="store_true", help="hfexport and eager only")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT, help="folder for realsize.json/.png")
    args = parser.parse_args(argv)
    _common.quiet_logs()
    for option, known in (("models", MODELS), ("backends", BACKENDS), ("precisions", PRECISIONS)):
        chosen = [v for v in getattr(args, option).split(",") if v]
        if not chosen or any(v not in known for v in chosen):
            parser.error(f"--{option} takes a comma list of {list(known)}")
        setattr(args, option, chosen)
    if args.prompt_len + args.new_tokens >= args.cache:
        parser.error(f"--prompt-len + --new-tokens must stay below --cache {args.cache}")

    import torch

    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    except ImportError:  # no ExecuTorch: its rows report it
        pass
    else:
        _unsafe_reset_threadpool(args.threads)  # process-wide; only safe before an XNNPACK method is loaded
    rows: list[Row] = []
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix=f"realsize-{name}-") as tmp:
            rows += measure_model(name, args, Path(tmp))

    print(report(rows))
    shapes = {
        name: {**MODELS[name][1], **({"num_hidden_layers": args.layers} if args.layers else {})} for name in args.models
    }
    payload = {
        "models": shapes,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "cache": args.cache,
        "repeat": args.repeat,
        "group_size": GROUP_SIZE,
        "threads": args.threads,
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    path = _common.write_json(args.out, "realsize", payload)
    labels = [" ".join(part for part in (r.model, r.tool, r.backend, r.precision) if part != "-") for r in rows]
    png = _common.bar_plot(
        args.out,
        "realsize",
        f"prefill and decode tokens/s, {', '.join(args.models)} (higher is better)",
        labels,
        {"prefill tok/s": [r.prefill_tok_s for r in rows], "decode tok/s": [r.decode_tok_s for r in rows]},
        "tokens / second",
        log=True,
    )
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
