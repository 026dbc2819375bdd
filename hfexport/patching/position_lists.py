"""Position tables that models build from Python lists of ints, built from the sequence length's symbol instead.

Under torch.export ``range(seq_len)`` needs a concrete length, so a forward that lists positions as Python ints
comes out as a graph for the sample's length only (a guard ``input_ids.size()[1] == n``). Two such models:

- Funnel Transformer's relative-shift attention lists every position (``list(range(seq_len))``), pools that list
  per block and measures relative distances from its first and last entries. The distances need just three
  facts of each list: its first entry, its last entry and its length; ``Positions`` keeps those as expressions
  of the sequence length (a leading <cls> position plus an arithmetic progression), so every ``arange`` the
  tables use has symbolic bounds. The factorized attention variant already uses tensors and is left as it is.
- CPM-Ant's left-padding mask counts each text position's distance from the end of the input from a reversed
  Python list; here it is a descending ``arange``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .registry import register_patch


@dataclass(frozen=True)
class Positions:
    """An ordered list of integer positions: an optional leading ``cls`` entry, then ``start + step * i`` for
    ``i < count`` (ints or SymInts)."""

    start: Any
    step: Any
    count: Any
    cls: Any = None

    @classmethod
    def up_to(cls, length: Any) -> Positions:
        return cls(0, 1, length)

    @property
    def size(self) -> Any:
        return self.count + (0 if self.cls is None else 1)

    @property
    def first(self) -> Any:
        return self.start if self.cls is None else self.cls

    @property
    def last(self) -> Any:
        """The last entry, without a branch on ``count`` (a guard on the length): where pooling left only the
        <cls> entry, ``start - step`` is that entry's position (``pooled_positions`` places it so)."""
        return self.start + self.step * (self.count - 1)

    def drop_first(self) -> Positions:
        """``positions[1:]``."""
        if self.cls is not None:
            return Positions(self.start, self.step, self.count)
        return Positions(self.start + self.step, self.step, self.count - 1)

    def drop_last(self) -> Positions:
        """``positions[:-1]`` of a list without a leading cls entry."""
        return Positions(self.start, self.step, self.count - 1, self.cls)

    def every_other(self) -> Positions:
        """``positions[::2]``."""
        if self.cls is None:
            return Positions(self.start, self.step * 2, (self.count + 1) // 2)
        # cls, then the progression's entries 1, 3, 5, ...
        return Positions(self.start + self.step, self.step * 2, self.count // 2, self.cls)


def pooled_positions(config: Any, positions: Positions, block_index: int) -> Positions:
    """The positions left after block ``block_index``'s stride-2 pooling; the <cls> token, kept apart when
    ``separate_cls``, sits one block before the first real one (position ``1 - 2**block_index``)."""
    if not config.separate_cls:
        return positions.every_other()
    body = positions.drop_first()
    if config.truncate_seq:
        body = body.drop_last()
    pooled = body.every_other()
    return Positions(pooled.start, pooled.step, pooled.count, cls=1 - 2**block_index)


def relative_distances(
    positions: Positions, stride: int, pooled: Positions | None = None, shift: int = 1, device: Any = None
) -> torch.Tensor:
    """Every relative distance between ``pooled`` (queries) and ``positions`` (keys), largest first, at ``stride``."""
    pooled = positions if pooled is None else pooled
    largest = pooled.first - positions.first + shift * pooled.size * stride
    smallest = pooled.first - positions.last
    return torch.arange(largest, smallest - 1, -stride, dtype=torch.long, device=device)


def _relative_tables(structure: Any, seq_len: Any, dtype: torch.dtype, device: Any) -> list[list[Any]]:
    """Per block: the position embeddings for attention without pooling, and (from the second block on) from
    pooled queries to unpooled keys, gathered from one sinusoid table over every distance the input can have."""
    half = structure.config.d_model // 2
    frequencies = 1 / (10000 ** (torch.arange(half, dtype=torch.int64, device=device).to(dtype) / half))
    offset = seq_len * 2
    distances = torch.arange(-offset, offset, dtype=torch.int64, device=device).to(dtype)
    angles = distances[:, None] * frequencies[None]
    table = torch.cat([structure.sin_dropout(torch.sin(angles)), structure.cos_dropout(torch.cos(angles))], dim=-1)

    def gather(rows: torch.Tensor) -> torch.Tensor:
        index = (rows[:, None] + offset).expand(rows.size(0), table.size(1))
        return torch.gather(table, 0, index)

    tables = []
    positions = Positions.up_to(seq_len)
    for block in range(structure.config.num_blocks):
        pooling = None
        if block > 0:
            pooled = pooled_positions(structure.config, positions, block)
            pooling = gather(relative_distances(positions, 2 ** (block - 1), pooled, shift=2, device=device))
            positions = pooled
        tables.append([gather(relative_distances(positions, 2**block, device=device)), pooling])
    return tables


def _position_embeds(original):
    def get_position_embeds(self, seq_len, dtype, device):
        if self.config.attention_type == "factorized":
            return original(self, seq_len, dtype, device)
        return _relative_tables(self, seq_len, dtype, device)

    return get_position_embeds


register_patch(
    "dynamo",
    "transformers.models.funnel.modeling_funnel.FunnelAttentionStructure.get_position_embeds",
    reason=(
        "Funnel's relative-shift tables list positions as Python ints (list(range(seq_len))), which pins the "
        "sequence length; the same tables from the length's symbol"
    ),
)(_position_embeds)


def _cpmant_attention_mask(original):
    def _prepare_attention_mask(self, input_ids, span, context, length):
        batch, seqlen = input_ids.shape[0], input_ids.shape[1]
        device = input_ids.device
        steps = torch.arange(seqlen, device=device)
        causal = (steps[None, :] <= steps[:, None])[None]
        mask = context[:, None, :] | (context[:, :, None].logical_not() & causal)
        mask = mask & (span[:, None, :] == span[:, :, None])
        # How far each text position is from the end (n-1 .. 0); rows shorter than `length` are left-padded.
        from_end = torch.arange(seqlen - self.prompt_length - 1, -1, -1, device=device)
        text = from_end[None, :].expand(batch, -1) < length[:, None]
        prompt = torch.ones(batch, self.prompt_length, dtype=torch.bool, device=device)
        keep = torch.cat((prompt, text), dim=1)
        return keep.view(batch, seqlen, 1) & keep.view(batch, 1, seqlen) & mask

    return _prepare_attention_mask


register_patch(
    "dynamo",
    "transformers.models.cpmant.modeling_cpmant.CpmAntModel._prepare_attention_mask",
    reason="CPM-Ant's padding mask reverses a Python list of range(length), which pins the sequence length",
)(_cpmant_attention_mask)
