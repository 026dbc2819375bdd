"""Sliding-window layers in a static-cache decode graph: every slot kept, the window applied by the mask.

transformers' ``StaticSlidingWindowLayer`` holds only ``sliding_window`` slots and picks its update
branch (fill, become full, roll) from a Python-int fill count. torch.export evaluates that count once,
on the sample, so an exported graph replays the sample's branch for every call: gemma3's decode graph
was 0.15 off eager on a fresh prompt. And its slots are not the caller's slots, so the caller's plain
causal mask over ``max_cache_len`` slots cannot address them.

The branch-free form used here:

* while ``export_for_generation`` watches ``generate()`` (patch set ``"generation"``), sliding layers
  of a StaticCache are ``FullLengthSlidingWindowLayer``: a ``StaticLayer`` (all ``max_cache_len``
  slots, written at the tensor fill count, no branch) that remembers its window. Eager generation is
  unchanged: with a 2D mask, transformers' mask builder already applies the window over the slots;
* during tracing (patch set ``"dynamo"``) a ready 4D mask given for such a layer gets the window ANDed
  in, counted back from each query row's own slot (its last visible slot): the caller passes only the
  plain causal mask over the cache slots, as for full-attention layers.

A DynamicCache's ``DynamicSlidingWindowLayer`` has the same kind of Python-int count (tokens seen), which
sizes its mask; a dynamic-cache decode graph then served only the sample's past length. While tracing,
that count is read from the 2D padding mask instead (``past + query`` columns), and ``hfexport.caches``
keeps it out of the pytree spec, so one graph serves any past length, shorter than the window too.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import DynamicSlidingWindowLayer, StaticLayer

from .registry import register_patch
from .renames import CACHE_ARGUMENT


class FullLengthSlidingWindowLayer(StaticLayer):
    """A static sliding-window layer that keeps all ``max_cache_len`` slots; the window lives in the mask.

    Same update as ``StaticLayer`` (index_copy at the tensor fill count: no Python-int state, no branch),
    so one exported graph serves a prompt on an empty cache, single tokens and token blocks. Slot ``j``
    holds the token of slot ``j`` for every layer, so one causal mask over the slots fits all layers.
    """

    is_sliding = True

    def __init__(self, max_cache_len: int, sliding_window: int, **kwargs: Any) -> None:
        super().__init__(max_cache_len=max_cache_len)
        self.sliding_window = int(sliding_window)


def window_ready_mask(mask: torch.Tensor, window: int) -> torch.Tensor:
    """A 4D mask over the cache slots, further restricted to each query's last ``window`` slots.

    A query row's own slot is its last visible slot (causal masks end at the query; a row the caller
    would leave empty attends to its own slot), so the window needs no position input and no branch.
    """
    slots = torch.arange(mask.shape[-1], device=mask.device)
    visible = mask if mask.dtype == torch.bool else mask == 0  # additive float masks: 0 where visible
    own = torch.where(visible, slots, -1).amax(dim=-1, keepdim=True)
    in_window = slots > own - window
    if mask.dtype == torch.bool:
        return mask & in_window
    return mask.masked_fill(~in_window, torch.finfo(mask.dtype).min)


@register_patch(
    "generation",
    "transformers.cache_utils.STATIC_LAYER_TYPE_MAPPING",
    reason="StaticSlidingWindowLayer keeps only the window and branches on a Python-int fill count that "
    "torch.export bakes in (gemma3's static decode graph 0.15 off eager); while generate() is watched, sliding "
    "layers keep every slot (FullLengthSlidingWindowLayer) and the mask applies the window. Remove when "
    "StaticSlidingWindowLayer.update is branch-free under torch.export (gemma3 static decode matches eager on a "
    "2-token and a 6-token prompt without this patch).",
)
def _full_length_sliding_layers(original: dict) -> dict:
    patched = dict(original)
    if "sliding_attention" in patched:
        patched["sliding_attention"] = FullLengthSlidingWindowLayer
    return patched


def _dynamic_sliding_sizes(
    config: Any, inputs_embeds: torch.Tensor, mask: torch.Tensor, cache: Any, layer: Any
) -> tuple:
    """``_preprocess_mask_arguments``' answer for a DynamicSlidingWindowLayer, from shapes alone.

    The layer stores its last ``window - 1`` tokens (fewer before the window fills) and counts the tokens
    seen in a Python int, which export would bake in. The 2D padding mask has ``past + query`` columns, so
    the count is ``past`` = mask length - query: the keys attended are the stored ones plus the query
    (``stored + query`` of them), starting at absolute index ``past - stored``. Every sliding layer's count
    is set to ``past``, so the cache the graph returns counts its tokens too.
    """
    mask = mask.to(device=inputs_embeds.device, dtype=torch.bool)
    query = inputs_embeds.shape[1]
    stored = layer.keys.shape[-2] if layer.is_initialized else 0
    past = mask.shape[-1] - query
    for other in cache.layers:
        if isinstance(other, DynamicSlidingWindowLayer):
            other.cumulative_length = past
    return False, mask, None, query, stored + query, past, past - stored


def additive_where_eager(mask: torch.Tensor, config: Any, dtype: torch.dtype) -> torch.Tensor:
    """A ready bool 4D mask in the form the attention adds to its scores where it runs eager (0 visible, the
    dtype's minimum hidden), as transformers' own mask builder gives eager attention. Every static graph takes
    the documented bool mask; given as is, eager attention added 0 or 1 to the scores (gemma2's soft-capped
    attention runs eager: its static decode graph was 0.35 off eager, silently, on the guide's bool mask)."""
    if mask.dtype != torch.bool or getattr(config, "_attn_implementation", None) != "eager":
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def _builds_masks(config: Any) -> bool:
    """Whether transformers builds masks for this attention implementation (else it passes none at all)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    return config._attn_implementation in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping


def _layer_at(cache: Any, index: Any) -> Any:
    layers = getattr(cache, "layers", None)
    if not isinstance(index, int) or not isinstance(layers, (list, tuple)) or not 0 <= index < len(layers):
        return None
    return layers[index]


@register_patch(
    "dynamo",
    "transformers.masking_utils._preprocess_mask_arguments",
    reason="mask preparation returns a ready 4D mask as-is for sliding layers too (a static decode graph fed the plain "
    "causal mask lost the window: ANDed in for FullLengthSlidingWindowLayer), and sizes a DynamicSlidingWindowLayer's "
    "mask from its Python-int token count, which export bakes (gemma3's dynamic-cache decode served only the "
    "sample's past length: the 2D mask's length gives the count). Remove when gemma3's static and dynamic-cache "
    "decode graphs serve 2- and 6-token pasts without it.",
)
def _window_in_ready_masks(original: Any) -> Any:
    signature = inspect.signature(original)

    def _preprocess_mask_arguments(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs).arguments
        cache, mask = bound.get(CACHE_ARGUMENT.key_in(bound) or ""), bound.get("attention_mask")
        layer = _layer_at(cache, bound.get("layer_idx"))
        if (
            isinstance(layer, DynamicSlidingWindowLayer)
            and isinstance(mask, torch.Tensor)
            and mask.dim() == 2
            and not layer.record_past
            and _builds_masks(bound["config"])
        ):
            return _dynamic_sliding_sizes(bound["config"], bound["inputs_embeds"], mask, cache, layer)
        result = original(*args, **kwargs)
        early_exit, ready = result[0], result[1]
        if not (early_exit and isinstance(ready, torch.Tensor) and ready.dim() == 4):
            return result
        if isinstance(layer, FullLengthSlidingWindowLayer):
            ready = window_ready_mask(ready, layer.sliding_window)
        return (early_exit, additive_where_eager(ready, bound["config"], bound["inputs_embeds"].dtype), *result[2:])

    return _preprocess_mask_arguments


@register_patch(
    "dynamo",
    "transformers.masking_utils._ignore_causal_mask_sdpa",
    reason="it compares the 2D padding mask's length with kv_length (past + query > stored + query for a sliding "
    "layer) before it checks that it is exporting, where it always answers False: the comparison guarded "
    "past > stored, so gemma3's dynamic-cache decode graph refused a past shorter than the window. Remove when the "
    "export check comes first.",
)
def _no_causal_skip_while_exporting(original: Any) -> Any:
    def _ignore_causal_mask_sdpa(*args: Any, **kwargs: Any) -> bool:
        if torch.compiler.is_exporting():
            return False
        return original(*args, **kwargs)

    return _ignore_causal_mask_sdpa
