"""A decode step copies no KV cache: grouped-query attention reads the KV heads as they are, and the
ExecuTorch program writes its cache update in place, with no identity expand of the cache before attention.

Each structural check is also run against an exporter with exactly the fault it looks for (the fold or the edge
passes switched off), so a check that cannot fail would show here.
"""

from __future__ import annotations

import pytest
import torch

from helpers import static_decode_export

from hfexport.executorch import passes as executorch_passes
from hfexport.patching import attention, delegate_attention

# --- grouped-query attention -------------------------------------------------------------------------


def _repeated_kv_reference(query, key, value, mask, groups):
    out = torch.nn.functional.scaled_dot_product_attention(
        query, attention._expand_kv(key, groups), attention._expand_kv(value, groups), attn_mask=mask
    )
    return out.transpose(1, 2)


def _masks(batch: int, q_len: int, kv_len: int) -> dict[str, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(1)
    four_d = torch.rand(batch, 1, q_len, kv_len, generator=generator) > 0.4
    two_d = torch.rand(q_len, kv_len, generator=generator) > 0.4
    additive = torch.where(four_d, 0.0, torch.finfo(torch.float32).min)
    for m in (four_d, two_d):
        m[..., 0] = True  # no fully masked row
    additive[..., 0] = 0.0
    return {"none": None, "bool_4d": four_d, "bool_2d": two_d, "float_4d": additive}


@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("mask_kind", ["none", "bool_4d", "bool_2d", "float_4d"])
def test_grouped_query_attention_equals_repeating_the_kv_heads(q_len, mask_kind):
    torch.manual_seed(0)
    batch, heads, kv_heads, kv_len, head_dim = 2, 8, 2, 12, 16
    query = torch.randn(batch, q_len, heads, head_dim).transpose(1, 2)  # transformers' layout
    key, value = torch.randn(batch, kv_heads, kv_len, head_dim), torch.randn(batch, kv_heads, kv_len, head_dim)
    mask = _masks(batch, q_len, kv_len)[mask_kind]
    got = attention._grouped_query_sdpa(query, key, value, mask, heads // kv_heads, 0.0, None)
    expected = _repeated_kv_reference(query, key, value, mask, heads // kv_heads)
    assert got.shape == (batch, q_len, heads, head_dim) and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_a_mask_tiled_per_group_instead_of_per_row_is_caught():
    """The fault the test above exists for: query rows of a group matched with the wrong mask rows."""
    torch.manual_seed(0)
    query = torch.randn(1, 3, 4, 8).transpose(1, 2)
    key, value = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    mask = _masks(1, 3, 6)["bool_4d"]
    right = attention._grouped_query_sdpa(query, key, value, mask, 2, 0.0, None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention, "_tile_mask_rows", lambda m, groups: m.repeat_interleave(groups, dim=-2))
        wrong = attention._grouped_query_sdpa(query, key, value, mask, 2, 0.0, None)
    expected = _repeated_kv_reference(query, key, value, mask, 2)
    torch.testing.assert_close(right, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(wrong, expected, atol=1e-4)


def _cache_repeats(program) -> list[str]:
    graph = program.graph if hasattr(program, "graph") else program.exported_program().graph
    return [str(n.target) for n in graph.nodes if "repeat_interleave" in str(n.target)]


def test_dynamo_decode_graph_does_not_repeat_the_kv_cache():
    program, _ = static_decode_export("dynamo")
    assert _cache_repeats(program) == []


def test_the_repeat_check_sees_a_graph_that_repeats_the_cache(monkeypatch):
    monkeypatch.setattr(attention, "_foldable_mask", lambda mask: False)  # the fault: no fold, KV heads repeated
    program, _ = static_decode_export("dynamo")
    assert _cache_repeats(program)


# --- ExecuTorch: cache copies outside the delegates ---------------------------------------------------


def cache_copies(manager) -> list[str]:
    """Ops in the lowered program that copy a cache-sized tensor on every call: an identity expand_copy, a
    functional index_put (a copy of the whole cache, then one slot written), a copy_ write-back."""
    found = []
    for node in manager.exported_program().graph.nodes:
        if node.op != "call_function":
            continue
        name, value = str(node.target), node.meta.get("val")
        if "expand_copy" in name and executorch_passes._same_shape(node.args[0].meta.get("val"), value):
            found.append("identity expand_copy")
        elif "index_put." in name:  # the out variant of the functional op; the in-place one is index_put_
            found.append("functional index_put")
        elif "copy_" in name and hasattr(value, "dim") and value.dim() == 4:
            found.append("cache copy_ write-back")
    return found


@pytest.fixture(scope="module")
def executorch_decode():
    """The program-owned cache form, the one the Python decode loop runs fast."""
    return static_decode_export("executorch", cache_as_buffers=True)[0]


def test_executorch_decode_program_copies_no_cache(executorch_decode):
    assert cache_copies(executorch_decode) == []


@pytest.mark.hfexport_slow
def test_cache_as_inputs_program_has_no_identity_expand():
    """With the cache as graph inputs the runtime hands each mutated input back as an output (a write-back
    copy per cache tensor stays: see ``ExecutorchDecodeLoop``); the identity expands still go."""
    assert "identity expand_copy" not in cache_copies(static_decode_export("executorch")[0])


def test_the_copy_check_sees_the_unpassed_program(monkeypatch):
    # The identity expands come from to_edge's decomposition of a rank-4 matmul, which the ExecuTorch attention
    # writes as a bmm of rank-3 views (patching/delegate_heads.py): put the matmul back to see them.
    monkeypatch.setattr(delegate_attention, "batched_product", torch.matmul)
    monkeypatch.setattr(executorch_passes, "EDGE_PASSES", ())
    found = cache_copies(static_decode_export("executorch", cache_as_buffers=True)[0])
    assert "identity expand_copy" in found and "functional index_put" in found and "cache copy_ write-back" in found


def test_the_cache_as_inputs_program_returns_its_cache_in_input_order():
    """The runtime returns the mutated inputs first; the guide's loop feeds them back as the next call's cache.
    A cache whose layers hold an integer length beside keys and values, with the keys and values updated in place
    and the lengths written back, came out reordered (EXIR moves written-back outputs first)."""
    from executorch.runtime import Runtime

    manager = static_decode_export("executorch")[0]
    meta = Runtime.get().load_program(manager.buffer).load_method("forward").metadata

    def kinds(infos):
        return [(str(info.dtype()), list(info.sizes())) for info in infos]

    cache_inputs = kinds(meta.input_tensor_meta(i) for i in range(3, meta.num_inputs()))
    assert {dtype for dtype, _ in cache_inputs} == {"4", "6"}, "the sample cache should hold lengths and tensors"
    assert kinds(meta.output_tensor_meta(i) for i in range(len(cache_inputs))) == cache_inputs
    assert manager.hfexport_io["mutated_inputs"] == manager.hfexport_io["inputs"][3:]
