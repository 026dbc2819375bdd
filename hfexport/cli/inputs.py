"""Sample inputs built from a model's config alone: token ids, masks, pixels, audio features."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import export_failed


def _vocab_size(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None)
    if not vocab:
        raise export_failed(f"{type(config).__name__} has no vocab_size, so no token ids can be drawn for it")
    return int(vocab)


def _token_ids_tensor(config: Any, batch: int, seq: int, avoid: Sequence[int] = ()) -> Any:
    import torch

    vocab = _vocab_size(config)
    low = 3 if vocab > 8 else 0  # skip the usual pad/bos/eos ids so generation does not stop at once
    ids = torch.randint(low, vocab, (batch, seq))
    for token in avoid:  # special multimodal tokens must only appear where the image goes
        if token is not None:
            ids[ids == token] = low
    return ids


def _image_token_count(config: Any) -> int:
    """Image tokens one image expands to.

    Models that pool image features state the count (``mm_tokens_per_image``); LLaVA-style models
    keep one token per patch, and their ``image_seq_length`` is the default checkpoint's (576), not
    this config's, so the count is derived from the vision config first.
    """
    pooled = getattr(config, "mm_tokens_per_image", None)
    if isinstance(pooled, int) and pooled > 0:
        return pooled
    vision = config.vision_config
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if isinstance(size, int) and isinstance(patch, int) and patch > 0:
        count = (size // patch) ** 2
        if getattr(config, "vision_feature_select_strategy", "default") == "full":
            count += 1  # the CLS token is kept
        return count
    for key in ("image_seq_length", "num_image_tokens"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError(f"cannot tell how many image tokens {type(config).__name__} expects per image")


def _vlm_inputs(config: Any, batch: int, seq: int, params: set[str]) -> dict[str, Any]:
    """Text around one image: LLaVA-style (fixed image token count) or Qwen2-VL-style (patch grid)."""
    import torch

    vision = config.vision_config
    image_token = getattr(config, "image_token_id", None)
    if image_token is None:
        image_token = getattr(config, "image_token_index", None)
    if image_token is None:
        raise ValueError(f"{type(config).__name__} names no image token (image_token_id / image_token_index)")
    specials = [image_token] + [
        t
        for t in (getattr(config, k, None) for k in ("video_token_id", "vision_start_token_id", "vision_end_token_id"))
        if t is not None
    ]
    text = _token_ids_tensor(config, batch, max(seq, 2), avoid=specials)
    if getattr(vision, "spatial_merge_size", None) and getattr(vision, "temporal_patch_size", None):
        merge, patch, tps = vision.spatial_merge_size, vision.patch_size, vision.temporal_patch_size
        grid = 2 * merge  # the smallest square grid that merges to more than one token
        channels = getattr(vision, "in_channels", getattr(vision, "num_channels", 3))
        n_tokens = grid * grid // (merge * merge)
        image = [image_token] * n_tokens
        if getattr(config, "vision_start_token_id", None) is not None:
            image = [config.vision_start_token_id] + image + [config.vision_end_token_id]
        ids = torch.cat([text[:, :1], torch.tensor([image]).expand(batch, -1), text[:, 1:]], dim=1)
        out = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "pixel_values": torch.randn(batch * grid * grid, channels * tps * patch * patch),
            "image_grid_thw": torch.tensor([[1, grid, grid]] * batch),
        }
        if "mm_token_type_ids" in params:
            out["mm_token_type_ids"] = ids.eq(image_token).long()
        return out
    size = vision.image_size
    channels = getattr(vision, "num_channels", 3)
    ids = torch.cat([text[:, :1], torch.full((batch, _image_token_count(config)), image_token), text[:, 1:]], dim=1)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(batch, channels, size, size),
    }


def sample_inputs(model: Any, batch: int, seq: int, for_generation: bool) -> dict[str, Any]:
    """Inputs built from the config alone: token ids and a mask for text, pixel_values for vision, both
    for VLMs, input_features for speech. For a plain export of an encoder-decoder the decoder's ids are
    added (its forward needs them); for generation only what ``generate()`` takes."""
    import inspect

    import torch

    config = model.config
    params = set(inspect.signature(model.forward).parameters)
    main = getattr(model, "main_input_name", "input_ids")
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    out: dict[str, Any]
    if main == "input_features":
        frames = 2 * getattr(config, "max_source_positions", 1500)
        out = {"input_features": torch.randn(batch, config.num_mel_bins, frames)}
    elif main == "input_values":
        out = {"input_values": torch.randn(batch, 400 * seq)}
    elif main == "pixel_values":
        vision = getattr(config, "vision_config", config)
        size = vision.image_size if isinstance(vision.image_size, int) else vision.image_size[0]
        out = {"pixel_values": torch.randn(batch, getattr(vision, "num_channels", 3), size, size)}
    elif getattr(config, "vision_config", None) is not None and "pixel_values" in params:
        out = _vlm_inputs(config, batch, seq, params)
    else:
        ids = _token_ids_tensor(config, batch, seq)
        out = {"input_ids": ids}
        if "attention_mask" in params:
            out["attention_mask"] = torch.ones_like(ids)
    if encoder_decoder and not for_generation and "decoder_input_ids" in params:
        out["decoder_input_ids"] = _token_ids_tensor(config, batch, max(1, seq // 2))
    return out


def describe_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    return {
        k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
        for k, v in inputs.items()
        if isinstance(v, torch.Tensor)
    }
