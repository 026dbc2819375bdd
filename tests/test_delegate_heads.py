"""ExecuTorch's rank-4 regrouping of grouped-query heads and its 3-D products (``patching/delegate_heads.py``).

The patch is a speed-up (fewer delegate cuts), so it must give exactly the 5-D path's result: checked bit for bit in
eager, on a grouped and a plain layout, with and without a mask, for one query token and several; a row order that
pairs a query head with the wrong KV head is the fault the comparison must see. The delegate count of the lowered
decode program is checked in ``test_executorch_partitions.py``.
"""

from __future__ import annotations

import pytest
import torch

from hfexport.patching import attention, delegate_attention, delegate_heads


def _inputs(q_len: int, heads: int = 6, kv_heads: int = 2, keys: int = 16):
    g = torch.Generator().manual_seed(q_len)
    query = torch.randn(1, q_len, heads, 8, generator=g).transpose(1, 2)  # HF's [b, s, h, d] memory
    key = torch.randn(1, kv_heads, keys, 8, generator=g)
    value = torch.randn(1, kv_heads, keys, 8, generator=g)
    positions = torch.arange(keys - q_len, keys)
    mask = (torch.arange(keys)[None, :] <= positions[:, None])[None, None]
    return query, key, value, mask


@pytest.fixture
def xnnpack_attend(monkeypatch):
    monkeypatch.setattr(attention, "ATTEND", delegate_attention._xnnpack_attention_factory(attention._sdpa))


@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("masked", [True, False])
def test_rank4_grouping_equals_the_rank5_path_bit_for_bit(xnnpack_attend, q_len, masked):
    query, key, value, mask = _inputs(q_len)
    mask = mask if masked else None
    want = attention._grouped_query_sdpa(query, key, value, mask, 3, 0.0, None)
    got = delegate_heads.grouped_query_sdpa_rank4(query, key, value, mask, 3, 0.0, None)
    assert got.shape == want.shape and got.is_contiguous()
    assert torch.equal(got, want)


def test_a_wrong_row_order_is_caught(xnnpack_attend):
    """The fault: the query heads grouped [kv, groups] the other way round (head h with KV head h % kv_heads)."""
    query, key, value, mask = _inputs(1)
    want = attention._grouped_query_sdpa(query, key, value, mask, 3, 0.0, None)
    swapped = query.unflatten(1, (3, 2)).transpose(1, 2).flatten(1, 2)
    got = delegate_heads.grouped_query_sdpa_rank4(swapped, key, value, mask, 3, 0.0, None)
    got = got.unflatten(2, (2, 3)).transpose(2, 3).flatten(2, 3)
    assert not torch.equal(got, want)


def test_the_batched_product_equals_matmul_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    left, right = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 16, 8, generator=g)
    assert torch.equal(delegate_heads.batched_product(left, right.transpose(-2, -1)), left @ right.transpose(-2, -1))
