"""Markers: registered (--strict-markers is clean), requires_cuda, requires_pins, hfexport_versions, hfexport_slow."""

import pytest

from pytest_hfexport import versions


def test_every_marker_is_registered(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.hfexport_backend("dynamo")
        @pytest.mark.hfexport_slow
        @pytest.mark.requires_pins("torch")
        @pytest.mark.hfexport_versions(torch=">=0.1")
        def test_x(hfexport_backend):
            pass

        @pytest.mark.dynamo
        @pytest.mark.onnx
        @pytest.mark.executorch
        @pytest.mark.requires_cuda
        def test_y():
            pass
    """)
    result = pytester.runpytest_inprocess("--strict-markers", "--hfexport-backend=dynamo", "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    result = pytester.runpytest_inprocess("--markers")
    for name in ("hfexport_backend", "requires_cuda", "requires_pins", "hfexport_versions", "hfexport_slow",
                 "dynamo:", "onnx:", "executorch:"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}*"])


def test_requires_cuda_skips_with_a_reason_where_there_is_none(pytester):
    import torch

    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_cuda
        def test_gpu():
            import torch
            assert torch.cuda.is_available()
    """)
    result = pytester.runpytest_inprocess("-rs")
    if torch.cuda.is_available():
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*requires_cuda: CUDA is not available on this machine*"])


def test_requires_pins_skips_or_xfails_on_drift(pytester):
    torch_version = versions.strip_local(versions.installed("torch"))
    (pytester.path / "pins.txt").write_text(f"torch=={torch_version}\npytest==0.0.1\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_pins("torch")
        def test_torch_at_pin():
            pass

        @pytest.mark.requires_pins("pytest")
        def test_pytest_drifted():
            raise AssertionError("must not run")

        @pytest.mark.requires_pins(xfail=True)
        def test_all_pins_xfail():
            raise AssertionError("drifted stack")
    """)
    result = pytester.runpytest_inprocess("--hfexport-pins=pins.txt", "-rsx")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*requires_pins: installed versions differ from the pins: pytest * (pin 0.0.1)*"])


def test_hfexport_versions_ranges(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.hfexport_versions(torch=">=2.0")
        def test_in_range():
            pass

        @pytest.mark.hfexport_versions(torch="<1.0")
        def test_out_of_range():
            raise AssertionError("must not run")

        @pytest.mark.hfexport_versions(torch="<1.0", xfail=True)
        def test_out_of_range_xfail():
            raise AssertionError("expected on this torch")

        @pytest.mark.hfexport_versions(no_such_dist_xyz=">=1")
        def test_missing_package():
            raise AssertionError("must not run")
    """)
    result = pytester.runpytest_inprocess("-rsx")
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    result.stdout.fnmatch_lines(["*hfexport_versions: torch * not <1.0*", "*no_such_dist_xyz missing not >=1*"])


def test_slow_marker_deselects_with_dash_m(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.hfexport_slow
        def test_slow():
            pass

        def test_fast():
            pass
    """)
    result = pytester.runpytest_inprocess("-m", "not hfexport_slow", "--strict-markers")
    result.assert_outcomes(passed=1, deselected=1)
