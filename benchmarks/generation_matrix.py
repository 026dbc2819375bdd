"""export_for_generation per model and backend: export seconds, components, largest component error,
and whether the exported components reproduce eager greedy decoding; then decode throughput.

For each zoo model (default: llama, gemma3, qwen3_moe, mamba, t5, llava) and backend:

* ``export s``: ``exporter.export_for_generation(model, sample, AutoExportConfig(dynamic=True))``;
* ``components``: the names it returned;
* ``max err``: each component saved, loaded back through ``hfexport.runtime.load`` and run on the
  kwargs ``decompose_for_generation`` captured from a real generate() run, against its eager
  submodule (largest absolute difference over all outputs and components);
* ``16 tokens``: the model's own ``generate()`` with every component served by its artifact
  (``hfexport.runtime.components.ExportedGenerate``) against eager ``generate()``, 16 greedy tokens;
* ``static loop``: for decoder-only models, the one-graph static-cache decode loop of
  ``hfexport.runtime.decode`` (multi-token decode, 32 slots) against eager ``generate()`` with the same
  static cache, 16 tokens.

A row that fails says why; rows listed in conformance/known_failures/hfexport.toml carry that
reason. Then ``decode_throughput.py`` runs (hidden 256, 4 layers, 512-slot cache) unless
``--no-throughput``.

    python benchmarks/generation_matrix.py
    python benchmarks/generation_matrix.py --models llama,t5 --backends dynamo,onnx --no-throughput
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
import tomllib

MODELS = ("llama", "gemma3", "qwen3_moe", "mamba", "t5", "llava")
BACKENDS = ("dynamo", "onnx", "executorch")
NEW_TOKENS = 16
STATIC_CACHE_LEN = 32
KNOWN = Path(__file__).resolve().parent.parent / "conformance" / "known_failures" / "hfexport.toml"


def known_reason(model: str, backend: str, check: str) -> str | None:
    entries = tomllib.loads(KNOWN.read_text()) if KNOWN.exists() else {}
    for key, reason in entries.items():
        if fnmatch.fnmatch(f"{model}/{backend}/{check}", key):
            return reason
    return None


def component_errors(components: dict, runners: dict) -> dict[str, float]:
    import torch

    from hfexport.dynamo import tensor_inputs
    from hfexport.outputs import flatten_named

    errors = {}
    for name, (module, kwargs) in components.items():
        with torch.no_grad():
            ref = flatten_named(module(**copy.deepcopy(kwargs)))
        got = runners[name](tensor_inputs(copy.deepcopy(kwargs)))
        got = {k: v for k, v in got.items() if isinstance(v, torch.Tensor)}
        missing = [k for k in ref if k not in got]
        if missing:
            raise AssertionError(f"{name}: the artifact returned no {missing[:3]}")
        errors[name] = max(((ref[k].double() - got[k].double()).abs().max().item() if ref[k].numel() else 0.0)
                           for k in ref)
    return errors


def static_loop_matches(model: Any, inputs: dict, backend: str, workdir: Path) -> bool:
    import torch
    import transformers

    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.runtime.decode import decode_loop

    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    generation = transformers.GenerationConfig(cache_implementation="static", max_cache_len=STATIC_CACHE_LEN)
    programs = exporter.export_for_generation(model, inputs, config, generation_config=generation,
                                              multi_token_decode=True)
    path = workdir / f"static-decode{exporter.file_suffix}"
    exporter.save(programs["decode"], str(path))
    prompt = inputs["input_ids"][:1]
    got = decode_loop(str(path), backend, max_cache_len=STATIC_CACHE_LEN).generate(prompt, NEW_TOKENS).tokens
    eager_config = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                                 do_sample=False, cache_implementation="static",
                                                 max_cache_len=STATIC_CACHE_LEN)
    with torch.no_grad():
        expected = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                  generation_config=eager_config)
    return got == expected[0, prompt.shape[1]:].tolist()


def measure(model_name: str, backend: str, workdir: Path) -> dict[str, Any]:
    from conformance.zoo import get
    from hfexport import AutoExportConfig, AutoHfExporter
    from hfexport.generation import decompose_for_generation
    from hfexport.runtime import load
    from hfexport.runtime.components import ExportedGenerate, eager_greedy_tokens

    entry = get(model_name)
    model = entry.model()
    inputs = entry.sample_inputs(model)
    row: dict[str, Any] = {"model": model_name, "backend": backend}
    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    try:
        with _common.PeakRss() as rss:
            row["export_s"], programs = _common.timed(lambda: exporter.export_for_generation(model, inputs, config))
        row["export_peak_mib"] = rss.peak_mib
        row["components"] = list(programs)
        runners = {}
        for name, program in programs.items():
            path = workdir / f"{model_name}-{backend}-{name}{exporter.file_suffix}"
            exporter.save(program, str(path))
            runners[name] = load(path)
        components = decompose_for_generation(model, inputs)
        errors = component_errors(components, runners)
        row["max_err"] = max(errors.values())
        row["worst_component"] = max(errors, key=errors.get)
        got = ExportedGenerate(model, components, runners).generate(inputs, NEW_TOKENS)
        expected = eager_greedy_tokens(model, inputs, NEW_TOKENS)
        row["tokens_match"] = got.tolist() == expected.tolist()
        row["tokens"] = got[0].tolist()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        row["error"] = f"{type(exc).__name__}: {first}"
        row["known"] = known_reason(model_name, backend, "generation*")
    if entry.family in ("decoder", "moe") and "error" not in row:
        try:
            row["static_loop_match"] = static_loop_matches(model, inputs, backend, workdir)
            if row["static_loop_match"] is False:
                row["static_known"] = known_reason(model_name, backend, "static_cache")
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            row["static_loop_match"] = f"error: {type(exc).__name__}: {first}"
            row["static_known"] = known_reason(model_name, backend, "static_cache")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--no-throughput", action="store_true", help="skip decode_throughput.py at the end")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args(argv)
    _common.quiet_logs()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_name in [m for m in args.models.split(",") if m]:
            for backend in [b for b in args.backends.split(",") if b]:
                print(f"{model_name} / {backend} ...", file=sys.stderr, flush=True)
                start = time.perf_counter()
                rows.append(measure(model_name, backend, Path(tmp)))
                print(f"  {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    def tokens_cell(row: dict) -> str:
        if "error" in row:
            return "known failure" if row.get("known") else "FAIL"
        return "match" if row["tokens_match"] else "DIFFER"

    def static_cell(row: dict) -> str:
        value = row.get("static_loop_match")
        if value is None:
            return "-"
        if value is True:
            return "match"
        if value is False:
            return "known failure (differ)" if row.get("static_known") else "DIFFER"
        return "known failure" if row.get("static_known") else "FAIL"

    print(_common.table(
        ["model", "backend", "export s", "peak RSS MiB", "components", "max err", "16 tokens", "static loop"],
        [[r["model"], r["backend"], r.get("export_s"), r.get("export_peak_mib"),
          ",".join(r.get("components", [])) or "-",
          f"{r['max_err']:.1e}" if "max_err" in r else "-", tokens_cell(r), static_cell(r)] for r in rows]))
    notes = [(r, r["error"], r.get("known")) for r in rows if "error" in r]
    static = "static_loop_match"
    notes += [(r, f"static loop: {r[static] if isinstance(r[static], str) else 'tokens differ'}",
               r.get("static_known")) for r in rows if r.get("static_loop_match") not in (None, True)]
    for row, error, known in notes:
        print(f"- {row['model']}/{row['backend']}: {error}" + (f"\n    known failure: {known}" if known else ""))
    bad = [r for r in rows if ("error" in r and not r.get("known")) or r.get("tokens_match") is False
           or (r.get("static_loop_match") is False and not r.get("static_known"))
           or (isinstance(r.get("static_loop_match"), str) and not r.get("static_known"))]
    _common.write_json(args.out, "generation_matrix", {"rows": rows, "versions": _common.versions(),
                                                      "argv": sys.argv})
    status = 1 if bad else 0
    if not args.no_throughput:
        import decode_throughput

        print("\ndecode throughput (hidden 256, 4 layers, 512-slot static cache, 64 tokens):", flush=True)
        status |= decode_throughput.main(["--out", str(args.out)])
    return status


if __name__ == "__main__":
    sys.exit(main())
