"""Retraces EXIR's lowering runs for nothing, skipped while hfexport lowers (the ``executorch_lowering`` set).

``to_edge_transform_and_lower`` retraces a program three times to decompose it (``run_decompositions``: first with
no table, to functionalise, then with the table that keeps the partitioner's ops, then with the full table for
what the partitioner refused), and XNNPACK's preprocess runs 17 passes over each partition, most of which end by
retracing the partition on fake tensors to refresh its metadata. On a tiny Llama the decomposition retraces and
XNNPACK's preprocess took 12 of the export's 18 seconds (``python benchmarks/export_stages.py``, its ``two-pass``
column).

hfexport's ExecuTorch exporter traces once, straight into the functional ATen program decomposed by the first
table (``decomposition_table``, ``decomposed_trace``); every decomposition retrace then finds nothing left to
do. Two patches skip a retrace only where it would record the graph it was given:

* ``run_decompositions`` of an ATen-dialect program (functional by construction) in which no node calls an op of
  the table (reading a symbolic size aside: it decomposes to itself) returns the program itself;
* an XNNPACK pass whose only use of the retrace is refreshing metadata (it overrides none of EXIR's retrace
  hooks, such as ``call_operator``), and whose own rewrite left the partition's graph as it was, skips the
  retrace.

A third skips the retrace of an EXIR pass that finds nothing it rewrites in the graph, told by a predicate per pass
(``edge_pass_triggers``; ``tests/test_executorch_edge_skips.py`` holds each against its pass): ``to_edge``'s
ATen-to-edge passes, XNNPACK's ``ConstPropPass`` and ``DimOrderOpsRevertPass``, ``to_executorch``'s
``LegalizePortableDimOrderPass``, and the plain retrace ``SpecPropPass`` runs to refresh every node's fake value,
skipped where every node has one (``tests/test_executorch_spec_refresh.py`` compares the emitted programs).

``tests/test_executorch_one_trace.py`` checks that the lowered programs are the ones EXIR gives without the one
trace and the skips (same ops, same delegate graphs), and that the XNNPACK skip leaves every delegate's bytes as
they were.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...patching.registry import register_patch
from ..fixes import LOWERING
from . import edge_pass_triggers

logger = logging.getLogger(__name__)

# Size reads a retrace records again as they were: their table entry (``x.size(dim)``) traces back to itself.
SIZE_READS = ("sym_size.int", "sym_stride.int", "sym_numel.default", "sym_storage_offset.default")
# Attribute on an XNNPACK pass instance: (graph module, its fingerprint) when the pass began.
_GRAPH_AT_START = "_hfexport_graph_at_start"


def _size_reads() -> set[Any]:
    found: set[Any] = set()
    for name in SIZE_READS:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            found.add(op)
    return found


def _calls(graph_module: torch.fx.GraphModule, ops: Any) -> Iterator[torch.fx.Node]:
    """The nodes of ``graph_module`` and of its submodules' graphs that call one of ``ops``."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            yield from (n for n in module.graph.nodes if n.op == "call_function" and n.target in ops)


def calls_any(graph_module: torch.fx.GraphModule, table: Any) -> list[str]:
    """The ops of ``table`` that a node of ``graph_module`` (or of a submodule's graph) calls, size reads aside."""
    return sorted({str(n.target) for n in _calls(graph_module, set(table.keys()) - _size_reads())})


def _materialised(table: Any) -> dict[Any, Callable]:
    return dict(table.materialize()) if hasattr(table, "materialize") else dict(table)


def _run_decompositions_when_needed(original: Callable) -> Callable:
    @functools.wraps(original)
    def run_decompositions(self: Any, decomp_table: Any = None, *args: Any, **kwargs: Any) -> Any:
        if decomp_table is not None and self.verifier.dialect == "ATEN":
            table = _materialised(decomp_table)
            if not calls_any(self.graph_module, table):
                logger.debug("run_decompositions skipped: the program calls none of the table's %d ops", len(table))
                return self
        return original(self, decomp_table, *args, **kwargs)

    return run_decompositions


register_patch(
    LOWERING,
    "torch.export.exported_program.ExportedProgram.run_decompositions",
    reason="to_edge_transform_and_lower retraces an already functional ATen program with tables none of whose "
    "ops it calls (hfexport traces once into that program); the retrace records the same graph. Drop when "
    "EXIR skips such retraces itself.",
    speedup=True,
)(_run_decompositions_when_needed)


def fingerprint(graph_module: torch.fx.GraphModule) -> tuple[tuple[str, ...], ...]:
    """The graph's structure: every node's kind, target, name, arguments; a rewrite changes it."""
    return tuple((n.op, str(n.target), n.name, str(n.args), str(n.kwargs)) for n in graph_module.graph.nodes)


@functools.cache
def _retrace_hooks() -> frozenset[str]:
    """The methods of EXIR's ``ExportPass`` (and its EXIR bases) that the retrace calls, ``call`` aside."""
    from executorch.exir.pass_base import ExportPass

    return frozenset(
        name
        for base in ExportPass.__mro__
        if base.__module__.startswith("executorch")
        for name, value in vars(base).items()
        if callable(value) and not name.startswith("__") and name != "call"
    )


def retraces_only_to_refresh(pass_class: type) -> bool:
    """Whether ``pass_class`` (an EXIR ``ExportPass``) leaves the retrace to EXIR: none of the classes between
    it and ``ExportPass`` defines a retrace hook (``call_operator``, ``placeholder``, ...), only ``call``."""
    from executorch.exir.pass_base import ExportPass

    if not issubclass(pass_class, ExportPass):
        return False
    for base in pass_class.__mro__:
        if base is ExportPass:
            return True
        if _retrace_hooks() & set(vars(base)):
            return False
    return False


def _record_graph_at_start(original: Callable) -> Callable:
    @functools.wraps(original)
    def _transform(program: Any, *passes: Any, **kwargs: Any) -> Any:
        for pass_ in passes:
            if retraces_only_to_refresh(type(pass_)):
                setattr(pass_, _GRAPH_AT_START, (program.graph_module, fingerprint(program.graph_module)))
        return original(program, *passes, **kwargs)

    return _transform


def _retrace_only_a_changed_graph(original: Callable) -> Callable:
    @functools.wraps(original)
    def call(self: Any, graph_module: torch.fx.GraphModule) -> Any:
        start = self.__dict__.get(_GRAPH_AT_START)
        if start is not None and start[0] is graph_module and start[1] == fingerprint(graph_module):
            from torch.fx.passes.infra.pass_base import PassResult

            return PassResult(graph_module, False)
        return original(self, graph_module)

    return call


register_patch(
    LOWERING,
    "executorch.backends.xnnpack._passes._transform",
    reason="XNNPACK's pass manager runs 17 passes per partition, and most retrace the partition to refresh its "
    "metadata even when they rewrote nothing; this records each such pass's graph as it starts. Drop when the "
    "passes retrace only after a rewrite.",
    speedup=True,
)(_record_graph_at_start)
register_patch(
    LOWERING,
    "executorch.exir.pass_base.ExportPass.call",
    reason="with the graph recorded above unchanged, the metadata retrace of an XNNPACK pass gives the graph it "
    "was given; skipped. Passes no start was recorded for retrace as before.",
    speedup=True,
)(_retrace_only_a_changed_graph)


def same_graph_in_a_new_module(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """What a retrace that rewrote nothing gives: a new module over a copy of the graph (every node's metadata as
    it was), with the same attributes, code generator and module metadata."""
    graph = torch.fx.Graph(tracer_cls=graph_module.graph._tracer_cls)
    value = graph.graph_copy(graph_module.graph, {})
    output = graph_module.graph.output_node()
    graph.output(value, type_expr=output.type).meta = dict(output.meta)
    graph._codegen = graph_module.graph._codegen
    module = torch.fx.GraphModule(graph_module, graph)
    module.meta = graph_module.meta.copy()
    return module


def _retrace_only_what_an_edge_pass_rewrites(original: Callable) -> Callable:
    @functools.wraps(original)
    def call(self: Any, graph_module: torch.fx.GraphModule) -> Any:
        if edge_pass_triggers.rewrites_nothing(self, graph_module):
            from executorch.exir.pass_base import ExportPass
            from torch.fx.passes.infra.pass_base import PassResult

            logger.debug("%s skipped: nothing in the graph it rewrites", type(self).__name__)
            if type(self) is ExportPass:
                # A plain retrace's caller takes its module as new: to_executorch copies the last pass's module
                # onto the program's, which empties a module copied onto itself.
                return PassResult(same_graph_in_a_new_module(graph_module), False)
            return PassResult(graph_module, False)
        return original(self, graph_module)

    return call


register_patch(
    LOWERING,
    "executorch.exir.pass_base.ExportPass.call",
    reason="to_edge retraces the whole program once per ATen-to-edge pass, XNNPACK once per partition for "
    "ConstPropPass and DimOrderOpsRevertPass, to_executorch once more to legalize dim orders and once to refresh "
    "the metadata SpecPropPass reads, and most find no op they rewrite or no value out of date "
    "(edge_pass_triggers reads that from the graph); their retrace then records the graph it was given. Skipped "
    "in that case. Drop when EXIR's passes skip such retraces themselves.",
    speedup=True,
)(_retrace_only_what_an_edge_pass_rewrites)


@functools.cache
def split_decomposition_table(backend: str) -> Any:
    """``decomposition_table(backend)`` split for a one-pass trace (``decomposed_trace.split_table``), or None;
    built once per backend, read only."""
    from ...decomposed_trace import split_table

    table = decomposition_table(backend)
    return None if table is None else split_table(table)


def decomposition_table(backend: str) -> Any:
    """The table ``to_edge_transform_and_lower`` decomposes a program with before partitioning, for ``backend``:
    EXIR's default table less the ops XNNPACK keeps whole (that ExecuTorch accepts keeping), or the whole default
    table where no partitioner runs (``"portable"``). None for any other backend: its program is traced as is."""
    from executorch.exir.program._program import _remove_invalid_ops_for_not_decompose
    from executorch.exir.tracer import _default_decomposition_table

    table = _materialised(_default_decomposition_table())
    if backend == "portable":
        return table
    if backend != "xnnpack":
        return None
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    kept, _ = XnnpackPartitioner().ops_to_not_decompose(None)  # its op list does not depend on the program
    for op in _remove_invalid_ops_for_not_decompose(list(kept)):
        table.pop(op, None)
    return table
