"""--hfexport-xfails: TOML or JSON, test ids or model/backend/check, strict, unmatched entries warned."""

import json

import pytest

from conftest import rows_of

TEST = """
    from fakeimpl.models import tiny

    def test_tiny(export_and_compare):
        export_and_compare(*tiny())
"""


def test_structured_and_test_id_keys_toml(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=perturb,executorch=lowering")
    pytester.makepyfile(TEST)
    (pytester.path / "known.toml").write_text(
        '[xfail]\n"test_tiny/onnx/export" = "onnx rounding"\n'
        '"test_structured_and_test_id_keys_toml.py::test_tiny[executorch]" = {reason = "xnnpack lowering"}\n')
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=all",
                                          "--hfexport-xfails=known.toml", "--hfexport-report=r.json", "-rx")
    result.assert_outcomes(passed=1, xfailed=2)
    result.stdout.fnmatch_lines(["*known failure (known.toml: test_tiny/onnx/export): onnx rounding*",
                                 "*xnnpack lowering*"])
    status = {r["backend"]: (r["status"], r["stage"]) for r in rows_of(pytester.path / "r.json")}
    assert status == {"dynamo": ("pass", None), "onnx": ("xfail", "mismatch"), "executorch": ("xfail", "lowering")}


def test_entry_that_passes_now_fails_strictly(pytester, fake_impl):
    pytester.makepyfile(TEST)
    (pytester.path / "known.json").write_text(json.dumps({"test_tiny/dynamo/*": "was broken"}))
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo",
                                          "--hfexport-xfails=known.json", "--hfexport-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*was broken*"])
    assert [r["status"] for r in rows_of(pytester.path / "r.json")] == ["xpass"]


def test_entry_matching_no_test_is_warned_about(pytester, fake_impl):
    pytester.makepyfile(TEST)
    pytester.makeini("[pytest]\nhfexport_xfails = known.toml\n")
    # An entry for a backend this run does not select is out of scope, not stale: no warning for it.
    (pytester.path / "known.toml").write_text('"gone/dynamo/export" = "model removed"\n'
                                              '"test_x/onnx/export" = "onnx only"\n'
                                              '"test_gone.py::test_y[onnx-llama]" = "an onnx test id"\n')
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*1 known-failure entry in known.toml match no collected test: gone/dynamo/export*"])


@pytest.mark.parametrize("text, message", [
    ('"a/b" = "two parts"\n', "neither a test id"),
    ('"a/b/c" = ""\n', "needs a reason"),
    ("not toml [", "cannot parse"),
])
def test_bad_files_are_usage_errors(pytester, text, message):
    (pytester.path / "bad.toml").write_text(text)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--hfexport-xfails=bad.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_an_entry_for_some_releases_applies_only_where_its_condition_holds(tmp_path):
    """`when` makes one known-failures file serve every stack of the window: the entry is in force on the
    releases it names and absent elsewhere (where a strict xfail would otherwise fail as XPASS)."""
    import importlib.metadata

    from pytest_hfexport import xfails

    torch_version = importlib.metadata.version("torch").split("+")[0]
    path = tmp_path / "kf.toml"
    path.write_text(
        f'"a/onnx/export" = {{ reason = "on this torch", when = "torch=={torch_version}" }}\n'
        '"b/onnx/export" = { reason = "on a torch to come", when = "torch>=99" }\n'
        '"c/onnx/export" = { reason = "both must hold", when = "torch>=1; transformers>=99" }\n'
        '"d/onnx/export" = "always"\n'
    )
    assert xfails.load(path) == {"a/onnx/export": "on this torch", "d/onnx/export": "always"}
    path.write_text('"a/onnx/export" = { reason = "x", when = "torch>>1" }\n')
    with pytest.raises(xfails.XfailFileError, match="when"):
        xfails.load(path)
