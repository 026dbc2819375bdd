"""ExecuTorch's attention (hfexport/patching/delegate_attention.py): the same numbers as torch's SDPA, each
layer's own mask, and a decode program whose attention XNNPACK runs: no per-layer mask or safe-softmax operator
left to the portable kernels.

Each check is also run against exactly the fault it looks for (the fully-masked-row factor dropped, the mask terms
shared between different masks, the patch left out), so a check that cannot fail would show here.
"""

from __future__ import annotations

import collections

import pytest
import torch

from helpers import static_decode_export

from hfexport.patching import PATCHES, attention, delegate_attention

# The largest difference measured between the two over these inputs is 4.8e-7 (float32 rounding of a matmul
# written out against SDPA's kernel); the bound keeps 2x of it.
ATOL = 1e-6


def _inputs(q_len: int, kv_len: int = 12, heads: int = 8, kv_heads: int = 2, head_dim: int = 16):
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, q_len, heads, head_dim, generator=generator).transpose(1, 2)
    key = torch.randn(2, kv_heads, kv_len, head_dim, generator=generator)
    value = torch.randn(2, kv_heads, kv_len, head_dim, generator=generator)
    return query, key, value


def _bool_mask(q_len: int, kv_len: int, seed: int, fully_masked_row: bool = False) -> torch.Tensor:
    mask = torch.rand(2, 1, q_len, kv_len, generator=torch.Generator().manual_seed(seed)) > 0.4
    mask[..., 0] = True
    if fully_masked_row:
        mask[1, 0, 0] = False  # a padding query row: eager SDPA gives it zeros
    return mask


def _attention(query, key, value, mask, reuse_key=None):
    groups = query.shape[1] // key.shape[1]
    return attention._grouped_query_sdpa(query, key, value, mask, groups, 0.0, None, reuse_key)


def _difference(monkeypatch, masks, q_len: int) -> float:
    """The largest difference from SDPA over consecutive calls with these masks (each reusable, as one trace's
    layers are)."""
    query, key, value = _inputs(q_len)
    expected = [_attention(query, key, value, mask) for mask in masks]
    monkeypatch.setattr(attention, "ATTEND", delegate_attention._xnnpack_attention_factory(attention._sdpa))
    got = [_attention(query, key, value, mask, (mask, key.shape[-2], 4) if mask is not None else None)
           for mask in masks]
    return max(float((g - e).abs().max()) for g, e in zip(got, expected))


@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("kind", ["none", "bool", "bool_fully_masked_row", "float"])
def test_the_xnnpack_attention_equals_sdpa(monkeypatch, q_len, kind):
    mask = {
        "none": None,
        "bool": _bool_mask(q_len, 12, 1),
        "bool_fully_masked_row": _bool_mask(q_len, 12, 1, fully_masked_row=True),
        "float": torch.where(_bool_mask(q_len, 12, 1), 0.0, torch.finfo(torch.float32).min),
    }[kind]
    assert _difference(monkeypatch, [mask], q_len) < ATOL


def test_a_fully_masked_row_left_to_softmax_is_caught(monkeypatch):
    """The fault: no ``valid`` factor, so a padding row attends uniformly instead of giving zeros."""
    terms = delegate_attention._mask_terms
    monkeypatch.setattr(delegate_attention, "_mask_terms", lambda mask, dtype: (terms(mask, dtype)[0], 1.0))
    assert _difference(monkeypatch, [_bool_mask(3, 12, 1, fully_masked_row=True)], 3) > 0.1


def test_layers_given_different_masks_keep_their_own(monkeypatch):
    """A full and a sliding-window layer alternate, as in gemma3: each reuses only its own mask's terms."""
    full, sliding = _bool_mask(5, 12, 1), _bool_mask(5, 12, 2)
    assert _difference(monkeypatch, [full, sliding, full, sliding], 5) < ATOL


def test_terms_shared_between_masks_are_caught(monkeypatch):
    monkeypatch.setattr(delegate_attention, "_slot", lambda reuse_key: reuse_key and tuple(reuse_key[1:]))
    assert _difference(monkeypatch, [_bool_mask(5, 12, 1), _bool_mask(5, 12, 2)], 5) > 0.1


# Operators SDPA's mask handling adds in every layer when it reaches ExecuTorch decomposed.
PORTABLE_MASK_OPS = ("eq", "logical_not", "any", "where", "repeat", "mul")


def _outside_the_delegate(program) -> collections.Counter:
    """Operators the portable kernels run, by name, among the mask's."""
    names = [str(n.target).split(".")[1] for n in program.exported_program().graph.nodes
             if n.op == "call_function" and str(n.target).startswith("aten.")]
    return collections.Counter(name for name in names if name in PORTABLE_MASK_OPS)


def test_the_decode_program_leaves_no_attention_operator_per_layer_outside_the_delegate():
    program, _ = static_decode_export("executorch", cache_as_buffers=True)
    ops = _outside_the_delegate(program)
    assert all(count <= 1 for count in ops.values()), ops  # the mask's terms, once for both layers


@pytest.mark.hfexport_slow
def test_the_decode_program_check_catches_sdpa_left_to_the_portable_kernels(monkeypatch):
    monkeypatch.setitem(PATCHES, "executorch", [p for p in PATCHES["executorch"] if not p.path.endswith(".ATTEND")])
    program, _ = static_decode_export("executorch", cache_as_buffers=True)
    assert any(count > 1 for count in _outside_the_delegate(program).values())

