"""Which graph inputs a traced program writes into: the one reason a Dynamo artifact is functionalised.

torch.export returns its training IR, where in-place ops stay as they were traced. One that writes into a
graph input (a user input such as a static cache, a buffer, a parameter, or a view of any of them) has to
become an explicit mutation in the program's signature, so that ``program.module()`` applies it back to the
caller's tensor and a saved program states it; ``run_decompositions({})`` does that. But that pass retraces
the whole graph, about as long as the export itself, and most programs write into nothing they were given:
their in-place ops are the ``detach_`` torch.export puts after every lifted constant, or an ``add_`` into a
tensor the graph itself made, which run the same functionalised or not. Those programs skip the pass.

The walk is structural: an op writes where its schema marks an argument ``(a!)``, and a written tensor is
followed back through ops whose result aliases their first argument (views, in-place ops, ``getitem`` of a
split) to the node that owns the storage. A higher-order op (a subgraph) is not looked into: it counts as a
write, so the program is functionalised as before.
"""

from __future__ import annotations

import operator
from typing import Any

import torch


def _aliases_first_argument(node: torch.fx.Node) -> bool:
    """The node's result shares storage with its first argument (a view, an in-place op, a getitem)."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _storage_owner(node: torch.fx.Node) -> torch.fx.Node:
    while _aliases_first_argument(node):
        node = node.args[0]  # type: ignore[assignment]
    return node


def _written_arguments(node: torch.fx.Node) -> list[torch.fx.Node]:
    schema = node.target._schema  # type: ignore[union-attr]
    written: list[torch.fx.Node] = []
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        written.extend(v for v in values if isinstance(v, torch.fx.Node))
    return written


def written_inputs(program: Any) -> list[str]:
    """Names of the placeholders (user inputs, parameters, buffers, lifted constants) the program's graph
    writes into, directly or through a view; a higher-order op is listed as ``<higher-order op NAME>``.
    Empty when functionalising the program would change nothing a caller can see."""
    found: list[str] = []
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            found.append(f"<higher-order op {node.target.name()}>")
        elif isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
            for tensor in _written_arguments(node):
                owner = _storage_owner(tensor)
                if owner.op == "placeholder" and owner.name not in found:
                    found.append(owner.name)
    return found
