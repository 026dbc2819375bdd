"""Attention: what cannot be exported, and an SDPA path without shape branches.

transformers' SDPA integration branches on ``query.shape[2] == 1`` (pack GQA for
decode) and on ``q_length > 1`` before it looks at the mask (also with T5's
``position_bias``, which it folds into the mask). Under torch.export
those branches become guards that pin the query length (``!= 1``), so a program
traced at prefill refuses a one-token call. The replacement below computes the
same attention with no branch on sizes: the query heads that share a KV head attend it
together (``_grouped_query_sdpa``; no copy of the cache per step), the mask when there is one, else an
explicit bottom-right causal mask.

The query also reaches SDPA with [batch, query, heads, head_dim] memory (viewed back): the CPU
kernel takes a fast path when ``query.transpose(1, 2)`` is contiguous, which for a query in the
other layout holds only for one token. phi3's query (rotary over a slice of the fused qkv
projection) comes in that layout, and its multi-token decode graph guarded
``8 * attention_mask.size()[2] != 8``: it refused single-token steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .registry import register_patch

# Attention implementations that no backend can export, and what to use instead.
UNEXPORTABLE_ATTENTION = ("flash_attention", "flex_attention")


def find_unexportable_attention(model: Any) -> list[tuple[str, str]]:
    """(config path, implementation) for every (sub)config that asks for flash or flex attention."""
    found: list[tuple[str, str]] = []
    seen: set[int] = set()

    def visit(config: Any, path: str) -> None:
        if config is None or id(config) in seen:
            return
        seen.add(id(config))
        impl = getattr(config, "_attn_implementation", None)
        if isinstance(impl, str) and any(impl.startswith(p) or p in impl for p in UNEXPORTABLE_ATTENTION):
            found.append((path, impl))
        for key in getattr(config, "sub_configs", {}) or {}:
            visit(getattr(config, key, None), f"{path}.{key}")

    visit(getattr(model, "config", None), "config")
    return found


def check_attention_exportable(model: Any) -> None:
    bad = find_unexportable_attention(model)
    if bad:
        where = ", ".join(f"{path}._attn_implementation={impl!r}" for path, impl in bad)
        raise ValueError(
            f"{type(model).__name__} uses {where}: FlashAttention and FlexAttention cannot be exported by any "
            "backend. Load or set the model with attn_implementation='sdpa' (fast) or 'eager' "
            "(e.g. model.set_attn_implementation('sdpa')), then export again."
        )


def _expand_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    if groups == 1:
        return t
    # repeat_interleave, not expand+reshape: the reshape of an expanded view guards on seq != 1.
    return torch.repeat_interleave(t, groups, dim=1)


def _query_major(query: torch.Tensor) -> torch.Tensor:
    """The query with [batch, query, heads, head_dim] memory (see module doc): a clone, so no stride is inspected."""
    return query.transpose(1, 2).clone(memory_format=torch.contiguous_format).transpose(1, 2)


_DELEGATE_KWARGS = ("softcap", "s_aux", "sinks", "cache")


def _foldable_mask(mask: torch.Tensor | None) -> bool:
    """A mask the grouped-query fold can tile over its query rows without reading a symbolic size: none, a
    [query, key] one, or a 4D one whose head axis is a static 1 (every zoo decoder's)."""
    if mask is None or mask.dim() == 2:
        return True
    return mask.dim() == 4 and isinstance(mask.shape[1], int) and mask.shape[1] == 1


def _tile_mask_rows(mask: torch.Tensor, groups: int) -> torch.Tensor:
    """Row ``g * query + i`` of the stacked query is query row ``i`` of group ``g``: the mask's query axis
    repeated whole, ``groups`` times (not each row ``groups`` times)."""
    return mask.repeat(groups, 1) if mask.dim() == 2 else mask.repeat(1, 1, groups, 1)


def _grouped_query_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    groups: int,
    dropout: float,
    scaling: float | None,
    reuse_key: tuple | None = None,
) -> torch.Tensor:
    """Grouped-query attention without repeating the KV heads: the ``groups`` query heads that share a KV
    head are stacked along the query axis ([batch, kv_heads, groups * query, head_dim]) and attend that KV
    head once. Repeating the KV heads instead copies the whole cache ``groups`` times on every decode step
    (portable ``expand_copy`` kernels on ExecuTorch, ``repeat_interleave`` on Dynamo), which dominated a
    one-token step. Returns [batch, query, heads, head_dim], row-major.

    Every regrouping goes through a row-major copy before a dimension merge, so no view decision depends on
    the (symbolic) query length; the stacked query gets the [batch, query, heads, head_dim] memory of
    ``_query_major`` for the same reason as the unfolded path."""
    q_len, kv_heads = query.shape[2], key.shape[1]
    stacked = query.unflatten(1, (kv_heads, groups)).permute(0, 2, 3, 1, 4)  # [b, g, q, kv, d]
    stacked = stacked.clone(memory_format=torch.contiguous_format).flatten(1, 2).transpose(1, 2)
    out = ATTEND(
        stacked,
        key,
        value,
        lambda: None if mask is None else _tile_mask_rows(mask, groups),
        dropout,
        scaling,
        reuse_key,
    )  # [b, kv, g * q, d]
    out = out.unflatten(2, (groups, q_len)).permute(0, 3, 1, 2, 4)  # [b, q, kv, g, d]
    return out.clone(memory_format=torch.contiguous_format).flatten(2, 3)


def _sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    lay_out_mask: Callable[[], torch.Tensor | None],
    dropout: float,
    scaling: float | None,
    reuse_key: tuple | None,
) -> torch.Tensor:
    """torch's SDPA over [batch, heads, query, head_dim] tensors. ``lay_out_mask()`` gives the mask in this
    call's layout; ``reuse_key`` (the mask transformers passed, the key length, the query-head groups) is the
    same for every layer that gets the same mask laid out the same way: a backend's ``ATTEND`` may derive
    what it needs from the mask once per forward (``hfexport/patching/delegate_attention.py``)."""
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=lay_out_mask(), dropout_p=dropout, scale=scaling, is_causal=False
    )


# The attention product every exported SDPA call goes through: a backend's patch may swap it.
ATTEND: Callable[..., torch.Tensor] = _sdpa


def _with_position_bias(position_bias: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """T5's additive relative-position bias folded into the mask, as transformers' SDPA does, minus its
    ``q_length > 1`` test (which pins the query length): a bool mask selects the bias or -inf, a float
    mask adds to it, no mask leaves the bias alone.

    Copied to row-major memory like transformers' ``.contiguous()``: the bias is a permuted view, and
    with such a mask the CPU SDPA dispatch skips its flash kernel for the math one (other rounding,
    other output layout than the trace assumed)."""
    bias = position_bias.to(dtype)
    if mask is None:
        folded = bias
    elif mask.dtype == torch.bool:
        folded = torch.where(mask, bias, torch.finfo(dtype).min)
    else:
        folded = bias + mask
    return folded.clone(memory_format=torch.contiguous_format)


def export_sdpa_factory(original):
    """transformers' sdpa_attention_forward guards on q_length == 1 / > 1; see module doc. Remove when it does not."""

    def export_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        if any(kwargs.get(k) is not None for k in _DELEGATE_KWARGS) or kwargs.get("output_attentions"):
            return original(
                module,
                query,
                key,
                value,
                attention_mask,
                dropout=dropout,
                scaling=scaling,
                is_causal=is_causal,
                **kwargs,
            )
        groups = query.shape[1] // key.shape[1]
        given = attention_mask
        if attention_mask is None and (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
            q_len, kv_len = query.shape[2], key.shape[2]
            rows = torch.arange(q_len, device=query.device)[:, None] + (kv_len - q_len)
            attention_mask = torch.arange(kv_len, device=query.device)[None, :] <= rows
        elif attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = attention_mask[:, :, :, : key.shape[-2]]
        position_bias = kwargs.get("position_bias")
        if position_bias is not None:
            attention_mask = _with_position_bias(position_bias, attention_mask, query.dtype)
        fold = groups > 1 and _foldable_mask(attention_mask)
        # Layers given the same mask object, cut to the same static key length and folded alike, lay it out alike.
        reusable = given is not None and position_bias is None and isinstance(key.shape[-2], int)
        reuse_key = (given, key.shape[-2], groups if fold else 1) if reusable else None
        if fold:
            return _grouped_query_sdpa(query, key, value, attention_mask, groups, dropout, scaling, reuse_key), None
        query = _query_major(query)
        key = _expand_kv(key, groups)
        value = _expand_kv(value, groups)
        mask = attention_mask
        out = ATTEND(query, key, value, lambda: mask, dropout, scaling, reuse_key)
        # A copy, not contiguous(): the fake SDPA output has the CPU flash kernel's [batch, query, heads, dim]
        # memory, so contiguous() would be traced as a no-op and the caller's reshape as a view, but the kernel
        # picked at run time may return [batch, heads, query, dim] memory (t5's position-bias mask), where
        # that view fails ("view size is not compatible with input tensor's size and stride").
        return out.transpose(1, 2).clone(memory_format=torch.contiguous_format), None

    return export_sdpa


@register_patch("dynamo", "transformers.modeling_utils.AttentionInterface._global_mapping")
def _patch_sdpa_mapping(original: dict) -> dict:
    """SDPA integration pins the query length under export (q_length branches); swap in a branch-free SDPA."""
    patched = dict(original)
    if "sdpa" in patched:
        patched["sdpa"] = export_sdpa_factory(original["sdpa"])
    return patched
