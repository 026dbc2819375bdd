"""Build one architecture tiny, with inputs its eager forward accepts, or say why it cannot be built.

``build`` tries the shrink levels in order (``shrink.LEVELS``) and, at each, every input layout
``inputs.candidates`` proposes; the first model whose eager forward runs on the sample is kept, with
the batch-2 set at another length when eager runs on it too. A model that cannot be built is not an
export failure: ``NotBuildable`` carries the reason (the stage that failed, the exception type and the
first line of its message) so the report can count it instead of dropping it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .enumerate import Architecture
from .inputs import OTHER, SAMPLE, InputsError, candidates
from .shrink import LEVELS, tiny_config

# A "tiny" model past this many parameters means the shrink did not reach a size the sweep can afford.
MAX_PARAMETERS = 20_000_000
# How far a build attempt got, so the most informative failure is the one reported.
BUILD_STAGES = ("import", "config", "size", "model", "inputs", "eager")


class NotBuildable(Exception):
    """The architecture cannot be built tiny here (``stage``: import, config, size, model, inputs, eager)."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


@dataclass
class Built:
    """A tiny model in eval mode, its sample and other inputs, and how it was made."""

    arch: Architecture
    model: Any
    sample: dict[str, Any]
    other: dict[str, Any] | None
    level: int
    inputs: str
    parameters: int
    notes: list[str] = field(default_factory=list)

    def info(self) -> dict[str, Any]:
        return {"level": self.level, "inputs": self.inputs, "parameters": self.parameters, "notes": self.notes}


def describe(exc: BaseException) -> str:
    """Exception type and the first non-empty line of its message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:240]}" if lines else type(exc).__name__


def eager(model: Any, inputs: dict[str, Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(**copy.deepcopy(inputs))


def _parameters(model_class: Any, config: Any) -> int:
    import torch

    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


def _start_token(model: Any) -> None:
    """Encoder-decoders whose config names no decoder start token (a tokenizer would supply one) start from the
    padding token, as T5 and BART checkpoints do, so eager generate() runs."""
    generation = getattr(model, "generation_config", None)
    if generation is None or not getattr(model.config, "is_encoder_decoder", False):
        return
    if generation.decoder_start_token_id is None and generation.bos_token_id is None:
        pad = getattr(model.config, "pad_token_id", None)
        generation.decoder_start_token_id = pad if isinstance(pad, int) else 0


def _as_standalone_decoder(config: Any, head: str) -> bool:
    """A causal-LM head on an encoder architecture (BERT, RoBERTa, ...) is only a decoder with ``is_decoder=True``
    (transformers warns otherwise): without it, attention is bidirectional and the cache is never written, so
    generate() runs a model nobody would deploy. Decoder-only configs do not read the flag."""
    if head != "causal_lm" or getattr(config, "is_decoder", None) is not False:
        return False
    config.is_decoder = True
    return True


def build(arch: Architecture, levels: tuple[frozenset[str], ...] = LEVELS) -> Built:
    """The first shrink level and input layout under which ``arch`` builds and runs eagerly."""
    import torch
    import transformers

    try:
        model_class = getattr(transformers, arch.name)
        config_class = getattr(transformers, arch.config_class)
    except Exception as exc:  # missing optional dependency, unknown name
        raise NotBuildable("import", describe(exc)) from exc
    best: tuple[int, str] | None = None

    def failed(stage: str, exc: BaseException) -> None:
        nonlocal best
        rank = BUILD_STAGES.index(stage)
        if best is None or rank > best[0]:
            best = (rank, describe(exc))

    for index, level in enumerate(levels):
        try:
            config = tiny_config(config_class, level)
        except Exception as exc:
            failed("config", exc)
            continue
        standalone = _as_standalone_decoder(config, arch.head)
        try:
            count = _parameters(model_class, config)
        except Exception:
            count = 0  # some models refuse the meta device; the real build below decides
        if count > MAX_PARAMETERS:
            failed("size", ValueError(f"{count} parameters at the smallest size the config accepts"))
            continue
        try:
            torch.manual_seed(0)
            model = model_class(config).eval()
        except Exception as exc:
            failed("model", exc)
            continue
        try:
            makers = candidates(model, arch.head)
        except InputsError as exc:
            failed("inputs", exc)
            continue
        for name, maker in makers:
            try:
                torch.manual_seed(1)
                sample = maker(model, *SAMPLE)
            except Exception as exc:
                failed("inputs", exc)
                continue
            try:
                eager(model, sample)
            except Exception as exc:
                failed("eager", exc)
                continue
            if arch.generative:
                _start_token(model)
            built = Built(arch, model, sample, None, index, name, sum(p.numel() for p in model.parameters()))
            if standalone:
                built.notes.append("is_decoder=True (causal LM head of an encoder architecture, as transformers asks)")
            try:
                torch.manual_seed(2)
                other = maker(model, *OTHER)
                eager(model, other)
                built.other = other
            except Exception as exc:  # the artifact is then judged at the sample only
                built.notes.append(f"no batch-{OTHER[0]} inputs: {describe(exc)}")
            return built
    assert best is not None
    raise NotBuildable(BUILD_STAGES[best[0]], best[1])
