"""--hfexport-report: one JSON row per model x backend x check, every status, and the terminal matrix."""

import json

from conftest import rows_of

TEST = """
    import pytest
    from fakeimpl.models import tiny

    def test_pass(export_and_compare):
        export_and_compare(*tiny())

    def test_fail(export_and_compare, hfexport_backend):
        model, inputs = tiny()
        export_and_compare(model, inputs, tolerance=1e-2 if hfexport_backend == "dynamo" else 0.0,
                           output_tolerance={"hidden": 1.0})
        assert hfexport_backend == "dynamo", "only dynamo passes this"

    @pytest.mark.xfail(reason="known", strict=False)
    def test_xfail(export_and_compare):
        raise RuntimeError("boom")

    @pytest.mark.xfail(reason="was broken", strict=False)
    def test_xpass(export_and_compare):
        export_and_compare(*tiny())

    @pytest.mark.skip(reason="not today")
    def test_skip(hfexport_backend):
        pass

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture fails")

    def test_error(broken, hfexport_backend):
        pass

    def test_not_an_export_test():
        pass
"""


def test_the_command_keeps_an_empty_marker_expression(pytester, fake_impl):
    """`-m ""` (every tier) must survive in the report's command, or the quoted command runs the default tier."""
    pytester.makepyfile(TEST)
    pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo", "-m", "",
                                 "--hfexport-report=out/report.json")
    data = json.loads((pytester.path / "out/report.json").read_text())
    assert data["command"] == ("python -m pytest --hfexport-impl=fakeimpl --hfexport-backend=dynamo -m '' "
                               "--hfexport-report=out/report.json")


def test_rows_and_statuses(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb,executorch=lacks")
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx,executorch",
                                          "--hfexport-report=out/report.json")
    data = json.loads((pytester.path / "out/report.json").read_text())
    assert data["implementation"] == "fakeimpl" and data["backends"] == ["dynamo", "onnx", "executorch"]
    assert data["versions"]["torch"] and data["pins"]["torch"]
    assert data["command"] == ("python -m pytest --hfexport-impl=fakeimpl --hfexport-backend=dynamo,onnx,executorch "
                               "--hfexport-report=out/report.json")
    rows = {(r["model"], r["backend"]): r for r in data["rows"]}
    assert not any(r["model"] == "test_not_an_export_test" for r in data["rows"])
    expect = {
        ("test_pass", "dynamo"): "pass", ("test_pass", "onnx"): "fail", ("test_pass", "executorch"): "unsupported",
        ("test_fail", "dynamo"): "pass", ("test_fail", "onnx"): "fail",
        ("test_xfail", "dynamo"): "xfail", ("test_xpass", "dynamo"): "xpass", ("test_xpass", "onnx"): "xfail",
        ("test_skip", "dynamo"): "skip", ("test_error", "onnx"): "error",
    }
    for key, status in expect.items():
        assert rows[key]["status"] == status, (key, rows[key])
    row = rows[("test_pass", "onnx")]
    assert row["check"] == "export" and row["stage"] == "mismatch" and row["worst_output"] == "logits"
    assert abs(row["max_abs"] - 1e-2) < 1e-6 and row["max_rel"] > 0 and row["seconds"] >= 0
    assert row["versions"]["torch"] and row["implementation"] == "fakeimpl"
    assert rows[("test_fail", "onnx")]["stage"] == "mismatch"
    assert rows[("test_error", "onnx")]["stage"] == "setup"
    assert rows[("test_skip", "dynamo")]["message"] == "not today"  # a skip says why it gave no verdict
    assert rows[("test_pass", "executorch")]["message"].startswith("unsupported: ")
    assert data["summary"]["pass"] == sum(r["status"] == "pass" for r in data["rows"])
    result.stdout.fnmatch_lines([
        "*= hfexport matrix =*",
        "model * check * dynamo * onnx * executorch*",
        "test_error * export * ERROR(setup) * ERROR(setup) * ERROR(setup)*",
        "test_pass * export * ok * FAIL(mismatch) * n/a*",
        "test_skip * export * skip * skip * skip*",
        "rows: *",
        "hfexport report: out/report.json",
    ])


def test_ini_twin_and_no_matrix_without_export_tests(pytester):
    pytester.makeini("[pytest]\nhfexport_report = r.json\n")
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    assert rows_of(pytester.path / "r.json") == []
    assert "hfexport matrix" not in result.stdout.str()


def test_every_comparison_puts_its_errors_and_tolerance_on_the_row_passes_included(pytester, fake_impl):
    """A check that calls ``compare`` itself (as the suite's do), not only the harness, gives its row the errors,
    the worst output's tolerance and how much of it the error uses."""
    pytester.makepyfile("""
        import torch
        from pytest_hfexport.compare import compare

        def test_direct(hfexport_backend):
            logits = torch.tensor([0.5, -0.5, 0.25])
            ref = {"logits": logits, "hidden": torch.full((2,), 10.0)}
            compare(ref, {"logits": logits + torch.tensor([0.0, 2e-6, 0.0]), "hidden": torch.full((2,), 10.0)},
                    "dynamo")
            compare(ref, {"logits": logits, "hidden": torch.full((2,), 10.0 + 1e-5)}, "dynamo")
    """)
    pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo",
                                 "--hfexport-report=out/report.json")
    row = json.loads((pytester.path / "out/report.json").read_text())["rows"][0]
    assert row["status"] == "pass" and row["compared"] == 2, row
    assert abs(row["max_abs"] - 9.5e-6) < 1e-6  # hidden: float32's 10 + 1e-5
    assert abs(row["max_abs_small_scale"] - 2e-6) < 1e-7  # logits only: hidden's scale is 10
    assert abs(row["max_rel"] - 4e-6) < 1e-7  # logits: 2e-6 against a scale of 0.5
    from pytest_hfexport.compare import default_tolerance

    tol = default_tolerance("dynamo", "float32")
    ratios = {"logits": 2e-6 / (tol.atol + tol.rtol * 0.5), "hidden": row["max_abs"] / (tol.atol + tol.rtol * 10)}
    worst = max(ratios, key=ratios.get)
    assert row["worst_output"] == worst and row["tolerance"] == str(tol)  # the output nearest its tolerance
    assert abs(row["ratio"] - ratios[worst]) < 0.01 * ratios[worst] and 0 < row["ratio"] < 1
