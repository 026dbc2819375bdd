"""The conformance suite's failure injection (``conformance.test_hygiene.inject``) fails only inside its block.

A module first imported inside the block can bind the patched entry point by name and keep it after the patch is
undone: ExecuTorch's XNNPACK SDPA pattern module does ``from torch.export import export`` and calls it at its first
lowering. A warm ``make run`` (exports served by the artifact cache) first lowered in a worker inside a hygiene
injection, and two later ExecuTorch tests in that worker failed with the suite's injected error."""

import warnings

import pytest
import torch


def _injection():
    """``(Injected, inject)``; the suite module's parameter marks are registered by its own conftest, not here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        from conformance.test_hygiene import Injected, inject
    return Injected, inject


class _Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_a_reference_kept_past_the_block_runs_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    Injected, inject = _injection()
    import torch.export._trace as export_trace

    with inject(monkeypatch, "after-trace", "dynamo") as fired:
        bound = export_trace._non_strict_export  # what a first import that binds the trace function by name keeps
        with pytest.raises(Injected):
            torch.export.export(_Double(), (torch.ones(2),))
    assert fired["fired"]
    assert export_trace._non_strict_export is not bound  # the patch itself is undone
    monkeypatch.setattr(export_trace, "_non_strict_export", bound)  # a module that kept the reference calls it
    program = torch.export.export(_Double(), (torch.ones(2),))  # ... and the kept reference no longer fails
    assert torch.equal(program.module()(torch.ones(2)), torch.full((2,), 2.0))
