"""Export time with torch's fake-tensor cache on and off during the trace, per model depth: where the two cross.

hfexport traces without the cache when a model has fewer repeated blocks than ``hfexport.trace_cache``'s
``CACHE_FROM_REPEATED_BLOCKS`` names for the export format. This benchmark forces the cache on and off for the
same export of a Llama of each depth (hidden 64, 4 heads, 2 KV heads, vocab 256), or of conformance zoo entries
(``--zoo``), taking turns, the fastest of ``--repeat`` each, and prints off / on: below 1 the trace is
faster without the cache. ``--generation`` times ``export_for_generation`` (prefill and static-cache decode
graphs) instead of the plain export.

    python benchmarks/fake_tensor_cache.py                                   # depths 1-16, dynamo and onnx
    python benchmarks/fake_tensor_cache.py --generation --depths 2,8 --backends dynamo,onnx,executorch
    python benchmarks/fake_tensor_cache.py --zoo llama,mamba,whisper,vit --backends onnx   # conformance zoo models
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import _common


def llama(depth: int) -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=depth, vocab_size=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    inputs = {"input_ids": torch.randint(0, 256, (1, 8)), "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    return model, inputs


@contextlib.contextmanager
def cache_forced(on: bool) -> Iterator[None]:
    """hfexport's policy answers ``on`` for every model and export format while the block runs."""
    from hfexport import trace_cache

    with mock.patch.object(trace_cache, "cache_pays_off", lambda model, export_format, carries_cache=False: on):
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default="1,2,4,6,8,12,16", help="comma list of decoder layer counts")
    parser.add_argument("--backends", default="dynamo,onnx", help="comma list of dynamo, onnx, executorch")
    parser.add_argument("--zoo", default="", help="comma list of conformance zoo entries to time instead of the "
                        "Llama depths")
    parser.add_argument("--generation", action="store_true", help="time export_for_generation")
    parser.add_argument("--repeat", type=int, default=2, help="timed exports per setting; the fastest counts")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args(argv)
    _common.quiet_logs()
    import export_time
    from hfexport import trace_cache

    if args.zoo:
        from conformance.zoo import get

        subjects = [(name, lambda name=name: (m := get(name).model(), get(name).sample_inputs(m)))
                    for name in args.zoo.split(",")]
    else:
        subjects = [(f"llama x {d}", lambda d=d: llama(d)) for d in (int(d) for d in args.depths.split(","))]
    rows = []
    for backend in args.backends.split(","):
        export = export_time.hfexport_export(backend, True, generation=args.generation)
        for label, build in subjects:
            model, inputs = build()
            export(model, copy.deepcopy(inputs))  # first-use costs stay out of the timings
            best: dict[bool, float] = {}
            for turn in range(2 * args.repeat):
                on = turn % 2 == 0
                with cache_forced(on):
                    seconds, _ = _common.timed(lambda: export(model, copy.deepcopy(inputs)))
                best[on] = min(best.get(on, seconds), seconds)
            policy = "on" if trace_cache.cache_pays_off(model, backend) else "off"
            if args.generation:  # the components' samples carry a cache; the policy of those
                policy = "on" if trace_cache.cache_pays_off(model, backend, carries_cache=True) else "off"
            blocks = trace_cache.repeated_blocks(model)
            rows.append([backend, label, blocks, best[True], best[False], best[False] / best[True], policy])
            print(f"{backend} {label}: on {best[True]:.3f} s, off {best[False]:.3f} s", file=sys.stderr)
    what = "export_for_generation" if args.generation else "export"
    print(f"{what}, dynamic=True; fastest of {args.repeat} per setting (llama x N: hidden 64, N layers)")
    print(_common.table(["backend", "model", "repeated blocks", "cache on s", "cache off s", "off / on",
                         "hfexport uses"], rows))
    payload = {"generation": args.generation, "thresholds": {f"{f}{' with a cache' if c else ''}": n
                                                  for (f, c), n in trace_cache.CACHE_FROM_REPEATED_BLOCKS.items()},
               "rows": [dict(zip(["backend", "model", "blocks", "on_s", "off_s", "ratio", "policy"], r)) for r in rows]}
    name = "fake_tensor_cache" + ("_zoo" if args.zoo else "") + ("_generation" if args.generation else "")
    print(f"wrote {_common.write_json(args.out, name, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
