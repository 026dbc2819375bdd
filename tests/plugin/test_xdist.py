"""Under pytest-xdist the controller gathers every worker's rows into one report and one matrix."""

from conftest import rows_of

TEST = """
    import pytest
    from fakeimpl.models import tiny

    @pytest.mark.parametrize("i", range(4))
    def test_many(export_and_compare, i):
        export_and_compare(*tiny())
"""


def test_report_is_complete_with_two_workers(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    pytester.makepyfile(TEST)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--hfexport-impl=fakeimpl",
                                           "--hfexport-backend=dynamo,onnx", "--hfexport-report=r.json")
    result.assert_outcomes(passed=4, failed=4)
    rows = rows_of(pytester.path / "r.json")
    assert len(rows) == 8 and len({r["nodeid"] for r in rows}) == 8
    assert sorted(r["status"] for r in rows) == ["fail"] * 4 + ["pass"] * 4
    assert {r["stage"] for r in rows if r["status"] == "fail"} == {"mismatch"}
    assert all(r["max_abs"] is not None for r in rows)
    result.stdout.fnmatch_lines(["*= hfexport matrix =*", "test_many * export * ok * FAIL(mismatch)*",
                                 "rows: 4 pass, 4 fail"])
