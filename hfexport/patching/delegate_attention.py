"""ExecuTorch: attention written as the operators XNNPACK runs, its mask terms computed once per forward.

torch's SDPA reaches ExecuTorch decomposed: ``mul.Scalar`` on the query and on every cached key, a boolean
mask turned into an additive one, and the ``_safe_softmax`` that zeroes fully masked rows (``eq``, ``any``,
``logical_not``, ``where``), in every layer. XNNPACK takes none of those operators, so each layer's attention
ran as portable kernels between three delegate calls (``benchmarks/profile_executorch_step.py``: 75 XNNPACK
calls and 255 portable ones per SmolLM2-shaped 6-layer decode step, against 25 in ``export_llama``'s program).

Here a float32 call with a boolean mask (or none) computes ``softmax(q * scale @ k^T + additive) * valid @ v``:
a batched matmul, an add, a softmax and a multiply, all XNNPACK's. ``additive`` (0 where the mask allows,
float32's lowest value where it does not) and ``valid`` (1 for a query row the mask allows anything in, else 0:
the zero rows ``_safe_softmax`` gives) are derived from the mask transformers passed once, and every layer given
that mask in the same layout reuses them (``attention.ATTEND``'s ``reuse_key``). Any other call (dropout, another
dtype, a float mask, T5's position bias) keeps torch's SDPA.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .delegate_heads import batched_product, same_leading_sizes
from .registry import register_patch


def _mask_terms(mask: torch.Tensor | None, dtype: torch.dtype) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(additive, valid) of a boolean mask laid out as the scores; (None, None) without a mask."""
    if mask is None:
        return None, None
    additive = torch.where(mask, 0.0, torch.finfo(dtype).min).to(dtype)
    valid = mask.any(dim=-1, keepdim=True).to(dtype)
    return additive, valid


def _slot(reuse_key: tuple | None) -> tuple | None:
    """Where a mask's terms are kept: the mask transformers passed (by identity) and how this call lays it out."""
    return None if reuse_key is None else (id(reuse_key[0]), *reuse_key[1:])


def _xnnpack_attention_factory(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """XNNPACK takes no operator of SDPA's decomposed mask and safe softmax: attend with ops it runs (module doc)."""
    # The masks seen while this patch is installed (one trace), by identity: each is held here, so no other
    # object can take its id while the entry lives.
    derived: dict[tuple, tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = {}

    def attend(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        lay_out_mask: Callable[[], torch.Tensor | None],
        dropout: float,
        scaling: float | None,
        reuse_key: tuple | None,
    ) -> torch.Tensor:
        if dropout or query.dtype != torch.float32:
            return original(query, key, value, lay_out_mask, dropout, scaling, reuse_key)
        slot = _slot(reuse_key)
        seen = derived.get(slot) if slot is not None else None
        if seen is not None:
            additive, valid = seen[1], seen[2]
        else:
            mask = lay_out_mask()
            if mask is not None and mask.dtype != torch.bool:
                return original(query, key, value, lambda: mask, dropout, scaling, None)
            additive, valid = _mask_terms(mask, query.dtype)
            if slot is not None and reuse_key is not None:
                derived[slot] = (reuse_key[0], additive, valid)
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        product = batched_product if same_leading_sizes(query, key) else torch.matmul
        scores = product(query * scale, key.transpose(-2, -1))
        if additive is None or valid is None:
            return product(torch.softmax(scores, dim=-1), value)
        return product(torch.softmax(scores + additive, dim=-1) * valid, value)

    return attend


register_patch("executorch", "hfexport.patching.attention.ATTEND")(_xnnpack_attention_factory)
