"""The judge's ExecuTorch guide session (``pytest_hfexport.guide.ExecutorchGuide``) on a tiny hand-lowered program."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("executorch")

from pytest_hfexport.guide import ExecutorchGuide  # noqa: E402

VOCAB, SLOTS = 5, 4


class TinyDecode(torch.nn.Module):
    """The guide's layout: input_ids, a 4D bool mask, position_ids and a cache it writes in place."""

    def forward(self, input_ids, attention_mask, position_ids, cache):
        cache.add_(attention_mask.any(2, keepdim=True).to(cache.dtype).transpose(2, 3))
        logits = (input_ids + position_ids).to(torch.float32)[..., None] * torch.ones(VOCAB)
        return logits + cache.sum((1, 2, 3))[:, None, None]


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    from executorch.exir import to_edge
    from torch.export import Dim

    batch, query = Dim("batch", min=1, max=4), Dim("query", min=1, max=SLOTS)
    sample = (
        torch.zeros(2, 2, dtype=torch.long),
        torch.ones(2, 1, 2, SLOTS, dtype=torch.bool),
        torch.zeros(2, 2, dtype=torch.long),
        torch.zeros(2, 1, SLOTS, 1),
    )
    shapes = ({0: batch, 1: query}, {0: batch, 2: query}, {0: batch, 1: query}, {0: batch})
    exported = torch.export.export(TinyDecode(), sample, dynamic_shapes=shapes)
    path = tmp_path_factory.mktemp("guide") / "decode.pte"
    path.write_bytes(to_edge(exported).to_executorch().buffer)
    return path


def test_guide_feeds_a_token_block_sliced_from_a_batch(program):
    guide = ExecutorchGuide(program, SLOTS, batch=2)
    tokens = torch.arange(12).reshape(2, 6)
    block = tokens[:, 1:3]  # what drive() feeds: a view, not contiguous at batch 2
    assert not block.is_contiguous()
    mask = torch.ones(2, 1, 2, SLOTS, dtype=torch.bool)
    positions = torch.arange(2).expand(2, 2)  # an expanded view, too
    logits = guide.step(block, mask, positions)
    assert logits.shape == (2, 2, VOCAB)
    assert torch.equal(logits[..., 0], (block + positions).float() + SLOTS)
    assert guide.cache_tensors()["cache.0"].sum() == 2 * SLOTS
