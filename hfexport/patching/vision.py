"""Vision encoders that attend image by image in a Python loop.

Qwen2-VL-style vision attention splits the patch sequence by ``cu_seqlens``
(``lengths.tolist()``), runs attention per image and concatenates. Under
torch.export the list of lengths is data-dependent and the trace fails. The
replacement computes the same thing in one batched SDPA with a block-diagonal
mask built from ``cu_seqlens`` with shape-only ops: token i may attend token j
iff both fall in the same image. It can go once the modeling code stops
calling ``.tolist()`` on ``cu_seqlens`` under export.
"""

from __future__ import annotations

import sys

import torch

from .registry import register_patch


def block_diagonal_mask(cu_seqlens: torch.Tensor, length: int | torch.SymInt) -> torch.Tensor:
    """[1, 1, L, L] bool: True where query and key belong to the same segment of cu_seqlens."""
    positions = torch.arange(length, device=cu_seqlens.device)  # type: ignore[arg-type]  # a SymInt while tracing
    segment = (positions[:, None] >= cu_seqlens[None, 1:-1].to(positions.dtype)).sum(-1)
    return (segment[:, None] == segment[None, :])[None, None]


def _batched_vision_attention(original):
    """Qwen2-VL vision attention loops over images with lengths.tolist(): data-dependent under export."""

    def forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
        rotary = getattr(sys.modules[type(self).__module__], "apply_rotary_pos_emb_vision", None)
        if rotary is None or not hasattr(self, "qkv") or position_embeddings is None:
            return original(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
        seq_length = hidden_states.shape[0]
        q, k, v = self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        q, k = rotary(q, k, cos, sin)
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        mask = block_diagonal_mask(cu_seqlens, seq_length)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)
        out = out.squeeze(0).transpose(0, 1).reshape(seq_length, -1).contiguous()
        return self.proj(out)

    return forward


register_patch(
    "dynamo",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.VisionAttention.forward",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl.Qwen2_5_VLVisionAttention.forward",
    reason="Qwen2-VL-style vision attention splits by cu_seqlens.tolist(); one SDPA with a block-diagonal mask instead",
)(_batched_vision_attention)
