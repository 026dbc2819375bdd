"""The command line's options: argparse, the option types, and the checks of options that do not go together."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import EXIT_USAGE, usage_error


def formats() -> tuple[str, ...]:
    """Every registered backend (``hfexport.backends``), read when the command line is built."""
    from ..backends import BACKENDS

    return tuple(BACKENDS)


def suffix_of(fmt: str) -> str:
    from ..backends import backend

    return backend(fmt).suffix


def format_of_suffix(suffix: str) -> str:
    from ..backends import backend_for_suffix

    return backend_for_suffix(suffix).name


EXECUTORCH_BACKENDS = ("xnnpack", "portable", "cuda")


# Each command's one-line help (in `hfexport --help`) and its description (in `hfexport <command> --help`).
COMMANDS: dict[str, tuple[str, str]] = {
    "export": (
        "export a local model folder",
        "Export a model folder written by save_pretrained. Plain exports are saved as "
        "DIR/model.<suffix>; with --for-generation each component as DIR/<component>.<suffix>. "
        "DIR/hfexport.json records what was exported, the config, versions, files and errors.",
    ),
    "run": (
        "run an exported static-cache decode loop",
        "Greedy decode with the exported 'decode' graph of DIR (exported with "
        "--for-generation --multi-token-decode --static-cache N): prefill the prompt, then one "
        "token per call. Prints the tokens and decode tokens/second.",
    ),
    "env": (
        "installed versions beside the pins, and usable backends",
        "Installed versions beside hfexport's tested pins (drift marked) and which export backends are usable here.",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error also says where to read the options (exit code 2, as argparse does)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nRun '{self.prog} --help' for the options.\n")


def _number_parser(kind: type, noun: str, smallest: float, rule: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that reads ``kind`` and refuses values below ``smallest`` with ``rule``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value < smallest:
            raise argparse.ArgumentTypeError(f"{value} {rule}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its "invalid ... value" message
    return parse


_positive_int = _number_parser(int, "an integer", 1, "must be 1 or more")
_tolerance = _number_parser(float, "a number", 0, "is negative; a tolerance is 0 or more")


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of token ids, e.g. 1,2,3") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more non-negative token ids, e.g. 1,2,3")
    return ids


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hfexport",
        description="Export transformers models from a local folder to torch.export "
        "(.pt2), ONNX (.onnx) or ExecuTorch (.pte), check them against eager, and run them.",
        epilog="Exit codes: 0 ok, 1 mismatch against eager, 2 usage error, 3 export failed.",
    )
    from .checkers import commands

    added = commands()
    names = [*COMMANDS, *(n for n in added if n not in COMMANDS)]
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(names) + "}", parser_class=_Parser)

    common = _Parser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        help="print a machine-readable result on stdout (progress and messages still go to stderr)",
    )
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines and no warnings")
    common.add_argument(
        "-v", "--verbose", action="store_true", help="log hfexport's INFO messages and full tracebacks on failure"
    )

    ex = sub.add_parser("export", parents=[common], help=COMMANDS["export"][0], description=COMMANDS["export"][1])
    ex.add_argument("path", help="local model folder (what save_pretrained writes: config.json + weights)")
    ex.add_argument("--format", "-f", required=True, help=f"one of {', '.join(formats())}")
    ex.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the artifacts (created)")
    ex.add_argument(
        "--for-generation",
        action="store_true",
        help="split into generation components (prefill, decode, encoders...) and export each",
    )
    ex.add_argument(
        "--multi-token-decode",
        action="store_true",
        help="one decode graph for 1..k query tokens (needs --for-generation)",
    )
    ex.add_argument(
        "--static-cache",
        type=_positive_int,
        metavar="N",
        help="export against a StaticCache of N slots (needs --for-generation); with "
        "--multi-token-decode this gives the decode graph 'hfexport run' drives",
    )
    ex.add_argument(
        "--dynamic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mark batch/sequence axes dynamic (default: on for --static-cache with "
        "--multi-token-decode, where the decode loop needs a symbolic query axis; off otherwise)",
    )
    ex.add_argument("--backend", choices=EXECUTORCH_BACKENDS, help="ExecuTorch delegate (default xnnpack)")
    ex.add_argument(
        "--quantize",
        metavar="SCHEME",
        help="weight quantization: int8 (every format), int4 (onnx: MatMulNBits, embeddings too), 8da4w or 8da8w "
        "(executorch: XNNPACK); docs/quantization.md",
    )
    ex.add_argument("--group-size", type=_positive_int, help="quantization group size (default: the scheme's, 32)")
    ex.add_argument("--opset", type=int, help="ONNX opset (default: the newest the installed onnxscript supports)")
    ex.add_argument(
        "--check",
        action="store_true",
        help="load every artifact back from disk and compare each "
        "output with eager PyTorch (within the backend's measured float32 tolerance, docs/plugin.md; looser for "
        "fp16/bf16, exact for integer and bool outputs)",
    )
    ex.add_argument("--atol", type=_tolerance, help="override the backend's tolerance for --check (every output)")
    ex.add_argument("--batch", type=_positive_int, default=1, help="batch size of the sample inputs (default 1)")
    ex.add_argument("--seq-len", type=_positive_int, default=8, help="tokens per sample row (default 8)")
    ex.add_argument("--attn-implementation", help="load the model with this attention (e.g. sdpa, eager)")
    ex.add_argument("--seed", type=int, default=0, help="seed of the random sample inputs (default 0)")

    run = sub.add_parser("run", parents=[common], help=COMMANDS["run"][0], description=COMMANDS["run"][1])
    run.add_argument("dir", help="folder written by 'hfexport export --for-generation'")
    run.add_argument("--prompt-ids", required=True, type=_token_ids, help="comma list of token ids, e.g. 1,2,3")
    run.add_argument("--max-new-tokens", type=_positive_int, default=16, help="tokens to generate (default 16)")
    run.add_argument(
        "--format",
        "-f",
        choices=formats(),
        help="which artifact to run when DIR holds several (default: the one hfexport.json names)",
    )
    run.add_argument(
        "--max-cache-len",
        type=_positive_int,
        help="resize the cache (the graph's cache axis is symbolic); default: the exported length",
    )
    run.add_argument("--warmup", type=int, default=0, help="untimed runs before the timed one (default 0)")
    run.add_argument(
        "--compare-eager",
        metavar="MODEL_PATH",
        help="also run eager model.generate with the same "
        "static cache and say whether the tokens match (exit 1 if not)",
    )

    sub.add_parser("env", parents=[common], help=COMMANDS["env"][0], description=COMMANDS["env"][1])
    for name, command in added.items():
        if name not in COMMANDS:
            parsed = sub.add_parser(name, parents=[common], help=command.HELP, description=command.DESCRIPTION)
            command.add_arguments(parsed)
    return parser


def validate_export_args(args: argparse.Namespace) -> None:
    """Options of ``export`` that argparse accepts one by one but that do not go together: usage errors."""
    if args.format not in formats():
        raise usage_error(f"unknown format {args.format!r}; use --format with one of: {', '.join(formats())}")
    if args.multi_token_decode and not args.for_generation:
        raise usage_error("--multi-token-decode shapes the decode component: add --for-generation")
    if args.static_cache and not args.for_generation:
        raise usage_error("--static-cache N sizes the generation cache: add --for-generation")
    if args.backend and args.format != "executorch":
        raise usage_error(
            f"--backend picks the ExecuTorch delegate; drop it, or use --format executorch (got --format {args.format})"
        )
    if args.opset is not None and args.format != "onnx":
        raise usage_error(f"--opset applies to ONNX only; drop it, or use --format onnx (got --format {args.format})")
    if args.opset is not None and args.opset < 18:
        raise usage_error(
            f"--opset {args.opset}: the torch.export-based ONNX exporter emits opset 18 or newer; "
            "pass 18 or more, or leave --opset out for the newest supported"
        )
    if args.group_size is not None and not args.quantize:
        raise usage_error("--group-size sizes the quantization groups: add --quantize SCHEME")
    if args.atol is not None and not args.check:
        raise usage_error("--atol sets the tolerance of --check: add --check")
    if args.static_cache and args.static_cache <= args.seq_len + 3:
        raise usage_error(
            f"--static-cache {args.static_cache} cannot hold the {args.seq_len}-token sample prompt "
            f"plus the decode steps captured; use --static-cache {args.seq_len + 8} or more, "
            "or a smaller --seq-len"
        )
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise usage_error(f"-o {args.output} is a file; pass a folder (it is created if missing)")
