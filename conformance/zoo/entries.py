"""The built-in tiny models: seeded random weights from configs, no hub.

Sizes are the smallest that keep each architecture's structure (GQA, MoE routing,
sliding windows, cross attention): hidden 32, 2 layers, vocab 128. Where the default
initialisation makes greedy generation repeat one token (gpt2, t5, bart, mbart, whisper, mamba), a
larger init scale and a seed give a reference with varied tokens (tests/test_zoo.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import transformers as tf

from .inputs import causal_lm_inputs, image_inputs, seq2seq_inputs, speech_inputs, text_inputs, vision_seq2seq_inputs
from .registry import ZooEntry, register

TINY = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=128,
    max_position_embeddings=128,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
GEN = ("export", "shapes", "generation", "multi_token_decode", "static_cache")
# Encoder-decoders: the documented static-cache decode loop is decoder-only (no encoder outputs in it).
SEQ2SEQ = ("export", "shapes", "generation", "multi_token_decode")


def _decoder(
    name: str, model_cls: Any, config_cls: Any, family: str = "decoder", checks=GEN, seed: int = 0, **overrides: Any
) -> None:
    def build() -> Any:
        cfg = config_cls(**{**TINY, **overrides})
        return model_cls(cfg)

    register(ZooEntry(name, family=family, build=build, inputs=causal_lm_inputs, checks=checks, seed=seed))


_decoder("llama", tf.LlamaForCausalLM, tf.LlamaConfig, num_key_value_heads=2)
_decoder("qwen3", tf.Qwen3ForCausalLM, tf.Qwen3Config, num_key_value_heads=2, head_dim=8)
_decoder("qwen2", tf.Qwen2ForCausalLM, tf.Qwen2Config, num_key_value_heads=2)
_decoder("mistral", tf.MistralForCausalLM, tf.MistralConfig, num_key_value_heads=2, sliding_window=None)
# Sliding windows shorter than the prompts (4 < 6): every layer of mistral, the upper layers of qwen2.
_decoder(
    "mistral_sliding",
    tf.MistralForCausalLM,
    tf.MistralConfig,
    family="decoder",
    num_key_value_heads=2,
    sliding_window=4,
)
_decoder(
    "qwen2_sliding",
    tf.Qwen2ForCausalLM,
    tf.Qwen2Config,
    family="decoder",
    num_key_value_heads=2,
    use_sliding_window=True,
    sliding_window=4,
    max_window_layers=1,
)
_decoder("phi3", tf.Phi3ForCausalLM, tf.Phi3Config, num_key_value_heads=2)
_decoder(
    "gemma3",
    tf.Gemma3ForCausalLM,
    tf.Gemma3TextConfig,
    num_key_value_heads=2,
    head_dim=8,
    sliding_window=4,
    layer_types=["sliding_attention", "full_attention"],
    seed=2,
)
# A second sliding-window configuration: three layers (two sliding, one full), a wider window, one key/value head
# shared by four query heads and a head size that is not hidden / heads.
_decoder(
    "gemma3_mqa",
    tf.Gemma3ForCausalLM,
    tf.Gemma3TextConfig,
    hidden_size=48,
    num_hidden_layers=3,
    num_key_value_heads=1,
    head_dim=16,
    sliding_window=6,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    seed=2,
)
_decoder(
    "qwen3_moe",
    tf.Qwen3MoeForCausalLM,
    tf.Qwen3MoeConfig,
    family="moe",
    num_key_value_heads=2,
    head_dim=8,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    decoder_sparse_step=1,
)
_decoder(
    "mixtral",
    tf.MixtralForCausalLM,
    tf.MixtralConfig,
    family="moe",
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
)


def _gpt2() -> Any:
    return tf.GPT2LMHeadModel(
        tf.GPT2Config(
            n_embd=32,
            n_layer=2,
            n_head=4,
            vocab_size=128,
            n_positions=128,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            initializer_range=0.2,
        )
    )


register(ZooEntry("gpt2", family="decoder", build=_gpt2, inputs=causal_lm_inputs, checks=GEN))


TINY_SSM = dict(
    hidden_size=32,
    state_size=8,
    num_hidden_layers=2,
    vocab_size=128,
    expand=2,
    conv_kernel=4,
    use_mambapy=False,
    initializer_range=0.5,
)


def _ssm(name: str, model_cls: Any, config_cls: Any) -> None:
    """A state-space model: no attention mask in its prompts, its state instead of a KV cache.

    Eager Mamba does not serve several query tokens on a filled cache the way it serves them one by
    one, so the multi-token decode graph is judged on single tokens."""
    register(
        ZooEntry(
            name,
            family="ssm",
            build=lambda: model_cls(config_cls(**TINY_SSM)),
            inputs=lambda m, b, s: text_inputs(m, b, s, mask=False),
            checks=("export", "shapes", "generation", "multi_token_decode"),
            query_tokens=(1,),
        )
    )


_ssm("mamba", tf.MambaForCausalLM, tf.MambaConfig)
# A second SSM: Mamba's scan with RMS-normalised B, C and dt (another mixer class to patch).
_ssm("falcon_mamba", tf.FalconMambaForCausalLM, tf.FalconMambaConfig)


def _bert() -> Any:
    return tf.BertModel(
        tf.BertConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            vocab_size=128,
            max_position_embeddings=128,
        ),
        add_pooling_layer=True,
    )


register(
    ZooEntry(
        "bert", family="encoder-text", build=_bert, inputs=lambda m, b, s: text_inputs(m, b, s, token_type_ids=True)
    )
)


def _roberta() -> Any:
    return tf.RobertaModel(
        tf.RobertaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            vocab_size=128,
            max_position_embeddings=130,
            pad_token_id=1,
        )
    )


register(ZooEntry("roberta", family="encoder-text", build=_roberta, inputs=text_inputs))


def _funnel() -> Any:
    """Funnel Transformer: relative-shift attention whose position tables the model builds from Python lists of
    positions, pooled to half the length per block and upsampled back by its decoder."""
    return tf.FunnelModel(
        tf.FunnelConfig(
            d_model=32, n_head=4, d_head=8, d_inner=64, block_sizes=[1, 1], num_decoder_layers=1, vocab_size=128
        )
    )


# Eager Funnel refuses fewer than 3 tokens (its pooled tables overrun).
register(ZooEntry("funnel", family="encoder-text", build=_funnel, inputs=text_inputs, min_seq=3))


# The tiny vision tower every image entry shares: TINY's widths over 32x32 images in 8x8 patches.
TINY_VISION = {
    **{k: TINY[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")},
    "image_size": 32,
    "patch_size": 8,
    "num_channels": 3,
}


def _vit() -> Any:
    return tf.ViTModel(tf.ViTConfig(**TINY_VISION))


def _siglip_classifier() -> Any:
    """SigLIP's image classifier: its pooling head is nn.MultiheadAttention(batch_first=True), whose transposed
    projection made a batch-1 trace pin the batch (kept fixed by the exporter's batch-2 retrace)."""
    return tf.SiglipForImageClassification(tf.SiglipConfig(vision_config=TINY_VISION, text_config=TINY, num_labels=3))


def _register_image_model(name: str, build: Callable[[], Any]) -> None:
    """An image model checked on export only: batch-1 sample, batch 3 as the other size, no token axis."""
    register(
        ZooEntry(
            name,
            family="encoder-vision",
            build=build,
            inputs=image_inputs,
            checks=("export",),
            sample=(1, 0),
            batch=3,
            seq=False,
        )
    )


_register_image_model("siglip_classifier", _siglip_classifier)
_register_image_model("vit", _vit)


# The T5-style stacks (t5, switch_transformers): relative position buckets, no learned positions.
TINY_T5 = dict(
    d_model=32,
    d_ff=64,
    d_kv=8,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    vocab_size=128,
    decoder_start_token_id=0,
    relative_attention_num_buckets=8,
)


def _t5() -> Any:
    return tf.T5ForConditionalGeneration(tf.T5Config(**TINY_T5, initializer_factor=5.0))


register(ZooEntry("t5", family="encoder-decoder", build=_t5, inputs=seq2seq_inputs, checks=SEQ2SEQ, seed=3))


def _switch_transformers() -> Any:
    """T5 with top-1 routed experts: the router re-casts itself inside forward and the experts loop over the
    experts a batch hits; the exporter keeps both traceable (checked on the plain export)."""
    config = tf.SwitchTransformersConfig(
        **TINY_T5, num_experts=4, expert_capacity=4, encoder_sparse_step=1, decoder_sparse_step=1
    )
    return tf.SwitchTransformersForConditionalGeneration(config)


register(
    ZooEntry(
        "switch_transformers",
        family="encoder-decoder",
        build=_switch_transformers,
        inputs=seq2seq_inputs,
        checks=("export",),
    )
)


# The stacks of the BART-style encoder-decoders (bart, mbart) and of whisper.
TINY_ENCODER_DECODER = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    vocab_size=128,
)
# The special token ids of the entries whose configs name them (whisper, the vision encoder-decoder's decoder).
SPECIAL_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
# BART-style encoder-decoders: learned positions, cross-attention caches in both layer layouts.
TINY_BART = dict(TINY_ENCODER_DECODER, max_position_embeddings=128)


def _bart_like(name: str, model_cls: Any, config_cls: Any, init_std: float, seed: int = 0) -> None:
    def build() -> Any:
        return model_cls(config_cls(**TINY_BART, init_std=init_std))

    register(ZooEntry(name, family="encoder-decoder", build=build, inputs=seq2seq_inputs, checks=SEQ2SEQ, seed=seed))


_bart_like("bart", tf.BartForConditionalGeneration, tf.BartConfig, init_std=0.2, seed=1)
# Cross-attention caches beyond t5/bart: pre-norm layers and a final layer norm on both stacks.
_bart_like("mbart", tf.MBartForConditionalGeneration, tf.MBartConfig, init_std=0.5)


def _whisper(name: str, **overrides: Any) -> None:
    """A tiny whisper: the tiny encoder-decoder's sizes, 16 mel bins, 16 source and 64 target positions, unless
    overridden."""

    def build() -> Any:
        config = dict(TINY_ENCODER_DECODER, num_mel_bins=16, max_source_positions=16, max_target_positions=64)
        config.update(overrides)
        return tf.WhisperForConditionalGeneration(
            tf.WhisperConfig(
                **config,
                decoder_start_token_id=1,
                **SPECIAL_TOKENS,
                suppress_tokens=None,
                begin_suppress_tokens=None,
                init_std=0.5,
            )
        )

    register(ZooEntry(name, family="speech", build=build, inputs=speech_inputs, checks=SEQ2SEQ))


_whisper("whisper")
# A second whisper: a deeper encoder than decoder, six heads of 8, other feature and position sizes.
_whisper(
    "whisper_uneven",
    d_model=48,
    encoder_layers=3,
    decoder_layers=1,
    encoder_attention_heads=6,
    decoder_attention_heads=6,
    encoder_ffn_dim=96,
    decoder_ffn_dim=80,
    vocab_size=160,
    num_mel_bins=20,
    max_source_positions=24,
    max_target_positions=48,
)


def _vision_encoder_decoder() -> Any:
    encoder = tf.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8
    )
    decoder = tf.GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=4,
        vocab_size=128,
        n_positions=64,
        add_cross_attention=True,
        is_decoder=True,
        initializer_range=0.5,
        **SPECIAL_TOKENS,
    )
    config = tf.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 1, 0, 2
    return tf.VisionEncoderDecoderModel(config)


# An encoder-decoder over images: a ViT encoder and a GPT-2 decoder with cross-attention (the composite
# model class that TrOCR/Donut-style checkpoints use), built from two configs.
register(
    ZooEntry(
        "vision_encoder_decoder",
        family="encoder-decoder",
        build=_vision_encoder_decoder,
        inputs=vision_seq2seq_inputs,
        checks=SEQ2SEQ,
        seed=3,
    )
)
