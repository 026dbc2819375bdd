"""The ``hfexport`` command line: export a local model folder, run its decode loop, report the environment.

    hfexport export ./my-model --format onnx -o out/ --check
    hfexport export ./my-model --format dynamo -o out/ --for-generation --multi-token-decode --static-cache 64
    hfexport run out/ --prompt-ids 1,2,3 --max-new-tokens 16 --compare-eager ./my-model
    hfexport env

Exit codes are part of the interface (CI scripts branch on them):

    0  everything asked for succeeded
    1  an artifact's outputs (or generated tokens) differ from eager PyTorch beyond the tolerance
    2  usage error: bad path, unknown format, a folder without config.json, options that do not go together
    3  the export (or loading/running an artifact) failed

Only local folders are read (what ``save_pretrained`` writes): the command never goes to the hub.
Library code logs through ``logging``; this module is the one place that prints.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
FORMATS = ("dynamo", "onnx", "executorch")
SUFFIX_BY_FORMAT = {"dynamo": ".pt2", "onnx": ".onnx", "executorch": ".pte"}
FORMAT_BY_SUFFIX = {suffix: fmt for fmt, suffix in SUFFIX_BY_FORMAT.items()}
# Max abs error each backend must meet against eager: the conformance suite's bars.
TOLERANCE = {"dynamo": 1e-5, "onnx": 1e-4, "executorch": 1e-3}
MANIFEST = "hfexport.json"
EXECUTORCH_BACKENDS = ("xnnpack", "portable", "cuda")


class CliError(Exception):
    """An error with the exit code it maps to; the message always says what to do next."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    return CliError(message, EXIT_USAGE)


def export_failed(message: str) -> CliError:
    return CliError(message, EXIT_FAILED)


# -- progress ---------------------------------------------------------------------------------

class Progress:
    """Progress for the slow steps (loading, tracing, lowering) on stderr.

    A spinner from ``rich`` when stderr is a terminal and rich is installed; plain
    ``[hfexport] ...`` lines otherwise (logs, CI, pipes), so a long export never looks hung.
    stdout is left to results, so ``--json`` output stays parseable.
    """

    def __init__(self, quiet: bool = False, stream: Any = None) -> None:
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.console = None
        if not quiet and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.console import Console

                self.console = Console(file=self.stream)
            except ImportError:
                self.console = None

    def line(self, message: str) -> None:
        if not self.quiet:
            print(f"[hfexport] {message}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[None]:
        if self.quiet:
            yield
            return
        start = time.perf_counter()
        try:
            if self.console is not None:
                with self.console.status(f"{label} ..."):
                    yield
            else:
                self.line(f"{label} ...")
                yield
        except BaseException:
            self.line(f"{label}: failed after {time.perf_counter() - start:.1f}s")
            raise
        self.line(f"{label}: done in {time.perf_counter() - start:.1f}s")


# -- arguments --------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error also says where to read the options (exit code 2, as argparse does)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nRun '{self.prog} --help' for the options.\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; a tolerance is 0 or more")
    return value


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of token ids, e.g. 1,2,3") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more non-negative token ids, e.g. 1,2,3")
    return ids


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hfexport", description="Export transformers models from a local folder to torch.export "
                     "(.pt2), ONNX (.onnx) or ExecuTorch (.pte), check them against eager, and run them.",
                     epilog="Exit codes: 0 ok, 1 mismatch against eager, 2 usage error, 3 export failed.")
    sub = parser.add_subparsers(dest="command", metavar="{export,run,env}", parser_class=_Parser)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print a machine-readable result on stdout (progress "
                        "and messages still go to stderr)")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines and no warnings")
    common.add_argument("-v", "--verbose", action="store_true", help="log hfexport's INFO messages and full "
                        "tracebacks on failure")

    ex = sub.add_parser("export", parents=[common], help="export a local model folder",
                        description="Export a model folder written by save_pretrained. Plain exports are saved as "
                        "DIR/model.<suffix>; with --for-generation each component as DIR/<component>.<suffix>. "
                        "DIR/hfexport.json records what was exported, the config, versions, files and errors.")
    ex.add_argument("path", help="local model folder (what save_pretrained writes: config.json + weights)")
    ex.add_argument("--format", "-f", required=True, help=f"one of {', '.join(FORMATS)}")
    ex.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the artifacts (created)")
    ex.add_argument("--for-generation", action="store_true",
                    help="split into generation components (prefill, decode, encoders...) and export each")
    ex.add_argument("--multi-token-decode", action="store_true",
                    help="one decode graph for 1..k query tokens (needs --for-generation)")
    ex.add_argument("--static-cache", type=_positive_int, metavar="N",
                    help="export against a StaticCache of N slots (needs --for-generation); with "
                    "--multi-token-decode this gives the decode graph 'hfexport run' drives")
    ex.add_argument("--dynamic", action=argparse.BooleanOptionalAction, default=None,
                    help="mark batch/sequence axes dynamic (default: on for --static-cache with "
                    "--multi-token-decode, where the decode loop needs a symbolic query axis; off otherwise)")
    ex.add_argument("--backend", choices=EXECUTORCH_BACKENDS, help="ExecuTorch delegate (default xnnpack)")
    ex.add_argument("--opset", type=int, help="ONNX opset (default: the newest the installed onnxscript supports)")
    ex.add_argument("--check", action="store_true", help="load every artifact back from disk and compare each "
                    "output with eager PyTorch (tolerance per backend: " +
                    ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()) + ")")
    ex.add_argument("--atol", type=_tolerance, help="override the backend's tolerance for --check")
    ex.add_argument("--batch", type=_positive_int, default=1, help="batch size of the sample inputs (default 1)")
    ex.add_argument("--seq-len", type=_positive_int, default=8, help="tokens per sample row (default 8)")
    ex.add_argument("--attn-implementation", help="load the model with this attention (e.g. sdpa, eager)")
    ex.add_argument("--seed", type=int, default=0, help="seed of the random sample inputs (default 0)")

    run = sub.add_parser("run", parents=[common], help="run an exported static-cache decode loop",
                         description="Greedy decode with the exported 'decode' graph of DIR (exported with "
                         "--for-generation --multi-token-decode --static-cache N): prefill the prompt, then one "
                         "token per call. Prints the tokens and decode tokens/second.")
    run.add_argument("dir", help="folder written by 'hfexport export --for-generation'")
    run.add_argument("--prompt-ids", required=True, type=_token_ids, help="comma list of token ids, e.g. 1,2,3")
    run.add_argument("--max-new-tokens", type=_positive_int, default=16, help="tokens to generate (default 16)")
    run.add_argument("--format", "-f", choices=FORMATS, help="which artifact to run when DIR holds several "
                     "(default: the one hfexport.json names)")
    run.add_argument("--max-cache-len", type=_positive_int, help="resize the cache (the graph's cache axis is "
                     "symbolic); default: the exported length")
    run.add_argument("--warmup", type=int, default=0, help="untimed runs before the timed one (default 0)")
    run.add_argument("--compare-eager", metavar="MODEL_PATH", help="also run eager model.generate with the same "
                     "static cache and say whether the tokens match (exit 1 if not)")

    sub.add_parser("env", parents=[common], help="installed versions beside the pins, and usable backends",
                   description="Installed versions beside hfexport's tested pins (drift marked) and which export "
                   "backends are usable here.")
    return parser


# -- output helpers ---------------------------------------------------------------------------

def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)


def emit_json(payload: Mapping[str, Any]) -> None:
    print(json.dumps(payload, indent=2, default=_json_default), flush=True)


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write JSON beside its final name, then rename: readers never see half a manifest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, default=_json_default)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _configure_logging(args: argparse.Namespace) -> None:
    level = logging.INFO if args.verbose else (logging.ERROR if args.quiet else logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("hfexport").setLevel(level)
    if args.quiet:
        warnings.filterwarnings("ignore")
        with contextlib.suppress(Exception):
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()


# -- model folders ----------------------------------------------------------------------------

def check_model_folder(path: str) -> Path:
    """A folder with config.json, or a usage error that says what a model folder is."""
    folder = Path(path)
    if not folder.exists():
        raise usage_error(f"{path}: no such folder. Pass a local model folder, i.e. what "
                          "model.save_pretrained(folder) writes (the hub is not used).")
    if not folder.is_dir():
        raise usage_error(f"{path} is a file, not a folder. Pass the folder that holds config.json and the weights.")
    if not (folder / "config.json").is_file():
        raise usage_error(f"{path} has no config.json, so it is not a model folder. Write one with "
                          "model.save_pretrained(folder) (or config.save_pretrained + weights) and pass that folder.")
    return folder


def auto_class_for(config: Any) -> Any:
    """The Auto model class that builds ``config.architectures[0]``.

    Each Auto class maps ``model_type`` to one class name; the first whose mapping names the saved
    architecture is the one that rebuilds exactly what was saved (head included). The architecture's
    own class stands in where no listed Auto class names it, and AutoModel where nothing does.
    """
    import transformers
    from transformers.models.auto import modeling_auto as ma

    candidates = [
        (transformers.AutoModelForCausalLM, ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
        (transformers.AutoModelForSeq2SeqLM, ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
        (transformers.AutoModelForSpeechSeq2Seq, ma.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES),
        (transformers.AutoModelForImageTextToText, ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES),
    ]
    architectures = list(getattr(config, "architectures", None) or [])
    model_type = getattr(config, "model_type", None)

    def names(value: Any) -> tuple[str, ...]:
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)

    for arch in architectures:
        for auto_cls, mapping in candidates:
            if arch in names(mapping.get(model_type, ())):
                return auto_cls
        direct = getattr(transformers, arch, None)
        if isinstance(direct, type) and hasattr(direct, "from_pretrained"):
            return direct
    return transformers.AutoModel


def load_model(path: Path, attn_implementation: str | None = None) -> Any:
    """Config and weights from the local folder only (``local_files_only``: never the hub)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise usage_error(f"{path}/config.json could not be read as a transformers config: {type(exc).__name__}: "
                          f"{exc}. Write the folder with save_pretrained.") from exc
    model_cls = auto_class_for(config)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = model_cls.from_pretrained(str(path), **kwargs)
    except Exception as exc:
        raise export_failed(f"could not load the model in {path} with {model_cls.__name__}: {type(exc).__name__}: "
                            f"{exc}. Check that the folder holds the weights save_pretrained wrote.") from exc
    return model.eval()


# -- sample inputs ----------------------------------------------------------------------------

def _vocab_size(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None)
    if not vocab:
        raise export_failed(f"{type(config).__name__} has no vocab_size, so no token ids can be drawn for it")
    return int(vocab)


def _token_ids_tensor(config: Any, batch: int, seq: int, avoid: Sequence[int] = ()) -> Any:
    import torch

    vocab = _vocab_size(config)
    low = 3 if vocab > 8 else 0  # skip the usual pad/bos/eos ids so generation does not stop at once
    ids = torch.randint(low, vocab, (batch, seq))
    for token in avoid:  # special multimodal tokens must only appear where the image goes
        if token is not None:
            ids[ids == token] = low
    return ids


def _image_token_count(config: Any) -> int:
    """Image tokens one image expands to.

    Models that pool image features state the count (``mm_tokens_per_image``); LLaVA-style models
    keep one token per patch, and their ``image_seq_length`` is the default checkpoint's (576), not
    this config's, so the count is derived from the vision config first.
    """
    pooled = getattr(config, "mm_tokens_per_image", None)
    if isinstance(pooled, int) and pooled > 0:
        return pooled
    vision = config.vision_config
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if isinstance(size, int) and isinstance(patch, int) and patch > 0:
        count = (size // patch) ** 2
        if getattr(config, "vision_feature_select_strategy", "default") == "full":
            count += 1  # the CLS token is kept
        return count
    for key in ("image_seq_length", "num_image_tokens"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError(f"cannot tell how many image tokens {type(config).__name__} expects per image")


def _vlm_inputs(config: Any, batch: int, seq: int, params: set[str]) -> dict[str, Any]:
    """Text around one image: LLaVA-style (fixed image token count) or Qwen2-VL-style (patch grid)."""
    import torch

    vision = config.vision_config
    image_token = getattr(config, "image_token_id", None)
    if image_token is None:
        image_token = getattr(config, "image_token_index", None)
    specials = [image_token] + [getattr(config, k, None) for k in ("video_token_id", "vision_start_token_id",
                                                                    "vision_end_token_id")]
    text = _token_ids_tensor(config, batch, max(seq, 2), avoid=specials)
    if getattr(vision, "spatial_merge_size", None) and getattr(vision, "temporal_patch_size", None):
        merge, patch, tps = vision.spatial_merge_size, vision.patch_size, vision.temporal_patch_size
        grid = 2 * merge  # the smallest square grid that merges to more than one token
        channels = getattr(vision, "in_channels", getattr(vision, "num_channels", 3))
        n_tokens = grid * grid // (merge * merge)
        image = [image_token] * n_tokens
        if getattr(config, "vision_start_token_id", None) is not None:
            image = [config.vision_start_token_id] + image + [config.vision_end_token_id]
        ids = torch.cat([text[:, :1], torch.tensor([image]).expand(batch, -1), text[:, 1:]], dim=1)
        out = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
               "pixel_values": torch.randn(batch * grid * grid, channels * tps * patch * patch),
               "image_grid_thw": torch.tensor([[1, grid, grid]] * batch)}
        if "mm_token_type_ids" in params:
            out["mm_token_type_ids"] = (ids == image_token).long()
        return out
    size = vision.image_size
    channels = getattr(vision, "num_channels", 3)
    ids = torch.cat([text[:, :1], torch.full((batch, _image_token_count(config)), image_token), text[:, 1:]], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values": torch.randn(batch, channels, size, size)}


def sample_inputs(model: Any, batch: int, seq: int, for_generation: bool) -> dict[str, Any]:
    """Inputs built from the config alone: token ids and a mask for text, pixel_values for vision, both
    for VLMs, input_features for speech. For a plain export of an encoder-decoder the decoder's ids are
    added (its forward needs them); for generation only what ``generate()`` takes."""
    import inspect

    import torch

    config = model.config
    params = set(inspect.signature(model.forward).parameters)
    main = getattr(model, "main_input_name", "input_ids")
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    out: dict[str, Any]
    if main == "input_features":
        frames = 2 * getattr(config, "max_source_positions", 1500)
        out = {"input_features": torch.randn(batch, config.num_mel_bins, frames)}
    elif main == "input_values":
        out = {"input_values": torch.randn(batch, 400 * seq)}
    elif main == "pixel_values":
        vision = getattr(config, "vision_config", config)
        size = vision.image_size if isinstance(vision.image_size, int) else vision.image_size[0]
        out = {"pixel_values": torch.randn(batch, getattr(vision, "num_channels", 3), size, size)}
    elif getattr(config, "vision_config", None) is not None and "pixel_values" in params:
        out = _vlm_inputs(config, batch, seq, params)
    else:
        ids = _token_ids_tensor(config, batch, seq)
        out = {"input_ids": ids}
        if "attention_mask" in params:
            out["attention_mask"] = torch.ones_like(ids)
    if encoder_decoder and not for_generation and "decoder_input_ids" in params:
        out["decoder_input_ids"] = _token_ids_tensor(config, batch, max(1, seq // 2))
    return out


def describe_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    return {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
            for k, v in inputs.items() if isinstance(v, torch.Tensor)}


# -- checks -----------------------------------------------------------------------------------

def compare_outputs(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per eager output: its max abs error, or why it could not be compared."""
    rows = []
    for name, ref in reference.items():
        got = candidate.get(name)
        if got is None:
            rows.append({"output": name, "max_abs_error": None, "problem": "missing from the artifact's outputs"})
        elif tuple(got.shape) != tuple(ref.shape):
            rows.append({"output": name, "max_abs_error": None,
                         "problem": f"shape {tuple(got.shape)} != eager {tuple(ref.shape)}"})
        else:
            err = (ref.double() - got.double()).abs().max().item() if ref.numel() else 0.0
            rows.append({"output": name, "max_abs_error": err, "problem": None})
    return rows


def check_artifact(path: Path, module: Any, kwargs: Mapping[str, Any], tolerance: float, label: str) -> dict[str, Any]:
    """Load ``path`` back from disk with hfexport.runtime and compare it with ``module(**kwargs)``."""
    import torch

    from . import runtime
    from .outputs import flatten_named

    result: dict[str, Any] = {"artifact": path.name, "inputs": label, "tolerance": tolerance}
    try:
        with torch.no_grad():
            reference = flatten_named(module(**copy.deepcopy(dict(kwargs))))
    except Exception as exc:
        result.update(status="error", outputs=[], error=f"the eager model itself failed on these inputs, so there "
                      f"is nothing to compare with: {type(exc).__name__}: {str(exc)[:600]}")
        return result
    try:
        runner = runtime.load(path)
        flat = runner.flatten_inputs(copy.deepcopy(dict(kwargs)))
        flat = {k: v for k, v in flat.items() if k in set(runner.input_names)}
        got = runner(flat)
    except Exception as exc:
        result.update(status="error", error=f"{type(exc).__name__}: {str(exc)[:800]}", outputs=[])
        return result
    rows = compare_outputs(reference, got)
    for row in rows:
        row["ok"] = row["problem"] is None and row["max_abs_error"] <= tolerance
    errors = [r["max_abs_error"] for r in rows if r["max_abs_error"] is not None]
    result.update(outputs=rows, max_abs_error=max(errors) if errors else None,
                  status="pass" if rows and all(r["ok"] for r in rows) else "mismatch")
    return result


def format_check(result: Mapping[str, Any]) -> str:
    head = f"check {result['artifact']} ({result['inputs']}, tolerance {result['tolerance']:g}): {result['status']}"
    if result["status"] == "error":
        return head + f"\n  {result['error']}"
    lines = [head]
    width = max([len(r["output"]) for r in result["outputs"]] + [6])
    for r in result["outputs"]:
        err = "-" if r["max_abs_error"] is None else f"{r['max_abs_error']:.2e}"
        verdict = "ok" if r["ok"] else (r["problem"] or "MISMATCH")
        lines.append(f"  {r['output']:<{width}}  {err:>9}  {verdict}")
    return "\n".join(lines)


# -- export -----------------------------------------------------------------------------------

def _validate_export_args(args: argparse.Namespace) -> None:
    if args.format not in FORMATS:
        raise usage_error(f"unknown format {args.format!r}; use --format with one of: {', '.join(FORMATS)}")
    if args.multi_token_decode and not args.for_generation:
        raise usage_error("--multi-token-decode shapes the decode component: add --for-generation")
    if args.static_cache and not args.for_generation:
        raise usage_error("--static-cache N sizes the generation cache: add --for-generation")
    if args.backend and args.format != "executorch":
        raise usage_error(f"--backend picks the ExecuTorch delegate; drop it, or use --format executorch "
                          f"(got --format {args.format})")
    if args.opset is not None and args.format != "onnx":
        raise usage_error(f"--opset applies to ONNX only; drop it, or use --format onnx (got --format {args.format})")
    if args.opset is not None and args.opset < 18:
        raise usage_error(f"--opset {args.opset}: the torch.export-based ONNX exporter emits opset 18 or newer; "
                          "pass 18 or more, or leave --opset out for the newest supported")
    if args.atol is not None and not args.check:
        raise usage_error("--atol sets the tolerance of --check: add --check")
    if args.static_cache and args.static_cache <= args.seq_len + 3:
        raise usage_error(f"--static-cache {args.static_cache} cannot hold the {args.seq_len}-token sample prompt "
                          f"plus the decode steps captured; use --static-cache {args.seq_len + 8} or more, "
                          "or a smaller --seq-len")
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise usage_error(f"-o {args.output} is a file; pass a folder (it is created if missing)")


def make_export_config(args: argparse.Namespace, dynamic: bool) -> Any:
    from . import AutoExportConfig

    data: dict[str, Any] = {"export_format": args.format, "dynamic": dynamic}
    if args.format == "onnx" and args.opset is not None:
        data["opset_version"] = args.opset
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
    from . import AutoHfExporter

    try:
        return AutoHfExporter.from_config(config)
    except ImportError as exc:
        raise export_failed(f"the {config.export_format} backend is not usable here: {exc} "
                            "('hfexport env' lists what each backend needs)") from exc


def _versions() -> dict[str, Any]:
    import platform

    from . import __version__
    from .environment import installed_versions

    return {"hfexport": __version__, "python": platform.python_version(), **installed_versions()}


def _model_config_dict(model: Any) -> dict[str, Any]:
    try:
        return model.config.to_dict()
    except Exception:  # noqa: BLE001 - a manifest without the config is still useful
        return {}


def cmd_export(args: argparse.Namespace, progress: Progress) -> tuple[int, dict[str, Any]]:
    """Load, export, save, optionally check; always leave DIR/hfexport.json saying what happened."""
    _validate_export_args(args)
    folder = check_model_folder(args.path)
    if args.format == "executorch" and args.backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise usage_error("--backend cuda needs a CUDA machine and this one has none; use --backend xnnpack "
                              "(CPU) or --backend portable")
    dynamic = args.dynamic if args.dynamic is not None else bool(args.static_cache and args.multi_token_decode)

    out_dir = Path(args.output)
    manifest: dict[str, Any] = {
        "model_path": str(folder.resolve()), "format": args.format, "for_generation": args.for_generation,
        "multi_token_decode": args.multi_token_decode, "static_cache": args.static_cache, "dynamic": dynamic,
        "status": "started", "files": [], "components": {}, "errors": [],
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
            raise usage_error(f"{type(model).__name__} cannot generate, so it has no generation components; drop "
                              "--for-generation (or save a generative head, e.g. *ForCausalLM)")
        torch.manual_seed(args.seed)
        try:
            inputs = sample_inputs(model, args.batch, args.seq_len, args.for_generation)
        except CliError:
            raise
        except Exception as exc:
            raise export_failed(f"could not build sample inputs for {type(model).__name__} from its config: "
                                f"{type(exc).__name__}: {exc}. Export it from Python with your own inputs "
                                "(hfexport.AutoHfExporter).") from exc
        manifest["sample_inputs"] = describe_inputs(inputs)
        generation_config = None
        if args.static_cache:
            from transformers import GenerationConfig

            generation_config = GenerationConfig(cache_implementation="static", max_cache_len=args.static_cache)
            manifest["generation_config"] = generation_config.to_diff_dict()
        suffix = exporter.file_suffix or SUFFIX_BY_FORMAT[args.format]

        start = time.perf_counter()
        if args.for_generation:
            with progress.step(f"exporting generation components of {type(model).__name__} to {args.format}"):
                programs = _run_export(lambda: exporter.export_for_generation(
                    model, inputs, config, generation_config=generation_config,
                    multi_token_decode=args.multi_token_decode))
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
                    raise export_failed(f"[{name}] saving {path} failed: {type(exc).__name__}: {exc}. Check that "
                                        f"{out_dir} is writable and has space.") from exc
                paths[name] = path
                files = [os.path.relpath(f, out_dir) for f in written]
                manifest["components"][name] = {"file": path.name, "files": files}
                manifest["files"].extend(files)
        manifest["status"] = "exported"

        if args.check:
            manifest["check"] = _check_all(args, model, inputs, generation_config, dynamic, paths, progress)
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
        manifest["versions"] = _versions() if "torch" in sys.modules else {}
        if manifest["status"] != "usage_error" or out_dir.is_dir():
            with contextlib.suppress(OSError):
                write_json_atomic(out_dir / MANIFEST, manifest)


def _run_export(fn: Any) -> Any:
    """Run an export call; any failure becomes exit code 3 with the exporter's own advice kept."""
    from .errors import HfExportError

    try:
        return fn()
    except HfExportError as exc:
        raise export_failed(f"export failed at stage '{exc.stage}': {exc}\nRun with -v for the traceback; "
                            "DIR/hfexport.json records the error.") from exc
    except NotImplementedError as exc:
        raise export_failed(f"this backend cannot export yet: {exc}. Use --format dynamo or onnx meanwhile.") from exc
    except Exception as exc:  # noqa: BLE001 - every failure maps to exit 3 with the message
        raise export_failed(f"export failed: {type(exc).__name__}: {exc}\nRun with -v for the traceback; "
                            "try --no-dynamic / --dynamic, or --attn-implementation sdpa.") from exc


def _check_all(args: argparse.Namespace, model: Any, inputs: Mapping[str, Any], generation_config: Any,
               dynamic: bool, paths: Mapping[str, Path], progress: Progress) -> list[dict[str, Any]]:
    import torch

    tolerance = args.atol if args.atol is not None else TOLERANCE[args.format]
    results = []
    with progress.step("checking artifacts against eager"):
        if args.for_generation:
            from .generation import decompose_for_generation

            components = decompose_for_generation(model, inputs, generation_config, args.multi_token_decode)
            for name, path in paths.items():
                module, kwargs = components[name]
                results.append(check_artifact(path, module, kwargs, tolerance, "captured generate() call"))
        else:
            results.append(check_artifact(paths["model"], model, inputs, tolerance, "sample inputs"))
            if dynamic:  # the artifact must also serve another batch and sequence length
                torch.manual_seed(args.seed + 1)
                other = sample_inputs(model, args.batch + 1, args.seq_len + 3, False)
                label = f"other shape: batch {args.batch + 1}, seq {args.seq_len + 3}"
                results.append(check_artifact(paths["model"], model, other, tolerance, label))
    return results


# -- run --------------------------------------------------------------------------------------

def find_decode_artifact(folder: Path, fmt: str | None) -> tuple[Path, str, dict[str, Any]]:
    """The decode graph of an export folder, and its backend (from hfexport.json, else the file suffix)."""
    if not folder.is_dir():
        raise usage_error(f"{folder}: no such folder. Pass the -o folder of 'hfexport export --for-generation'.")
    manifest: dict[str, Any] = {}
    if (folder / MANIFEST).is_file():
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except json.JSONDecodeError as exc:
            raise usage_error(f"{folder / MANIFEST} is not valid JSON ({exc}); export again") from exc
    if fmt is None and manifest.get("components", {}).get("decode"):
        path = folder / manifest["components"]["decode"]["file"]
    else:
        found = [folder / f"decode{SUFFIX_BY_FORMAT[f]}" for f in ([fmt] if fmt else FORMATS)]
        found = [p for p in found if p.is_file()]
        if len(found) > 1:
            raise usage_error(f"{folder} holds several decode graphs ({', '.join(p.name for p in found)}); pick one "
                              "with --format")
        if not found:
            raise usage_error(f"{folder} has no decode graph{' for ' + fmt if fmt else ''}. Export one with "
                              "'hfexport export MODEL --for-generation --multi-token-decode --static-cache N -o "
                              f"{folder}'.")
        path = found[0]
    if not path.is_file():
        raise usage_error(f"{path} is named in {MANIFEST} but missing; export again")
    if manifest and not manifest.get("static_cache") and manifest.get("components", {}).get("decode"):
        raise usage_error(f"{folder}'s decode graph was exported without a static cache, which the decode loop "
                          "needs; export again with --for-generation --multi-token-decode --static-cache N")
    return path, FORMAT_BY_SUFFIX[path.suffix], manifest


def eager_generate(model: Any, prompt: Any, max_new_tokens: int, max_cache_len: int) -> tuple[list[int], float]:
    """Greedy ``model.generate`` with a static cache of the same length; (new tokens, seconds)."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                              num_beams=1, cache_implementation="static", max_cache_len=max_cache_len,
                              pad_token_id=getattr(model.generation_config, "pad_token_id", None) or 0)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    return out[0, prompt.shape[1]:].tolist(), time.perf_counter() - start


def cmd_run(args: argparse.Namespace, progress: Progress) -> tuple[int, dict[str, Any]]:
    folder = Path(args.dir)
    path, backend, manifest = find_decode_artifact(folder, args.format)
    model_folder = check_model_folder(args.compare_eager) if args.compare_eager else None
    vocab = manifest.get("model_config", {}).get("vocab_size") or (
        manifest.get("model_config", {}).get("text_config", {}) or {}).get("vocab_size")
    if vocab and max(args.prompt_ids) >= vocab:
        raise usage_error(f"--prompt-ids holds {max(args.prompt_ids)}, but the vocabulary has {vocab} tokens "
                          f"(ids 0..{vocab - 1})")
    result: dict[str, Any] = {"artifact": str(path), "backend": backend, "prompt_ids": args.prompt_ids,
                              "max_new_tokens": args.max_new_tokens}
    import torch

    from .runtime.decode import decode_loop
    # Graphs exported with a symbolic cache axis (ONNX) cannot tell the loop their length: the manifest can.
    cache_len = args.max_cache_len or manifest.get("static_cache")
    options = {"max_cache_len": int(cache_len)} if cache_len else {}
    with progress.step(f"loading {path.name} ({backend})"):
        try:
            loop = decode_loop(str(path), backend, **options)
        except (ImportError, ModuleNotFoundError, AttributeError) as exc:
            raise export_failed(f"the {backend} decode loop is not available here: {type(exc).__name__}: {exc}. "
                                "'hfexport env' lists usable backends; export with --format dynamo meanwhile.") from exc
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
    result.update(tokens=generated.tokens, prefill_s=generated.prefill_s, decode_s=generated.decode_s,
                  decode_steps=generated.steps, tokens_per_s=generated.tokens_per_s,
                  max_cache_len=loop.max_cache_len)
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
    lines = [f"backend: {result['backend']} ({Path(result['artifact']).name}, cache {result['max_cache_len']})",
             f"tokens: {','.join(str(t) for t in result['tokens'])}",
             f"prefill: {result['prefill_s'] * 1000:.1f} ms; decode: {result['decode_steps']} steps in "
             f"{result['decode_s']:.3f} s = {tps:.1f} tokens/s"]
    if "eager_tokens" in result:
        lines.append(f"eager:  {','.join(str(t) for t in result['eager_tokens'])}")
        lines.append("match: yes, the exported loop generates eager's tokens" if result["match"] else
                     "match: NO, the tokens differ from eager generate()")
    return "\n".join(lines)


# -- env --------------------------------------------------------------------------------------

def backend_status() -> list[dict[str, Any]]:
    """Per registered backend: are its packages importable, does validate_environment pass, is there a
    decode loop runner."""
    import importlib

    from . import AUTO_EXPORTER_MAPPING
    from .environment import is_importable
    from .runtime.decode import DECODE_LOOPS

    rows = []
    for name, cls in sorted(AUTO_EXPORTER_MAPPING.items()):
        missing = [p for p in cls.required_packages if not is_importable(p)]
        row: dict[str, Any] = {"backend": name, "exporter": cls.__name__, "missing_packages": missing}
        try:
            cls.validate_environment()
            row["environment"] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            row["environment"] = f"{type(exc).__name__}: {exc}"
        loop = DECODE_LOOPS.get(name)
        if loop:
            module, attr = loop.split(":")
            try:
                getattr(importlib.import_module(module), attr)
                row["decode_loop"] = "ok"
            except Exception as exc:  # noqa: BLE001
                row["decode_loop"] = f"unavailable: {type(exc).__name__}: {exc}"
        else:
            row["decode_loop"] = "none"
        row["usable"] = not missing and row["environment"] == "ok"
        rows.append(row)
    return rows


def cmd_env(args: argparse.Namespace, progress: Progress) -> tuple[int, dict[str, Any]]:
    from . import __version__
    from .environment import environment_report

    packages = [{"package": p.name, "pinned": p.pinned, "installed": p.installed,
                 "status": "missing" if p.missing else ("DRIFT" if p.drift else "ok")} for p in environment_report()]
    return EXIT_OK, {"hfexport": __version__, "python": sys.version.split()[0], "packages": packages,
                     "backends": backend_status()}


def format_env(result: Mapping[str, Any]) -> str:
    lines = [f"hfexport {result['hfexport']} on Python {result['python']}", "",
             f"{'package':<16} {'pinned':<12} {'installed':<16} status"]
    for p in result["packages"]:
        lines.append(f"{p['package']:<16} {p['pinned'] or '-':<12} {p['installed'] or '-':<16} {p['status']}")
    drift = [p["package"] for p in result["packages"] if p["status"] != "ok"]
    if drift:
        lines.append(f"drift from the tested pins: {', '.join(drift)} (exports usually still work; pin for production)")
    lines += ["", f"{'backend':<11} {'usable':<7} {'environment':<40} decode loop"]
    for b in result["backends"]:
        env = b["environment"] if len(b["environment"]) <= 40 else b["environment"][:37] + "..."
        lines.append(f"{b['backend']:<11} {'yes' if b['usable'] else 'no':<7} {env:<40} {b['decode_loop'][:60]}")
    return "\n".join(lines)


# -- entry point ------------------------------------------------------------------------------

def format_export(result: Mapping[str, Any], out_dir: str) -> str:
    lines = [f"exported {result.get('model_class', '?')} to {result['format']} in {result.get('export_s', 0):.1f}s:"]
    for name, comp in result.get("components", {}).items():
        lines.append(f"  {name:<16} {Path(out_dir) / comp['file']}")
    for check in result.get("check", []):
        lines.append(format_check(check))
    lines.append(f"manifest: {Path(out_dir) / MANIFEST}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``hfexport`` console script; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args)
    progress = Progress(quiet=args.quiet or False)
    handlers = {"export": cmd_export, "run": cmd_run, "env": cmd_env}
    try:
        code, result = handlers[args.command](args, progress)
    except CliError as exc:
        if args.verbose and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        print(f"hfexport {args.command}: error: {exc}", file=sys.stderr)
        if args.json:
            emit_json({"command": args.command, "exit_code": exc.code, "status":
                       "usage_error" if exc.code == EXIT_USAGE else "failed", "error": str(exc)})
        return exc.code
    except KeyboardInterrupt:
        print("hfexport: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug of ours must still give exit 3 and a way forward
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        message = (f"unexpected {type(exc).__name__}: {exc}. This is a bug in hfexport's command line; rerun with "
                   "-v for the traceback and report it (the Python API, hfexport.AutoHfExporter, may work meanwhile).")
        print(f"hfexport {args.command}: error: {message}", file=sys.stderr)
        if args.json:
            emit_json({"command": args.command, "exit_code": EXIT_FAILED, "status": "failed", "error": message})
        return EXIT_FAILED
    result = {"command": args.command, "exit_code": code, **result}
    if args.json:
        emit_json(result)
    elif args.command == "export":
        print(format_export(result, args.output))
    elif args.command == "run":
        print(format_run(result))
    else:
        print(format_env(result))
    if code == EXIT_MISMATCH and not args.json:
        print("hfexport: outputs differ from eager beyond the tolerance (exit 1). Look at the worst output "
              "above; try --no-dynamic, another --opset, or report it with hfexport.json.", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
