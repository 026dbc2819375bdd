"""Inputs for any tiny model, made from what it declares: its ``main_input_name``, its forward's parameters
and its config.

Text: token ids that avoid every special token, with an attention mask (left padding on the first row
of a batch, so masks are really used). Vision: ``pixel_values`` sized from the config's image size and
channels. Speech: ``input_features`` (mel bins x frames, or frames x features) or raw ``input_values``.
Encoder-decoders get ``decoder_input_ids``. Image-text models get ``pixel_values`` and a prompt with as
many image tokens as the vision tower yields features (counted by running ``get_image_features``).

A model may accept several layouts (speech features are channels-first in some families and
frames-first in others): ``candidates`` returns every plausible maker and ``build`` keeps the first
whose eager forward runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

# The sample every export is traced on, and the other size the artifact must also serve.
SAMPLE = (1, 6)
OTHER = (2, 9)
AUDIO_SAMPLES = {6: 4000, 9: 4800}  # raw audio length for a "sequence length" (samples at 16 kHz)
IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")

InputMaker = Callable[[Any, int, int], dict[str, Any]]


class InputsError(Exception):
    """The model's inputs cannot be made generically (an unknown main input, a processor-only argument)."""


def _parameters(model: Any) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _text_config(config: Any) -> Any:
    try:
        return config.get_text_config()
    except (AttributeError, TypeError, ValueError):
        return config


def _find(config: Any, *names: str) -> Any:
    """The first of ``names`` set on the config or one of its vision/audio/encoder sub-configs."""
    for cfg in (
        config,
        getattr(config, "vision_config", None),
        getattr(config, "audio_config", None),
        getattr(config, "encoder_config", None),
        getattr(config, "encoder", None),
    ):
        for name in names:
            value = getattr(cfg, name, None) if cfg is not None else None
            if value is not None:
                return value
    return None


def token_ids(model: Any, batch: int, seq: int) -> Any:
    """Random ids inside the vocabulary, never a special token (those change control flow: an image token
    without an image is an error, an end-of-sequence token stops a row)."""
    import torch

    from .shrink import special_token_ids

    vocab = int(_text_config(model.config).vocab_size)
    special = special_token_ids(model.config)
    allowed = torch.tensor([i for i in range(3, vocab) if i not in special] or [0])
    return allowed[torch.randint(0, len(allowed), (batch, seq))]


def _mask(batch: int, seq: int) -> Any:
    import torch

    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1 and seq > 2:
        mask[0, :2] = 0  # left padding on the first row
    return mask


def text(model: Any, batch: int, seq: int) -> dict[str, Any]:
    out: dict[str, Any] = {"input_ids": token_ids(model, batch, seq)}
    params = _parameters(model)
    if "attention_mask" in params:
        out["attention_mask"] = _mask(batch, seq)
    if getattr(model.config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        out["decoder_input_ids"] = token_ids(model, batch, max(1, seq // 2))
    return out


def _image_size(config: Any) -> tuple[int, int]:
    size = _find(config, "image_size", "input_size")
    if isinstance(size, (list, tuple)):
        return int(size[-2]), int(size[-1])
    if isinstance(size, dict):
        return int(size.get("height", 32)), int(size.get("width", 32))
    return (int(size), int(size)) if size else (32, 32)


def pixels(model: Any, batch: int) -> Any:
    import torch

    channels = _find(model.config, "num_channels", "in_channels") or 3
    height, width = _image_size(model.config)
    return torch.randn(batch, int(channels), height, width)


def vision(model: Any, batch: int, seq: int) -> dict[str, Any]:
    return {"pixel_values": pixels(model, batch)}


def _decoder_ids(model: Any, out: dict[str, Any], batch: int, seq: int) -> dict[str, Any]:
    if getattr(model.config, "is_encoder_decoder", False) and "decoder_input_ids" in _parameters(model):
        out["decoder_input_ids"] = token_ids(model, batch, max(1, seq // 2))
    return out


def features_channels_first(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """[batch, mel bins, frames]: whisper-like encoders read exactly 2 x max_source_positions frames."""
    import torch

    bins = _find(model.config, "num_mel_bins", "feature_size", "input_feat_per_channel") or 80
    source = _find(model.config, "max_source_positions")
    frames = 2 * int(source) if source else 8 * seq
    return _decoder_ids(model, {"input_features": torch.randn(batch, int(bins), frames)}, batch, seq)


def features_frames_first(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """[batch, frames, features] (speech_to_text, conformers); frames follow the sequence length."""
    import torch

    bins = _find(model.config, "input_feat_per_channel", "feature_size", "num_mel_bins") or 80
    channels = _find(model.config, "input_channels") or 1
    out: dict[str, Any] = {"input_features": torch.randn(batch, 8 * seq, int(bins) * int(channels))}
    if "attention_mask" in _parameters(model):
        out["attention_mask"] = torch.ones(batch, 8 * seq, dtype=torch.long)
    return _decoder_ids(model, out, batch, seq)


def raw_audio(model: Any, batch: int, seq: int) -> dict[str, Any]:
    import torch

    samples = AUDIO_SAMPLES.get(seq, 400 * seq + 1600)
    return _decoder_ids(model, {"input_values": torch.randn(batch, samples)}, batch, seq)


def image_token_id(config: Any) -> int | None:
    for key in IMAGE_TOKEN_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def count_image_tokens(model: Any, pixel_values: Any) -> int:
    """How many image features one image yields: what the prompt must hold as image tokens."""
    import torch

    from pytest_hfexport.naming import flat_named

    getter = getattr(model, "get_image_features", None) or getattr(
        getattr(model, "model", None), "get_image_features", None
    )
    if getter is None:
        raise InputsError("image-text model without get_image_features: image tokens cannot be counted")
    with torch.no_grad():
        out = getter(pixel_values=pixel_values)
    if not isinstance(out, torch.Tensor):
        named = flat_named(out)
        for prefix in ("pooler_output", "image_embeds", "image_features", ""):
            parts = [t for name, t in named.items() if name.startswith(prefix)]
            if parts:
                break
        out = torch.cat([t.reshape(-1, t.shape[-1]) for t in (parts if prefix else parts[:1])])
    rows = out.reshape(-1, out.shape[-1]).shape[0]
    return rows // pixel_values.shape[0]


def image_text(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """pixel_values and a prompt of ``seq`` text tokens around one image's worth of image tokens per row."""
    import torch

    token = image_token_id(model.config)
    if token is None:
        raise InputsError("image-text model: its config names no image token id")
    pixel_values = pixels(model, batch)
    count = count_image_tokens(model, pixel_values)
    ids = token_ids(model, batch, seq)
    head = min(2, seq)
    ids = torch.cat([ids[:, :head], torch.full((batch, count), token), ids[:, head:]], dim=1)
    out: dict[str, Any] = {"input_ids": ids, "pixel_values": pixel_values}
    if "attention_mask" in _parameters(model):
        out["attention_mask"] = _mask(batch, ids.shape[1])
    return out


def text_and_pixels(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """Dual encoders (CLIP-like): token ids and an image, each through its own tower."""
    out = text(model, batch, seq)
    out["pixel_values"] = pixels(model, batch)
    return out


def candidates(model: Any, head: str) -> list[tuple[str, InputMaker]]:
    """Every plausible way to feed this model, most likely first (``build`` keeps the first that runs)."""
    main = getattr(model, "main_input_name", "input_ids")
    params = _parameters(model)
    has_vision = getattr(model.config, "vision_config", None) is not None
    if head == "image_text_to_text" or (main == "input_ids" and has_vision and "pixel_values" in params):
        makers: list[tuple[str, InputMaker]] = []
        if image_token_id(model.config) is not None:
            makers.append(("image_text", image_text))
        makers.append(("text_and_pixels", text_and_pixels))
        if main == "pixel_values":
            makers.append(("vision", lambda m, b, s: {**vision(m, b, s), **text(m, b, s)}))
        return makers
    if main == "input_ids":
        return [("text", text)]
    if main == "pixel_values":
        return [("vision", vision)]
    if main == "input_features":
        return [("features_channels_first", features_channels_first), ("features_frames_first", features_frames_first)]
    if main == "input_values":
        return [("raw_audio", raw_audio)]
    raise InputsError(f"main input {main!r} has no generic maker")
