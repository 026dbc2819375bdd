"""A downstream repo's generative models, one per family, built from configs with random weights (no hub):
a decoder (GPT-NeoX), an encoder-decoder (T5) and a vision-language model (LLaVA: a CLIP tower and a Llama).
Each inputs maker takes ``(model, batch, seq)``, so the checks can run the export away from its sample."""

from __future__ import annotations

import torch
import transformers

VOCAB = 96
IMAGE_TOKEN = VOCAB - 1


def tiny_gpt_neox() -> transformers.GPTNeoXForCausalLM:
    config = transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )
    return transformers.GPTNeoXForCausalLM(config)


def tiny_t5() -> transformers.T5ForConditionalGeneration:
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )
    return transformers.T5ForConditionalGeneration(config)


def tiny_llava() -> transformers.LlavaForConditionalGeneration:
    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
        patch_size=8, projection_dim=32,
    )
    text = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
    )
    config = transformers.LlavaConfig(
        vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN, projector_hidden_act="gelu",
        vision_feature_layer=-1, vision_feature_select_strategy="default",
    )
    return transformers.LlavaForConditionalGeneration(config)


def tokens(model, batch: int, seq: int) -> dict:
    ids = torch.randint(2, IMAGE_TOKEN, (batch, seq))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def seq2seq(model, batch: int, seq: int) -> dict:
    return {**tokens(model, batch, seq), "decoder_input_ids": torch.zeros(batch, 1, dtype=torch.long)}


def image_prompt(model, batch: int, seq: int) -> dict:
    """``seq`` text tokens around one image: 16 image tokens (32 px in patches of 8, CLS dropped) after the first
    two text tokens (the checks left-pad a batch over those)."""
    vision = model.config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    text = torch.randint(2, IMAGE_TOKEN, (batch, max(seq, 2)))
    ids = torch.cat([text[:, :2], torch.full((batch, patches), IMAGE_TOKEN), text[:, 2:]], dim=1)
    pixels = torch.randn(batch, 3, vision.image_size, vision.image_size)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": pixels}
