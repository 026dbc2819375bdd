"""One copy of a tied embedding in an ONNX graph.

A causal LM whose ``lm_head`` shares its weight with the input embedding (SmolLM2, Qwen3-0.6B, t5's shared
embedding when tied) is traced as ``embedding(W, ids)`` and ``linear(x, W)``; torch.onnx writes ``linear`` as
``MatMul(x, Transpose(W))`` and the onnxscript optimizer folds that transpose into a second initializer ``W.T``.
The saved file then holds the vocabulary matrix twice (SmolLM2-135M: 108 MiB of its 623). Here the embedding's
``Gather(W, ids)`` reads the folded copy instead, ``Transpose(Gather(W.T, ids, axis=1))``, and ``W`` goes: the
same values (a gather copies them), one matrix on disk and in ONNX Runtime's memory; the transpose moves only the
looked-up rows.
"""

from __future__ import annotations

import logging
from typing import Any

from .onnx_fixes import register_onnx_ir_fix, swap_in

logger = logging.getLogger(__name__)


def _transposed_twin(weight: Any, initializers: list[Any]) -> Any:
    """The initializer holding exactly ``weight``'s transpose, or None."""
    import numpy as np

    shape = tuple(weight.shape)
    candidates = [v for v in initializers if v is not weight and tuple(v.shape or ()) == shape[::-1]]
    if not candidates:
        return None
    values = weight.const_value.numpy()
    for candidate in candidates:
        other = candidate.const_value
        if other is not None and other.dtype == weight.const_value.dtype and np.array_equal(values.T, other.numpy()):
            return candidate
    return None


@register_onnx_ir_fix(
    reason="torch.onnx folds a tied lm_head's Transpose(W) into a second initializer beside the embedding's W: the "
    "vocabulary matrix is stored twice. The embedding's Gather reads the transposed copy (axis 1) instead."
)
def _tied_embedding_stored_once(model: Any) -> bool:
    import onnx_ir as ir

    graph = model.graph
    initializers = [v for v in graph.initializers.values() if v.const_value is not None and v.shape is not None]
    changed = False
    for node in list(graph):
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        weight, ids = node.inputs
        axis = node.attributes.get_int("axis", 0)
        if weight is None or weight not in initializers or len(weight.shape) != 2 or axis != 0:
            continue
        if ids is None or ids.shape is None:
            continue
        twin = _transposed_twin(weight, initializers)
        if twin is None:
            continue
        rank = len(ids.shape)
        gathered = ir.node("Gather", inputs=[twin, ids], attributes={"axis": 1})
        moved = ir.node("Transpose", inputs=[gathered.outputs[0]], attributes={"perm": [*range(1, rank + 1), 0]})
        swap_in(graph, node, [gathered, moved])
        if not weight.uses() and weight not in graph.inputs:
            graph.initializers.pop(weight.name)
            initializers.remove(weight)
        logger.debug("tied embedding %s now read from %s", weight.name, twin.name)
        changed = True
    return changed
