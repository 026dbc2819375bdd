"""``hfexport export``: load a local model folder, export it, save every artifact, optionally check them.

Whatever happens, DIR/hfexport.json says what was exported, with which config and versions, which
files were written and which errors occurred.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .arguments import suffix_of, validate_export_args
from .checkers import checker
from .errors import EXIT_FAILED, EXIT_MISMATCH, EXIT_OK, CliError, export_failed, usage_error
from .inputs import describe_inputs, sample_inputs
from .loading import check_model_folder, load_model
from .manifest import MANIFEST, versions, write_json_atomic
from .progress import Progress


def make_export_config(args: argparse.Namespace, dynamic: bool) -> Any:
    from .. import AutoExportConfig

    data: dict[str, Any] = {"export_format": args.format, "dynamic": dynamic}
    if args.format == "onnx" and args.opset is not None:
        data["opset_version"] = args.opset
    if args.quantize:
        data["quantization"], data["quantization_group_size"] = args.quantize, args.group_size
    if args.format == "executorch":
        # Memory planning stays on (alloc_* True): with unplanned graph inputs the Python runtime keeps the
        # storage it first bound and ignores the values of a later call's cache inputs, so --check of a
        # decode graph would compare against an empty cache. Caller-owned buffers are a C++ matter.
        data["backend"] = args.backend or "xnnpack"
    try:
        return AutoExportConfig.from_dict(data)
    except ValueError as exc:
        raise usage_error(f"{exc}") from exc


def _exporter_for(config: Any) -> Any:
    from .. import AutoHfExporter

    try:
        return AutoHfExporter.from_config(config)
    except ImportError as exc:
        raise export_failed(
            f"the {config.export_format} backend is not usable here: {exc} "
            "('hfexport env' lists what each backend needs)"
        ) from exc


def _model_config_dict(model: Any) -> dict[str, Any]:
    try:
        return model.config.to_dict()
    except Exception:  # noqa: BLE001 - a manifest without the config is still useful
        return {}


def cmd_export(args: argparse.Namespace, progress: Progress) -> tuple[int, dict[str, Any]]:
    """Load, export, save, optionally check; always leave DIR/hfexport.json saying what happened."""
    validate_export_args(args)
    folder = check_model_folder(args.path)
    if args.format == "executorch" and args.backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise usage_error(
                "--backend cuda needs a CUDA machine and this one has none; use --backend xnnpack "
                "(CPU) or --backend portable"
            )
    dynamic = args.dynamic if args.dynamic is not None else bool(args.static_cache and args.multi_token_decode)

    out_dir = Path(args.output)
    manifest: dict[str, Any] = {
        "model_path": str(folder.resolve()),
        "format": args.format,
        "for_generation": args.for_generation,
        "multi_token_decode": args.multi_token_decode,
        "static_cache": args.static_cache,
        "dynamic": dynamic,
        "status": "started",
        "files": [],
        "components": {},
        "errors": [],
    }
    code = EXIT_OK
    try:
        import torch

        config = make_export_config(args, dynamic)
        manifest["export_config"] = config.to_dict()
        exporter = _exporter_for(config)
        with progress.step(f"loading {folder}"):
            model = load_model(folder, args.attn_implementation)
        manifest["model_class"] = type(model).__name__
        manifest["architectures"] = list(getattr(model.config, "architectures", None) or [])
        manifest["model_config"] = _model_config_dict(model)
        if args.for_generation and not (hasattr(model, "can_generate") and model.can_generate()):
            raise usage_error(
                f"{type(model).__name__} cannot generate, so it has no generation components; drop "
                "--for-generation (or save a generative head, e.g. *ForCausalLM)"
            )
        torch.manual_seed(args.seed)
        try:
            inputs = sample_inputs(model, args.batch, args.seq_len, args.for_generation)
        except CliError:
            raise
        except Exception as exc:
            raise export_failed(
                f"could not build sample inputs for {type(model).__name__} from its config: "
                f"{type(exc).__name__}: {exc}. Export it from Python with your own inputs "
                "(hfexport.AutoHfExporter)."
            ) from exc
        manifest["sample_inputs"] = describe_inputs(inputs)
        generation_config = None
        if args.static_cache:
            from transformers import GenerationConfig

            generation_config = GenerationConfig(cache_implementation="static", max_cache_len=args.static_cache)
            manifest["generation_config"] = generation_config.to_diff_dict()
        suffix = exporter.file_suffix or suffix_of(args.format)

        start = time.perf_counter()
        if args.for_generation:
            with progress.step(f"exporting generation components of {type(model).__name__} to {args.format}"):
                programs = _run_export(
                    lambda: exporter.export_for_generation(
                        model,
                        inputs,
                        config,
                        generation_config=generation_config,
                        multi_token_decode=args.multi_token_decode,
                    )
                )
        else:
            with progress.step(f"exporting {type(model).__name__} to {args.format}"):
                programs = {"model": _run_export(lambda: exporter.export(model, inputs, config))}
        manifest["export_s"] = round(time.perf_counter() - start, 3)

        paths: dict[str, Path] = {}
        with progress.step(f"saving {len(programs)} artifact(s) to {out_dir}"):
            for name, program in programs.items():
                path = out_dir / f"{name}{suffix}"
                try:
                    written = exporter.save(program, str(path))
                except Exception as exc:
                    raise export_failed(
                        f"[{name}] saving {path} failed: {type(exc).__name__}: {exc}. Check that "
                        f"{out_dir} is writable and has space."
                    ) from exc
                paths[name] = path
                files = [os.path.relpath(f, out_dir) for f in written]
                manifest["components"][name] = {"file": path.name, "files": files}
                manifest["files"].extend(files)
        manifest["status"] = "exported"

        if args.check:
            manifest["check"] = checker().check_all(args, model, inputs, generation_config, dynamic, paths, progress)
            if any(c["status"] == "error" for c in manifest["check"]):
                code = EXIT_FAILED
                manifest["errors"].append("an artifact could not be loaded or run back from disk; see 'check'")
            elif any(c["status"] != "pass" for c in manifest["check"]):
                code = EXIT_MISMATCH
            manifest["status"] = {EXIT_OK: "checked", EXIT_MISMATCH: "mismatch", EXIT_FAILED: "check_failed"}[code]
        return code, manifest
    except CliError as exc:
        manifest["status"] = "failed" if exc.code == EXIT_FAILED else "usage_error"
        manifest["errors"].append(str(exc))
        raise
    finally:
        manifest["versions"] = versions() if "torch" in sys.modules else {}
        if manifest["status"] != "usage_error" or out_dir.is_dir():
            with contextlib.suppress(OSError):
                write_json_atomic(out_dir / MANIFEST, manifest)


def _run_export(fn: Any) -> Any:
    """Run an export call; any failure becomes exit code 3 with the exporter's own advice kept."""
    from ..errors import HfExportError

    try:
        return fn()
    except HfExportError as exc:
        raise export_failed(
            f"export failed at stage '{exc.stage}': {exc}\nRun with -v for the traceback; "
            "DIR/hfexport.json records the error."
        ) from exc
    except NotImplementedError as exc:
        raise export_failed(f"this backend cannot export yet: {exc}. Use --format dynamo or onnx meanwhile.") from exc
    except Exception as exc:  # noqa: BLE001 - every failure maps to exit 3 with the message
        raise export_failed(
            f"export failed: {type(exc).__name__}: {exc}\nRun with -v for the traceback; "
            "try --no-dynamic / --dynamic, or --attn-implementation sdpa."
        ) from exc


def format_export(result: Mapping[str, Any], out_dir: str) -> str:
    lines = [f"exported {result.get('model_class', '?')} to {result['format']} in {result.get('export_s', 0):.1f}s:"]
    for name, comp in result.get("components", {}).items():
        lines.append(f"  {name:<16} {Path(out_dir) / comp['file']}")
    for check in result.get("check", []):
        lines.append(checker().format_check(check))
    lines.append(f"manifest: {Path(out_dir) / MANIFEST}")
    return "\n".join(lines)
