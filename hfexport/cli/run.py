"""``hfexport run``: greedy decoding with the exported static-cache decode graph of an export folder,
optionally against eager ``model.generate`` with the same static cache."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .arguments import format_of_suffix, formats, suffix_of
from .errors import EXIT_MISMATCH, EXIT_OK, export_failed, usage_error
from .loading import check_model_folder, load_model
from .manifest import MANIFEST, read_manifest
from .progress import Progress


def find_decode_artifact(folder: Path, fmt: str | None) -> tuple[Path, str, dict[str, Any]]:
    """The decode graph of an export folder, and its backend (from hfexport.json, else the file suffix)."""
    if not folder.is_dir():
        raise usage_error(f"{folder}: no such folder. Pass the -o folder of 'hfexport export --for-generation'.")
    manifest = read_manifest(folder)
    if fmt is None and manifest.get("components", {}).get("decode"):
        path = folder / manifest["components"]["decode"]["file"]
    else:
        found = [folder / f"decode{suffix_of(f)}" for f in ([fmt] if fmt else formats())]
        found = [p for p in found if p.is_file()]
        if len(found) > 1:
            raise usage_error(
                f"{folder} holds several decode graphs ({', '.join(p.name for p in found)}); pick one with --format"
            )
        if not found:
            raise usage_error(
                f"{folder} has no decode graph{' for ' + fmt if fmt else ''}. Export one with "
                "'hfexport export MODEL --for-generation --multi-token-decode --static-cache N -o "
                f"{folder}'."
            )
        path = found[0]
    if not path.is_file():
        raise usage_error(f"{path} is named in {MANIFEST} but missing; export again")
    if manifest and not manifest.get("static_cache") and manifest.get("components", {}).get("decode"):
        raise usage_error(
            f"{folder}'s decode graph was exported without a static cache, which the decode loop "
            "needs; export again with --for-generation --multi-token-decode --static-cache N"
        )
    return path, format_of_suffix(path.suffix), manifest


def eager_generate(model: Any, prompt: Any, max_new_tokens: int, max_cache_len: int) -> tuple[list[int], float]:
    """Greedy ``model.generate`` with a static cache of the same length; (new tokens, seconds)."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        cache_implementation="static",
        max_cache_len=max_cache_len,
        pad_token_id=getattr(model.generation_config, "pad_token_id", None) or 0,
    )
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    return out[0, prompt.shape[1] :].tolist(), time.perf_counter() - start


def cmd_run(args: argparse.Namespace, progress: Progress) -> tuple[int, dict[str, Any]]:
    folder = Path(args.dir)
    path, backend, manifest = find_decode_artifact(folder, args.format)
    model_folder = check_model_folder(args.compare_eager) if args.compare_eager else None
    vocab = manifest.get("model_config", {}).get("vocab_size") or (
        manifest.get("model_config", {}).get("text_config", {}) or {}
    ).get("vocab_size")
    if vocab and max(args.prompt_ids) >= vocab:
        raise usage_error(
            f"--prompt-ids holds {max(args.prompt_ids)}, but the vocabulary has {vocab} tokens (ids 0..{vocab - 1})"
        )
    result: dict[str, Any] = {
        "artifact": str(path),
        "backend": backend,
        "prompt_ids": args.prompt_ids,
        "max_new_tokens": args.max_new_tokens,
    }
    import torch

    from ..runtime.decode import decode_loop

    # Graphs exported with a symbolic cache axis (ONNX) cannot tell the loop their length: the manifest can.
    cache_len = args.max_cache_len or manifest.get("static_cache")
    options = {"max_cache_len": int(cache_len)} if cache_len else {}
    with progress.step(f"loading {path.name} ({backend})"):
        try:
            loop = decode_loop(str(path), backend, **options)
        except (ImportError, ModuleNotFoundError, AttributeError) as exc:
            raise export_failed(
                f"the {backend} decode loop is not available here: {type(exc).__name__}: {exc}. "
                "'hfexport env' lists usable backends; export with --format dynamo meanwhile."
            ) from exc
        except Exception as exc:
            raise export_failed(f"could not load {path}: {type(exc).__name__}: {exc}. Export it again.") from exc
    prompt = torch.tensor([args.prompt_ids], dtype=torch.long)
    try:
        for _ in range(max(0, args.warmup)):
            loop.generate(prompt, args.max_new_tokens)
        with progress.step(f"decoding {args.max_new_tokens} tokens"):
            generated = loop.generate(prompt, args.max_new_tokens)
    except ValueError as exc:
        raise usage_error(f"{exc}") from exc
    except Exception as exc:
        raise export_failed(f"the decode loop failed: {type(exc).__name__}: {exc}") from exc
    result.update(
        tokens=generated.tokens,
        prefill_s=generated.prefill_s,
        decode_s=generated.decode_s,
        decode_steps=generated.steps,
        tokens_per_s=generated.tokens_per_s,
        max_cache_len=loop.max_cache_len,
    )
    code = EXIT_OK
    if model_folder is not None:
        with progress.step(f"eager generate from {model_folder}"):
            model = load_model(model_folder)
            eager_tokens, eager_s = eager_generate(model, prompt, args.max_new_tokens, loop.max_cache_len)
        result.update(eager_tokens=eager_tokens, eager_s=eager_s, match=eager_tokens == generated.tokens)
        if not result["match"]:
            code = EXIT_MISMATCH
    return code, result


def format_run(result: Mapping[str, Any]) -> str:
    tps = result["tokens_per_s"]
    lines = [
        f"backend: {result['backend']} ({Path(result['artifact']).name}, cache {result['max_cache_len']})",
        f"tokens: {','.join(str(t) for t in result['tokens'])}",
        f"prefill: {result['prefill_s'] * 1000:.1f} ms; decode: {result['decode_steps']} steps in "
        f"{result['decode_s']:.3f} s = {tps:.1f} tokens/s",
    ]
    if "eager_tokens" in result:
        lines.append(f"eager:  {','.join(str(t) for t in result['eager_tokens'])}")
        lines.append(
            "match: yes, the exported loop generates eager's tokens"
            if result["match"]
            else "match: NO, the tokens differ from eager generate()"
        )
    return "\n".join(lines)
