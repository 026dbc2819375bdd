"""Eager attention's key/value head repeat, without a test of the sequence length against 1.

Every transformers modeling file with grouped-query attention defines its own ``repeat_kv``: the key/value heads
expanded, then reshaped to one head per query head. torch.export decides whether that reshape of an expanded
tensor can be a view by comparing the sequence axis with 1, even when tracing size-obliviously, and keeps the
answer as a guard (``input_ids.size()[1] != 1``): a program traced on a prompt refuses a one-token call. It shows
on every model whose attention runs eager: Gemma2 (its soft-capped scores need eager attention) and any model
loaded with ``attn_implementation="eager"``. ``index_select`` along the head axis copies the same rows (query head
``h`` reads key/value head ``h // n_rep``) and makes no such test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .registry import register_patch


@register_patch("dynamo", "transformers.models.*.repeat_kv")
def _repeat_kv_by_index(original: Callable[..., Any]) -> Callable[..., Any]:
    """torch.export guards ``seq != 1`` on the reshape of expanded key/value heads (module doc)."""

    def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
        if n_rep == 1:
            return hidden_states
        heads = hidden_states.shape[1]
        index = torch.arange(heads * n_rep, device=hidden_states.device) // n_rep
        return hidden_states.index_select(1, index)

    return repeat_kv
