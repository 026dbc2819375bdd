"""A dynamic export from a batch-1 sample whose trace pins the batch still serves every batch.

``PooledAttention`` is SigLIP's pooling head in miniature: ``nn.MultiheadAttention(batch_first=True)``
projects a transposed ``(seq, batch, E)`` key, a view that is legal for any strides only at batch 1, so the
batch-1 trace records ``batch == 1``. hfexport traces again from batch 2 and opens the program to batch 1
(``hfexport.batch_retrace``). Each test fails with the retrace disabled (``test_without_the_retrace_the_
program_pins_batch_1`` shows the fault it guards against).
"""

from __future__ import annotations

import pytest
import torch

from hfexport import DynamoConfig, DynamoExporter, OnnxConfig, OnnxExporter
from hfexport import tracing
from hfexport.batch_retrace import pinned_batch_inputs


class PooledAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.probe = torch.nn.Parameter(torch.randn(1, 1, 16))
        self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(hidden)
        probe = self.probe.repeat(hidden.shape[0], 1, 1)
        return self.attention(probe, hidden, hidden)[0][:, 0]


def _eager(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(hidden)


SAMPLE = {"hidden": torch.randn(1, 7, 16)}
OTHER_BATCHES = (torch.randn(1, 5, 16), torch.randn(3, 9, 16))


def test_without_the_retrace_the_program_pins_batch_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing.Trace, "open_pinned_batch", lambda self, *args: args[1])
    program = DynamoExporter().export(PooledAttention(), SAMPLE, DynamoConfig(dynamic=True))
    assert pinned_batch_inputs(program) == ["hidden"]
    with pytest.raises(AssertionError, match=r"hidden\.size\(\)\[0\]"):
        program.module()(hidden=OTHER_BATCHES[1])


def test_dynamo_program_serves_batch_1_and_3() -> None:
    model = PooledAttention()
    program = DynamoExporter().export(model, SAMPLE, DynamoConfig(dynamic=True))
    assert pinned_batch_inputs(program) == []
    for hidden in (SAMPLE["hidden"], *OTHER_BATCHES):
        torch.testing.assert_close(program.module()(hidden=hidden), _eager(model, hidden))


def test_saved_program_keeps_batch_1_open(tmp_path) -> None:
    model = PooledAttention()
    program = DynamoExporter().export(model, SAMPLE, DynamoConfig(dynamic=True))
    path = tmp_path / "model.pt2"
    DynamoExporter.save(program, str(path))
    loaded = DynamoExporter.load(str(path))
    for hidden in (SAMPLE["hidden"], OTHER_BATCHES[1]):
        torch.testing.assert_close(loaded.module()(hidden=hidden), _eager(model, hidden))


def test_onnx_program_serves_batch_1_and_3() -> None:
    from hfexport.runtime.onnxruntime import OrtRunner

    model = PooledAttention()
    runner = OrtRunner(OnnxExporter().export(model, SAMPLE, OnnxConfig(dynamic=True)))
    for hidden in (SAMPLE["hidden"], *OTHER_BATCHES):
        (got,) = runner({"hidden": hidden}).values()
        torch.testing.assert_close(got, _eager(model, hidden), atol=1e-5, rtol=1e-4)


class PooledAttentionCounting(PooledAttention):
    """Writes into an input (a step counter, as a StaticCache's position would), so the exporter functionalises the
    accepted batch-2 program: that retrace derives the batch-2 trace's guards again (Nemotron's RNN-T)."""

    def forward(self, hidden: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        steps.add_(1)
        return super().forward(hidden)


def test_guards_dropped_by_the_retrace_stay_dropped_after_functionalisation(tmp_path) -> None:
    model = PooledAttentionCounting()
    sample = {"hidden": SAMPLE["hidden"], "steps": torch.zeros(1, dtype=torch.long)}
    program = DynamoExporter().export(model, sample, DynamoConfig(dynamic=True))
    path = tmp_path / "model.pt2"
    DynamoExporter.save(program, str(path))
    loaded = DynamoExporter.load(str(path))
    for hidden in (SAMPLE["hidden"], OTHER_BATCHES[1]):
        with torch.no_grad():
            expected = PooledAttention.forward(model.eval(), hidden)
        for served in (program, loaded):
            steps = torch.zeros(1, dtype=torch.long)
            torch.testing.assert_close(served.module()(hidden=hidden, steps=steps), expected)


def test_a_guard_written_with_sym_min_is_evaluated_at_the_sample() -> None:
    """torch 2.14 writes a batch-2 trace's `batch != 1` guard through torch.sym_min (Funnel's pooling); a guard the
    batch-1 sample fails must be dropped, so it must evaluate rather than count as 'cannot tell' and stay."""
    from types import SimpleNamespace

    from hfexport.batch_retrace import accept_batch_one

    guard = "(L['x'].size()[0]*(1 + torch.sym_min(L['x'].size()[1], 3))) != (1 + torch.sym_min(L['x'].size()[1], 3))"
    kept = "L['x'].size()[1] > 2"
    program = SimpleNamespace(_guards_code=[guard, kept], graph=SimpleNamespace(nodes=[]), range_constraints={})
    assert accept_batch_one(program, ["x"], {"x": torch.zeros(1, 6)}) == [guard]
    assert program._guards_code == [kept]
