"""Which architectures the sweep measures: every model class the Auto mappings of transformers register.

A class is measured once, under the first head (in ``HEADS`` order) whose mapping lists it, so a
class registered as a causal LM and as a base model counts once, as a causal LM. The config class
comes from ``CONFIG_MAPPING_NAMES`` for the mapping's model type. Nothing is imported from the
model modules here (names only), so enumeration is cheap and does not depend on optional packages.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from typing import Any

# Head -> the mapping (in transformers.models.auto.modeling_auto) that lists its classes, most specific
# first: a class is measured under the first head that lists it. Mappings missing from the installed
# transformers are skipped (VISION_2_SEQ was folded into IMAGE_TEXT_TO_TEXT).
HEADS: dict[str, tuple[str, ...]] = {
    "causal_lm": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
    "seq2seq_lm": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "speech_seq2seq": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",),
    "image_text_to_text": ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"),
    "masked_lm": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",),
    "ctc": ("MODEL_FOR_CTC_MAPPING_NAMES",),
    "sequence_classification": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",),
    "token_classification": ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",),
    "image_classification": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
    "base": ("MODEL_MAPPING_NAMES",),
}
# Heads whose models generate: their cells also judge export_for_generation and greedy tokens.
GENERATIVE_HEADS = frozenset({"causal_lm", "seq2seq_lm", "speech_seq2seq"})


@dataclass(frozen=True)
class Architecture:
    """One model class to measure: its name, the head it is measured as, its model type and config class."""

    name: str
    head: str
    model_type: str
    config_class: str

    @property
    def generative(self) -> bool:
        return self.head in GENERATIVE_HEADS

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Architecture:
        return cls(data["name"], data["head"], data["model_type"], data["config_class"])


def mapping_names() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Head -> the installed mappings that list its classes (model type -> class name or names)."""
    from transformers.models.auto import modeling_auto

    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for head, names in HEADS.items():
        found[head] = [(name, dict(getattr(modeling_auto, name))) for name in names if hasattr(modeling_auto, name)]
    return found


def _owns(class_name: str, config_name: str) -> bool:
    """Whether a config class is the model class's own (``LlamaConfig`` for ``LlamaForCausalLM``)."""
    stem = config_name.removesuffix("Config")
    return bool(stem) and class_name.lower().startswith(stem.lower())


def sweep_order(arch: Architecture) -> str:
    """A fixed pseudo-random order (a digest of the name): any prefix of it, a ``--limit`` or a sweep cut short
    by its time budget, samples every head alike, and both implementations meet the same architectures first."""
    return hashlib.sha1(arch.name.encode()).hexdigest()


SCOPES = ("all", "types")


def architectures(only: str | None = None, limit: int | None = None, scope: str = "all") -> list[Architecture]:
    """Every registered model class once, in ``sweep_order``; ``only`` filters names (case-insensitive regex
    searched in the class name, the head and the model type), ``limit`` keeps the first N after filtering.
    ``scope="types"`` keeps one class per model type, its most specific head (about half the classes: a
    quicker sweep that still meets every model family)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    seen: dict[str, Architecture] = {}
    for head, mappings in mapping_names().items():
        for _, mapping in mappings:
            for model_type, classes in mapping.items():
                for name in classes if isinstance(classes, (list, tuple)) else (classes,):
                    config = CONFIG_MAPPING_NAMES.get(model_type, "")
                    if name not in seen:
                        seen[name] = Architecture(name, head, model_type, config)
                    elif _owns(name, config) and not _owns(name, seen[name].config_class):
                        # A class reused by another model type (internlm3 -> LlamaForCausalLM): keep its own config.
                        seen[name] = Architecture(name, seen[name].head, model_type, config)
    found = sorted(seen.values(), key=sweep_order)
    if scope == "types":
        heads = list(HEADS)
        first: dict[str, Architecture] = {}
        for arch in sorted(found, key=lambda a: (heads.index(a.head), a.name)):
            first.setdefault(arch.model_type, arch)
        found = [a for a in found if first.get(a.model_type) is a]
    elif scope != "all":
        raise ValueError(f"unknown scope {scope!r}; scopes: {SCOPES}")
    if only:
        pattern = re.compile(only, re.IGNORECASE)
        found = [a for a in found if pattern.search(a.name) or pattern.search(a.head) or pattern.search(a.model_type)]
    return found[:limit] if limit is not None else found
