"""--hfexport-pins and the session header: installed versions beside the pins, drift marked."""

import pytest

from pytest_hfexport import versions


def test_header_shows_impl_backends_device_and_shipped_pins(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo")
    result.stdout.fnmatch_lines(["hfexport: impl=hfexport backends=dynamo device=cpu",
                                 "hfexport versions: torch *, transformers *"])
    shipped = versions.read_pins()
    line = next(line for line in result.outlines if line.startswith("hfexport versions:"))
    for name in shipped:
        assert f"{name} " in line


def test_drift_is_marked(pytester):
    pins = pytester.path / "pins.txt"
    pins.write_text("# comment\ntorch==0.0.1\nno-such-dist==1.0\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", f"--hfexport-pins={pins}")
    result.stdout.fnmatch_lines([f"hfexport: * pins={pins}",
                                 "hfexport versions: torch * DRIFT (pin 0.0.1, in window 2.13.0 to *), no-such-dist missing (pin 1.0)"])


def test_ini_twin_and_bad_file(pytester):
    pytester.makeini("[pytest]\nhfexport_pins = nowhere.txt\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hfexport-pins:*nowhere.txt*"])
    (pytester.path / "bad.txt").write_text("torch>=2\n")
    result = pytester.runpytest_inprocess("--hfexport-pins=bad.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*not of the form name==version*"])
