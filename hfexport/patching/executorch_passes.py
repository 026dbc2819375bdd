"""Edge-graph passes hfexport runs between ``to_edge_transform_and_lower`` and ``to_executorch``.

One table (``EDGE_PASSES``), each entry a function over the lowered edge program's graph module that
returns how many nodes it changed, with the reason it exists. They remove work the portable kernels would
otherwise do on every call of the program, outside any delegate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EdgePass:
    name: str
    run: Callable[[torch.fx.GraphModule], int]
    reason: str


def _same_shape(a: Any, b: Any) -> bool:
    """Whether two fake tensors provably have one shape (symbolic sizes compared without adding a guard)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if a is None or b is None or not hasattr(a, "shape") or not hasattr(b, "shape") or a.dim() != b.dim():
        return False
    return all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape)) and a.dtype == b.dtype


def remove_noop_expand_copies(graph_module: torch.fx.GraphModule) -> int:
    """Drop ``expand_copy`` nodes whose output has their input's shape: identity, but a full copy at run time."""
    from executorch.exir.dialects._ops import ops as exir_ops

    target = exir_ops.edge.aten.expand_copy.default
    removed = 0
    for node in list(graph_module.graph.nodes):
        if node.op != "call_function" or node.target != target:
            continue
        source = node.args[0]
        if not isinstance(source, torch.fx.Node) or not _same_shape(source.meta.get("val"), node.meta.get("val")):
            continue
        node.replace_all_uses_with(source)
        graph_module.graph.erase_node(node)
        removed += 1
    if removed:
        graph_module.graph.lint()
        graph_module.recompile()
    return removed


EDGE_PASSES: tuple[EdgePass, ...] = (
    EdgePass(
        "remove_noop_expand_copies",
        remove_noop_expand_copies,
        reason="to_edge decomposes attention's matmuls with an expand of each operand to the broadcast shape; for "
        "the static cache that expand is the identity, and its portable expand_copy copied every layer's whole "
        "K and V cache on each decode step. Remove when EXIR drops identity expands itself.",
    ),
)


def run_edge_passes(edge: Any) -> dict[str, int]:
    """Run every ``EDGE_PASSES`` entry over each method of an ``EdgeProgramManager``, in place."""
    changed: dict[str, int] = {}
    for method in edge.methods:
        module = edge.exported_program(method).graph_module
        for edge_pass in EDGE_PASSES:
            count = edge_pass.run(module)
            if count:
                changed[edge_pass.name] = changed.get(edge_pass.name, 0) + count
    if changed:
        logger.debug("edge passes changed %s", changed)
    return changed
