"""Trace a model straight into a decomposed ATen program: one trace where torch.onnx needs two.

``torch.export.export`` gives a training-IR program (pre-dispatch ATen, composite ops whole); torch.onnx then
runs ``run_decompositions(table)``, which traces that program a second time, functionalised and post-dispatch,
with the ONNX decomposition table. The second trace costs as much as the first. torch.export's own post-dispatch
entry (``torch.export._trace._export(..., pre_dispatch=False)``) traces the model once into the same IR; given
the same table, split the way ``run_decompositions`` splits it (composite-implicit ops kept whole or decomposed
by the table's callable, every other entry applied while tracing), it records the same graph. So the ONNX
exporter traces once and skips the decomposition pass (``python benchmarks/export_time.py --backends onnx``).

Both torch hooks used here are private; ``tests/test_decomposed_trace.py`` compares each zoo-sized graph this
trace gives with the two-trace one, so a torch upgrade that changes either shows there.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

DecompTable = Mapping[Any, Callable]


def split_table(table: DecompTable) -> tuple[dict[Any, Callable], dict[Any, Callable]]:
    """(composite-implicit ops -> callable or torch's "keep whole" marker, every other entry): the split
    ``ExportedProgram.run_decompositions`` makes, so a one-pass trace keeps and decomposes the same ops."""
    from torch.export.exported_program import _split_decomp_table_to_cia_and_python_decomp

    cia_table, python_table = _split_decomp_table_to_cia_and_python_decomp(dict(table))
    return cia_table, python_table


@contextlib.contextmanager
def _decomposing(python_table: dict[Any, Callable], cia_table: dict[Any, Callable]) -> Iterator[None]:
    """While active, torch.export's post-dispatch trace applies ``python_table`` and keeps or decomposes the
    composite-implicit ops as ``cia_table`` says. The module attribute comes back after, failed or not."""
    import torch.export._trace as export_trace
    from torch.export.exported_program import _override_composite_implicit_decomp

    original = export_trace._export_to_aten_ir
    export_trace._export_to_aten_ir = functools.partial(original, decomp_table=python_table)
    try:
        with _override_composite_implicit_decomp(cia_table):
            yield
    finally:
        export_trace._export_to_aten_ir = original


def export_decomposed(
    model: torch.nn.Module,
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    table: tuple[dict[Any, Callable], dict[Any, Callable]],
    *,
    strict: bool = False,
    prefer_deferred_runtime_asserts_over_guards: bool = False,
) -> torch.export.ExportedProgram:
    """Export of ``model(**kwargs)`` into functional post-dispatch ATen, decomposed by ``table``
    (``split_table``'s pair): what ``torch.export.export(...).run_decompositions(table)`` gives, in one trace.
    In-place writes to inputs come out as input mutations, as after ``run_decompositions``."""
    import torch.export._trace as export_trace

    cia_table, python_table = table
    with _decomposing(python_table, cia_table):
        return export_trace._export(
            model,
            (),
            kwargs,
            dynamic_shapes,
            strict=strict,
            pre_dispatch=False,
            prefer_deferred_runtime_asserts_over_guards=prefer_deferred_runtime_asserts_over_guards,
        )
