"""--hfexport-backend: default, names, lists, all, missing packages, ini twin, marker, -m selection."""

import pytest

from pytest_hfexport import backends

TEST = """
    import pytest

    def test_x(hfexport_backend):
        assert hfexport_backend in ("dynamo", "onnx", "executorch")

    @pytest.mark.hfexport_backend("onnx")
    def test_only_onnx(hfexport_backend):
        assert hfexport_backend == "onnx"
"""


def collected(result):
    return sorted(line.strip() for line in result.outlines if "::" in line and "<" not in line)


def test_default_is_every_installed_backend(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--collect-only", "-q")
    ids = collected(result)
    for backend in backends.available():
        assert f"test_default_is_every_installed_backend.py::test_x[{backend}]" in ids
    assert len([i for i in ids if "test_x[" in i]) == len(backends.available())


def test_one_backend_by_name(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", "-v")
    result.stdout.fnmatch_lines(["*test_x[[]dynamo[]] PASSED*"])  # test_only_onnx: no selected backend, deselected
    result.assert_outcomes(passed=1, deselected=1)


def test_comma_list_keeps_the_order_given(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-backend=onnx,dynamo", "--collect-only", "-q")
    ids = [i for i in collected(result) if "test_x[" in i]
    assert ids == sorted(ids) and len(ids) == 2
    result.stdout.fnmatch_lines(["*test_x[[]onnx[]]", "*test_x[[]dynamo[]]", "*test_only_onnx[[]onnx[]]"])


def test_all_means_every_known_backend(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-backend=all", "--collect-only", "-q")
    assert len([i for i in collected(result) if "test_x[" in i]) == len(backends.BACKENDS)


def test_unknown_backend_is_a_usage_error(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-backend=tflite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown backend(s) ['tflite']" in result.stderr.str()


def test_backend_with_missing_packages_is_a_usage_error_not_a_skip(pytester, monkeypatch):
    monkeypatch.setitem(backends.BACKEND_PACKAGES, "executorch", ["torch", "no_such_package_hfexport"])
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo,executorch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*asks for executorch but packages are missing: executorch needs "
                                 "no_such_package_hfexport*"])
    # ...while the default quietly leaves that backend out
    result = pytester.runpytest_inprocess("--collect-only", "-q")
    assert not [i for i in collected(result) if "executorch" in i]


def test_ini_twin(pytester):
    pytester.makeini("[pytest]\nhfexport_backend = onnx\n")
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--collect-only", "-q")
    assert [i for i in collected(result) if "test_x[" in i] == ["test_ini_twin.py::test_x[onnx]"]
    # the command line wins over the ini file
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", "--collect-only", "-q")
    assert [i for i in collected(result) if "test_x[" in i] == ["test_ini_twin.py::test_x[dynamo]"]


def test_backend_markers_select_with_dash_m(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo,onnx", "-m", "onnx", "--strict-markers", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_x[[]onnx[]] PASSED*", "*test_only_onnx[[]onnx[]] PASSED*"])
