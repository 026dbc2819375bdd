"""ONNX: the linear layers that read one input, as one MatMul.

A decoder layer's query, key and value projections read the same normed hidden state, and so do its MLP's gate
and up projections. ONNX Runtime runs each MatMul as its own kernel call split over the intra-op threads; on a
one-token step the calls cost more than their arithmetic (SmolLM2's shape, 2 threads: q/k/v 86 us as three
MatMuls, 56 as one over the concatenated weight; gate/up 218 and 130). onnxruntime-genai's builder packs q/k/v
the same way. Each column of a matrix product is its own dot product, whatever the other columns: the packed
product's slices are the separate products bit for bit (measured at 1, 5 and 16 tokens, float32 and int4).

The packed MatMul carries the innermost module scope its members share, and each member's ``Slice`` the member's
own scope and node name, so the locator still compares ``q_proj``'s, ``k_proj``'s and ``v_proj``'s outputs, and
``PACKED_LINEARS`` (a metadata key on the packed node) tells the int4 pass it holds ``nn.Linear`` calls.
"""

from __future__ import annotations

import ast
import logging
from typing import Any

from ..onnx_int4 import PACKED_LINEARS, _is_linear_call
from . import onnx_tied_weights  # noqa: F401  (registered first: a tied head's weight must find its table unpacked)
from .onnx_fixes import register_onnx_ir_fix, swap_in

logger = logging.getLogger(__name__)

_SCOPES = "pkg.torch.onnx.name_scopes"
_CLASSES = "pkg.torch.onnx.class_hierarchy"


def _packable_weight(node: Any) -> Any:
    """The [K, N] float initializer a plain ``MatMul`` multiplies by and nothing else reads, or None."""
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    weight = node.inputs[1]
    if weight is None or not weight.is_initializer() or weight.const_value is None or weight.is_graph_output():
        return None
    if len(weight.shape or ()) != 2 or len(weight.uses()) != 1:
        return None
    return weight if weight.const_value.dtype.is_floating_point() else None


def _shared_metadata(nodes: list[Any]) -> dict[str, str]:
    """The module scopes (and classes) every node lies in, as the metadata of one node that computes for all."""
    scopes = [ast.literal_eval(n.metadata_props.get(_SCOPES, "[]")) for n in nodes]
    classes = [ast.literal_eval(n.metadata_props.get(_CLASSES, "[]")) for n in nodes]
    depth = 0
    while all(len(s) > depth + 1 and s[depth] == scopes[0][depth] for s in scopes):
        depth += 1
    return {
        _SCOPES: repr([*scopes[0][:depth], "packed_linears"]),
        _CLASSES: repr([*classes[0][:depth], "hfexport.packed_linears"]),
        PACKED_LINEARS: repr([n.name for n in nodes]),
    }


def _pack(graph: Any, members: list[Any]) -> None:
    import numpy as np
    import onnx_ir as ir

    weights = [m.inputs[1] for m in members]
    arrays = [w.const_value.numpy() for w in weights]
    first = members[0]
    packed_weight = ir.Value(name=f"{first.name}_packed_weight")
    packed_weight.const_value = ir.tensor(np.concatenate(arrays, axis=1))
    packed_weight.shape, packed_weight.type = ir.Shape(packed_weight.const_value.shape), weights[0].type
    graph.register_initializer(packed_weight)
    product = ir.Node(
        "",
        "MatMul",
        inputs=[first.inputs[0], packed_weight],
        name=f"{first.name}_packed",
        metadata_props=_shared_metadata(members),
    )
    graph.insert_before(first, [product])
    start = 0
    for member, array in zip(members, arrays):
        bounds = [
            ir.Value(name=f"{member.name}_packed_{part}", const_value=ir.tensor(np.array([value], dtype=np.int64)))
            for part, value in (("start", start), ("end", start + array.shape[1]), ("axis", -1))
        ]
        for bound in bounds:
            bound.shape, bound.type = ir.Shape([1]), ir.TensorType(ir.DataType.INT64)
            graph.register_initializer(bound)
        piece = ir.Node(
            "",
            "Slice",
            inputs=[product.outputs[0], *bounds],
            name=member.name,
            metadata_props=dict(member.metadata_props),
        )
        swap_in(graph, member, [piece])
        start += array.shape[1]
    for weight in weights:
        graph.initializers.pop(weight.name, None)


@register_onnx_ir_fix(
    reason="ONNX Runtime runs each MatMul as its own threaded call: the linear layers that read one input (q/k/v, "
    "gate/up) become one MatMul over their concatenated weights, sliced back per layer",
    speedup=True,
)
def _linears_of_one_input_packed(model: Any) -> bool:
    graph = model.graph
    groups: dict[tuple[int, int, Any], list[Any]] = {}
    for node in graph:
        weight = _packable_weight(node)
        if weight is None or not _is_linear_call(node):
            continue
        key = (id(node.inputs[0]), weight.shape[0], weight.const_value.dtype)
        groups.setdefault(key, []).append(node)
    packed = 0
    for members in groups.values():
        if len(members) > 1:
            _pack(graph, members)
            packed += len(members)
    if packed:
        logger.debug("%d linear layers packed into %d MatMuls", packed, sum(len(g) > 1 for g in groups.values()))
    return bool(packed)
