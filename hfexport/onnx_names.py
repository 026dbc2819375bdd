"""Flat names for an ONNX graph's inputs and outputs, the names ``flatten_named`` gives the sample and the output.

Inputs are named as ``flatten_named(sample inputs)`` names them, outputs as ``flatten_named(eager output)`` does;
where an input and an output share a name (a cache the graph updates), they become ``input.X`` and ``output.X``,
which the runtime binds to one buffer. Every graph output carries its own value, so each can carry its own name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from .errors import HfExportError

logger = logging.getLogger(__name__)

INPUT_PREFIX = "input."
OUTPUT_PREFIX = "output."


def bypass_output_identities(graph: Any) -> int:
    """A graph output that is ``Identity(x)`` of an intermediate ``x`` becomes ``x`` itself (the Identity goes).

    torch.onnx wraps outputs in Identity nodes (the updated cache a decoder also returns); ONNX Runtime runs
    each as a copy, so a static cache's output was written twice per step: once by its update and once by the
    Identity, and the update could not land in the bound buffer in place. Where ``x`` is a graph input, an
    initializer or another output, the Identity stays (an output must have its own value). Returns how many
    went."""
    outputs = list(graph.outputs)
    removed = 0
    for i, value in enumerate(outputs):
        node = value.producer()
        if node is None or node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(value.uses()):
            continue
        source = node.inputs[0]
        if source is None or source.producer() is None or source.is_initializer() or source.is_graph_input():
            continue
        if any(source is other for other in outputs) or source.is_graph_output():
            continue
        outputs[i] = source
        graph.outputs[i] = source
        graph.remove(node, safe=True)
        removed += 1
    return removed


def all_values(model: Any) -> Iterator[Any]:
    """Every value of the main graph and its subgraphs: inputs, initializers, node outputs."""
    import onnx_ir as ir

    yield from model.graph.inputs
    yield from model.graph.initializers.values()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        yield from node.outputs


def name_values(
    model: Any, inputs_by_placeholder: dict[str, str], output_names: list[str], mutated: list[tuple[str, str]]
) -> None:
    """Give graph inputs and outputs their flat names, with ``input.``/``output.`` on clashes."""
    import onnx_ir as ir

    graph = model.graph
    if len(graph.inputs) == len(inputs_by_placeholder):  # graph inputs keep the user inputs' order
        in_names = list(inputs_by_placeholder.values())
    else:
        in_names = [inputs_by_placeholder.get(v.name, v.name) for v in graph.inputs]
    placeholder_to_flat = dict(inputs_by_placeholder)
    n_user = len(graph.outputs) - len(mutated)
    if n_user != len(output_names):
        logger.warning(
            "the ONNX graph has %d outputs but the program's output spec has %d leaves; outputs keep positional names",
            n_user,
            len(output_names),
        )
        output_names = [f"output_{i}" for i in range(n_user)]
    out_names = list(output_names)
    mutation_values = list(graph.outputs)[n_user:]
    del graph.outputs[n_user:]
    for value, (_, target) in zip(mutation_values, mutated):
        name = placeholder_to_flat.get(target, target)
        if name in out_names:
            # The model also returns the cache it updated (e.g. a StaticCache in its output): that user
            # output is the written value, so it carries the name once.
            graph.outputs[out_names.index(name)] = value
        else:
            graph.outputs.append(value)
            out_names.append(name)
    clash = set(in_names) & set(out_names)
    in_names = [INPUT_PREFIX + n if n in clash else n for n in in_names]
    out_names = [OUTPUT_PREFIX + n if n in clash else n for n in out_names]
    if len(set(out_names)) != len(out_names):
        raise HfExportError(f"two outputs would share a name: {out_names}", stage="lowering")

    bypass_output_identities(graph)
    # An output that is a graph input, an initializer or another output gets its own Identity value,
    # so each graph output can carry its own name.
    inputs = set(id(v) for v in graph.inputs)
    seen: set[int] = set()
    for i, value in enumerate(list(graph.outputs)):
        if id(value) in inputs or id(value) in seen or value.is_initializer() or value.producer() is None:
            node = ir.node("Identity", inputs=[value], num_outputs=1)
            graph.append(node)
            out = node.outputs[0]
            out.shape, out.type = value.shape, value.type
            graph.outputs[i] = out
            value = out
        seen.add(id(value))

    # Free the target names first: an intermediate value may already carry one of them.
    targets = set(in_names) | set(out_names)
    keep = set(id(v) for v in list(graph.inputs) + list(graph.outputs))
    for value in all_values(model):
        if value.name in targets and id(value) not in keep:
            value.name = f"_{value.name}_inner"
    for value, name in zip(graph.inputs, in_names):
        value.metadata_props["pkg.torch.onnx.original_node_name"] = str(value.name)
        value.name = name
    for value, name in zip(graph.outputs, out_names):
        value.metadata_props["pkg.torch.onnx.original_node_name"] = str(value.name)
        value.name = name
