"""Generation entries drawn from the coverage sweep: decoders the zoo does not hand-write, at the sweep's own size.

The coverage sweep (``conformance.coverage``) builds every registered architecture tiny from its config class's
defaults (``shrink.tiny_config``) and judges one plain export and eager's greedy tokens; it never runs the
generation components away from the sample, the static cache or the multi-token decode graph. Each entry here
takes one such shrunk configuration, unchanged but for the keys ``overrides`` names (an init scale where the
default one makes greedy tokens repeat), and puts it through every generation check of the suite. The table picks
architectures for what their decoder layer does that the hand-written entries do not: attention logit
soft-capping with alternating sliding layers, parallel attention and MLP blocks with a logit scale, partial
rotary embeddings, and norms on the queries and keys after projection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import transformers as tf

from ..coverage.shrink import tiny_config
from .inputs import causal_lm_inputs
from .registry import ZooEntry, register

GEN = ("export", "shapes", "generation", "multi_token_decode", "static_cache")


@dataclass(frozen=True)
class SweepDecoder:
    """One architecture of the sweep, by its transformers class names, and why the zoo takes it."""

    name: str
    model_class: str
    config_class: str
    why: str
    overrides: dict[str, Any] = field(default_factory=dict)
    seed: int = 0


SWEEP_DECODERS = (
    SweepDecoder(
        "sweep_gemma2",
        "Gemma2ForCausalLM",
        "Gemma2Config",
        "attention and final logit soft-capping; sliding and full layers alternate",
    ),
    SweepDecoder(
        "sweep_cohere",
        "CohereForCausalLM",
        "CohereConfig",
        "attention and MLP in parallel on one layer norm; logits scaled; interleaved rotary pairs",
        overrides={"initializer_range": 0.2},  # at 0.02 the scaled logits make greedy repeat one token
    ),
    SweepDecoder(
        "sweep_gpt_neox",
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        "rotary embedding on a quarter of each head; parallel residual",
    ),
    SweepDecoder(
        "sweep_olmo2", "Olmo2ForCausalLM", "Olmo2Config", "RMS norms on the projected queries and keys", seed=2
    ),
)


def sweep_config(decoder: SweepDecoder) -> Any:
    """The sweep's shrunk configuration of ``decoder``'s class, with its overrides."""
    config = tiny_config(getattr(tf, decoder.config_class))
    for key, value in decoder.overrides.items():
        setattr(config, key, value)
    return config


def _register(decoder: SweepDecoder) -> None:
    def build() -> Any:
        return getattr(tf, decoder.model_class)(sweep_config(decoder))

    register(
        ZooEntry(decoder.name, family="decoder", build=build, inputs=causal_lm_inputs, checks=GEN, seed=decoder.seed)
    )


for _decoder in SWEEP_DECODERS:
    _register(_decoder)
