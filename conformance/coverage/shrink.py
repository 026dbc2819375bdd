"""Tiny configs from config class defaults, so that any registered architecture builds in milliseconds.

The defaults of a config class describe a real checkpoint (hidden 4096, 32 layers, vocabulary
150k); the sweep needs the same structure at toy size. ``shrink_dict`` rewrites a config's
``to_dict()`` with the rules below (widths, feed-forward sizes, layers, heads, key/value heads,
head dims, experts, vocabulary, positions, image and patch sizes, token ids), recursing into the
sub-configs of composite models (any nested dict that names a ``model_type``); ``tiny_config``
rebuilds the config with ``from_dict`` so the class recomputes whatever it derives from them.

One width for every hidden size keeps composite models consistent (a projector from a vision
tower of width 32 into a language model of width 32). Lists that follow the layer count
(``layer_types``) are cut to the new count and layer indices are clamped into it.

``LEVELS`` name how much is shrunk: a config that refuses the full shrink (a window that does
not divide the image, a vocabulary some module hard-codes) is retried with less; the caller
(``build``) keeps the first level whose model builds and runs its sample.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeGuard

WIDTH = 32
FFN = 64
LAYERS = 2
HEADS = 4
HEAD_DIM = 8
LORA_RANK = 16
EXPERTS = 4
VOCAB = 256
POSITIONS = 128
IMAGE = 32
PATCH = 8
SOURCE_POSITIONS = 64  # encoder positions of speech models (whisper reads 2x as many feature frames)
SLIDING_WINDOW = 4  # shorter than the sample prompts, so windowed attention is really exercised

WIDTH_KEYS = frozenset(
    {
        "hidden_size",
        "d_model",
        "n_embd",
        "embed_dim",
        "model_dim",
        "dim",
        "embedding_size",
        "embedding_dim",
        "word_embed_proj_dim",
        "projection_dim",
        "out_hidden_size",
        "encoder_hidden_size",
        "decoder_hidden_size",
        "text_hidden_size",
        "vision_hidden_size",
        "projector_hidden_size",
        "output_hidden_size",
        "hidden_dim",
        "encoder_hidden_dim",
        "fusion_hidden_size",
        "attention_hidden_size",
        "pooler_output_size",
        "pooler_hidden_size",
        "classifier_proj_size",
        "vision_embed_dim",
        "text_embed_dim",
        "d_embed",
    }
)
FFN_KEYS = frozenset(
    {
        "intermediate_size",
        "ffn_dim",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "d_ff",
        "n_inner",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "mlp_dim",
        "decoder_intermediate_size",
        "ffn_hidden_size",
        "intermediate_size_mlp",
        "expert_intermediate_size",
    }
)
LAYER_KEYS = frozenset(
    {
        "num_hidden_layers",
        "n_layer",
        "n_layers",
        "num_layers",
        "encoder_layers",
        "decoder_layers",
        "num_decoder_layers",
        "num_encoder_layers",
        "depth",
        "num_text_layers",
        "num_vision_layers",
    }
)
HEAD_KEYS = frozenset(
    {
        "num_attention_heads",
        "n_head",
        "n_heads",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "num_heads",
        "num_decoder_attention_heads",
        "decoder_num_attention_heads",
    }
)
KV_HEAD_KEYS = frozenset({"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"})
HEAD_DIM_KEYS = frozenset(
    {"head_dim", "d_kv", "kv_channels", "v_head_dim", "qk_nope_head_dim", "qk_rope_head_dim", "attention_head_dim"}
)
LORA_KEYS = frozenset({"kv_lora_rank", "q_lora_rank"})
EXPERT_KEYS = frozenset({"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"})
TOP_K_KEYS = frozenset({"num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k"})
GROUP_KEYS = frozenset({"n_group", "topk_group"})
VOCAB_KEYS = frozenset({"vocab_size", "entity_vocab_size", "vocab_size_per_layer_input", "n_words"})
POSITION_KEYS = frozenset({"max_position_embeddings", "n_positions", "n_ctx", "max_target_positions", "max_seq_len"})
SOURCE_KEYS = frozenset({"max_source_positions"})
IMAGE_KEYS = frozenset({"image_size"})
PATCH_KEYS = frozenset({"patch_size"})
# Lists of widths (stages of a hierarchical vision model, a convolutional feature extractor): scaled together.
WIDTH_LIST_KEYS = frozenset({"hidden_sizes", "conv_dim", "embed_dim", "neck_hidden_sizes", "tdnn_dim"})
DEPTH_LIST_KEYS = frozenset({"depths", "num_block_repeats", "stage_num_blocks"})
HEAD_LIST_KEYS = frozenset({"num_heads", "num_attention_heads"})
# Lists whose entries are layer indices: clamped into the new layer count.
INDEX_LIST_SUFFIXES = ("_indexes", "_indices", "_idxs", "_layer_ids", "no_rope_layers", "mlp_only_layers")

# name -> (the keys it shrinks); a level is the set of groups applied.
GROUPS = ("width", "depth", "vocab", "spatial")
LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"width", "depth", "vocab", "spatial"}),
    frozenset({"width", "depth", "vocab"}),
    frozenset({"width", "depth"}),
    frozenset({"depth"}),
)
# Backbone outputs named by stage or layer: derived from the depth, so dropped when it shrinks (the class
# then picks its default, the last stage).
STAGE_OUTPUT_KEYS = ("out_features", "out_indices", "_out_features", "_out_indices", "stage_names")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(_is_int(v) for v in value)


def _smaller(value: Any, tiny: int) -> Any:
    """``tiny`` where ``value`` is a larger int; anything else unchanged."""
    return tiny if _is_int(value) and value > tiny else value


def _layer_count(data: dict[str, Any]) -> int | None:
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers", "depth"):
        if _is_int(data.get(key)):
            return int(data[key])
    return None


def _is_subconfig(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("model_type"), str)


def _token_keys(data: dict[str, Any]) -> list[str]:
    return [k for k in data if k.endswith(("_token_id", "_token_index", "token_ids")) or k == "decoder_start_token_id"]


def shrink_dict(data: dict[str, Any], level: frozenset[str] = LEVELS[0]) -> dict[str, Any]:
    """A copy of a config's ``to_dict()`` at toy size (see the module doc); sub-configs are shrunk too."""
    out = copy.deepcopy(data)
    _shrink(out, level)
    return out


def _shrink(data: dict[str, Any], level: frozenset[str]) -> None:
    old_layers = _layer_count(data)
    old_heads = next((data[k] for k in ("num_attention_heads", "n_head", "num_heads") if _is_int(data.get(k))), None)
    rules: dict[frozenset[str], tuple[str, Callable[[Any], Any]]] = {
        WIDTH_KEYS: ("width", lambda v: _smaller(v, WIDTH)),
        FFN_KEYS: ("width", lambda v: _smaller(v, FFN)),
        HEAD_KEYS: ("width", lambda v: _smaller(v, HEADS)),
        HEAD_DIM_KEYS: ("width", lambda v: _smaller(v, HEAD_DIM)),
        LORA_KEYS: ("width", lambda v: _smaller(v, LORA_RANK)),
        EXPERT_KEYS: ("width", lambda v: _smaller(v, EXPERTS)),
        TOP_K_KEYS: ("width", lambda v: _smaller(v, 2)),
        GROUP_KEYS: ("width", lambda v: _smaller(v, 1)),
        LAYER_KEYS: ("depth", lambda v: _smaller(v, LAYERS)),
        VOCAB_KEYS: ("vocab", lambda v: _smaller(v, VOCAB)),
        POSITION_KEYS: ("vocab", lambda v: _smaller(v, POSITIONS)),
        SOURCE_KEYS: ("spatial", lambda v: _smaller(v, SOURCE_POSITIONS)),
        IMAGE_KEYS: ("spatial", _shrink_image),
        PATCH_KEYS: ("spatial", lambda v: _smaller(v, PATCH)),
    }
    # A hierarchical model (stages of ``depths``) derives its layer count and stage names from the stage lists:
    # those shrink (one block per stage), the count follows.
    staged = _int_list(data.get("depths"))
    for key, value in list(data.items()):
        if _is_subconfig(value):
            _shrink(value, level)
            continue
        if staged and key in LAYER_KEYS:
            continue
        for keys, (group, rule) in rules.items():
            if key in keys and group in level and not (isinstance(value, list) and key in HEAD_LIST_KEYS):
                data[key] = rule(value)
                break
    _kv_heads(data, old_heads, level)
    _composite_dims(data, level)
    _lists(data, old_layers, level)
    if "vocab" in level:
        _token_ids(data, _vocab(data))
    if "spatial" in level and _is_int(data.get("mm_tokens_per_image")):
        data["mm_tokens_per_image"] = min(data["mm_tokens_per_image"], 4)  # pooled from a 4x4 patch grid
    if "spatial" in level and _is_int(data.get("image_seq_length")):
        data["image_seq_length"] = min(data["image_seq_length"], (IMAGE // PATCH) ** 2)
    if "width" in level and _is_int(data.get("sliding_window")) and data["sliding_window"] > SLIDING_WINDOW:
        data["sliding_window"] = SLIDING_WINDOW


def _shrink_image(value: Any) -> Any:
    if _int_list(value):
        return [min(v, IMAGE) for v in value]
    return _smaller(value, IMAGE)


def _kv_heads(data: dict[str, Any], old_heads: Any, level: frozenset[str]) -> None:
    """Key/value heads keep their relation to the query heads: as many (MHA), one (MQA) or fewer (GQA)."""
    if "width" not in level:
        return
    for key in KV_HEAD_KEYS:
        value = data.get(key)
        if not _is_int(value):
            continue
        if value <= 1:
            continue
        data[key] = HEADS if _is_int(old_heads) and value >= old_heads else min(value, HEADS // 2)


def _composite_dims(data: dict[str, Any], level: frozenset[str]) -> None:
    """Sizes derived from others that the config keeps as fields of their own."""
    if "width" not in level:
        return
    if _is_int(data.get("qk_head_dim")) and _is_int(data.get("qk_nope_head_dim")):
        data["qk_head_dim"] = data["qk_nope_head_dim"] + (data.get("qk_rope_head_dim") or 0)
    # State-space mixers: heads x head dim must equal expand x width.
    for expand_key, heads_key, dim_key in (
        ("expand", "num_heads", "head_dim"),
        ("mamba_expand", "mamba_n_heads", "mamba_d_head"),
    ):
        expand, heads, width = data.get(expand_key), data.get(heads_key), data.get("hidden_size")
        if _is_int(expand) and _is_int(heads) and _is_int(width) and _is_int(data.get(dim_key)) and heads > 0:
            data[dim_key] = max(1, expand * width // heads)
    if _is_int(data.get("first_k_dense_replace")):
        data["first_k_dense_replace"] = min(data["first_k_dense_replace"], 1)


def _lists(data: dict[str, Any], old_layers: int | None, level: frozenset[str]) -> None:
    new_layers = _layer_count(data)
    staged = _int_list(data.get("depths"))
    for key, value in list(data.items()):
        if not isinstance(value, list) or not value:
            continue
        if (
            "depth" in level
            and not staged
            and old_layers
            and new_layers
            and len(value) == old_layers
            and old_layers > new_layers
        ):
            data[key] = value[:new_layers]  # per-layer lists (layer_types, per-layer flags)
            continue
        if not _int_list(value):
            continue
        if "depth" in level and key in DEPTH_LIST_KEYS:
            data[key] = [1] * len(value)
        elif "width" in level and key in WIDTH_LIST_KEYS:
            smallest = min(value)
            factor = min(1.0, 8 / smallest) if smallest > 0 else 1.0
            data[key] = [max(1, round(v * factor)) for v in value]
        elif "width" in level and key in HEAD_LIST_KEYS:
            smallest = min(value)
            data[key] = [max(1, v // smallest) for v in value] if smallest > 0 else value
        elif "depth" in level and new_layers and key.endswith(INDEX_LIST_SUFFIXES):
            clamped = sorted({min(v, new_layers - 1) if v >= 0 else max(v, -new_layers) for v in value})
            data[key] = clamped
    if "depth" in level and old_layers and new_layers and old_layers > new_layers:
        for key in STAGE_OUTPUT_KEYS:
            data.pop(key, None)
        per_layer = data.get("per_layer_config")
        if isinstance(per_layer, dict):
            data["per_layer_config"] = {k: v for k, v in per_layer.items() if str(k).isdigit() and int(k) < new_layers}
    if "depth" in level and new_layers and _int_list(data.get("vision_feature_layer")):
        data["vision_feature_layer"] = [max(v, -new_layers) for v in data["vision_feature_layer"]]
    if "depth" in level and new_layers and _is_int(data.get("vision_feature_layer")):
        data["vision_feature_layer"] = max(min(data["vision_feature_layer"], new_layers), -new_layers)
    if "depth" in level and new_layers and _is_int(data.get("max_window_layers")):
        data["max_window_layers"] = min(data["max_window_layers"], new_layers)


def _vocab(data: dict[str, Any]) -> int | None:
    """The vocabulary the config's token ids index: its own, else its text or decoder sub-config's."""
    for source in (data, data.get("text_config"), data.get("decoder"), data.get("decoder_config")):
        if isinstance(source, dict) and _is_int(source.get("vocab_size")):
            return int(source["vocab_size"])
    return None


def _token_ids(data: dict[str, Any], vocab: int | None) -> None:
    """Special token ids past the new vocabulary move to its top, each to its own id (an image token must not
    collide with the padding token); ids already inside stay."""
    if vocab is None:
        return
    taken: set[int] = set()
    for key in _token_keys(data):
        value = data[key]
        if _is_int(value) and value < vocab:
            taken.add(value)
    free = (i for i in range(vocab - 1, 2, -1) if i not in taken)
    for key in _token_keys(data):
        value = data[key]
        if _is_int(value) and value >= vocab:
            data[key] = next(free)
        elif _int_list(value):
            data[key] = [v if v < vocab else next(free) for v in value]


def tiny_config(config_class: Any, level: frozenset[str] = LEVELS[0]) -> Any:
    """The config class's defaults at toy size (``level``: which groups of sizes are shrunk)."""
    defaults = config_class()
    return config_class.from_dict(shrink_dict(defaults.to_dict(), level))


def special_token_ids(config: Any) -> set[int]:
    """Every special token id a config (and its sub-configs) names: random inputs avoid them."""
    ids: set[int] = set()

    def visit(data: dict[str, Any]) -> None:
        for key, value in data.items():
            if _is_subconfig(value):
                visit(value)
            elif key in _token_keys(data):
                if _is_int(value):
                    ids.add(int(value))
                elif _int_list(value):
                    ids.update(int(v) for v in value)

    visit(config.to_dict())
    return ids
