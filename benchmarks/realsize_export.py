"""hfexport's export for generation as every real-size figure takes it (realsize.py, speedup_ab.py,
profile_executorch_step.py), and the child process that runs one such export from a saved checkpoint so that its
wall time and peak RSS are the export's alone.

    python benchmarks/realsize_export.py SPEC.json     # internal: realsize.py writes SPEC.json (export_spec)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import _common
from decode_throughput import generation_config


def export_spec(run: Any, backend: str, fields: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """(the file that tells the export child what to export and where, the file the child names its artifact in)."""
    spec_path = run.workdir / f"{out.name}.spec.json"
    spec = {
        "checkpoint": str(run.checkpoint),
        "backend": backend,
        "fields": fields,
        "out": str(out),
        "result": str(run.workdir / f"{out.name}.result.json"),
        "prompt": run.prompt.tolist(),
        "cache": run.cache,
    }
    spec_path.write_text(json.dumps(spec))
    return spec_path, Path(spec["result"])


def export_child_command(spec_path: Path) -> list[str]:
    return [sys.executable, __file__, str(spec_path)]


def exporter_options(backend: str, cache: int) -> dict[str, Any]:
    """ExecuTorch: the cache owned by the program (as decode_throughput.py runs it), and sequences bounded by the
    cache length as export_llama's --max_seq_length bounds them. At the default bound (2048 tokens) this model's
    plan holds logits for 2048 x 49152 and the saved program fails to load (method load error 0x21, the planned
    buffer overflows its allocator)."""
    if backend == "executorch":
        return {"cache_as_buffers": True, "max_batch": 2, "max_length": cache}
    return {}


def export_for_generation(model: Any, prompt: Any, backend: str, fields: dict[str, Any], cache: int) -> tuple[Any, Any]:
    """(exporter, programs): hfexport's export of ``model`` for generation as every real-size figure takes it."""
    import torch

    import hfexport

    config = hfexport.AutoExportConfig.from_dict({"export_format": backend, "dynamic": True, **fields})
    exporter = type(hfexport.AutoHfExporter.from_config(config))(**exporter_options(backend, cache))
    programs = exporter.export_for_generation(
        model,
        {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)},
        config,
        generation_config=generation_config(cache),
        multi_token_decode=True,
    )
    return exporter, programs


def export_child(spec_path: Path) -> None:
    """The child process of one hfexport export: load the checkpoint, export ``decode``, save it, record the
    seconds the export call itself took (beside the child's wall time the parent measures)."""
    import torch
    import transformers

    _common.quiet_logs()
    spec = json.loads(spec_path.read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(spec["checkpoint"], dtype=torch.float32).eval()
    prompt = torch.tensor(spec["prompt"])
    export_s, (exporter, programs) = _common.timed(
        lambda: export_for_generation(model, prompt, spec["backend"], spec["fields"], spec["cache"])
    )
    artifact = str(Path(spec["out"]) / f"decode{exporter.file_suffix}")
    save_s, _ = _common.timed(lambda: exporter.save(programs["decode"], artifact))
    Path(spec["result"]).write_text(json.dumps({"artifact": artifact, "export_call_s": export_s, "save_s": save_s}))


if __name__ == "__main__":
    export_child(Path(sys.argv[1]))
