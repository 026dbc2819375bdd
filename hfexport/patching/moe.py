"""MoE experts: the grouped_mm path that neither ONNX nor ExecuTorch can run.

transformers dispatches MoE experts to ``grouped_mm`` whenever it can (CPU included). torchlib has no
ONNX translation for ``transformers::grouped_mm_fallback`` / ``aten._grouped_mm``, and ExecuTorch has
no ``_grouped_mm.out`` kernel (its verifier also rejects the ``aten.histc`` the path uses). During
those exports the experts run the ``batched_mm`` form (gather + bmm) instead: same math, exportable.
The caller's model and config are untouched; the mapping comes back after the export.
Remove when qwen3_moe exports and runs on both backends without this patch.
"""

from __future__ import annotations

from typing import Any

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


# Expert containers that loop over the experts a batch hits (``nonzero()`` then ``for expert in hit``): the
# loop's length and each expert's token count depend on the routing, so torch.export stops at a
# data-dependent guard. During every export they run every expert on every token and keep each token's
# own expert by its one-hot routing mask: the routed token gets expert(x) * weight * 1, every other term is
# an exact zero, so the sum is what the loop's index_add gives (tokens dropped by the expert capacity get
# zeros in both). Costs num_experts times the expert compute in the exported program, which is what a
# static graph of a routed MoE pays anyway. Remove when these models adopt transformers' experts interface.
DENSE_EXPERT_LOOPS = (
    "transformers.models.switch_transformers.modeling_switch_transformers.SwitchTransformersExperts.forward",
)


@register_patch("dynamo", *DENSE_EXPERT_LOOPS)
def _dense_one_hot_experts(original: Any) -> Any:
    """Switch-style expert loops guard on data-dependent expert hits; run every expert, keep the routed one."""

    def forward(self: Any, hidden_states: Any, selected_experts: Any, routing_weights: Any) -> Any:
        # selected_experts: (tokens, 1, experts), one-hot, capacity overflow zeroed; routing_weights: (tokens, 1)
        output = hidden_states.new_zeros(hidden_states.shape)
        for index in range(self.num_experts):
            routed = selected_experts[:, 0, index, None].to(routing_weights.dtype)
            expert_out = self[f"expert_{index}"](hidden_states) * (routing_weights * routed)
            output = output + expert_out.to(hidden_states.dtype)
        return output

    return forward


@register_patch(
    "dynamo",
    "transformers.models.openai_privacy_filter.modeling_openai_privacy_filter.OpenAIPrivacyFilterExperts.forward",
    reason=(
        "the eager experts loop over nonzero() expert hits (data-dependent sizes); every expert in float32 "
        "on every token, kept by its routing weight"
    ),
)
def _dense_float32_experts(original: Any) -> Any:
    """The privacy filter pins its experts to the eager loop and accumulates in float32 in expert order.

    Dense form with the same arithmetic: each expert's float32 output for every token times that token's weight
    for it (its routing weight where routed, an exact zero elsewhere), summed in expert order from zero, which is
    the order the loop's ``index_add_`` adds them. Other experts implementations keep their own dispatch."""

    def forward(self: Any, hidden_states: Any, router_indices: Any = None, routing_weights: Any = None) -> Any:
        if self.config._experts_implementation != "eager":
            return original(self, hidden_states, router_indices, routing_weights)
        states = hidden_states.float()
        total = states.new_zeros(states.shape)
        for expert in range(self.num_experts):
            weight = (routing_weights.float() * (router_indices == expert)).sum(-1, keepdim=True)
            gate_up = states @ self.gate_up_proj[expert].float() + self.gate_up_proj_bias[expert].float()
            out = self._apply_gate(gate_up).float() @ self.down_proj[expert].float()
            total = total + (out + self.down_proj_bias[expert].float()) * weight
        return total.to(hidden_states.dtype)

    return forward
