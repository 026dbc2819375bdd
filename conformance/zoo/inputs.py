"""Input makers shared by zoo entries: token ids with a left-padded mask, images, audio features."""

from __future__ import annotations

from typing import Any

import torch


def text_inputs(model: Any, batch: int, seq: int, *, mask: bool = True, token_type_ids: bool = False) -> dict[str, Any]:
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(3, vocab, (batch, seq))
    out: dict[str, Any] = {"input_ids": ids}
    if mask:
        am = torch.ones(batch, seq, dtype=torch.long)
        if batch > 1 and seq > 2:
            am[0, :2] = 0  # left padding on the first row: masks must really be used
        out["attention_mask"] = am
    if token_type_ids:
        out["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.long)
    return out


def left_padded_mask(ids: torch.Tensor) -> torch.Tensor:
    """Ones, with the first row's first two tokens masked as left padding in a batch."""
    mask = torch.ones_like(ids)
    if ids.shape[0] > 1:
        mask[0, :2] = 0
    return mask


def causal_lm_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    return text_inputs(model, batch, seq)


def image_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    cfg = getattr(model.config, "vision_config", model.config)
    size = cfg.image_size
    return {"pixel_values": torch.randn(batch, cfg.num_channels, size, size)}


def seq2seq_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    out = text_inputs(model, batch, seq)
    out["decoder_input_ids"] = torch.randint(3, model.config.vocab_size, (batch, max(1, seq // 2)))
    return out


def speech_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    cfg = model.config
    frames = 2 * cfg.max_source_positions
    return {
        "input_features": torch.randn(batch, cfg.num_mel_bins, frames),
        "decoder_input_ids": torch.randint(3, cfg.vocab_size, (batch, max(1, seq // 2))),
    }


def vision_seq2seq_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """An image for the encoder and a decoder prompt (the encoder has no token axis; ``seq`` sizes the decoder)."""
    encoder, decoder = model.config.encoder, model.config.decoder
    size = encoder.image_size
    return {
        "pixel_values": torch.randn(batch, encoder.num_channels, size, size),
        "decoder_input_ids": torch.randint(3, decoder.vocab_size, (batch, max(1, seq // 2))),
    }
