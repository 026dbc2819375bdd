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
Library code logs through ``logging``; this package is the one place that prints: ``main`` writes
results to stdout, ``progress`` writes progress to stderr.

One module per job: ``arguments`` (options), ``loading`` (model folders), ``inputs`` (sample inputs),
``export``, ``checkers`` (``export --check``: a checker the judge registers), ``run``, ``env`` (the commands),
``manifest`` (hfexport.json), ``progress`` (stderr and logging), ``errors`` (exit codes). Importing this package
imports no torch, transformers, onnx or executorch: each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from .arguments import build_parser, format_of_suffix, formats, suffix_of
from .env import cmd_env, format_env
from .errors import EXIT_FAILED, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, CliError
from .export import cmd_export, format_export
from .manifest import MANIFEST, json_default
from .progress import Progress
from .progress import configure_logging as _configure_logging
from .run import cmd_run, format_run

__all__ = [
    "main",
    "build_parser",
    "CliError",
    "EXIT_OK",
    "EXIT_MISMATCH",
    "EXIT_USAGE",
    "EXIT_FAILED",
    "formats",
    "format_of_suffix",
    "suffix_of",
    "MANIFEST",
]


def emit_json(payload: Mapping[str, Any]) -> None:
    print(json.dumps(payload, indent=2, default=json_default), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``hfexport`` console script; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args)
    progress = Progress(quiet=args.quiet or False)
    from .checkers import commands

    added = {name: command for name, command in commands().items() if name not in ("export", "run", "env")}
    handlers = {"export": cmd_export, "run": cmd_run, "env": cmd_env, **{n: c.run for n, c in added.items()}}
    try:
        code, result = handlers[args.command](args, progress)
    except CliError as exc:
        if args.verbose and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        print(f"hfexport {args.command}: error: {exc}", file=sys.stderr)
        if args.json:
            emit_json(
                {
                    "command": args.command,
                    "exit_code": exc.code,
                    "status": "usage_error" if exc.code == EXIT_USAGE else "failed",
                    "error": str(exc),
                }
            )
        return exc.code
    except KeyboardInterrupt:
        print("hfexport: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug of ours must still give exit 3 and a way forward
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        message = (
            f"unexpected {type(exc).__name__}: {exc}. This is a bug in hfexport's command line; rerun with "
            "-v for the traceback and report it (the Python API, hfexport.AutoHfExporter, may work meanwhile)."
        )
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
    elif args.command in added:
        print(added[args.command].format_result(result))
    else:
        print(format_env(result))
    if code == EXIT_MISMATCH and args.command == "export" and not args.json:
        print(
            "hfexport: outputs differ from eager beyond the tolerance (exit 1). Look at the worst output "
            "above; try --no-dynamic, another --opset, or report it with hfexport.json.",
            file=sys.stderr,
        )
    return code
