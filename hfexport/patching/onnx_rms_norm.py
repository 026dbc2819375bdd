"""RMS norms in the form ONNX Runtime fuses.

transformers' RMS norm is ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``; torch.onnx writes ``rsqrt``
as ``Reciprocal(Sqrt(...))`` and the product as a ``Mul``. ONNX Runtime fuses an RMS norm into one
``SimplifiedLayerNormalization`` kernel only in the form ``Div(x, Sqrt(ReduceMean(Pow(x, 2)) + eps))``; it left
the seven nodes of each of SmolLM2's 61 norms to run one by one. Here ``Mul(x, Reciprocal(s))`` becomes
``Div(x, s)`` where ``s`` is such a root of ``x``'s own mean square: the same quotient, rounded once instead of
twice (within a float32 ulp of the product), and ONNX Runtime's fusion then applies.
"""

from __future__ import annotations

import logging
from typing import Any

from .onnx_fixes import register_onnx_ir_fix, swap_in

logger = logging.getLogger(__name__)


def _producer(value: Any, op_type: str) -> Any:
    """The node of ``op_type`` (default domain) that computes ``value``, or None."""
    node = value.producer() if value is not None else None
    return node if node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx") else None


def _root_mean_square_of(root: Any, x: Any) -> bool:
    """Whether ``root`` is ``Sqrt(ReduceMean(Pow(x, _)) + _)`` (either order of the Add)."""
    sqrt = _producer(root, "Sqrt")
    add = _producer(sqrt.inputs[0], "Add") if sqrt is not None else None
    if add is None:
        return False
    for mean_value in add.inputs:
        mean = _producer(mean_value, "ReduceMean")
        power = _producer(mean.inputs[0], "Pow") if mean is not None else None
        if power is not None and power.inputs[0] is x:
            return True
    return False


@register_onnx_ir_fix(
    reason="ONNX Runtime fuses an RMS norm written Div(x, Sqrt(...)), not torch.onnx's Mul(x, Reciprocal(Sqrt(...))): "
    "each norm's product becomes the quotient"
)
def _rms_norm_as_a_quotient(model: Any) -> bool:
    import onnx_ir as ir

    graph = model.graph
    changed = 0
    for node in list(graph):
        if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        for side in (0, 1):
            x, inverse = node.inputs[side], node.inputs[1 - side]
            reciprocal = _producer(inverse, "Reciprocal")
            if reciprocal is None or len(inverse.uses()) != 1 or inverse.is_graph_output():
                continue
            if not _root_mean_square_of(reciprocal.inputs[0], x):
                continue
            quotient = ir.node("Div", inputs=[x, reciprocal.inputs[0]], metadata_props=dict(node.metadata_props))
            swap_in(graph, node, [quotient], removed=(reciprocal,))
            changed += 1
            break
    if changed:
        logger.debug("%d RMS norms written as quotients", changed)
    return bool(changed)
