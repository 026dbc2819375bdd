"""The zoo's table: one entry per tiny architecture, and the function that builds it.

An entry knows how to build its model (seeded, random weights, from a config: no
hub) and how to make inputs at any batch and sequence length, and it states
which checks apply. Adding an architecture is adding one entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pytest_hfexport.downstream import ModelCase

# Families of architectures the zoo covers.
FAMILIES = ("decoder", "moe", "ssm", "encoder-text", "encoder-vision", "encoder-decoder", "speech", "vlm")

# Size tiers: ``tiny`` (the default runs, every check in seconds) and ``realsize`` (published dimensions of real
# checkpoints, random weights; the ``hfexport_realsize`` tier, slow).
TIERS = ("tiny", "realsize")
# Check families an entry may opt into; each also runs at batch 2 as its own ``<check>_batch`` check.
CHECKS = ("export", "shapes", "generation", "multi_token_decode", "static_cache")


# The plugin's checks a zoo entry gets as a model repo's case, per suite family it opts into: the same families, the
# suite's generation family judging both the components and the tokens they generate.
PLUGIN_CHECKS = {
    "export": ("export", "unchanged"),
    "shapes": ("shapes",),
    "generation": ("generation", "generation_tokens"),
    "multi_token_decode": ("multi_token_decode",),
    "static_cache": ("static_cache",),
}


@dataclass(eq=False, kw_only=True)
class ZooEntry(ModelCase):
    """One tiny architecture: a ``ModelCase`` (how to build it, how to make inputs of any size) that also says
    which suite families apply and how the suite varies its inputs. Being a ``ModelCase``, an entry is also what a
    model repo hands ``parametrize_with_checks``: the same checks judge it there.

    ``sample`` is the (batch, sequence) the exports are traced on; every artifact also runs at
    ``other_seq`` tokens, at ``batch`` rows with left padding and, where ``min_seq`` is 1, at one token.
    ``seq`` is False where the inputs have no token axis (images): then only the batch varies."""

    family: str
    checks: tuple[str, ...] = ("export", "shapes")
    other_seq: int = 9
    batch: int = 2
    seq: bool = True
    min_seq: int = 1  # the shortest input the entry is run at: 1 where eager serves one token
    query_tokens: tuple[int, ...] = (1, 3)  # query blocks a multi-token decode graph serves (eager must too)
    tier: str = "tiny"

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"zoo entry {self.name}: unknown tier {self.tier!r}; tiers are {TIERS}")
        if self.family not in FAMILIES:
            raise ValueError(f"zoo entry {self.name}: unknown family {self.family!r}; families are {FAMILIES}")
        unknown = set(self.checks) - set(CHECKS)
        if unknown:
            raise ValueError(f"zoo entry {self.name}: unknown checks {sorted(unknown)}; checks are {CHECKS}")
        self.other = (self.sample[0], self.other_seq)  # the plugin's export check runs the artifact there too

    def selected_checks(self) -> tuple[str, ...]:
        """The plugin's checks for the suite families this entry opts into (``PLUGIN_CHECKS``)."""
        return tuple(check for family in self.checks for check in PLUGIN_CHECKS[family])

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
