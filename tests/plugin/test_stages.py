"""Failure stages kept apart (eager, export, lowering, save, load, run, mismatch), in rows and summary."""

import pytest

from conftest import rows_of

TEST = """
    import torch
    from fakeimpl.models import tiny

    def test_tiny(export_and_compare):
        model, inputs = tiny()
        export_and_compare(model, inputs)

    def test_broken_model(export_and_compare):
        class Broken(torch.nn.Module):
            def forward(self, x):
                raise ValueError("the model itself fails")
        export_and_compare(Broken(), {"x": torch.ones(1)})
"""


@pytest.mark.parametrize("stage", ["export", "lowering", "save", "load", "run", "perturb"])
def test_stage_of_a_failure(pytester, fake_impl, monkeypatch, stage):
    monkeypatch.setenv("FAKEIMPL", f"onnx={stage}")
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-report=r.json")
    result.assert_outcomes(passed=1, failed=3)
    expected = "mismatch" if stage == "perturb" else stage
    rows = {(r["model"], r["backend"]): r for r in rows_of(pytester.path / "r.json")}
    assert rows[("test_tiny", "dynamo")]["stage"] is None
    assert rows[("test_tiny", "onnx")]["stage"] == expected
    assert rows[("test_broken_model", "dynamo")]["stage"] == "eager"
    assert "the model itself fails" in rows[("test_broken_model", "dynamo")]["message"]
    result.stdout.fnmatch_lines([f"failures by stage: eager: 2, {expected}: 1"])
    result.stdout.fnmatch_lines([f"*ExportCheckError: [[]{expected}[]]*" if expected != "mismatch"
                                 else "*ExportMismatch: [[]mismatch[]]*"])
