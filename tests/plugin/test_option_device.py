"""--hfexport-device: cpu, cuda, auto; anything else, or cuda without CUDA, is a usage error."""

import pytest


def test_cpu_is_the_default_and_reaches_the_fixtures(pytester):
    pytester.makepyfile("def test_d(hfexport_device): assert hfexport_device == 'cpu'")
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*device=cpu*"])


def test_auto_resolves_to_what_the_machine_has(pytester):
    import torch

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    pytester.makepyfile(f"def test_d(hfexport_device): assert hfexport_device == {expected!r}")
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", "--hfexport-device=auto")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*device=auto*"])


def test_cuda(pytester):
    import torch

    pytester.makepyfile("def test_d(hfexport_device): assert hfexport_device == 'cuda'")
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", "--hfexport-device=cuda")
    if torch.cuda.is_available():
        result.assert_outcomes(passed=1)
    else:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*--hfexport-device=cuda but CUDA is not available*"])


def test_unknown_device_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\nhfexport_device = tpu\n")
    pytester.makepyfile("def test_d(): pass")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hfexport-device=tpu: choose one of cpu, cuda, auto*"])
