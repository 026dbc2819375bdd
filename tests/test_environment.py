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


def test_local_suffix_is_not_drift(caplog, monkeypatch):
    class Local(_Probe):
        tested_versions = {"torch": environment.strip_local(environment.installed_version("torch"))}

    monkeypatch.setattr(environment, "installed_version", lambda p: "2.13.0+cpu" if p == "torch" else None)
    Local.tested_versions = {"torch": "2.13.0"}
    with caplog.at_level(logging.WARNING):
        Local.validate_environment()
    assert not [r for r in caplog.records if "tested with" in r.getMessage()]
    assert environment.strip_local("2.13.0+cu126") == "2.13.0"


def test_tested_versions_come_from_the_pins_that_pyproject_installs():
    pins = environment.read_pins()
    assert DynamoExporter.tested_versions == {"torch": pins["torch"], "transformers": pins["transformers"]}
    pyproject = (Path(environment.__file__).parents[1] / "pyproject.toml").read_text()
    for name in ("core", "onnx", "executorch", "test"):
        assert f"hfexport/pins/{name}.txt" in pyproject
    # the installed stack is the pinned stack (the README's set-up guarantees it)
    assert environment.strip_local(environment.installed_version("torch")) == pins["torch"]


def test_pins_file_format_is_checked(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("torch>=2\n")
    with pytest.raises(ValueError, match="name==version"):
        environment.read_pins(bad)
