"""Where an ONNX Runtime decode step goes at real size: hfexport's graph against onnxruntime-genai's, op by op.

Both tools export the same random-weight model of a real model's shape (``realsize.py``'s MODELS, ``--layers``
decoder layers) at one precision with the same cache; the builder runs at hfexport's arithmetic (accuracy level
1, as realsize.py's specialist row). Printed per tool: the nodes of the graph ONNX Runtime runs (after its own
fusions) per decoder layer and in all, the loop's decode tokens/s without the profiler, then ORT's kernel time per
op type over the one-token calls of one profiled generation (``--new-tokens``; the prompt's call left out):
microseconds per call and nodes per call. The profiler adds a cost per node: read its times as shares, its
counts as exact.

    python benchmarks/profile_ort_realsize.py --precision int4
"""

from __future__ import annotations

import argparse
import collections
import gc
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


def ran_nodes(path: Path, folder: Path) -> collections.Counter:
    """Op type -> nodes of the graph ONNX Runtime runs (its optimised model, written once)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(folder / f"{path.parent.name}-optimised.onnx")
    options.log_severity_level = 3  # not the warning that an optimised model is for this machine only
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(options.optimized_model_filepath, load_external_data=False).graph
    return collections.Counter(node.op_type for node in graph.node)


def kernel_times(events: list[dict[str, Any]]) -> tuple[int, dict[str, tuple[float, float]]]:
    """(decode calls, op type -> (kernel microseconds per call, nodes per call)) from ORT's profiler events, the
    prompt's call (the first) left out."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    after_prompt = runs[0]["ts"] + runs[0]["dur"] if runs else 0
    calls = max(1, len(runs) - 1)
    spent: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= after_prompt:
            spent[event["args"]["op_name"]] += event["dur"]
            count[event["args"]["op_name"]] += 1
    return calls, {op: (us / calls, count[op] / calls) for op, us in spent.most_common()}


def read_profile(path: Path) -> list[dict[str, Any]]:
    """ORT's profile, also when the session that wrote it has not closed its JSON array."""
    text = path.read_text().rstrip()
    return json.loads(text if text.endswith("]") else text.rstrip(",") + "]")


def hfexport_profile(artifact: Path, prompt: Any, new_tokens: int, cache: int, threads: int, folder: Path) -> Any:
    import onnxruntime as ort

    from hfexport.runtime.decode import decode_loop

    rate = decode_loop(str(artifact), "onnx", max_cache_len=cache)
    rate.generate(prompt, 8)
    result = rate.generate(prompt, new_tokens)
    del rate
    gc.collect()
    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, str(folder / "hfexport-profile")
    options.intra_op_num_threads = threads
    loop = decode_loop(str(artifact), "onnx", max_cache_len=cache, session_options=options)
    loop.generate(prompt, new_tokens)
    return result.steps / result.decode_s, read_profile(Path(loop.runner.session.end_profiling()))


def genai_profile(model_dir: Path, prompt: Any, new_tokens: int, cache: int, threads: int, folder: Path) -> Any:
    """(decode tokens/s, profile events): the profiled generation runs in a child process, as onnxruntime-genai
    writes its sessions' profiles only when the process ends."""
    rate = specialists.OrtGenaiLoop(model_dir, cache, threads)
    rate.generate(prompt, 8)
    result = rate.generate(prompt, new_tokens)
    del rate
    gc.collect()
    spec = {"model": str(model_dir), "prompt": prompt[0].tolist(), "new_tokens": new_tokens, "cache": cache,
            "threads": threads, "prefix": str(folder / "genai-profile")}
    subprocess.run([sys.executable, __file__, "--genai-child", json.dumps(spec)], check=True)
    return result.steps / result.decode_s, read_profile(max(folder.glob("genai-profile*.json")))


def genai_child(spec: dict[str, Any]) -> None:
    import onnxruntime_genai as og

    config = og.Config(spec["model"])
    options = {"intra_op_num_threads": spec["threads"], "enable_profiling": spec["prefix"]}
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(
        max_length=spec["cache"], min_length=len(spec["prompt"]) + spec["new_tokens"], do_sample=False
    )
    generator = og.Generator(model, params)
    generator.append_tokens(spec["prompt"])
    for _ in range(spec["new_tokens"]):
        generator.generate_next_token()


def report(tool: str, nodes: collections.Counter, layers: int, rate: float, events: list[dict[str, Any]],
           rows: int) -> str:
    calls, times = kernel_times(events)
    total = sum(us for us, _ in times.values())
    lines = [
        f"{tool}: {sum(nodes.values())} nodes run ({sum(nodes.values()) / layers:.1f} per layer), "
        f"decode {rate:.1f} tok/s; profiled: {total / 1000:.2f} ms of kernels per call over {calls} calls",
        f"  {'op type':34s} {'us/call':>9s} {'nodes':>7s} {'share':>6s}",
    ]
    for op, (us, count) in list(times.items())[:rows]:
        lines.append(f"  {op:34s} {us:9.0f} {count:7.1f} {us / total:6.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", choices=list(realsize.MODELS))
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the model's)")
    parser.add_argument("--precision", default="int4", choices=["float32", "int4", "int8"])
    parser.add_argument("--cache", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--genai-child", help=argparse.SUPPRESS)  # the profiled genai generation (internal)
    args = parser.parse_args(argv)
    if args.genai_child:
        genai_child(json.loads(args.genai_child))
        return 0
    _common.quiet_logs()

    import torch

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    model = realsize.build_model(args.model, args.layers)
    layers = model.config.num_hidden_layers
    prompt = realsize.seeded_prompt(model)
    with tempfile.TemporaryDirectory(prefix="profile-ort-") as tmp:
        work = Path(tmp)
        checkpoint = work / "checkpoint"
        specialists.save_checkpoint(model, checkpoint)
        exporter, programs = realsize_export.export_for_generation(
            model, prompt, "onnx", realsize.PRECISIONS[args.precision]["onnx"], args.cache
        )
        (work / "hfexport").mkdir()
        artifact = work / "hfexport" / "decode.onnx"
        exporter.save(programs["decode"], str(artifact))
        del exporter, programs, model
        gc.collect()
        genai_dir = work / "genai"
        subprocess.run(specialists.ort_genai_command(checkpoint, genai_dir, args.precision), check=True,
                       capture_output=True)
        for tool, path, profile in (
            ("hfexport", artifact, hfexport_profile),
            ("onnxruntime-genai", genai_dir / "model.onnx", genai_profile),
        ):
            source = artifact if tool == "hfexport" else genai_dir
            rate, events = profile(source, prompt, args.new_tokens, args.cache, threads, work)
            print(report(tool, ran_nodes(path, work), layers, rate, events, args.rows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
