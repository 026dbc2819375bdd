"""Cache updates written in place in a torch.export module, instead of a copy of the cache and a copy back.

``ExportedProgram.module()`` runs a functional graph: a static cache's update is ``index_copy(cache, ...)``,
which allocates and fills a whole new cache tensor, and the mutated input is then written back with
``copy_(cache, new)``. Per decode step that is two full copies of every layer's keys and values (on the
benchmark's llama, 512 slots x 4 layers, about half of each step's time went to ``aten::copy_``). When the
only readers of the cache input run before its update (shape guards), the update can write into the
input directly and the write-back goes away: the results are the same tensors with the same values.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)

# Functional update -> its in-place twin (same arguments, first argument updated and returned).
IN_PLACE: dict[Any, Any] = {
    torch.ops.aten.index_copy.default: torch.ops.aten.index_copy_.default,
    torch.ops.aten.index_put.default: torch.ops.aten.index_put_.default,
    torch.ops.aten.scatter.src: torch.ops.aten.scatter_.src,
    torch.ops.aten.scatter.value: torch.ops.aten.scatter_.value,
}


def reinplace_input_updates(module: torch.fx.GraphModule) -> int:
    """Rewrite ``copy_(x, update(x, ...))`` on a graph input ``x`` into ``update_(x, ...)`` where that is exact:
    ``update`` is a functional op with an in-place twin, its first argument is ``x`` itself (not a view), and
    every other reader of ``x`` runs before it. Returns how many updates were rewritten; the module is
    recompiled when any was."""
    graph = module.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    rewritten = 0
    for copy in list(graph.nodes):
        if copy.op != "call_function" or copy.target is not torch.ops.aten.copy_.default:
            continue
        target, update = copy.args[0], copy.args[1]
        if getattr(target, "op", None) != "placeholder" or getattr(update, "op", None) != "call_function":
            continue
        twin = IN_PLACE.get(update.target)
        if twin is None or not update.args or update.args[0] is not target or update.kwargs:
            continue
        if any(u not in (update, copy) and order[u] > order[update] for u in target.users):
            continue  # the old cache is still read after the update
        update.target = twin
        copy.replace_all_uses_with(target)
        graph.erase_node(copy)
        rewritten += 1
    if rewritten:
        graph.lint()
        module.recompile()
        logger.debug("wrote %d cache updates in place", rewritten)
    return rewritten
