"""ExecuTorch: the decoder layer's work stays inside the XNNPACK delegate (rotary halves, head views).

Two speed-ups (``hfexport/patching/rotate_half.py``, ``fixes._one_symbolic_size_inferred``) keep work XNNPACK can
do from being cut out of the delegate: ``rotate_half``'s dynamic slices become one exact matrix product, and a view
with one symbolic size is written with -1 there. Checked here: the product equals the slices bit for bit, and the
tiny Llama's decode program calls the delegate fewer times with no rotary slice or view below rank 5 outside it; the
same program with speed-ups off is the fault the structural check must see.
"""

from __future__ import annotations

import collections

import pytest
import torch
from helpers import static_decode_export

import hfexport
from hfexport.patching import rotate_half as rotate_half_patch


def _llama_rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _interleaved_rotate_half(x: torch.Tensor) -> torch.Tensor:  # GLM's
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _inputs() -> torch.Tensor:
    x = torch.randn(2, 3, 5, 64, generator=torch.Generator().manual_seed(1)) * 1e3
    x[0, 0, 0, :4] = torch.tensor([0.0, -0.0, 1e-40, -3e38])  # zeros, a subnormal, a huge value
    return x


@pytest.mark.parametrize("original", [_llama_rotate_half, _interleaved_rotate_half])
def test_the_product_equals_the_slices_bit_for_bit(original):
    patched = rotate_half_patch._rotate_half_as_a_product(original)
    x = _inputs()
    assert torch.equal(patched(x), original(x))


def test_a_transposed_matrix_is_caught():
    """The fault: M where M^T belongs (the inverse rotation): the exactness check above must see it."""
    weight = rotate_half_patch._signed_permutation(_llama_rotate_half, 64, torch.float32)
    x = _inputs()
    assert not torch.equal(torch.nn.functional.linear(x, weight.T), _llama_rotate_half(x))


def test_a_function_that_is_no_signed_permutation_keeps_the_original():
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., 32:], x[..., :32]), dim=-1) * 0.5

    assert rotate_half_patch._signed_permutation(scaled, 64, torch.float32) is None
    x = _inputs()
    assert torch.equal(rotate_half_patch._rotate_half_as_a_product(scaled)(x), scaled(x))


def _program_summary(program) -> collections.Counter:
    """Delegate calls, and the views and slices the portable kernels run, in the lowered program."""
    counts: collections.Counter = collections.Counter()
    for node in program.exported_program().graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if "executorch_call_delegate" in name:
            counts["delegate"] += 1
        elif "slice_copy" in name and node.meta["val"].shape[-1] == 4:  # half of the tiny Llama's head_dim 8
            counts["rotary slice"] += 1
        elif "view" in name:
            # Grouped-heads views ([B, kv, groups, S, D]) are left as traced (fixes._one_symbolic_size_inferred).
            counts["view" if node.meta["val"].dim() < 5 and node.args[0].meta["val"].dim() < 5 else "5-D view"] += 1
    return counts


@pytest.fixture(scope="module")
def owned_cache_decode():
    program, _ = static_decode_export("executorch", cache_as_buffers=True)
    return program


def test_the_decode_program_keeps_rotary_and_head_views_in_the_delegate(owned_cache_decode):
    program = owned_cache_decode
    counts = _program_summary(program)
    assert counts["rotary slice"] == 0 and counts["view"] == 0, counts
    # 2 layers, cut by the RMS norms' means and the cache writes; 22 with the rank-5 head views
    # (patching/delegate_heads.py left out), 25 with the views and slices outside too
    assert counts["delegate"] <= 10, counts


def test_a_program_owned_cache_keeps_the_token_batch_static(owned_cache_decode):
    """The cache's buffers fix the batch (``ShapePlan.static_batch``): a batch symbol would admit only inputs that
    fail to run, and it put a second symbolic size in every head view, which XNNPACK refuses (a cut delegate)."""
    program = owned_cache_decode.exported_program()
    batches = {
        node.name: node.meta["val"].shape[0]
        for node in program.graph.nodes
        if node.op == "placeholder" and node.name in ("input_ids", "attention_mask", "position_ids")
    }
    assert len(batches) == 3 and all(type(b) is int and b == 1 for b in batches.values()), batches  # not a SymInt


@pytest.mark.hfexport_slow
def test_the_partition_check_catches_the_speedups_left_out():
    with hfexport.speedups_off():
        program, _ = static_decode_export("executorch", cache_as_buffers=True)
    counts = _program_summary(program)
    assert counts["rotary slice"] > 0 and counts["view"] > 0 and counts["delegate"] > 10, counts


@pytest.mark.hfexport_slow
def test_the_partition_check_catches_the_rank5_head_views(monkeypatch):
    """The fault: ``patching/delegate_heads.py`` left out, every other patch in place."""
    from hfexport.patching import registry

    kept = [p for p in registry.PATCHES["executorch"] if not p.path.endswith("attention._grouped_query_sdpa")]
    assert len(kept) == len(registry.PATCHES["executorch"]) - 1
    monkeypatch.setitem(registry.PATCHES, "executorch", kept)
    program, _ = static_decode_export("executorch", cache_as_buffers=True)
    assert _program_summary(program)["delegate"] > 10


class _HeadsView(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], x.shape[1], -1, 4) * 2


def _views_after_the_fix(dynamic: dict[int, object]) -> tuple[list, torch.export.ExportedProgram]:
    from hfexport.executorch import fixes

    program = torch.export.export(_HeadsView(), (torch.randn(2, 5, 12),), dynamic_shapes=(dynamic,))
    fixes._one_symbolic_size_inferred(program)
    views = [n.args[1] for n in program.graph.nodes if n.op == "call_function" and n.target in fixes._RESHAPES]
    return views, program


def test_a_view_with_one_symbolic_size_infers_it():
    views, program = _views_after_the_fix({1: torch.export.Dim("seq", max=64)})
    assert views == [[2, -1, 3, 4]]
    x = torch.randn(2, 7, 12)
    assert torch.equal(program.module()(x), _HeadsView()(x))


def test_a_view_with_two_symbolic_sizes_is_left_as_traced():
    views, _ = _views_after_the_fix({0: torch.export.Dim("batch", max=4), 1: torch.export.Dim("seq", max=64)})
    assert len(views) == 1 and sum(not isinstance(size, int) for size in views[0]) == 2
