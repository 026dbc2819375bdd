"""``hfexport export --check``: load every artifact back from disk, run it, and compare it with eager PyTorch.

The judge's part of the ``hfexport`` command, added to it through the entry-point group ``hfexport.checkers``
(``pyproject.toml``), so the library imports nothing of the judge. The verdict is ``pytest_hfexport.compare``
(the one comparison of this repository: per-backend and per-dtype tolerances, missing outputs, shapes, dtype
kinds); this module runs both sides, names their outputs with ``pytest_hfexport.naming.flat_named`` and turns
the result into the rows the command prints and records in hfexport.json.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hfexport.cli.inputs import sample_inputs
from hfexport.cli.progress import Progress

from .compare import FP32_ATOL

# The max abs error each backend must meet on float32 outputs (its measured tolerance, docs/plugin.md).
TOLERANCE = dict(FP32_ATOL)


def _rows(names: Any, result: Any) -> list[dict[str, Any]]:
    """One row per eager output, in eager's order: its max abs error, or why it could not be compared."""
    rows = []
    for name in names:
        diff = result.outputs.get(name)
        if diff is None:
            rows.append(
                {"output": name, "max_abs_error": None, "problem": "missing from the artifact's outputs", "ok": False}
            )
            continue
        error = diff.max_abs if math.isfinite(diff.max_abs) else None  # inf: shapes differ, no error to state
        rows.append({"output": name, "max_abs_error": error, "problem": diff.note or None, "ok": diff.ok})
    return rows


def check_artifact(
    path: Path, module: Any, kwargs: Mapping[str, Any], backend: str, atol: Any, label: str
) -> dict[str, Any]:
    """Load ``path`` back from disk with hfexport.runtime and compare it with ``module(**kwargs)``.

    ``atol`` (a float, or a ``compare.Tolerance``) overrides the verdict engine's tolerance for every output;
    None keeps its per-dtype bars."""
    import torch

    from hfexport import runtime

    from .compare import compare
    from .naming import flat_named

    tolerance = atol if atol is not None else TOLERANCE[backend]
    result: dict[str, Any] = {"artifact": path.name, "inputs": label, "tolerance": _described(tolerance)}
    try:
        with torch.no_grad():
            reference = flat_named(module(**copy.deepcopy(dict(kwargs))))
    except Exception as exc:
        result.update(
            status="error",
            outputs=[],
            error=f"the eager model itself failed on these inputs, so there "
            f"is nothing to compare with: {type(exc).__name__}: {str(exc)[:600]}",
        )
        return result
    try:
        runner = runtime.load(path)
        flat = runner.flatten_inputs(copy.deepcopy(dict(kwargs)))
        flat = {k: v for k, v in flat.items() if k in set(runner.input_names)}
        got = runner(flat)
    except Exception as exc:
        result.update(status="error", error=f"{type(exc).__name__}: {str(exc)[:800]}", outputs=[])
        return result
    verdict = compare(reference, got, backend, tolerance=atol, label=label)
    rows = _rows(reference, verdict)
    errors = [r["max_abs_error"] for r in rows if r["max_abs_error"] is not None]
    result.update(
        outputs=rows,
        max_abs_error=max(errors) if errors else None,
        status="pass" if rows and verdict.ok else "mismatch",
    )
    if verdict.extra:  # informational: the artifact returns more than eager does
        result["extra_outputs"] = list(verdict.extra)
    if not verdict.ok:
        from .localise import Artifact, locate

        result["first_divergence"] = locate(module, kwargs, backend, Artifact(path), tolerance=atol).to_dict()
    return result


def check_all(
    args: argparse.Namespace,
    model: Any,
    inputs: Mapping[str, Any],
    generation_config: Any,
    dynamic: bool,
    paths: Mapping[str, Path],
    progress: Progress,
) -> list[dict[str, Any]]:
    """Every artifact of an export against eager: generation components on the inputs ``generate()`` gave
    each of them, a plain export on the sample (and, when dynamic, on another batch and length)."""
    import torch

    backend, atol = args.format, args.atol
    scheme = getattr(args, "quantize", None)
    if scheme:  # a quantized artifact is checked against eager running the same quantization (the judge's own)
        from .quantized_reference import TOLERANCE as QUANTIZED_TOLERANCE
        from .quantized_reference import quantized_copy

        model = quantized_copy(model, scheme, args.group_size)
        atol = atol if atol is not None else QUANTIZED_TOLERANCE.get((scheme, backend))
    results = []
    with progress.step("checking artifacts against eager"):
        if args.for_generation:
            from hfexport.generation import decompose_for_generation

            components = decompose_for_generation(model, inputs, generation_config, args.multi_token_decode)
            for name, path in paths.items():
                module, kwargs = components[name]
                results.append(check_artifact(path, module, kwargs, backend, atol, "captured generate() call"))
        else:
            results.append(check_artifact(paths["model"], model, inputs, backend, atol, "sample inputs"))
            if dynamic:  # the artifact must also serve another batch and sequence length
                torch.manual_seed(args.seed + 1)
                other = sample_inputs(model, args.batch + 1, args.seq_len + 3, False)
                label = f"other shape: batch {args.batch + 1}, seq {args.seq_len + 3}"
                results.append(check_artifact(paths["model"], model, other, backend, atol, label))
    return results


def _described(tolerance: Any) -> Any:
    """A float tolerance as it is (hfexport.json keeps a number); a ``Tolerance`` as its text."""
    return tolerance if isinstance(tolerance, (int, float)) else str(tolerance)


def format_check(result: Mapping[str, Any]) -> str:
    value = result["tolerance"]
    shown = f"{value:g}" if isinstance(value, (int, float)) else value
    head = f"check {result['artifact']} ({result['inputs']}, tolerance {shown}): {result['status']}"
    if result["status"] == "error":
        return head + f"\n  {result['error']}"
    lines = [head]
    width = max([len(r["output"]) for r in result["outputs"]] + [6])
    for r in result["outputs"]:
        err = "-" if r["max_abs_error"] is None else f"{r['max_abs_error']:.2e}"
        verdict = "ok" if r["ok"] else (r["problem"] or "MISMATCH")
        lines.append(f"  {r['output']:<{width}}  {err:>9}  {verdict}")
    if result.get("first_divergence"):
        from .localise import Divergence

        lines.append(f"  {Divergence(**result['first_divergence']).describe()}")
    return "\n".join(lines)
