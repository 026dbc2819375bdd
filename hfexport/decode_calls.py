"""The calls a decode graph is traced on and driven with: merged decode steps, and the masks they take.

generate() passes masks in whatever form suits eager attention (per-layer-type dicts, sliding-window masks, or
nothing when there is no padding). A decode graph is driven with one mask whatever the model: with a static
cache, the plain causal mask over the cache slots [batch, 1, query, max_cache_len]; with a dynamic cache, the
2D padding mask [batch, past + query]. This module builds those calls from captured ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from .errors import HfExportError
from .patching.renames import CACHE_ARGUMENT

# Main token inputs, by kind of call, in the order they are looked for.
TOKEN_KEYS = ("input_ids", "decoder_input_ids", "inputs_embeds")
# Other inputs with one entry per token (last axis): concatenated when decode steps are merged.
PER_TOKEN_KEYS = ("position_ids", "token_type_ids", "mm_token_type_ids")


def _token_key(call: Mapping[str, Any]) -> str:
    for key in TOKEN_KEYS:
        if isinstance(call.get(key), torch.Tensor):
            return key
    raise HfExportError("a captured decode call has no input_ids, decoder_input_ids or inputs_embeds", stage="eager")


def merge_decode_calls(steps: list[dict[str, Any]], user_mask: torch.Tensor | None) -> dict[str, Any]:
    """One call that feeds the tokens of several consecutive decode steps at once.

    The cache is the snapshot from before the first step; token and position inputs are
    concatenated on their sequence axis. The mask is rebuilt rather than concatenated (per-step
    masks are wrong for sliding windows, and generate() drops an all-ones mask):

    * static cache: the plain causal mask over the cache slots (``static_decode_call``);
    * otherwise: the 2D padding mask [batch, past + query], also when there is no padding, so the
      graph keeps it as an input and serves a padded batch.
    """
    merged = dict(steps[0])
    key = _token_key(merged)
    merged[key] = torch.cat([s[key] for s in steps], dim=1)
    for name in PER_TOKEN_KEYS:  # one entry per token, on the last axis (qwen2-vl's position_ids are 3D)
        if all(isinstance(s.get(name), torch.Tensor) for s in steps):
            merged[name] = torch.cat([s[name] for s in steps], dim=-1)
    if key == "decoder_input_ids":
        masks = [s.get("decoder_attention_mask") for s in steps]
        if all(isinstance(m, torch.Tensor) and m.dim() == 4 for m in masks):
            merged["decoder_attention_mask"] = torch.cat(
                [m for m in masks if m is not None], dim=2
            )  # static self-attention cache rows
        elif isinstance(merged.get("decoder_attention_mask"), torch.Tensor):
            merged.pop("decoder_attention_mask")  # per-step decoder masks: let the model rebuild it
        return merged
    if static_cache_of(merged) is not None:
        return static_decode_call(merged, user_mask)
    if "attention_mask" in merged or user_mask is not None:
        merged["attention_mask"] = padding_mask(merged, user_mask)
    return merged


def _attention_cache_of(call: Mapping[str, Any]) -> Any:
    """The call's KV cache (a Cache with key/value layers), or None (no cache, or recurrent state only)."""
    for value in call.values():
        layers = getattr(value, "layers", None)
        if isinstance(layers, (list, tuple)) and any(
            isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers
        ):
            return value
    return None


def _recurrent_only(cache: Any) -> bool:
    """A state-space model's cache: recurrent state layers only, no key/value layer."""
    from transformers.cache_utils import CacheLayerMixin

    layers = list(getattr(cache, "layers", None) or [])
    return bool(layers) and not any(isinstance(layer, CacheLayerMixin) for layer in layers)


def static_cache_of(call: Mapping[str, Any]) -> Any:
    """The call's KV cache if it is a compileable (fixed-size, static) one, else None."""
    cache = _attention_cache_of(call)
    return cache if getattr(cache, "is_compileable", False) else None


def holds_one_position(call: Mapping[str, Any]) -> bool:
    """The call's dynamic cache holds exactly one position (a one-token prompt, or an encoder-decoder's decoder
    start token): torch.export specialises a size-1 axis, so a decode graph traced from this call would serve
    only a one-position cache."""
    for value in call.values():
        if hasattr(value, "get_seq_length") and not getattr(value, "is_compileable", False):
            return int(value.get_seq_length()) == 1
    return False


def _past_length(cache: Any) -> int:
    return int(cache.get_seq_length()) if cache is not None else 0


def padding_mask(call: Mapping[str, Any], user_mask: torch.Tensor | None) -> torch.Tensor | None:
    """[batch, past + query] padding mask of a decode call: the prompt's mask (or ones), then the new tokens.

    None (the model's default) for a model without a KV cache to count the past in (Mamba's state)."""
    cache = _attention_cache_of(call)
    ids = call[_token_key(call)]
    batch, query = ids.shape[0], ids.shape[1]
    if cache is None:
        if user_mask is None or bool((user_mask != 0).all()):
            return None
        return torch.cat([user_mask, user_mask.new_ones(batch, query)], dim=1)
    past = _past_length(cache)
    prompt = (
        user_mask
        if isinstance(user_mask, torch.Tensor) and user_mask.shape == (batch, past)
        else torch.ones(batch, past, dtype=torch.long, device=ids.device)
    )
    return torch.cat([prompt, prompt.new_ones(batch, query)], dim=1)


def _no_mask(mask: Any) -> bool:
    """No mask at all: None, or a mapping per layer type whose entries are all None (generate() passes
    ``{'full_attention': None}`` to a static-cache prefill of a model with ``layer_types``, such as qwen3, where the
    attention is plain causal). Dropped as a non-tensor constant, such a mapping left the exported prefill with no
    mask input, computing another attention than eager's."""
    return mask is None or (isinstance(mask, Mapping) and all(value is None for value in mask.values()))


def explicit_mask(call: dict[str, Any], accepts_mask: bool) -> dict[str, Any]:
    """The call with the padding mask a caller passes: generate() drops an all-ones mask (batch 1, no padding)
    before it calls the model, and a graph traced without a mask input cannot serve a padded batch.

    Only for token calls (``input_ids``, or the ``inputs_embeds`` a vision-language model hands its language
    model) of a forward that takes ``attention_mask`` and got none: ones over the cached (KV cache) and the new
    tokens, [batch, past + query]; eager's outputs are the same with or without it. Not for state-space models
    (a ``cache_params`` state, no KV cache): their mask only zeroes padded positions of the current tokens, and
    generate() passes it whenever the caller gave one.
    """
    ids = call.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        ids = call.get("inputs_embeds")
    if not accepts_mask or not isinstance(ids, torch.Tensor) or not _no_mask(call.get("attention_mask")):
        return call
    if _recurrent_only(call.get(CACHE_ARGUMENT.key_in(call) or "")):
        return call
    past = _past_length(_attention_cache_of(call))
    return {
        **call,
        "attention_mask": torch.ones(ids.shape[0], past + ids.shape[1], dtype=torch.long, device=ids.device),
    }


def accepts_attention_mask(module: Any) -> bool:
    try:
        return "attention_mask" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def cache_slot_mask(
    query_slots: torch.Tensor, cache_len: int, valid: torch.Tensor | None = None, dtype: torch.dtype = torch.bool
) -> torch.Tensor:
    """The guide's static-cache mask [batch, 1, query, cache_len]: slot j is visible from the query in slot p
    iff j <= p and slot j is ``valid`` (not padding); a row left empty sees its own slot.

    ``query_slots``: [query]; ``valid``: [batch, cache_len] bool (None: no padding, batch 1). Float dtypes
    give the additive form (0 visible, finfo.min hidden) that eager attention takes.
    """
    slots = torch.arange(cache_len, device=query_slots.device)
    visible = (slots[None, :] <= query_slots[:, None])[None, None]
    if valid is not None:
        visible = visible & valid[:, None, None, :].to(torch.bool)
    own = (slots[None, :] == query_slots[:, None])[None, None]
    mask = visible | (own & ~visible.any(dim=-1, keepdim=True))
    if dtype == torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def one_static_mask(call: dict[str, Any]) -> dict[str, Any]:
    """A static-cache call with generate()'s masks per layer type (``{'full_attention': 4D, 'sliding_attention':
    4D}``, qwen3 and gemma3) as the one 4D mask a static graph takes: the full-attention entry (any entry where
    the model has no full-attention layer); sliding layers derive their window from it inside the graph
    (``patching.sliding_window``). Other calls are returned as they are."""
    mask = call.get("attention_mask")
    if static_cache_of(call) is None:
        return call
    if not isinstance(mask, Mapping):
        return {**call, "attention_mask": as_bool_mask(mask)} if isinstance(mask, torch.Tensor) else call
    tensors = [m for m in mask.values() if isinstance(m, torch.Tensor)]
    full = mask.get("full_attention")
    chosen = full if isinstance(full, torch.Tensor) else (tensors[0] if tensors else None)
    return call if chosen is None else {**call, "attention_mask": as_bool_mask(chosen)}


def static_decode_call(call: dict[str, Any], user_mask: torch.Tensor | None) -> dict[str, Any]:
    """A static-cache decode call whose mask is the guide's plain causal 4D mask over the cache slots.

    generate() passes per-layer-type dicts (qwen2, qwen3, gemma3), sliding-window masks, or no mask at
    all: the exported graph would then take a dict or no mask, and a padded batch could not be served.
    Every static decode graph takes the one mask the decode loop builds; sliding layers derive their
    window from it inside the graph (``patching.sliding_window``).
    """
    cache = static_cache_of(call)
    if cache is None or "attention_mask" not in call:
        return call
    ids = call[_token_key(call)]
    batch, query = ids.shape[0], ids.shape[1]
    cache_len = max(
        layer.keys.shape[-2] for layer in cache.layers if isinstance(getattr(layer, "keys", None), torch.Tensor)
    )
    past = _past_length(cache)
    valid = torch.ones(batch, cache_len, dtype=torch.bool, device=ids.device)
    if isinstance(user_mask, torch.Tensor) and user_mask.dim() == 2 and user_mask.shape[0] == batch:
        valid[:, : user_mask.shape[1]] = user_mask.to(torch.bool)
    out = dict(call)
    # bool whatever the attention implementation: the documented contract; eager attention's additive form is made
    # inside the graph (patching.sliding_window.additive_where_eager)
    out["attention_mask"] = cache_slot_mask(torch.arange(past, past + query, device=ids.device), cache_len, valid)
    return out


def as_bool_mask(mask: Any) -> Any:
    """A 4D additive float mask (eager attention's: 0 where visible, the dtype's minimum where hidden) as the bool
    mask every static graph takes; anything else as it is."""
    if isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.is_floating_point():
        return mask == 0
    return mask
