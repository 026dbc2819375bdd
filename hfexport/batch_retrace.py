"""A dynamic export whose batch-1 trace pinned the batch axis: traced again from batch 2, then opened to batch 1.

Some forwards take a view whose legality depends on strides: torch's ``MultiheadAttention`` projects a
transposed ``(seq, batch, E)`` tensor (SigLIP's pooling head), Hiera unrolls its patches, LongT5 and WavLM
reshape transposed blocks. At batch 1 any such view is legal, so even a size-oblivious trace records
``batch == 1`` and the program refuses every other batch (ONNX keeps the batch in a Reshape's shape). From a
batch-2 sample the same code records ``batch != 1`` and keeps the general op (a copy before the view), which
computes the same at batch 1: only guards refuse it. So the exporter traces again from the sample repeated
to batch 2, drops the guards on that batch which the caller's batch-1 sample fails (``batch != 1`` and
products with it), lowers the batch range back to 1, and checks the program at the batch-1 sample against the
eager model. If any step fails, the batch-1 program is kept (with a warning): never a worse export.

Guards are read from ``ExportedProgram._guards_code``, the source torch compiles into ``program.module()``'s
input check; the tests fail if torch changes its form.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import torch

logger = logging.getLogger(__name__)

_PINNED = re.compile(r"L\['(\w+)'\]\.size\(\)\[0\] (?:== 1|<= 1|< 2)")


# What guard code may call: torch 2.14 writes sym_min/sym_max into guards on sizes (torch.sym_min of ints is min).
_GUARD_GLOBALS = {"__builtins__": {}, "max": max, "min": min, "abs": abs, "torch": torch}


def pinned_batch_inputs(program: torch.export.ExportedProgram) -> list[str]:
    """Inputs whose leading axis the program accepts only at size 1."""
    return sorted({m.group(1) for g in getattr(program, "_guards_code", []) or [] if (m := _PINNED.fullmatch(g))})


def batch_one_sample(graph_inputs: Mapping[str, Any], names: list[str]) -> bool:
    """Every pinned input is a tensor of batch 1 in the sample (the case a batch-2 retrace can open)."""
    return all(isinstance(t := graph_inputs.get(n), torch.Tensor) and t.dim() and t.shape[0] == 1 for n in names)


def accept_batch_one(program: torch.export.ExportedProgram, names: list[str], sample: Mapping[str, Any]) -> list[str]:
    """Drop the guards on the batch of ``names`` that the batch-1 ``sample`` fails (``batch != 1``, or products
    with it such as ``64 * batch * ... // ... != 1``) and lower those batch ranges from 2 to 1, in place. A
    guard that cannot be evaluated here is kept. Returns the guards dropped."""
    from torch.utils._sympy.value_ranges import ValueRanges

    def fails_at_sample(guard: str) -> bool:
        if not any(f"L['{name}'].size()[0]" in guard for name in names):
            return False
        try:
            return not eval(guard, _GUARD_GLOBALS, {"L": sample})  # noqa: S307
        except Exception:
            return False

    dropped = [g for g in program._guards_code if fails_at_sample(g)]
    program._guards_code = [g for g in program._guards_code if g not in dropped]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for name in names:
        node = placeholders.get(name)
        size = node.meta.get("val").shape[0] if node is not None and node.meta.get("val") is not None else None
        if not isinstance(size, torch.SymInt):
            continue
        symbol = size.node.expr
        if symbol in program.range_constraints and program.range_constraints[symbol].lower == 2:
            program.range_constraints[symbol] = ValueRanges(1, program.range_constraints[symbol].upper)
    return dropped


# Attribute of an accepted batch-2 program that lists the guards ``accept_batch_one`` dropped: a later retrace of
# the program (functionalisation) derives its guards again from the batch-2 trace, and they must go again.
DROPPED_ATTR = "_hfexport_dropped_guards"


def remember_dropped(program: torch.export.ExportedProgram, dropped: list[str]) -> None:
    setattr(program, DROPPED_ATTR, list(dropped))


def drop_again(program: torch.export.ExportedProgram, source: torch.export.ExportedProgram) -> list[str]:
    """Remove from ``program`` (a retrace of ``source``) the guards ``accept_batch_one`` dropped from ``source``;
    returns those that had come back."""
    dropped = getattr(source, DROPPED_ATTR, [])
    back = [g for g in program._guards_code if g in dropped]
    program._guards_code = [g for g in program._guards_code if g not in dropped]
    return back


def differs_from_eager(model: Any, program: torch.export.ExportedProgram, inputs: Mapping[str, Any]) -> str:
    """Empty when ``program`` gives the eager model's outputs at ``inputs`` (run on copies); else what differs."""
    from torch.utils import _pytree

    with torch.no_grad():
        expected = _pytree.tree_leaves(model(**{k: v.clone() for k, v in inputs.items()}))
        try:
            got = _pytree.tree_leaves(program.module()(**{k: v.clone() for k, v in inputs.items()}))
        except Exception as exc:  # a guard still refuses batch 1, or the general op fails there
            return f"fails at the batch-1 sample: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if len(expected) != len(got):
        return f"returns {len(got)} outputs, eager {len(expected)}"
    for index, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, torch.Tensor) and not (isinstance(g, torch.Tensor) and _close(e, g)):
            return f"differs from eager at the batch-1 sample (output {index})"
    return ""


def _close(expected: torch.Tensor, got: torch.Tensor) -> bool:
    if expected.shape != got.shape or expected.dtype != got.dtype:
        return False
    if expected.is_floating_point():
        return torch.allclose(expected, got, atol=1e-4, rtol=1e-3, equal_nan=True)
    return torch.equal(expected, got)
