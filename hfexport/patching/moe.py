"""MoE experts: the grouped_mm path that neither ONNX nor ExecuTorch can run.

transformers dispatches MoE experts to ``grouped_mm`` whenever it can (CPU included). torchlib has no
ONNX translation for ``transformers::grouped_mm_fallback`` / ``aten._grouped_mm``, and ExecuTorch has
no ``_grouped_mm.out`` kernel (its verifier also rejects the ``aten.histc`` the path uses). During
those exports the experts run the ``batched_mm`` form (gather + bmm) instead: same math, exportable.
The caller's model and config are untouched; the mapping comes back after the export.
Remove when qwen3_moe exports and runs on both backends without this patch.
"""

from __future__ import annotations

from .registry import register_patch


@register_patch(
    "onnx",
    "transformers.integrations.moe.ExpertsInterface._global_mapping",
    reason="no ONNX translation / ExecuTorch kernel for grouped_mm MoE experts; use batched_mm",
)
@register_patch(
    "executorch",
    "transformers.integrations.moe.ExpertsInterface._global_mapping",
    reason="no ONNX translation / ExecuTorch kernel for grouped_mm MoE experts; use batched_mm",
)
def experts_as_batched_mm(original: dict) -> dict:
    patched = dict(original)
    if "grouped_mm" in patched and "batched_mm" in patched:
        patched["grouped_mm"] = original["batched_mm"]
    return patched
