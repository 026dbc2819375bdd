"""Where an ONNX Runtime decode step goes, and what the exported attention costs there.

Same model, cache and prompt as ``decode_throughput.py`` (llama hidden 256, 4 layers, 512-slot static cache). The
decode graph is exported twice: as hfexport exports it (SDPA written as MatMul/Softmax) and with torch's own SDPA
translation (opset 23's ``Attention`` op, hfexport's translation removed for that export). For each it prints the
graph's node count, the node count after ONNX Runtime's own graph optimisation (the model ORT actually runs:
an op without a kernel for its inputs is inlined as its function body), the loop's tokens/s over ``--repeat``
generations, and whether the tokens equal eager ``generate()``'s. Then ORT's per-op kernel time for hfexport's
graph (ORT's profiler; it slows the run, so read the shares).

    python benchmarks/profile_ort_step.py
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common
import decode_throughput

CACHE, HIDDEN, LAYERS, VOCAB, PROMPT = 512, 256, 4, 1024, 16


def export_decode(model: Any, prompt: Any, path: Path, torch_sdpa: bool) -> None:
    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.patching import onnx_fixes

    config = AutoExportConfig.from_dict({"export_format": "onnx", "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    kept = onnx_fixes.ONNX_TRANSLATIONS
    if torch_sdpa:
        onnx_fixes.ONNX_TRANSLATIONS = [t for t in kept if "scaled_dot_product" not in str(t.target)]
    try:
        inputs = {"input_ids": prompt, "attention_mask": prompt.new_ones(prompt.shape)}
        programs = exporter.export_for_generation(
            model, inputs, config, generation_config=decode_throughput.generation_config(CACHE), multi_token_decode=True
        )
    finally:
        onnx_fixes.ONNX_TRANSLATIONS = kept
    exporter.save(programs["decode"], str(path))


def node_counts(path: Path, folder: Path) -> tuple[int, int, int]:
    """(nodes in the file, nodes ORT runs after its own optimisation, Attention ops in the file)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(folder / f"{path.stem}.ort-optimised.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ran = onnx.load(options.optimized_model_filepath, load_external_data=False)
    written = onnx.load(str(path), load_external_data=False).graph.node
    return len(written), len(ran.graph.node), sum(n.op_type == "Attention" for n in written)


def loop_rate(path: Path, prompt: Any, expected: list[int], repeat: int) -> tuple[float, bool]:
    from hfexport.runtime.decode import decode_loop

    loop = decode_loop(str(path), "onnx", max_cache_len=CACHE)
    loop.generate(prompt, 8)  # warm-up
    runs = [loop.generate(prompt, 64) for _ in range(repeat)]
    del loop
    gc.collect()  # the session's intra-op threads go before the next graph is timed
    return statistics.median(r.tokens_per_s for r in runs), all(r.tokens == expected for r in runs)


def kernel_shares(path: Path, prompt: Any, folder: Path, rows: int) -> list[tuple[str, float, int, float]]:
    """(op type, kernel microseconds per step, nodes, share) from ORT's profiler over one 64-token generation."""
    import onnxruntime as ort

    from hfexport.runtime.decode import decode_loop

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "ort-profile")
    loop = decode_loop(str(path), "onnx", max_cache_len=CACHE, session_options=options)
    loop.generate(prompt, 64)
    events = json.loads(Path(loop.runner.session.end_profiling()).read_text())
    steps = max(1, sum(1 for e in events if e.get("name") == "model_run"))
    time: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            time[event["args"]["op_name"]] += event["dur"]
            count[event["args"]["op_name"]] += 1
    total = sum(time.values()) or 1
    return [(op, us / steps, count[op] // steps, us / total) for op, us in time.most_common(rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="timed 64-token generations per graph (default 5)")
    parser.add_argument("--rows", type=int, default=12, help="op types listed in the kernel-time table")
    args = parser.parse_args(argv)
    _common.quiet_logs()
    import torch

    model = decode_throughput.build_model(HIDDEN, LAYERS, VOCAB, CACHE)
    torch.manual_seed(1)
    prompt = torch.randint(3, VOCAB, (1, PROMPT))
    eager = decode_throughput.eager_rate(model, prompt, 64, CACHE, 3)
    expected = eager["tokens"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = {}
        for label, torch_sdpa in (("torch's SDPA translation", True), ("hfexport (MatMul/Softmax)", False)):
            path = folder / ("torch_sdpa" if torch_sdpa else "hfexport") / "decode.onnx"
            path.parent.mkdir()
            export_decode(model, prompt, path, torch_sdpa)
            nodes, ran, attention = node_counts(path, path.parent)
            rate, same = loop_rate(path, prompt, expected, args.repeat)
            rows.append([label, nodes, ran, attention, rate, rate / eager["tokens_per_s"], same])
            paths[label] = path
        print(f"decode graph, llama h{HIDDEN} x {LAYERS}, {CACHE}-slot cache; eager generate "
              f"{eager['tokens_per_s']:.1f} tokens/s")
        print(_common.table(["graph", "nodes", "nodes ORT runs", "Attention ops in the file", "tokens/s", "x eager",
                             "tokens = eager"], rows))
        shares = kernel_shares(paths["hfexport (MatMul/Softmax)"], prompt, folder, args.rows)
    print("\nORT kernel time per step, hfexport's graph (under ORT's profiler)")
    print(_common.table(["op", "us/step", "nodes", "share"], [[op, us, n, f"{100 * s:.1f}%"] for op, us, n, s in shares]))
    payload = {"rows": [dict(zip(("graph", "nodes", "nodes_ort_runs", "attention_ops", "tokens_per_s", "x_eager",
                                  "tokens_match_eager"), r)) for r in rows],
               "kernels": [dict(zip(("op", "us_per_step", "nodes", "share"), k)) for k in shares]}
    print(f"wrote {_common.write_json(_common.DEFAULT_OUT, 'profile_ort_step', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
