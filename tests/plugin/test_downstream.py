"""parametrize_with_checks: a downstream repo's factories get the checks, ids, backend axis, xfails, rows."""

import sys
from pathlib import Path

import pytest

from conftest import rows_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "downstream"


def test_factories_get_every_check_on_every_backend(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb")
    pytester.makepyfile("""
        from pytest_hfexport import ModelCase, parametrize_with_checks
        from fakeimpl.models import Tiny, tiny

        def sized(model, batch, seq):
            import torch
            return {"x": torch.randn(batch, seq, 4)}

        @parametrize_with_checks([tiny, ModelCase("sized", Tiny, sized, checks=("export",))],
                                 xfails={"tiny/onnx/export": "fake onnx is off by 1e-2"})
        def test_model(check):
            assert check.backend in ("dynamo", "onnx")
            check()
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx", "-v",
                                          "--hfexport-report=r.json", "--strict-markers")
    result.stdout.fnmatch_lines(["*test_model[[]dynamo-tiny-export[]] PASSED*",
                                 "*test_model[[]dynamo-tiny-shapes[]] PASSED*",
                                 "*test_model[[]onnx-tiny-export[]] XFAIL*",
                                 "*test_model[[]onnx-sized-export[]] FAILED*"])
    rows = {(r["model"], r["backend"], r["check"]): r["status"] for r in rows_of(pytester.path / "r.json")}
    assert rows == {
        ("tiny", "dynamo", "export"): "pass", ("tiny", "onnx", "export"): "xfail",
        ("tiny", "dynamo", "shapes"): "pass", ("tiny", "onnx", "shapes"): "fail",  # sample already off
        ("tiny", "dynamo", "unchanged"): "pass", ("tiny", "onnx", "unchanged"): "pass",
        ("sized", "dynamo", "export"): "pass", ("sized", "onnx", "export"): "fail",
    }
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx", "-m", "onnx",
                                          "-k", "sized")
    result.assert_outcomes(failed=1, deselected=7)


def test_unchanged_check_catches_an_export_that_mutates_the_model(pytester, fake_impl):
    pytester.makepyfile("""
        import torch
        import fakeimpl
        from pytest_hfexport import parametrize_with_checks
        from fakeimpl.models import tiny

        original = fakeimpl.Exporter.export

        def leaky(self, model, inputs, config=None):
            with torch.no_grad():
                model.proj.bias.add_(1.0)
            return original(self, model, inputs, config)

        fakeimpl.Exporter.export = leaky

        @parametrize_with_checks([tiny], checks=["unchanged"])
        def test_model(check):
            check()
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the export changed the caller's world: model: parameter proj.bias changed*"])


def test_unknown_check_and_duplicate_names_are_refused():
    from pytest_hfexport import ModelCase, parametrize_with_checks

    case = ModelCase("m", lambda: None, {})
    with pytest.raises(ValueError, match="unknown check 'generate'"):
        parametrize_with_checks([case], checks=["generate"])
    with pytest.raises(ValueError, match="must be unique"):
        parametrize_with_checks([case, case])


def test_check_unbound_without_the_plugin_says_so():
    from pytest_hfexport.downstream import CheckCase, ModelCase

    with pytest.raises(RuntimeError, match="plugin active"):
        CheckCase(ModelCase("m", lambda: None, {}), "export")()


def test_the_example_runs_on_dynamo_with_real_exports(pytester):
    for name in ("tiny_model.py", "conftest.py", "test_exportable.py"):
        (pytester.path / name).write_text((EXAMPLE / name).read_text())
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", "--hfexport-report=r.json",
                                          "--hfexport-max-examples=2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    rows = {(r["model"], r["check"]): r for r in rows_of(pytester.path / "r.json")}
    assert rows[("tiny-classifier", "export")]["max_abs"] <= 1e-5
    assert rows[("tiny-classifier", "shapes")]["status"] == "pass"
