"""Real-size entries: the published dimensions of four checkpoints, random seeded weights, no hub.

What users export (100M-1B parameters), where a decode step is compute rather than overhead and an export's time
and memory show. Each entry carries the same checks as its tiny family; all sit in the ``realsize`` tier
(``pytest conformance -m hfexport_realsize``), never in the default run. Dimensions from each model's published
``config.json``: SmolLM2-135M, Qwen3-0.6B, whisper-base, t5-small.
"""

from __future__ import annotations

from typing import Any

import transformers as tf

from .entries import GEN, SEQ2SEQ
from .inputs import causal_lm_inputs, seq2seq_inputs, speech_inputs
from .registry import ZooEntry, register

SMOLLM2_135M = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)
QWEN3_0_6B = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=151643,
    eos_token_id=151645,
    pad_token_id=151643,
)
WHISPER_BASE = dict(
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    vocab_size=51865,
    num_mel_bins=80,
    max_source_positions=1500,
    max_target_positions=448,
    decoder_start_token_id=50258,
    bos_token_id=50257,
    eos_token_id=50257,
    pad_token_id=50257,
    suppress_tokens=None,
    begin_suppress_tokens=None,
)
T5_SMALL = dict(
    d_model=512,
    d_ff=2048,
    d_kv=64,
    num_layers=6,
    num_decoder_layers=6,
    num_heads=8,
    vocab_size=32128,
    relative_attention_num_buckets=32,
    feed_forward_proj="relu",
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)


def _entry(name: str, family: str, build: Any, inputs: Any, checks: tuple[str, ...]) -> None:
    register(ZooEntry(name, family=family, build=build, inputs=inputs, checks=checks, tier="realsize"))


_entry("smollm2_135m", "decoder", lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**SMOLLM2_135M)), causal_lm_inputs, GEN)
_entry("qwen3_0_6b", "decoder", lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(**QWEN3_0_6B)), causal_lm_inputs, GEN)
_entry(
    "whisper_base",
    "speech",
    lambda: tf.WhisperForConditionalGeneration(tf.WhisperConfig(**WHISPER_BASE)),
    speech_inputs,
    SEQ2SEQ,
)
_entry(
    "t5_small",
    "encoder-decoder",
    lambda: tf.T5ForConditionalGeneration(tf.T5Config(**T5_SMALL)),
    seq2seq_inputs,
    SEQ2SEQ,
)
