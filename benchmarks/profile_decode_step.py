"""Where a decode loop's step time goes: torch.profiler over the Dynamo decode loop of the throughput model.

Same model, cache and prompt as ``decode_throughput.py`` (llama hidden 256, 4 layers, 512-slot static cache);
the decode graph is exported with ``export_for_generation(..., multi_token_decode=True)``, saved, loaded into
``hfexport.runtime.decode.DynamoDecodeLoop``, then ``--new-tokens`` tokens are generated under the profiler.
Prints the eager and loop rates of this run, the graph's op counts and the ops by self CPU time (share of
the total), so a claim such as "the KV-head repeat is half of a step" can be checked.

    python benchmarks/profile_decode_step.py
    python benchmarks/profile_decode_step.py --new-tokens 32 --rows 15
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import _common
import decode_throughput


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens generated under the profiler")
    parser.add_argument("--rows", type=int, default=12, help="ops listed (default 12)")
    args = parser.parse_args(argv)
    _common.quiet_logs()

    import torch
    from torch.profiler import profile

    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.runtime.decode import decode_loop

    cache = 512
    model = decode_throughput.build_model(256, 4, 1024, cache)
    torch.manual_seed(1)
    prompt = torch.randint(3, 1024, (1, 16))
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
    programs = exporter.export_for_generation(
        model, inputs, config, generation_config=decode_throughput.generation_config(cache), multi_token_decode=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "decode.pt2"
        exporter.save(programs["decode"], str(path))
        loop = decode_loop(str(path), "dynamo", max_cache_len=cache)
    eager = decode_throughput.eager_rate(model, prompt, 32, cache, 1)["tokens_per_s"]
    loop.generate(prompt, 8)  # warm-up
    rate = loop.generate(prompt, 32).tokens_per_s
    print(f"eager generate {eager:.1f} tok/s, Dynamo loop {rate:.1f} tok/s ({rate / eager:.2f}x), same run")

    ops = collections.Counter(str(n.target) for n in loop.module.graph.nodes if n.op == "call_function")
    print("graph ops:", ", ".join(f"{op} x{count}" for op, count in ops.most_common(8)))
    with profile() as prof:
        loop.generate(prompt, args.new_tokens)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    print(f"{'op':<56} {'self %':>7} {'calls':>7}")
    for event in events[: args.rows]:
        print(f"{event.key[:56]:<56} {100 * event.self_cpu_time_total / total:>6.1f}% {event.count:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
