"""Eager references, built by the judge from transformers alone.

What an exported generation component must reproduce is read off one real eager
``generate()`` run: forward pre-hooks on the model and on the parts the API names
(``prefill``/``decode`` are the model's first and later calls; ``encoder``,
``image_encoder``, ``audio_encoder``, a projector under a conventional name,
``language_model``, ``lm_head``) record a deep copy of every call's arguments at
the moment of the call. The same run at another prompt length, at batch 2 with
left padding or with a one-token prompt gives the calls a dynamic component must
also serve. ``merged_decode_call`` builds the one call that feeds k query tokens
on the cache of the first of k consecutive decode steps, and checks that eager
itself agrees with the k single steps before it is used as a reference.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .naming import cache_entry

# Components that stand for the top-level model's forward: which of its calls each one is.
TOP_LEVEL = {"prefill": 0, "decode": 1}
# A projector is its own component only under one of these names.
PROJECTOR_NAMES = ("multi_modal_projector", "connector", "embed_vision", "embed_audio")
# Arguments generate() passes that only trim or shape the Python return value; a reference call drops them so
# it returns every position (a multi-token decode graph must return logits for each query token).
RETURN_SHAPING = ("logits_to_keep", "return_dict", "output_attentions", "output_hidden_states")
TOKEN_KEYS = ("input_ids", "decoder_input_ids")


def _encoder(model: Any, modality: str | None) -> Any:
    getter = getattr(model, "get_encoder", None)
    if getter is None:
        return None
    try:
        found = getter(modality=modality) if modality else getter()
    except (TypeError, AttributeError, NotImplementedError, ValueError):
        return None
    return None if found is model else found


def component_modules(model: Any) -> dict[str, Any]:
    """Component name -> the live submodule it stands for (top-level components map to the model)."""
    import torch

    found: dict[str, Any] = {"prefill": model, "decode": model}
    if getattr(model.config, "is_encoder_decoder", False):
        found["encoder"] = _encoder(model, None)
    for modality in ("image", "audio"):
        found[f"{modality}_encoder"] = _encoder(model, modality)
    for root in (model, getattr(model, "model", None)):  # on the head model, or on its base model
        for name in PROJECTOR_NAMES:
            if found.get(name) is None and root is not None:
                found[name] = getattr(root, name, None)
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    found["language_model"] = None if decoder is model else decoder
    found["lm_head"] = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {k: v for k, v in found.items() if isinstance(v, torch.nn.Module)}


def bind_call(module: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """One call's positional and keyword arguments as a flat dict of parameter names."""
    signature = inspect.signature(module.forward)
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments
    except TypeError:
        return dict(kwargs)
    out: dict[str, Any] = {}
    for name, value in bound.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            out[name] = value
    return out


def generation_config(model: Any, new_tokens: int, base: Any = None) -> Any:
    """Greedy, exactly ``new_tokens`` tokens, from ``base`` or the model's own config. The end-of-sequence id is
    one past the vocabulary (``None`` would be refilled from the model's config): generation never stops early
    and no minimum-length processor rewrites the logits, so each token is the argmax of the raw logits."""
    config = copy.deepcopy(base if base is not None else model.generation_config)
    config.max_new_tokens, config.min_new_tokens, config.max_length = new_tokens, None, None
    config.eos_token_id = int(model.config.get_text_config().vocab_size)
    config.do_sample, config.num_beams = False, 1
    return config


@dataclass
class Capture:
    """The calls each component received during one eager generate() run, and the tokens it produced."""

    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    tokens: Any = None  # [batch, new tokens]
    caches: list[Any] = field(default_factory=list)  # the cache after each top-level call (when asked)
    logits: list[Any] = field(default_factory=list)  # the last-position logits of each step

    def call(self, component: str) -> dict[str, Any]:
        """The arguments of ``component``'s call that the API exports (the first, or the first decode step)."""
        if component in TOP_LEVEL:
            calls = self.calls.get("model", [])
            index = TOP_LEVEL[component]
        else:
            calls, index = self.calls.get(component, []), 0
        if len(calls) <= index:
            raise LookupError(f"generate() made no {component!r} call to record (it made {len(calls)})")
        return calls[index]


@contextlib.contextmanager
def recording(modules: Mapping[str, Any], keep_caches: bool = False) -> Iterator[Capture]:
    """Hook every module's forward for the block: deep-copied arguments per call, and (``keep_caches``) the
    top-level model's cache after each of its calls."""
    capture = Capture()
    handles = []
    for name, module in modules.items():

        def pre(mod: Any, args: tuple, kwargs: dict, name: str = name) -> None:
            capture.calls.setdefault(name, []).append(copy.deepcopy(bind_call(mod, args, kwargs)))

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
    if keep_caches and "model" in modules:

        def post(mod: Any, args: tuple, kwargs: dict, output: Any) -> None:
            cache = cache_entry(output)[1]
            capture.caches.append(copy.deepcopy(cache))

        handles.append(modules["model"].register_forward_hook(post, with_kwargs=True))
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()


def new_tokens(sequences: Any, tokens: int) -> Any:
    """The tokens generate() added: the last ``tokens`` (with no EOS, it adds exactly that many; encoder-decoders
    may also prepend a start token to the decoder prompt)."""
    return sequences[:, sequences.shape[1] - tokens :]


def capture_generation(
    model: Any, inputs: Mapping[str, Any], tokens: int, generation: Any = None, keep_caches: bool = False
) -> Capture:
    """Run eager greedy ``generate()`` for ``tokens`` new tokens and record every component's calls."""
    import torch

    modules = {"model": model, **{k: v for k, v in component_modules(model).items() if k not in TOP_LEVEL}}
    config = generation_config(model, tokens, generation)
    with torch.no_grad(), recording(modules, keep_caches) as capture:
        out = model.generate(
            **copy.deepcopy(dict(inputs)), generation_config=config, return_dict_in_generate=True, output_logits=True
        )
    capture.tokens = new_tokens(out.sequences, tokens)
    capture.logits = list(out.logits or [])
    if isinstance(inputs.get("attention_mask"), torch.Tensor):
        for name, module in modules.items():
            if takes_attention_mask(module):
                for call in capture.calls.get(name, []):
                    explicit_mask(call)
    return capture


def takes_attention_mask(module: Any) -> bool:
    try:
        return "attention_mask" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def explicit_mask(call: dict[str, Any]) -> None:
    """generate() drops an all-ones padding mask (batch 1, no padding) before it calls the model, or a
    vision-language model its language model; a graph serves padded batches only if it takes a mask, so the
    judge passes the mask the caller would: all ones over the cached and the new tokens (eager's outputs are the
    same with or without it)."""
    import torch

    key = next((k for k in ("input_ids", "inputs_embeds") if isinstance(call.get(k), torch.Tensor)), None)
    mask = call.get("attention_mask")
    # A mapping per layer type whose entries are all None (a static-cache prefill of a model with layer_types) is
    # no mask either: generate() leaves the attention plain causal.
    if key is None or not (mask is None or (isinstance(mask, Mapping) and all(v is None for v in mask.values()))):
        return
    cache = cache_entry(call)[1]
    past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
    ids = call[key]
    call["attention_mask"] = torch.ones(ids.shape[0], past + ids.shape[1], dtype=torch.long)


def eager_tokens(model: Any, inputs: Mapping[str, Any], tokens: int, generation: Any = None) -> Any:
    """Greedy tokens of plain eager generate(): the reference every served or looped generation must equal."""
    return capture_generation(model, inputs, tokens, generation).tokens


def graph_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments an exported graph takes: those that carry tensors (flags and sizes were fixed at export)."""
    return {k: v for k, v in kwargs.items() if carries_tensors(v)}


def carries_tensors(value: Any) -> bool:
    import torch

    from .naming import flat_named

    if isinstance(value, torch.Tensor):
        return True
    if value is None or isinstance(value, (bool, int, float, str)):
        return False
    return bool(flat_named(value))


def reference_call(module: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Flat named eager outputs of ``module`` on a recorded call (return-shaping flags dropped)."""
    import torch

    from .naming import flat_named

    call = {k: v for k, v in copy.deepcopy(dict(kwargs)).items() if k not in RETURN_SHAPING}
    with torch.no_grad():
        return flat_named(module(**call))


# -- k query tokens in one call ----------------------------------------------------------------------------


def _token_key(call: Mapping[str, Any]) -> str:
    import torch

    for key in TOKEN_KEYS:
        if isinstance(call.get(key), torch.Tensor):
            return key
    raise LookupError("a recorded decode call has no input_ids or decoder_input_ids")


def _concat_masks(masks: list[Any]) -> Any:
    """The mask of one call over the queries of several steps: 2D padding masks grow by one per step (the last
    covers every key), 4D masks over fixed cache slots stack their query rows; per-layer-type dicts likewise."""
    import torch

    first = masks[0]
    if first is None:
        return None
    if isinstance(first, Mapping):
        return {k: _concat_masks([m[k] for m in masks]) for k in first}
    if first.dim() == 2:
        return masks[-1]
    if len({tuple(m.shape[-1:]) for m in masks}) != 1:
        raise ValueError("the steps' 4D masks cover different key lengths; they cannot be stacked into one call")
    return torch.cat(masks, dim=-2)


def merged_decode_call(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One call feeding the tokens of consecutive decode steps at once, on the cache of the first step."""
    import torch

    merged = dict(steps[0])
    key = _token_key(merged)
    merged[key] = torch.cat([s[key] for s in steps], dim=1)
    for name in ("position_ids", "cache_position", "decoder_position_ids"):
        if isinstance(merged.get(name), torch.Tensor):
            merged[name] = torch.cat([s[name] for s in steps], dim=-1)
    for name in ("attention_mask", "decoder_attention_mask"):
        if name in merged and (key == "decoder_input_ids") == name.startswith("decoder"):
            merged[name] = _concat_masks([s.get(name) for s in steps])
    return merged


def decode_block(model: Any, inputs: Mapping[str, Any], tokens: int, tolerance: float = 1e-4) -> dict[str, Any]:
    """The recorded call that feeds ``tokens`` query tokens after the prompt (the prompt's cache), checked
    against eager's own single steps: the merged call's logits must equal each step's logits.

    "Equal" is up to float rounding, ``tolerance`` times the logits' largest magnitude (at least ``tolerance``):
    a merged call sums in another order than single steps (T5's unscaled logits, up to 77 in the zoo, differed by
    1.0e-4 with one torch thread and 9.7e-5 with two), while a model that really serves a block differently is off
    by a large fraction of its logits (Mamba: 5.7 on logits up to 8.6)."""
    import torch

    capture = capture_generation(model, inputs, tokens + 1)
    steps = capture.calls["model"][1 : 1 + tokens]
    call = steps[0] if tokens == 1 else merged_decode_call(steps)
    merged = reference_call(model, call)["logits"]
    singles = torch.cat([reference_call(model, s)["logits"][:, -1:] for s in steps], dim=1)
    bound = tolerance * max(1.0, float(singles.abs().max())) if singles.numel() else tolerance
    if merged.shape != singles.shape or not torch.allclose(merged, singles, atol=bound, rtol=0):
        raise AssertionError(
            f"eager {type(model).__name__} does not serve {tokens} query tokens in one call the way "
            "it serves them one by one; multi-token decode has no eager reference for it"
        )
    return call


# -- inputs and masks of the guide's static-cache decode loop ---------------------------------------------


def left_padding(attention_mask: Any) -> list[int]:
    """Pad tokens at the left of each row of a 2D padding mask."""
    return [int((row == 0).long().cumprod(0).sum()) for row in attention_mask]


def slot_mask(query_slots: Any, pads: list[int], cache_len: int) -> Any:
    """The guide's 4D bool mask over the cache slots: query at slot i sees slots j <= i of its own row's real
    tokens; a pad query (it sees nothing) sees its own slot, so no row is all masked."""
    import torch

    slots = torch.arange(cache_len)
    rows = []
    for pad in pads:
        visible = (slots[None, :] <= query_slots[:, None]) & (slots[None, :] >= pad)
        visible |= (slots[None, :] == query_slots[:, None]) & (query_slots[:, None] < pad)
        rows.append(visible)
    return torch.stack(rows)[:, None]


def positions(query_slots: Any, pads: list[int]) -> Any:
    """Position ids of the queries at these cache slots, per row (eager generate()'s: pads count from the first
    real token; a pad token's position is 1)."""
    import torch

    out = torch.stack([query_slots - pad for pad in pads])
    return out.masked_fill(out < 0, 1)


def expected_components(model: Any, capture: Capture) -> set[str]:
    """The split the API promises for this model, read from which parts generate() called: ``decode`` always;
    ``prefill`` unless the model is multimodal (then its encoders, projector, language model and LM head
    instead); ``encoder`` for encoder-decoders."""
    called = {name for name in component_modules(model) if name not in TOP_LEVEL and capture.calls.get(name)}
    multimodal = bool(called & {"image_encoder", "audio_encoder"})
    if multimodal:
        return {"decode", *called}
    return {"decode", "prefill", *(called & {"encoder"})}


def component_calls(
    model: Any, components: Collection[str], inputs_by_kind: Mapping[str, Mapping[str, Any]]
) -> Iterator[tuple[str, str, Any, dict[str, Any]]]:
    """``(label, component, eager submodule, call)`` for every exported component on each call generate() makes
    at every input set: what the suite's ``generation`` family and a model repo's ``generation`` check judge. It
    first asserts the split is the one the API promises (``expected_components``)."""
    modules = component_modules(model)
    for kind, inputs in inputs_by_kind.items():
        capture = capture_generation(model, inputs, 2)
        expected = expected_components(model, capture)
        assert set(components) == expected, (
            f"export_for_generation returned {sorted(components)}; for {type(model).__name__} the split is "
            f"{sorted(expected)}"
        )
        for name in sorted(components):
            yield f"component {name!r} on the {kind} prompt", name, modules[name], capture.call(name)


def decode_block_calls(
    model: Any, inputs_by_kind: Mapping[str, Mapping[str, Any]], token_counts: Sequence[int]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(label, call)``: the decode of each block size after each input set's prompt (``decode_block``), what the
    ``multi_token_decode`` family judges the one decode graph on."""
    for kind, inputs in inputs_by_kind.items():
        for tokens in token_counts:
            yield f"decode of {tokens} query token(s) after the {kind} prompt", decode_block(model, inputs, tokens)
