"""A speed-up measured on a real-size model: decode tok/s of one export with hfexport's speed-ups on against one
with them off (``hfexport.speedups_off()``), the two loops taking turns in one process so both see the same
machine.

The model is ``realsize.py``'s (random weights of a real model's shape, ``--layers`` to shorten it), exported for
generation with a 128-slot static cache at ``--precision`` on ``--backend``; each round generates ``--new-tokens``
greedy tokens with each loop. Printed: every round's tok/s per loop, the medians after the first round, and
their ratio (on / off).

    python benchmarks/speedup_ab.py --backend onnx --precision int4
    python benchmarks/speedup_ab.py --backend executorch --precision 8da4w --layers 6
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile

import _common
import realsize
import realsize_export


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", choices=list(realsize.MODELS))
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--backend", default="onnx", choices=realsize.BACKENDS)
    parser.add_argument("--precision", default="int4", choices=list(realsize.PRECISIONS))
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    _common.quiet_logs()

    import hfexport
    from hfexport.runtime.decode import decode_loop

    model = realsize.build_model(args.model, args.layers)
    prompt = realsize.seeded_prompt(model)
    fields = realsize.PRECISIONS[args.precision][args.backend]
    loops = {}
    with tempfile.TemporaryDirectory() as folder:
        for label, on in (("on", True), ("off", False)):
            with contextlib.nullcontext() if on else hfexport.speedups_off():
                exporter, programs = realsize_export.export_for_generation(model, prompt, args.backend, fields, 128)
            path = f"{folder}/decode-{label}{exporter.file_suffix}"
            exporter.save(programs["decode"], path)
            options = {} if args.backend == "executorch" else {"max_cache_len": 128}  # a program's own slots
            loops[label] = decode_loop(path, args.backend, **options)
        rates: dict[str, list[float]] = {label: [] for label in loops}
        for _ in range(args.rounds):
            for label, loop in loops.items():
                result = loop.generate(prompt, args.new_tokens)
                rates[label].append(result.steps / result.decode_s)
    for label, values in rates.items():
        print(f"speed-ups {label}: " + " ".join(f"{v:.1f}" for v in values) + " tok/s")
    on, off = (statistics.median(rates[label][1:]) for label in ("on", "off"))
    print(f"median after the first round: on {on:.1f}, off {off:.1f} tok/s: {on / off:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
