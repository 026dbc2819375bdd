"""Registration through the pytest11 entry point, and loading without heavy imports."""

import importlib.metadata
import subprocess
import sys


def test_entry_point_is_registered_by_the_install():
    eps = importlib.metadata.entry_points(group="pytest11")
    assert any(ep.name == "hfexport" and ep.value == "pytest_hfexport.plugin" for ep in eps)


def test_importing_the_plugin_imports_no_heavy_package():
    code = ("import sys, pytest_hfexport.plugin, pytest_hfexport.report, pytest_hfexport.xfails; "
            "heavy = [m for m in ('torch', 'onnx', 'onnxruntime', 'executorch', 'transformers', 'hfexport') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_run_that_does_not_use_the_plugin_imports_no_torch(pytester, monkeypatch):
    pytester.makepyfile(test_light="""
        import sys

        def test_nothing_heavy_loaded(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("pytest_hfexport.plugin") or \\
                pytestconfig.pluginmanager.has_plugin("hfexport")
            assert not [m for m in ("torch", "onnx", "executorch", "hfexport") if m in sys.modules]
    """)
    # Loaded by the entry point (the installed package)...
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hfexport: impl=hfexport backends=*", "hfexport versions: torch *"])
    # ...and loaded explicitly with autoloading off.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess("-p", "pytest_hfexport.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hfexport: impl=hfexport backends=*"])


def test_plugin_is_active_in_pytester_runs(pytester):
    pytester.makepyfile("def test_x(hfexport_backend): assert hfexport_backend")
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo")
    result.assert_outcomes(passed=1)
