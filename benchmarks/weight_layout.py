"""The Dynamo decode loop with its linear weights laid out for one-token steps, against nn.Linear's own layout.

``hfexport.runtime.weight_layout`` stores each linear weight of the loop's module as [in, out] memory (same shape
and values, transposed strides). Here one export of ``realsize.py``'s model (random weights of a real model's
shape, ``--layers`` to shorten it) is decoded by two loops: as hfexport loads it, and with every weight made
contiguous again ([out, in], as saved). The loops and eager ``generate()`` take turns, ``--repeat`` rounds of
``--new-tokens`` greedy tokens each; printed: the median decode tokens/s of each, the ratios, and whether the
tokens agree.

    python benchmarks/weight_layout.py
"""

from __future__ import annotations

import argparse

import _common
import realsize
import realsize_export


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", choices=list(realsize.MODELS))
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the model's)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    _common.quiet_logs()

    import torch

    from hfexport.runtime.decode import decode_loop

    torch.set_num_threads(args.threads or torch.get_num_threads())
    model = realsize.build_model(args.model, args.layers)
    prompt = realsize.seeded_prompt(model)
    _, programs = realsize_export.export_for_generation(model, prompt, "dynamo", {}, 128)
    relaid = decode_loop(programs["decode"], "dynamo", max_cache_len=128)
    as_saved = decode_loop(programs["decode"], "dynamo", max_cache_len=128)
    with torch.no_grad():
        for parameter in as_saved.flat_graph.graph_module.parameters():
            parameter.data = parameter.data.contiguous()
    loops = {"[in, out] (hfexport)": relaid, "[out, in] (as saved)": as_saved,
             "eager generate": realsize.EagerLoop(model, 128)}
    rates: dict[str, list[float]] = {name: [] for name in loops}
    tokens: dict[str, list[int]] = {}
    for loop in loops.values():
        loop.generate(prompt, 8)
    for _ in range(args.repeat):
        for name, loop in loops.items():
            result = loop.generate(prompt, args.new_tokens)
            rates[name].append(result.steps / result.decode_s)
            tokens[name] = result.tokens
    medians = {name: _common.median(values) for name, values in rates.items()}
    base, eager = medians["[out, in] (as saved)"], medians["eager generate"]
    print(f"threads {torch.get_num_threads()}, {model.config.num_hidden_layers} layers, medians of {args.repeat}")
    for name, rate in medians.items():
        print(f"  {name:22s} decode {rate:6.1f} tok/s  {rate / base:5.2f}x as saved  {rate / eager:5.2f}x eager  "
              f"tokens = eager: {tokens[name] == tokens['eager generate']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
