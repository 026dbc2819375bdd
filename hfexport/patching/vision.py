"""Vision encoders that attend image by image in a Python loop.

Qwen2-VL-style vision attention splits the patch sequence by ``cu_seqlens``
(``lengths.tolist()``), runs attention per image and concatenates. Under
torch.export the list of lengths is data-dependent and the trace fails. The
replacement computes the same thing in one batched SDPA with a block-diagonal
mask built from ``cu_seqlens`` with shape-only ops: token i may attend token j
iff both fall in the same image. It can go once the modeling code stops
calling ``.tolist()`` on ``cu_seqlens`` under export.

The same encoders derive each patch's rotary (row, column) position and the attention
segments from the values of ``grid_thw`` with a Python loop over ``grid_thw.tolist()``: the
trace unrolls it for the sample's image count and the graph guards on it
(``grid_thw.size()[0] == 1``). ``vision_patch_layout`` computes both from the grid with
elementwise ops over the patch axis, whose length the graph already knows (the rows of
``pixel_values``), so one graph serves any number and size of images.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

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


def vision_patch_layout(
    grid_thw: torch.Tensor, num_patches: int | torch.SymInt, merge: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(position_ids [patches, 2], cu_seqlens [patches + 1]) of a Qwen2-VL-style patch sequence, loop-free.

    Patches are laid out image by image, frame by frame, and inside a frame in ``merge x merge``
    blocks, row-major over blocks (what the encoders' own helpers build). Each patch finds its
    image by comparing its index with the cumulative patch counts, then its (row, column) from
    its offset inside the frame. ``cu_seqlens`` holds the end of every frame (one attention
    segment each) in order, padded with empty segments at the end to one entry per patch, so
    its length is known without reading the grid values. Entry k + 1 counts the patches of
    frames 0..k (no sort, which ExecuTorch has no kernel for).
    """
    grid = grid_thw.to(torch.long)
    t, h, w = grid.unbind(-1)
    starts = F.pad((t * h * w).cumsum(0), (1, 0))
    patch = torch.arange(num_patches, device=grid.device)  # type: ignore[arg-type]  # a SymInt while tracing
    image = (patch[:, None] >= starts[None, 1:]).sum(-1).clamp(max=grid.shape[0] - 1)
    frame = h[image] * w[image]
    in_frame = (patch - starts[image]) % frame
    blocks_per_row = w[image] // merge
    block, inner = in_frame // (merge * merge), in_frame % (merge * merge)
    rows = (block // blocks_per_row) * merge + inner // merge
    cols = (block % blocks_per_row) * merge + inner % merge
    frame_index = F.pad(t.cumsum(0), (1, 0))[image] + (patch - starts[image]) // frame
    cu_seqlens = F.pad((frame_index[None, :] <= patch[:, None]).sum(-1), (1, 0)).to(torch.int32)
    return torch.stack([rows, cols], dim=-1), cu_seqlens


def _vision_layout_from_patches(original):
    """Qwen2-VL's vision encoder loops over grid_thw.tolist() for positions and segments; loop-free instead."""

    def forward(self, hidden_states, grid_thw, **kwargs):
        merge = getattr(self, "spatial_merge_size", None)
        if isinstance(merge, int) and "position_ids" not in kwargs and "cu_seqlens" not in kwargs:
            # The encoder takes precomputed position_ids / cu_seqlens from its kwargs instead of computing them.
            kwargs["position_ids"], kwargs["cu_seqlens"] = vision_patch_layout(grid_thw, hidden_states.shape[0], merge)
        return original(self, hidden_states, grid_thw, **kwargs)

    return forward


register_patch(
    "dynamo",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel.forward",
    reason="Qwen2-VL's vision encoder derives positions and segments from grid_thw.tolist(); computed loop-free",
)(_vision_layout_from_patches)


def _patch_embedding_as_linear(original):
    """ExecuTorch's portable kernels have no 3-D convolution; Qwen2-VL's patchify Conv3d is a linear layer.

    The kernel equals the stride and the patch, so each output is one dot product of a flattened patch with a
    flattened filter: the same numbers as a matrix product with the filters viewed [embed, channels * t * p * p].
    """

    def forward(self, hidden_states):
        proj = getattr(self, "proj", None)
        if not isinstance(proj, torch.nn.Conv3d) or tuple(proj.kernel_size) != tuple(proj.stride):
            return original(self, hidden_states)
        weight = proj.weight
        flat = hidden_states.reshape(-1, weight[0].numel()).to(weight.dtype)
        return F.linear(flat, weight.reshape(weight.shape[0], -1), proj.bias)

    return forward


register_patch(
    "executorch",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.PatchEmbed.forward",
    reason="ExecuTorch has no 3-D convolution kernel; Qwen2-VL's patchify Conv3d (kernel == stride) as a linear",
)(_patch_embedding_as_linear)
