"""The zoo's table: one entry per tiny architecture, and the function that builds it.

An entry knows how to build its model (seeded, random weights, from a config: no
hub) and how to make inputs at any batch and sequence length, and it states
which checks apply. Adding an architecture is adding one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# Families of architectures the zoo covers.
FAMILIES = ("decoder", "moe", "ssm", "encoder-text", "encoder-vision", "encoder-decoder", "speech", "vlm")

# Size tiers: ``tiny`` (the default runs, every check in seconds) and ``realsize`` (published dimensions of real
# checkpoints, random weights; the ``hfexport_realsize`` tier, slow).
TIERS = ("tiny", "realsize")
# Check families an entry may opt into; each also runs at batch 2 as its own ``<check>_batch`` check.
CHECKS = ("export", "shapes", "generation", "multi_token_decode", "static_cache")


@dataclass(frozen=True)
class ZooEntry:
    """One tiny architecture: how to build it, how to make inputs of any size, which checks apply.

    ``sample`` is the (batch, sequence) the exports are traced on; every artifact also runs at
    ``other_seq`` tokens, at ``batch`` rows with left padding and, where ``min_seq`` is 1, at one token.
    ``seq`` is False where the inputs have no token axis (images): then only the batch varies."""

    name: str
    family: str
    build: Callable[[], Any]  # -> model (eval mode, seeded)
    inputs: Callable[[Any, int, int], dict[str, Any]]  # (model, batch, seq) -> inputs
    checks: tuple[str, ...] = ("export", "shapes")
    sample: tuple[int, int] = (1, 6)
    other_seq: int = 9
    batch: int = 2
    seq: bool = True
    min_seq: int = 1  # the shortest input the entry is run at: 1 where eager serves one token
    query_tokens: tuple[int, ...] = (1, 3)  # query blocks a multi-token decode graph serves (eager must too)
    seed: int = 0  # the weights' seed: chosen so greedy generation is not degenerate
    tier: str = "tiny"

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"zoo entry {self.name}: unknown tier {self.tier!r}; tiers are {TIERS}")
        if self.family not in FAMILIES:
            raise ValueError(f"zoo entry {self.name}: unknown family {self.family!r}; families are {FAMILIES}")
        unknown = set(self.checks) - set(CHECKS)
        if unknown:
            raise ValueError(f"zoo entry {self.name}: unknown checks {sorted(unknown)}; checks are {CHECKS}")

    def model(self) -> Any:
        torch.manual_seed(self.seed)
        return self.build().eval()

    def sample_inputs(self, model: Any, batch: int | None = None, seq: int | None = None) -> dict[str, Any]:
        b, s = self.sample
        torch.manual_seed(1)
        return self.inputs(model, b if batch is None else batch, s if seq is None else seq)

    def input_sets(self, model: Any, kinds: tuple[str, ...] = ("sample", "other", "one")) -> dict[str, dict[str, Any]]:
        """Named input sets: ``sample``, ``other`` (another length), ``one`` (one token), ``batch`` (``batch`` rows,
        left-padded, at the other length); kinds that do not apply to this entry are left out."""
        b, s = self.sample
        sets = {
            "sample": lambda: self.sample_inputs(model),
            "other": (lambda: self.sample_inputs(model, b, self.other_seq)) if self.seq else None,
            "one": (lambda: self.sample_inputs(model, b, 1)) if self.seq and self.min_seq == 1 else None,
            "batch": lambda: self.sample_inputs(model, self.batch, self.other_seq if self.seq else s),
        }
        return {kind: make() for kind in kinds if (make := sets.get(kind)) is not None}


# The tiny entries (what every tool iterates by default) and the real-size ones, each entry in its tier's table.
ZOO: dict[str, ZooEntry] = {}
REALSIZE: dict[str, ZooEntry] = {}


def register(entry: ZooEntry) -> ZooEntry:
    if entry.name in ZOO or entry.name in REALSIZE:
        raise ValueError(f"zoo entry {entry.name!r} registered twice")
    (REALSIZE if entry.tier == "realsize" else ZOO)[entry.name] = entry
    return entry


def get(name: str) -> ZooEntry:
    entry = ZOO.get(name) or REALSIZE.get(name)
    if entry is None:
        raise KeyError(f"no zoo entry {name!r}; entries: {sorted(ZOO)}, real-size: {sorted(REALSIZE)}")
    return entry


def select(
    names: list[str] | None = None, family: str | None = None, check: str | None = None, tier: str | None = "tiny"
) -> list[ZooEntry]:
    """Entries by name (any tier), else every entry of ``tier`` (None: every tier), by family and check."""
    tables = [ZOO, REALSIZE] if tier is None else [REALSIZE if tier == "realsize" else ZOO]
    entries = [get(n) for n in names] if names else [e for table in tables for e in table.values()]
    if family:
        entries = [e for e in entries if e.family == family]
    if check:
        entries = [e for e in entries if check in e.checks]
    return entries
