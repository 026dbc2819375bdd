"""Decode tokens/second: each backend's exported static-cache loop against eager ``generate``.

The model is a small random-weight llama (hidden 256, 4 layers, vocab 1024) with a 512-slot
static cache. Each backend exports ``decode`` with ``export_for_generation(..., multi_token_decode=True)``
and a static ``GenerationConfig``; ``hfexport.runtime.decode.decode_loop`` then prefills the prompt
and decodes greedily. ExecuTorch runs in two forms: the cache owned by the program
(``ExecutorchExporter(cache_as_buffers=True)``: mutable buffers that persist across ``execute()``, no copy
per step; the form the Python loop is fast with) and the cache as graph inputs (the form a C++ caller binds
with ``set_output_data_ptr``; from Python the runtime copies the cache in and out on every call). Eager runs ``model.generate`` with the same static cache (no torch.compile);
its decode rate is (N - 1) / (t(N tokens) - t(1 token)), so prefill is not counted on either side.
Every backend's tokens are compared with eager's. A backend that cannot export or run here is
reported as ``unavailable: <reason>`` and the others still run.

    python benchmarks/decode_throughput.py                         # every runner; 64 tokens, 5 runs each
    python benchmarks/decode_throughput.py --backends dynamo --new-tokens 128 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common

# Runner name -> (backend, ExecutorchExporter options). --backends picks runners by backend.
RUNNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "dynamo": ("dynamo", {}),
    "onnx": ("onnx", {}),
    "executorch": ("executorch", {"cache_as_buffers": True}),
    "executorch (cache as inputs)": ("executorch", {}),
}
BACKENDS = ("dynamo", "onnx", "executorch")


def build_model(hidden: int, layers: int, vocab: int, cache: int) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                                      max_position_embeddings=max(1024, cache), bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0)
    return transformers.LlamaForCausalLM(config).eval()


def generation_config(cache: int, new_tokens: int | None = None) -> Any:
    import transformers

    extra = {} if new_tokens is None else {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    return transformers.GenerationConfig(cache_implementation="static", max_cache_len=cache, do_sample=False,
                                         num_beams=1, pad_token_id=0, disable_compile=True, **extra)


def eager_rate(model: Any, prompt: Any, new_tokens: int, cache: int, repeat: int) -> dict[str, Any]:
    import torch

    def run(n: int) -> tuple[float, list[int]]:
        with torch.no_grad():
            seconds, out = _common.timed(lambda: model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt),
                generation_config=generation_config(cache, n)))
        return seconds, out[0, prompt.shape[1]:].tolist()

    run(new_tokens)  # warm-up
    rates, tokens = [], []
    for _ in range(repeat):
        t1, _ = run(1)
        tn, tokens = run(new_tokens)
        rates.append((new_tokens - 1) / max(tn - t1, 1e-9))
    return {"tokens_per_s": statistics.median(rates), "runs": rates, "tokens": tokens}


def backend_rate(runner: str, model: Any, prompt: Any, new_tokens: int, cache: int, repeat: int,
                 workdir: Path) -> dict[str, Any]:
    """Export, save and load ``decode`` for ``runner``, then time its loop. Raises when unavailable."""
    import torch

    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.runtime.decode import decode_loop

    backend, options = RUNNERS[runner]
    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
    exporter = type(AutoHfExporter.from_config(config))(**options)
    inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
    with _common.PeakRss() as rss:
        export_s, programs = _common.timed(lambda: exporter.export_for_generation(
            model, inputs, config, generation_config=generation_config(cache), multi_token_decode=True))
    path = workdir / f"decode{len(list(workdir.iterdir()))}{exporter.file_suffix}"
    exporter.save(programs["decode"], str(path))
    del programs
    loop = decode_loop(str(path), backend, max_cache_len=cache)  # ONNX graphs keep the cache axis symbolic
    loop.generate(prompt, new_tokens)  # warm-up
    results = [loop.generate(prompt, new_tokens) for _ in range(repeat)]
    return {"tokens_per_s": statistics.median(r.tokens_per_s for r in results),
            "runs": [r.tokens_per_s for r in results],
            "prefill_ms": 1000 * statistics.median(r.prefill_s for r in results),
            "export_s": export_s, "export_peak_mib": rss.peak_mib, "tokens": results[-1].tokens}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list (default: all three)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per run (default 64)")
    parser.add_argument("--prompt-len", type=int, default=16, help="prompt tokens (default 16)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed runs per runner; the median counts, min and max are printed (default 5)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--cache", type=int, default=512, help="static cache slots (default 512)")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT, help="folder for decode_throughput.json/.png")
    args = parser.parse_args(argv)
    _common.quiet_logs()
    if args.prompt_len + args.new_tokens > args.cache:
        parser.error(f"--prompt-len + --new-tokens ({args.prompt_len + args.new_tokens}) exceeds --cache {args.cache}")
    backends = [b for b in args.backends.split(",") if b]
    if any(b not in BACKENDS for b in backends):
        parser.error(f"--backends takes {list(BACKENDS)}")

    import torch

    model = build_model(args.hidden, args.layers, 1024, args.cache)
    torch.manual_seed(1)
    prompt = torch.randint(3, 1024, (1, args.prompt_len))

    print("eager generate ...", file=sys.stderr, flush=True)
    eager = eager_rate(model, prompt, args.new_tokens, args.cache, args.repeat)
    rows: list[dict[str, Any]] = [{"runner": "eager generate (static cache)", "status": "ok",
                                   "tokens_per_s": eager["tokens_per_s"], "runs": eager["runs"],
                                   "speedup_vs_eager": 1.0, "tokens_match_eager": True}]
    runners = [name for name, (backend, _) in RUNNERS.items() if backend in backends]
    with tempfile.TemporaryDirectory() as tmp:
        for runner in runners:
            print(f"{runner}: export + decode loop ...", file=sys.stderr, flush=True)
            row: dict[str, Any] = {"runner": f"{runner} decode loop"}
            try:
                result = backend_rate(runner, model, prompt, args.new_tokens, args.cache, args.repeat, Path(tmp))
            except Exception as exc:  # a backend colleagues are still finishing: report, keep going
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                row.update(status=f"unavailable: {type(exc).__name__}: {first}", tokens_per_s=None)
            else:
                row.update(status="ok", **{k: v for k, v in result.items() if k != "tokens"},
                           speedup_vs_eager=result["tokens_per_s"] / eager["tokens_per_s"],
                           tokens_match_eager=result["tokens"] == eager["tokens"])
            rows.append(row)

    for r in rows:
        r["min_tokens_per_s"], r["max_tokens_per_s"] = (min(r["runs"]), max(r["runs"])) if r.get("runs") else (None,) * 2
        # (max - min) / median over the timed runs: a loop's own variance shows as a spread wider than eager's,
        # which runs on the same machine in the same minutes.
        r["spread"] = (r["max_tokens_per_s"] - r["min_tokens_per_s"]) / r["tokens_per_s"] if r.get("runs") else None
    print(_common.table(["runner", "tokens/s", "min", "max", "spread", "x eager", "prefill ms", "export s",
                         "export peak RSS MiB", "tokens = eager", "status"],
                        [[r["runner"], r.get("tokens_per_s"), r.get("min_tokens_per_s"), r.get("max_tokens_per_s"),
                          r.get("spread"), r.get("speedup_vs_eager"), r.get("prefill_ms"), r.get("export_s"),
                          r.get("export_peak_mib"),
                          r.get("tokens_match_eager"), r["status"][:90]] for r in rows]))
    payload = {"model": {"arch": "llama", "hidden": args.hidden, "layers": args.layers, "vocab": 1024,
                         "cache": args.cache}, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
               "repeat": args.repeat, "torch_threads": torch.get_num_threads(), "rows": rows}
    path = _common.write_json(args.out, "decode_throughput", payload)
    png = _common.bar_plot(args.out, "decode_throughput", f"decode tokens/s, llama h{args.hidden} x{args.layers}, "
                           f"cache {args.cache} (higher is better)", [r["runner"] for r in rows],
                           {"tokens/s": [r.get("tokens_per_s") for r in rows]}, "tokens / second")
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    print(_common.json.dumps({"rows": rows}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
