"""A backend an implementation registers once (``hfexport.backends.register_backend``) is a backend everywhere:
``AutoHfExporter``, ``hfexport.runtime.load``, the command line's ``--format`` and the plugin's
``--hfexport-backend``, whose checks then judge it like the built-in three."""

import pytest

REGISTRATION = """
from dataclasses import dataclass

import torch

from hfexport import Backend, DynamoConfig, DynamoExporter, register_backend
from hfexport.runtime.dynamo import DynamoRunner


@dataclass(eq=False)
class CopyConfig(DynamoConfig, export_format="pt2copy"):
    pass


class CopyExporter(DynamoExporter):
    \"\"\"torch.export's program saved under its own suffix: a fourth backend with the Dynamo runtime.\"\"\"

    export_format = "pt2copy"
    config_class = CopyConfig
    file_suffix = ".pt2c"


class CopyRunner(DynamoRunner):
    backend = "pt2copy"


register_backend(
    Backend(name="pt2copy", exporter=CopyExporter, config=CopyConfig, suffix=".pt2c", runner=CopyRunner,
            tolerance=(2e-6, 3e-5)),
    replace=True,
)
"""

CHECKS = """
import torch

from pytest_hfexport import ModelCase, parametrize_with_checks


class Scorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.tanh(self.proj(x)).sum(-1)


def build():
    torch.manual_seed(0)
    return Scorer().eval()


def inputs(model, batch, seq):
    return {"x": torch.randn(batch, seq, 8)}


@parametrize_with_checks([ModelCase("scorer", build, inputs)])
def test_exportable(check):
    check()
"""


@pytest.fixture
def registered_fourth_backend():
    namespace: dict = {}
    exec(compile(REGISTRATION, "registration", "exec"), namespace)
    yield namespace
    from hfexport import backends

    backends.unregister_backend("pt2copy")


def test_a_registered_backend_is_found_by_every_library_layer(registered_fourth_backend, tmp_path):
    import torch

    from hfexport import AutoExportConfig, AutoHfExporter, runtime
    from hfexport.cli import formats, suffix_of

    config = AutoExportConfig.from_dict({"export_format": "pt2copy", "dynamic": False})
    exporter = AutoHfExporter.from_config(config)
    assert type(exporter) is registered_fourth_backend["CopyExporter"]
    model = torch.nn.Linear(3, 2).eval()
    sample = {"input": torch.randn(2, 3)}
    path = tmp_path / f"model{suffix_of('pt2copy')}"
    exporter.save(exporter.export(model, sample, config), str(path))
    runner = runtime.load(path)
    assert type(runner) is registered_fourth_backend["CopyRunner"]
    assert "pt2copy" in formats()


def test_the_plugin_runs_its_checks_on_a_registered_backend(pytester):
    pytester.makeconftest(REGISTRATION)
    pytester.makepyfile(test_repo=CHECKS)
    result = pytester.runpytest_subprocess("--hfexport-backend=pt2copy", "-p", "no:cacheprovider", "-v", "--strict-markers")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_exportable[[]pt2copy-scorer-export[]] PASSED*"])


def test_an_unregistered_backend_is_a_usage_error_naming_how_to_register(pytester):
    pytester.makepyfile(test_repo=CHECKS)
    result = pytester.runpytest_subprocess("--hfexport-backend=pt2copy", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown backend(s) ['pt2copy']" in result.stderr.str() and "register_backend" in result.stderr.str()
