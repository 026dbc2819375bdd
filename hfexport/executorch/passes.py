"""Edge-graph passes hfexport runs between ``to_edge_transform_and_lower`` and ``to_executorch``.

One table (``EDGE_PASSES``), each entry a function over one method's lowered edge program (an
``ExportedProgram``, changed in place) that returns how many nodes it changed, with the reason it exists.
They remove work the portable kernels would otherwise do on every call of the program, outside any delegate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import HfExportError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EdgePass:
    name: str
    run: Callable[[Any], int]
    reason: str


def _same_shape(a: Any, b: Any) -> bool:
    """Whether two fake tensors provably have one shape (symbolic sizes compared without adding a guard)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if a is None or b is None or not hasattr(a, "shape") or not hasattr(b, "shape") or a.dim() != b.dim():
        return False
    return all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape)) and a.dtype == b.dtype


def remove_noop_expand_copies(program: Any) -> int:
    """Drop ``expand_copy`` nodes whose output has their input's shape: identity, but a full copy at run time."""
    from executorch.exir.dialects._ops import ops as exir_ops

    graph_module = program.graph_module
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


def _mutable_inputs(program: Any) -> set[str]:
    """Placeholder names of the buffers the program mutates and of the user inputs it mutates."""
    signature = program.graph_signature
    mutated_buffers = set(signature.buffers_to_mutate.values())
    names = {name for name, buffer in signature.inputs_to_buffers.items() if buffer in mutated_buffers}
    return names | set(signature.user_inputs_to_mutate.values())


_VIEW_OPS = ("view", "alias", "expand", "slice", "select", "transpose", "permute", "squeeze", "unsqueeze", "as_strided")


def cache_updates_in_place(program: Any) -> int:
    """Turn ``index_put(cache, ...)`` into ``index_put_`` where ``cache`` is a mutable buffer or a mutated
    input that nothing reads after the update (every other user comes before it, and none is a view that could
    be read later). The write-back then needs no ``copy_``: the update's lineage reaches the input.

    EXIR's own reinplace pass also rewrites index_puts into intermediates without looking at their views; on
    the portable backend that changed llama's prefill outputs (max error 0.37), so only the cache update,
    whose aliases are known, is rewritten here."""
    from executorch.exir.dialects._ops import ops as exir_ops

    functional, inplace = exir_ops.edge.aten.index_put.default, exir_ops.edge.aten.index_put_.default
    graph_module, mutable = program.graph_module, _mutable_inputs(program)
    order = {node: i for i, node in enumerate(graph_module.graph.nodes)}
    updated = []
    for node in list(graph_module.graph.nodes):
        if node.op != "call_function" or node.target != functional:
            continue
        target = node.args[0]
        if not isinstance(target, torch.fx.Node) or target.op != "placeholder" or target.name not in mutable:
            continue
        others = [user for user in target.users if user is not node]
        if any(order[user] > order[node] or any(v in str(user.target) for v in _VIEW_OPS) for user in others):
            continue
        node.target = inplace
        updated.append(node)
    reverted = _keep_written_back_outputs_first(program, set(updated), inplace, functional)
    for node in updated:
        if node.target == inplace:
            _read_through_the_input(node)
    if updated:
        graph_module.recompile()
    return len(updated) - reverted


def _read_through_the_input(node: Any) -> None:
    """Make every reader of an in-place cache update (attention's read of the updated cache, the graph outputs)
    read the updated input itself.

    EXIR's memory planner skips in-place nodes when it sets lifetimes (``collect_specs_from_nodes``), so a read of
    the update's result did not keep the input's storage alive: a mutated user input (not a mutable buffer, which
    is never freed) was freed at its update, and the planner put later tensors on it. On llama's decode graph,
    with the sequence bound at the cache's 32 slots, the int64 cache length written at the end landed on layer 1's
    first key (the keys came back 0.32 off, the logits 1.1e-4). Read through the placeholder, every use counts,
    and EXIR's write-back still sees the output's in-place lineage (no ``copy_``). The update has no users left;
    EXIR keeps it as a mutating op."""
    source = node.args[0]
    node.replace_all_uses_with(source)


def _keep_written_back_outputs_first(program: Any, updated: set[Any], inplace: Any, functional: Any) -> int:
    """Turn back those of the ``updated`` nodes that would reorder the outputs a caller gets; returns how many.

    ``to_executorch`` writes back each mutated input whose output is not an in-place update of it with a ``copy_``,
    and moves those write-backs in front of every other output (EXIR's ``_insert_copy``), while the signature keeps
    the old order. The runtime returns the mutated user inputs first, in that new order (buffers stay inside the
    program). So an in-place update of a user input is safe only after its last written-back one: a static cache
    whose layers each hold an integer length (an ``add``, written back) beside keys and values (updated in place)
    came out with its outputs in another order than its inputs, and the guide's loop fed a length where a key was
    expected ('Input 4 has unexpected scalar type: expected Float but was Long')."""
    signature = program.graph_signature
    output_node = program.graph_module.graph.output_node()
    args = [
        a for spec, a in zip(signature.output_specs, output_node.args[0]) if spec.kind.name == "USER_INPUT_MUTATION"
    ]

    def in_place(arg: Any) -> bool:
        while isinstance(arg, torch.fx.Node) and arg.op == "call_function" and arg.target == inplace:
            arg = arg.args[0]
        return isinstance(arg, torch.fx.Node) and arg.op == "placeholder"

    last_write_back = max((i for i, arg in enumerate(args) if not in_place(arg)), default=-1)
    reverted = 0
    for arg in args[:last_write_back]:
        while isinstance(arg, torch.fx.Node) and arg in updated:
            arg.target = functional
            reverted += 1
            arg = arg.args[0]
    return reverted


EDGE_PASSES: tuple[EdgePass, ...] = (
    EdgePass(
        "remove_noop_expand_copies",
        remove_noop_expand_copies,
        reason="to_edge decomposes attention's matmuls with an expand of each operand to the broadcast shape; for "
        "the static cache that expand is the identity, and its portable expand_copy copied every layer's whole "
        "K and V cache on each decode step. Remove when EXIR drops identity expands itself.",
    ),
    EdgePass(
        "cache_updates_in_place",
        cache_updates_in_place,
        reason="the static cache's update is a functional index_put: its portable kernel copied the whole cache "
        "tensor before writing one slot, and a copy_ wrote the result back into the buffer, on every decode step. "
        "Remove when EXIR's reinplace pass checks views (see cache_updates_in_place).",
    ),
)


def run_edge_passes(edge: Any) -> dict[str, int]:
    """Run every ``EDGE_PASSES`` entry over each method of an ``EdgeProgramManager``, in place."""
    changed: dict[str, int] = {}
    for method in edge.methods:
        program = edge.exported_program(method)
        for edge_pass in EDGE_PASSES:
            count = edge_pass.run(program)
            if count:
                changed[edge_pass.name] = changed.get(edge_pass.name, 0) + count
    if changed:
        logger.debug("edge passes changed %s", changed)
    return changed


def _planned_specs(nodes: list[Any]) -> list[Any]:
    """Every memory-planned tensor spec the nodes compute (a node with several outputs holds a list of them). The
    output node's own specs are left out: the emitter returns its arguments' values and writes nothing there."""
    specs = []
    for node in nodes:
        if node.op == "output":
            continue
        spec = node.meta.get("spec")
        for one in spec if isinstance(spec, (list, tuple)) else [spec]:
            if getattr(one, "mem_id", None) is not None and getattr(one, "mem_offset", None) is not None:
                specs.append(one)
    return specs


def check_updated_inputs_keep_their_storage(manager: Any) -> None:
    """Refuse a memory plan that puts another tensor on a mutated user input's storage after the input's planned
    lifetime ends.

    The caller reads a mutated input's new value (a static cache's keys) after the call, from the input's own
    storage; a tensor written there later returns its bytes as the cache, silently. ``_read_through_the_input``
    prevents it for hfexport's in-place updates; this catches any other path to it (another pass, another EXIR
    release)."""
    for method in manager.methods:
        program = manager.exported_program(method)
        nodes = list(program.graph.nodes)
        mutated = set(program.graph_signature.user_inputs_to_mutate.values())
        specs = _planned_specs(nodes)
        for node in nodes:
            if node.op != "placeholder" or node.name not in mutated:
                continue
            kept = node.meta.get("spec")
            if getattr(kept, "mem_id", None) is None or not getattr(kept, "lifetime", None):
                continue
            end = kept.lifetime[1]
            lo, hi = kept.mem_offset, kept.mem_offset + kept.allocated_memory
            later = [
                s
                for s in specs
                if s is not kept
                and s.mem_id == kept.mem_id
                and s.lifetime[0] is not None
                and s.lifetime[0] > end
                and s.mem_offset < hi
                and lo < s.mem_offset + s.allocated_memory
            ]
            if later:
                raise HfExportError(
                    f"ExecuTorch's memory plan of method {method!r} frees the mutated input {node.name!r} at node "
                    f"{end} of {len(nodes)} and puts {len(later)} later tensor(s) on its storage, before the "
                    "program returns it: they would overwrite its new value. This is a defect of a lowering pass; "
                    "please report it with this message. Meanwhile export with "
                    "ExecutorchExporter(cache_as_buffers=True) (the program keeps the cache).",
                    stage="lowering",
                )
