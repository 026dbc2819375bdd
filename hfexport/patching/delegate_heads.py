"""ExecuTorch: grouped-query heads regrouped with 4-D views, and attention's products as 3-D ``bmm``.

``attention._grouped_query_sdpa`` stacks the query heads that share a KV head with a 5-D unflatten and permute, and
``torch.matmul`` on 4-D tensors reaches the edge dialect as views around a ``bmm`` whose sizes are symbolic
expressions. XNNPACK's partitioner takes a view only with at most one symbolic size, written as -1
(``fixes._one_symbolic_size_inferred`` writes it so, for views of rank 4 or less): the 5-D views and the matmul's
views ran as portable kernels between delegate calls, four cuts of each decoder layer's delegate
(``benchmarks/profile_executorch_step.py``: 58 delegate calls a 6-layer SmolLM2-shaped decode step).

Here the same rows are stacked in the same order with rank-4 views of a row-major copy ([batch, heads, query, d]
viewed as [batch, kv_heads, groups * query, d]: row ``g * query + i`` is query row ``i`` of group ``g``, as
``attention._tile_mask_rows`` lays out the mask), and each product is a ``bmm`` of rank-3 views. The products and
the softmax see the same values in the same order: the result is bit for bit the 5-D path's
(``tests/test_delegate_heads.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import attention
from .registry import register_patch


def grouped_query_sdpa_rank4(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    groups: int,
    dropout: float,
    scaling: float | None,
    reuse_key: tuple | None = None,
) -> torch.Tensor:
    """``attention._grouped_query_sdpa`` with no tensor above rank 4; returns [batch, query, heads, head_dim]."""
    batch, heads, q_len, head_dim = query.shape
    kv_heads = key.shape[1]
    stacked = query.clone(memory_format=torch.contiguous_format).view(batch, kv_heads, groups * q_len, head_dim)
    out = attention.ATTEND(
        stacked,
        key,
        value,
        lambda: None if mask is None else attention._tile_mask_rows(mask, groups),
        dropout,
        scaling,
        reuse_key,
    )  # [b, kv, g * q, d]
    out = out.view(batch, heads, q_len, head_dim).transpose(1, 2)
    return out.clone(memory_format=torch.contiguous_format)


def same_leading_sizes(left: torch.Tensor, right: torch.Tensor) -> bool:
    """Whether the batch and head sizes of two rank-4 tensors are provably equal, without adding a guard."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return left.dim() == right.dim() == 4 and all(
        statically_known_true(a == b) for a, b in zip(left.shape[:2], right.shape[:2])
    )


def batched_product(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``left @ right`` for [batch, heads, m, k] @ [batch, heads, k, n] as one ``bmm`` of rank-3 views."""
    batch, heads, rows, inner = left.shape
    cols = right.shape[-1]
    flat = torch.bmm(left.reshape(batch * heads, rows, inner), right.reshape(batch * heads, inner, cols))
    return flat.view(batch, heads, rows, cols)


@register_patch("executorch", "hfexport.patching.attention._grouped_query_sdpa", speedup=True)
def _rank4_grouping(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """XNNPACK takes no view above rank 4 (module doc): regroup the query heads with rank-4 views."""
    return grouped_query_sdpa_rank4
