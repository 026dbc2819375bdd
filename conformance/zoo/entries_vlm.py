"""The built-in tiny vision-language models (registered after ``entries``): seeded random weights, no hub."""

from __future__ import annotations

from typing import Any

import torch
import transformers as tf

from .entries import TINY
from .inputs import left_padded_mask
from .registry import ZooEntry, register

# -- vision-language ---------------------------------------------------------------------
LLAVA_IMAGE_TOKEN = 127


def _llava() -> Any:
    vision = tf.CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        projection_dim=32,
    )
    text = tf.LlamaConfig(**{**TINY, "num_key_value_heads": 2, "head_dim": 8})
    return tf.LlavaForConditionalGeneration(
        tf.LlavaConfig(
            vision_config=vision,
            text_config=text,
            image_token_id=LLAVA_IMAGE_TOKEN,
            projector_hidden_act="gelu",
            vision_feature_layer=-1,
            vision_feature_select_strategy="default",
        )
    )


def _llava_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """A prompt of ``seq`` text tokens around one image (16 image tokens: 32px / patch 8, CLS dropped); in a batch
    the first row is left-padded over its first two text tokens."""
    n_image = (model.config.vision_config.image_size // model.config.vision_config.patch_size) ** 2
    text = torch.randint(3, LLAVA_IMAGE_TOKEN - 1, (batch, max(seq, 2)))
    ids = torch.cat([text[:, :2], torch.full((batch, n_image), LLAVA_IMAGE_TOKEN), text[:, 2:]], dim=1)
    return {
        "input_ids": ids,
        "attention_mask": left_padded_mask(ids),
        "pixel_values": torch.randn(
            batch, 3, model.config.vision_config.image_size, model.config.vision_config.image_size
        ),
    }


register(
    ZooEntry(
        "llava",
        family="vlm",
        build=_llava,
        inputs=_llava_inputs,
        checks=("export", "shapes", "generation"),
        sample=(1, 4),
        other_seq=6,
        min_seq=2,
    )
)

QWEN2VL_TOKENS = dict(image_token_id=120, video_token_id=121, vision_start_token_id=122, vision_end_token_id=123)


def _qwen2_vl() -> Any:
    return tf.Qwen2VLForConditionalGeneration(
        tf.Qwen2VLConfig(
            text_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=128,
                # TINY's position limit, as every other decoder here: ExecuTorch plans memory for the longest
                # sequence a model takes, and at the default 32768 (bounded to 2048) every load of Qwen2-VL's
                # decode program allocated gigabytes.
                max_position_embeddings=TINY["max_position_embeddings"],
                bos_token_id=1,
                eos_token_id=2,
                pad_token_id=0,
                rope_parameters=dict(rope_type="default", mrope_section=[1, 1, 2], rope_theta=10000.0),
            ),
            vision_config=dict(
                depth=2,
                embed_dim=32,
                hidden_size=32,
                num_heads=4,
                mlp_ratio=2,
                patch_size=4,
                spatial_merge_size=2,
                temporal_patch_size=2,
                in_channels=3,
            ),
            **QWEN2VL_TOKENS,
        )
    )


def _qwen2_vl_inputs(model: Any, batch: int, seq: int) -> dict[str, Any]:
    """One 16x16 image per row (grid 1x4x4 -> 16 patches -> 4 merged image tokens) inside ``seq`` text tokens; in
    a batch the first row is left-padded over its first two text tokens."""
    text = torch.randint(3, 119, (batch, max(seq, 2)))
    start, end = QWEN2VL_TOKENS["vision_start_token_id"], QWEN2VL_TOKENS["vision_end_token_id"]
    image = torch.tensor([[start] + [QWEN2VL_TOKENS["image_token_id"]] * 4 + [end]]).expand(batch, -1)
    ids = torch.cat([text[:, :2], image, text[:, 2:]], dim=1)
    return {
        "input_ids": ids,
        "attention_mask": left_padded_mask(ids),
        "mm_token_type_ids": (ids == QWEN2VL_TOKENS["image_token_id"]).long(),
        "pixel_values": torch.randn(batch * 16, 3 * 2 * 4 * 4),
        "image_grid_thw": torch.tensor([[1, 4, 4]] * batch),
    }


register(
    ZooEntry(
        "qwen2_vl",
        family="vlm",
        build=_qwen2_vl,
        inputs=_qwen2_vl_inputs,
        checks=("export", "generation"),
        sample=(1, 4),
        other_seq=6,
        min_seq=2,
    )
)
