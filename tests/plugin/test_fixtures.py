"""Fixtures: export_and_compare's result object, assert_exportable's message, tolerances, config factory,
exporter. Real torch.export on a tiny module (dynamo); mismatches come from the fake implementation."""

TINY_MODULE = """
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(4, 3)

        def forward(self, x):
            return {"logits": self.proj(x), "hidden": x * 2}
"""


def test_export_and_compare_result_on_dynamo(pytester):
    pytester.makepyfile(TINY_MODULE + """
    def test_result(export_and_compare, hfexport_exporter, hfexport_config):
        x = torch.randn(2, 5, 4)
        result = export_and_compare(Tiny(), {"x": x}, {"x": torch.randn(3, 7, 4)})
        assert result.ok and result.stage is None and result.backend == "dynamo"
        assert [r.label for r in result.results] == ["sample", "other"]
        logits = result["logits"]
        assert logits.shape == (2, 5, 3) and logits.dtype == "float32"
        from pytest_hfexport.compare import FP32_ATOL
        assert logits.tolerance.atol == FP32_ATOL["dynamo"] and logits.max_abs <= logits.allowed
        assert result.results[1].outputs["hidden"].shape == (3, 7, 4)
        assert result.artifact.suffix == ".pt2" and result.artifact.exists()
        assert set(result.seconds) == {"eager", "export", "save", "load", "run"}
        assert isinstance(result.program, torch.export.ExportedProgram)
        assert hfexport_config(dynamic=True).dynamic is True
        assert hfexport_exporter.file_suffix == ".pt2"
    """)
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo")
    result.assert_outcomes(passed=1)


def test_assert_exportable_message_names_output_shapes_error_tolerance(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb")
    pytester.makepyfile("""
        from fakeimpl.models import tiny

        def test_tiny(assert_exportable):
            model, inputs = tiny()
            assert_exportable(model, inputs)
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*ExportMismatch: [[]mismatch[]] Tiny: onnx export does not match eager PyTorch (sample inputs):*",
        "*output 'logits' shape (2, 5, 3) float32: max abs error 1.000e-02, max rel error *, tolerance atol=*",
    ])


def test_tolerance_overrides_per_model_and_per_output(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb")
    pytester.makepyfile("""
        import pytest
        from pytest_hfexport import ExportMismatch, Tolerance
        from fakeimpl.models import tiny

        def test_model_wide(export_and_compare):
            model, inputs = tiny()
            result = export_and_compare(model, inputs, tolerance=2e-2)
            assert result["logits"].tolerance == Tolerance(2e-2)

        def test_per_output_only_loosens_that_output(export_and_compare):
            model, inputs = tiny()
            with pytest.raises(ExportMismatch) as info:
                export_and_compare(model, inputs, output_tolerance={"logits": 2e-2})
            result = info.value.measurement
            assert result["logits"].ok and not result["hidden"].ok
            assert "'hidden'" in str(info.value) and "'logits'" not in str(info.value)

        def test_pattern(export_and_compare):
            model, inputs = tiny()
            export_and_compare(model, inputs, tolerance={"*": 2e-2})
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=onnx")
    result.assert_outcomes(passed=3)


def test_a_mismatch_fails_even_when_the_result_is_ignored(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "dynamo=perturb")
    pytester.makepyfile("""
        from fakeimpl.models import tiny

        def test_ignores_result(export_and_compare):
            model, inputs = tiny()
            export_and_compare(model, inputs)  # no assert: must fail anyway
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo")
    result.assert_outcomes(failed=1)
