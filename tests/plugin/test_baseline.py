"""--hfexport-baseline: passed there and fails now fails the session and is listed; improvements listed."""

import json

import pytest

TEST = """
    from fakeimpl.models import tiny

    def test_a(export_and_compare):
        export_and_compare(*tiny())

    def test_b(export_and_compare):
        export_and_compare(*tiny())
"""


def baseline(path, rows):
    path.write_text(json.dumps({"rows": [dict(zip(("model", "backend", "check", "status"), r)) for r in rows]}))


def test_regression_fails_the_session_and_is_listed(pytester, fake_impl, monkeypatch):
    pytester.makepyfile(TEST)
    baseline(pytester.path / "base.json", [("test_a", "dynamo", "export", "pass"), ("test_a", "onnx", "export", "pass"),
                                           ("test_b", "onnx", "export", "fail")])
    # everything passes now: an improvement, no regression
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-baseline=base.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*improvement test_b/onnx/export: fail -> pass*", "0 regression(s), 1 improvement(s)"])
    # onnx breaks, but test_a[onnx] is a known failure now: xfail is still a regression against the baseline
    monkeypatch.setenv("FAKEIMPL", "onnx=run")
    (pytester.path / "xf.toml").write_text('"test_a/onnx/export" = "onnx runtime broke"\n')
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-baseline=base.json", "--hfexport-xfails=xf.toml")
    result.assert_outcomes(passed=2, failed=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*REGRESSION test_a/onnx/export: pass -> xfail [[]run[]]*",
                                 "1 regression(s), 0 improvement(s)"])


def test_only_the_baseline_makes_an_otherwise_green_run_red(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb")
    pytester.makepyfile(TEST)
    (pytester.path / "xf.json").write_text(json.dumps({"test_a/onnx/export": "drift", "test_b/onnx/*": "drift"}))
    args = ["--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx", "--hfexport-xfails=xf.json"]
    assert pytester.runpytest_inprocess(*args).ret == pytest.ExitCode.OK
    baseline(pytester.path / "base.json", [("test_b", "onnx", "export", "pass")])
    result = pytester.runpytest_inprocess(*args, "--hfexport-baseline=base.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*REGRESSION test_b/onnx/export: pass -> xfail [[]mismatch[]]*"])


def test_reads_its_own_report_and_the_ini_twin(pytester, fake_impl):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo",
                                          "--hfexport-report=first.json")
    assert result.ret == pytest.ExitCode.OK
    pytester.makeini("[pytest]\nhfexport_baseline = first.json\n")
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*hfexport baseline first.json*", "0 regression(s), 0 improvement(s)"])


def test_missing_baseline_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--hfexport-baseline=nope.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_pass_to_unsupported_or_not_run_is_a_regression(pytester, fake_impl, monkeypatch):
    """A row that passed must pass again: unsupported now, or not run at all, fails the gate too."""
    monkeypatch.setenv("FAKEIMPL", "onnx=lacks")
    pytester.makepyfile(TEST)
    baseline(pytester.path / "base.json", [("test_a", "onnx", "export", "pass"), ("gone", "dynamo", "export", "pass")])
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-baseline=base.json", "--hfexport-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*REGRESSION test_a/onnx/export: pass -> unsupported*",
                                 "*REGRESSION gone/dynamo/export: pass -> not run*", "2 regression(s), 0 improvement(s)"])
    assert sorted(map(tuple, json.loads((pytester.path / "r.json").read_text())["regressions"])) == [
        ("gone", "dynamo", "export"), ("test_a", "onnx", "export")]
