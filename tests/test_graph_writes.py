"""The Dynamo exporter functionalises a program exactly when its graph writes into an input.

``written_inputs`` decides whether ``run_decompositions({})`` (a whole retrace) runs: a program that
writes into a caller's tensor, a buffer or a view of one must state the write in its signature, and one
whose only in-place ops touch tensors of its own must skip the pass. Each test here fails when the walk
misses a write (``test_cache_write_is_stated_in_the_signature`` with ``written_inputs`` faked empty) or
functionalises what needs nothing (``test_program_without_input_writes_skips_the_retrace``).
"""

from __future__ import annotations

import pytest
import torch

from hfexport import DynamoConfig, DynamoExporter
from hfexport.graph_writes import written_inputs


class OwnWrites(torch.nn.Module):
    """In-place ops only on tensors the graph makes itself, and a lifted constant (its detach_)."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.add_(1)
        return y + torch.tensor([1.0]) + cache.sum()


class CacheWrite(torch.nn.Module):
    """Writes the first row of ``x`` into the caller's ``cache`` through a view of it."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache[0].copy_(x[0])
        return x + 1


class SplitWrite(torch.nn.Module):
    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        first, _ = cache.split([2, 3])
        first.mul_(2)
        return x + 1


class BufferWrite(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(4))

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        return x + self.steps


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3, 4), torch.zeros(5, 4)


@pytest.mark.parametrize(
    ("module", "expected"),
    [(OwnWrites(), []), (CacheWrite(), ["cache"]), (SplitWrite(), ["cache"]), (BufferWrite(), ["b_steps"])],
    ids=["own-tensors", "view-of-input", "split-of-input", "buffer"],
)
def test_written_inputs_follows_views_to_the_input(module: torch.nn.Module, expected: list[str]) -> None:
    program = torch.export.export(module, _inputs())
    assert written_inputs(program) == expected


def test_program_without_input_writes_skips_the_retrace(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    original = torch.export.ExportedProgram.run_decompositions

    def counting(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counting)
    x, cache = _inputs()
    program = DynamoExporter().export(OwnWrites(), {"x": x, "cache": cache}, DynamoConfig())
    assert calls == [], "a program that writes into none of its inputs was functionalised"
    torch.testing.assert_close(program.module()(x=x, cache=cache), OwnWrites()(x, cache))


def test_cache_write_is_stated_in_the_signature() -> None:
    x, cache = _inputs()
    program = DynamoExporter().export(CacheWrite(), {"x": x, "cache": cache.clone()}, DynamoConfig())
    assert list(program.graph_signature.user_inputs_to_mutate.values()) == ["cache"]
    mine = torch.zeros(5, 4)
    program.module()(x=x, cache=mine)
    torch.testing.assert_close(mine[0], x[0])
