"""The built-in tiny models: seeded random weights from configs, no hub.

Sizes are the smallest that keep each architecture's structure (GQA, MoE routing,
sliding windows, cross attention): hidden 32, 2 layers, vocab 128.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers as tf

from .inputs import causal_lm_inputs, image_inputs, seq2seq_inputs, speech_inputs, text_inputs
from .registry import ZooEntry, register

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
            max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
GEN = ("export", "shapes", "generation", "multi_token_decode", "static_cache")


def _decoder(name: str, model_cls: Any, config_cls: Any, family: str = "decoder", checks=GEN, **overrides: Any) -> None:
    def build() -> Any:
        cfg = config_cls(**{**TINY, **overrides})
        return model_cls(cfg)

    register(ZooEntry(name, family, build, causal_lm_inputs, checks=checks))


_decoder("llama", tf.LlamaForCausalLM, tf.LlamaConfig, num_key_value_heads=2)
_decoder("qwen3", tf.Qwen3ForCausalLM, tf.Qwen3Config, num_key_value_heads=2, head_dim=8)
_decoder("qwen2", tf.Qwen2ForCausalLM, tf.Qwen2Config, num_key_value_heads=2)
_decoder("mistral", tf.MistralForCausalLM, tf.MistralConfig, num_key_value_heads=2, sliding_window=None)
_decoder("phi3", tf.Phi3ForCausalLM, tf.Phi3Config, num_key_value_heads=2)
_decoder("gemma3", tf.Gemma3ForCausalLM, tf.Gemma3TextConfig, num_key_value_heads=2, head_dim=8,
         sliding_window=4, layer_types=["sliding_attention", "full_attention"])
_decoder("qwen3_moe", tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig, family="moe", num_key_value_heads=2, head_dim=8,
         num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)
_decoder("mixtral", tf.MixtralForCausalLM, tf.MixtralConfig, family="moe", num_key_value_heads=2,
         num_local_experts=4, num_experts_per_tok=2)


def _gpt2() -> Any:
    return tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=128, n_positions=128,
                                                    bos_token_id=1, eos_token_id=2, pad_token_id=0))


register(ZooEntry("gpt2", "decoder", _gpt2, causal_lm_inputs, checks=GEN))


def _mamba() -> Any:
    return tf.MambaForCausalLM(tf.MambaConfig(hidden_size=32, state_size=8, num_hidden_layers=2, vocab_size=128,
                                              expand=2, conv_kernel=4, use_mambapy=False))


register(ZooEntry("mamba", "ssm", _mamba, lambda m, b, s: text_inputs(m, b, s, mask=False),
                  checks=("export", "shapes", "generation")))


def _bert() -> Any:
    return tf.BertModel(tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, vocab_size=128, max_position_embeddings=128),
                        add_pooling_layer=True)


register(ZooEntry("bert", "encoder-text", _bert, lambda m, b, s: text_inputs(m, b, s, token_type_ids=True)))


def _roberta() -> Any:
    return tf.RobertaModel(tf.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, vocab_size=128, max_position_embeddings=130,
                                            pad_token_id=1))


register(ZooEntry("roberta", "encoder-text", _roberta, text_inputs))


def _vit() -> Any:
    return tf.ViTModel(tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, num_channels=3))


register(ZooEntry("vit", "encoder-vision", _vit, image_inputs, sample=(1, 0), other=(3, 0)))


def _t5() -> Any:
    return tf.T5ForConditionalGeneration(tf.T5Config(d_model=32, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2,
                                                     num_heads=4, vocab_size=128, decoder_start_token_id=0,
                                                     relative_attention_num_buckets=8))


register(ZooEntry("t5", "encoder-decoder", _t5, seq2seq_inputs, checks=("export", "shapes", "generation")))


def _bart() -> Any:
    return tf.BartForConditionalGeneration(tf.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2,
                                                         encoder_attention_heads=4, decoder_attention_heads=4,
                                                         encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128,
                                                         max_position_embeddings=128))


register(ZooEntry("bart", "encoder-decoder", _bart, seq2seq_inputs, checks=("export", "shapes", "generation")))


def _whisper() -> Any:
    return tf.WhisperForConditionalGeneration(tf.WhisperConfig(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128, num_mel_bins=16, max_source_positions=16,
        max_target_positions=64, decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1,
        suppress_tokens=None, begin_suppress_tokens=None))


register(ZooEntry("whisper", "speech", _whisper, speech_inputs, checks=("export", "shapes", "generation")))
