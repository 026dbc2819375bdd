"""``hfexport explain MODEL ARTIFACT``: where an artifact diverges from the eager model it was exported from.

The judge's command, added to ``hfexport`` through the entry-point group ``hfexport.commands``
(``pyproject.toml``), so the library imports nothing of the judge. It rebuilds the sample inputs that
``hfexport export`` traced on (same ``--batch``, ``--seq-len`` and ``--seed``; a generation component gets the
call ``generate()`` makes to it), runs the artifact against eager with the verdict's tolerance, and on a
mismatch names the first diverging module (``pytest_hfexport.localise``). An ExecuTorch ``.pte`` keeps no module
names: the program is exported again with the config in the artifact folder's ``hfexport.json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HELP = "name the first module where an artifact diverges from eager"
DESCRIPTION = (
    "Run ARTIFACT (a .pt2, .onnx or .pte that 'hfexport export' wrote) against the eager model at MODEL on the "
    "export's sample inputs and, where the outputs differ beyond the backend's tolerance, name the first module "
    "whose output differs (and the last one that still matches). Exit 0: the artifact matches; 1: it differs."
)
SUFFIXES = {".pt2": "dynamo", ".onnx": "onnx", ".pte": "executorch"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the local model folder the artifact was exported from")
    parser.add_argument("artifact", help="the artifact file (.pt2, .onnx or .pte)")
    parser.add_argument("--batch", type=int, help="sample batch (default: what hfexport.json records, else 1)")
    parser.add_argument("--seq-len", type=int, help="sample length (default: what hfexport.json records, else 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample inputs (default 0, as export's)")


def _manifest(artifact: Path) -> dict[str, Any]:
    from hfexport.cli.manifest import read_manifest

    try:
        return read_manifest(artifact.parent)
    except Exception:  # no hfexport.json: the artifact was saved from Python; defaults apply
        return {}


def _sample_shape(manifest: Mapping[str, Any], args: argparse.Namespace) -> tuple[int, int]:
    described = (manifest.get("sample_inputs") or {}).get("input_ids") or {}
    shape = described.get("shape") if isinstance(described, Mapping) else None
    batch, seq = (shape[0], shape[1]) if isinstance(shape, list) and len(shape) == 2 else (1, 8)
    return args.batch or batch, args.seq_len or seq


def run(args: argparse.Namespace, progress: Any) -> tuple[int, dict[str, Any]]:
    from hfexport.quiet import quiet

    with quiet():  # the third-party import noise hfexport's own commands keep off the terminal
        return _explain(args, progress)


def _explain(args: argparse.Namespace, progress: Any) -> tuple[int, dict[str, Any]]:
    import torch

    from hfexport import AutoExportConfig, AutoHfExporter, runtime
    from hfexport.cli.errors import usage_error
    from hfexport.cli.inputs import sample_inputs
    from hfexport.cli.loading import check_model_folder, load_model

    from .compare import compare
    from .localise import Artifact, locate
    from .naming import flat_named

    artifact = Path(args.artifact)
    backend = SUFFIXES.get(artifact.suffix)
    if backend is None or not artifact.is_file():
        raise usage_error(f"{artifact} is not a .pt2, .onnx or .pte file; give the artifact 'hfexport export' wrote")
    manifest = _manifest(artifact)
    with progress.step(f"loading {args.model}"):
        model = load_model(check_model_folder(args.model))
    batch, seq = _sample_shape(manifest, args)
    torch.manual_seed(args.seed)
    for_generation = bool(manifest.get("for_generation"))
    inputs = sample_inputs(model, batch, seq, for_generation)
    module, call = model, inputs
    component = artifact.stem
    if for_generation:
        from hfexport.generation import decompose_for_generation

        generation_config = None
        if manifest.get("static_cache"):
            from transformers import GenerationConfig

            generation_config = GenerationConfig(
                cache_implementation="static", max_cache_len=int(manifest["static_cache"])
            )
        components = decompose_for_generation(
            model, inputs, generation_config, bool(manifest.get("multi_token_decode"))
        )
        if component not in components:
            known = sorted(components)
            raise usage_error(f"{artifact.name}: no generation component {component!r} (there are {known})")
        module, call = components[component]

    def program() -> Any:
        data = dict(manifest.get("export_config") or {"export_format": backend, "dynamic": False})
        config = AutoExportConfig.from_dict(data)
        exporter = AutoHfExporter.from_config(config)
        if for_generation:
            return exporter.export_for_generation(model, inputs, config)[component]
        return exporter.export(model, inputs, config)

    with progress.step(f"running {artifact.name} against eager"):
        with torch.no_grad():
            expected = flat_named(module(**_copy(call)))
        runner = runtime.load(artifact)
        flat = runner.flatten_inputs(_copy(call))
        got = runner({k: v for k, v in flat.items() if k in set(runner.input_names)})
        verdict = compare(expected, got, backend, label="sample")
    result: dict[str, Any] = {
        "artifact": str(artifact),
        "backend": backend,
        "matches": verdict.ok,
        "verdict": verdict.to_dict(),
    }
    if verdict.ok:
        return 0, result
    with progress.step("locating the first diverging module"):
        found = locate(module, call, backend, Artifact(artifact, program))
    result["message"] = verdict.message()
    result["first_divergence"] = found.to_dict()
    return 1, result


def _copy(call: Mapping[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(dict(call))


def format_result(result: Mapping[str, Any]) -> str:
    if result["matches"]:
        return f"{result['artifact']} matches eager on its sample inputs ({result['backend']}): nothing to explain"
    from .localise import Divergence

    found = Divergence(**result["first_divergence"])
    return f"{result['message']}\n{found.describe()}"
