"""validate_environment: missing packages, minimum versions, drift warnings; the pins as one source."""

import logging
import re
from pathlib import Path

import pytest

from hfexport import DynamoExporter, HfExporter, environment


class _Probe(HfExporter):
    required_packages = ["torch"]

    def export(self, model, sample_inputs, config=None):  # pragma: no cover
        raise NotImplementedError


def test_missing_package_names_the_pip_command():
    class Needs(_Probe):
        required_packages = ["torch", "definitely_not_installed_pkg"]

    with pytest.raises(ImportError, match="pip install 'definitely_not_installed_pkg'"):
        Needs.validate_environment()


def test_below_min_version_is_an_error():
    class TooNew(_Probe):
        min_versions = {"torch": "99.0"}

    with pytest.raises(ImportError, match=r"torch>=99.0"):
        TooNew.validate_environment()


def test_drift_warns_once_per_class_not_per_instance(caplog):
    class Drifty(_Probe):
        tested_versions = {"torch": "1.0.0"}

    class Other(_Probe):
        tested_versions = {"torch": "1.0.0"}

    with caplog.at_level(logging.WARNING, logger="hfexport.base"):
        Drifty(); Drifty(); Drifty.validate_environment()
        Other()
    drift = [r for r in caplog.records if "tested with other versions" in r.getMessage()]
    assert [r.getMessage().split()[0] for r in drift] == ["Drifty", "Other"]


def test_a_release_inside_the_window_is_tested_one_outside_warns_naming_the_window(caplog, monkeypatch):
    """hfexport's own exporters take their window from window.toml: 5.25 of transformers is tested, 9.0 is not."""
    low, high = environment.read_window()["packages"]["transformers"]["window"]
    assert DynamoExporter.tested_windows["transformers"] == (low, high)

    def installed(version):
        return lambda p: version if p == "transformers" else environment.strip_local(torch_version)

    torch_version = environment.installed_version("torch")

    class Inside(DynamoExporter):
        pass

    class Outside(DynamoExporter):
        pass

    monkeypatch.setattr(environment, "installed_version", installed(high))
    with caplog.at_level(logging.WARNING, logger="hfexport.base"):
        Inside.validate_environment()
    assert not [r for r in caplog.records if "tested with" in r.getMessage()]
    monkeypatch.setattr(environment, "installed_version", installed("9.0.0"))
    with caplog.at_level(logging.WARNING, logger="hfexport.base"):
        Outside.validate_environment()
    (record,) = [r for r in caplog.records if "tested with" in r.getMessage()]
    assert f"transformers 9.0.0 (tested window {low} to {high})" in record.getMessage()


def test_local_suffix_is_not_drift(caplog, monkeypatch):
    class Local(_Probe):
        tested_versions = {"torch": environment.strip_local(environment.installed_version("torch"))}

    monkeypatch.setattr(environment, "installed_version", lambda p: "2.13.0+cpu" if p == "torch" else None)
    Local.tested_versions = {"torch": "2.13.0"}
    with caplog.at_level(logging.WARNING):
        Local.validate_environment()
    assert not [r for r in caplog.records if "tested with" in r.getMessage()]
    assert environment.strip_local("2.13.0+cu126") == "2.13.0"


def test_tested_versions_are_the_pinned_stack_and_the_installed_stack_is_it():
    pins = environment.read_pins()
    assert DynamoExporter.tested_versions == {"torch": pins["torch"], "transformers": pins["transformers"]}
    # the installed stack is the pinned stack (the README's set-up guarantees it)
    assert environment.strip_local(environment.installed_version("torch")) == pins["torch"]


def test_install_requirements_are_the_windows_ranges_written_from_window_toml():
    """pyproject.toml installs from requires-*.txt; each is what window.toml says (`make requirements`)."""
    pyproject = (Path(environment.__file__).parents[1] / "pyproject.toml").read_text()
    for extra in environment.EXTRAS:
        assert f"hfexport/pins/requires-{extra}.txt" in pyproject
        assert environment.requirements_file(extra).read_text() == environment.requirements_text(extra), (
            f"requires-{extra}.txt is stale: run `make requirements`"
        )
        for line in environment.requirement_lines(extra):
            assert "==" not in line, f"{line}: an install requirement is a range, never a pin"
    # every pinned release lies in its window, and the window's lower end is the install's lower bound
    window = environment.read_window()["packages"]
    for name, pinned in environment.read_pins().items():
        assert name in window, f"{name} is pinned but has no window"
        assert environment.in_window(name, pinned), f"{name}=={pinned} is pinned outside its window"
        assert window[name]["install"].startswith(f">={window[name]['window'][0]}") or name in (
            "pytest",
            "pytest-xdist",
            "hypothesis",
            "matplotlib",
            "ruff",
            "mypy",
        )
    assert 'requires-python = ">=3.11"' in pyproject


def test_window_file_is_checked(tmp_path):
    bad = tmp_path / "window.toml"
    bad.write_text('[packages.torch]\nwindow = ["2.13.0", "2.14.1"]\ninstall = ">=2.14,<3"\nextra = "core"\n')
    with pytest.raises(ValueError, match="outside install"):
        environment.read_window(bad)
    bad.write_text(
        '[packages.torch]\nwindow = ["2.13.0", "2.14.1"]\ninstall = ">=2.13,<3"\nextra = "core"\n'
        '[stacks.new]\ntorch = "2.15.0"\n'
    )
    with pytest.raises(ValueError, match="outside the window"):
        environment.read_window(bad)


def test_pins_file_format_is_checked(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("torch>=2\n")
    with pytest.raises(ValueError, match="name==version"):
        environment.read_pins(bad)


def _third_party_imports(package: Path) -> set[str]:
    import ast
    import sys

    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names}


def test_what_the_plugin_imports_installs_with_hfexport():
    """A model repo's only set-up is installing hfexport: every package the plugin imports is a core requirement,
    one of theirs (numpy, packaging, filelock come with transformers), pytest (the repo runs it) or a backend's
    extra, imported only when that backend is selected."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    core = {Requirement(line).name for line in environment.requirement_lines("core")}
    below = {Requirement(r).name for name in core for r in requires(name) or () if "extra ==" not in r}
    backends = {"onnx", "onnxruntime", "onnxscript", "executorch"}
    ours = {"hfexport", "pytest_hfexport", "conformance"}
    imported = _third_party_imports(Path(environment.__file__).parents[1] / "pytest_hfexport")
    loose = {
        name
        for name in imported - ours - backends - {"pytest", "xdist"}
        if environment.DISTRIBUTION_NAMES.get(name, name) not in core | below
    }
    assert not loose, f"the plugin imports {sorted(loose)}, which installing hfexport does not install"
    assert "hypothesis" in core  # the `shapes` check draws its sizes with it
