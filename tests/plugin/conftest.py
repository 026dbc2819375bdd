"""Tests of the pytest_hfexport plugin itself, run through pytester.

``fake_impl`` writes ``fakeimpl``, a package exposing the export API (``--hfexport-impl=fakeimpl``) whose
exporter copies the model (saved with torch.save) and whose runtime runs it: fast, no torch.export. The environment
variable ``FAKEIMPL`` makes a backend misbehave: ``onnx=perturb`` (outputs off by 1e-2),
``executorch=export`` (raise in that stage: eager is the model's own; export, lowering, save, load, run),
``dynamo=notimpl`` (NotImplementedError: a failure like any other exception), ``onnx=lacks`` (the module
declares it lacks that backend in ``HFEXPORT_LACKS``: the only way to be unsupported).
"""

import pytest

import sys
import tempfile

import _pytest.pytester



# pytester's in-process runs restore sys.modules afterwards, dropping what they imported first; torch
# (and what sits on it) registers C-level state and cannot be imported twice in one process. Keep every
# module but those written by the tests themselves (under this session's pytest base temp directory,
# not the system temp directory: a checkout, and its .venv with torch, may itself live under /tmp).
_TMP = tempfile.gettempdir()  # replaced by the session's basetemp in _keep_heavy_modules


class _KeepHeavyModules(_pytest.pytester.SysModulesSnapshot):
    def __init__(self, preserve=None):
        def keep(name):
            module = sys.modules.get(name)
            return not (getattr(module, "__file__", None) or "").startswith(_TMP + "/")

        super().__init__(preserve=keep)


@pytest.fixture(autouse=True)
def _keep_heavy_modules(monkeypatch, tmp_path_factory):
    global _TMP
    _TMP = str(tmp_path_factory.getbasetemp())
    monkeypatch.setattr(_pytest.pytester, "SysModulesSnapshot", _KeepHeavyModules)


FAKEIMPL_INIT = '''
import copy, os
import torch

STAGE_ERRORS = ("export", "lowering", "save", "load", "run")


def behaviour(backend):
    for part in os.environ.get("FAKEIMPL", "").split(","):
        if part.startswith(backend + "="):
            return part.split("=", 1)[1]
    return "ok"


class StageError(RuntimeError):
    def __init__(self, msg, stage):
        super().__init__(msg)
        self.stage = stage


class Config:
    def __init__(self, export_format, **options):
        self.export_format = export_format
        self.options = options


class AutoExportConfig:
    @classmethod
    def from_dict(cls, data):
        data = dict(data)
        if data["export_format"] not in ("dynamo", "onnx", "executorch"):
            raise ValueError("unknown export_format; known formats: dynamo, onnx, executorch")
        return Config(**data)


# What this implementation declares it lacks (read when the adapter is built).
HFEXPORT_LACKS = {f"export/{b}": f"fakeimpl cannot {b}" for b in ("dynamo", "onnx", "executorch")
                  if behaviour(b) == "lacks"}


class Exporter:
    file_suffix = ".fake"

    def __init__(self, backend):
        self.backend = backend

    def export(self, model, inputs, config=None):
        b = behaviour(self.backend)
        if b == "notimpl":
            raise NotImplementedError(f"fakeimpl cannot {self.backend}")
        if b in ("export", "lowering"):
            raise StageError(f"fake {b} failure", b)
        return {"model": copy.deepcopy(model), "backend": self.backend}

    def save(self, program, path):
        if behaviour(self.backend) == "save":
            raise OSError("fake save failure")
        torch.save(program, path)  # a real file: it loads in another session too (the artifact cache)
        return [str(path)]


class AutoHfExporter:
    @classmethod
    def from_config(cls, config):
        return Exporter(config.export_format)


__version__ = "0.0-fake"
'''

FAKEIMPL_RUNTIME = '''
import torch
from hfexport.outputs import flatten_named
from . import behaviour


def load(path):
    program = torch.load(path, weights_only=False)
    backend = program["backend"]
    if behaviour(backend) == "load":
        raise RuntimeError("fake load failure")

    def run(inputs=None, **kwargs):
        if behaviour(backend) == "run":
            raise RuntimeError("fake run failure")
        out = flatten_named(program["model"](**{**dict(inputs or {}), **kwargs}))
        if behaviour(backend) == "perturb":
            out = {k: v + 1e-2 if v.is_floating_point() else v for k, v in out.items()}
        return out

    return run
'''

FAKEIMPL_MODELS = '''
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x):
        return {"logits": self.proj(x), "hidden": x * 2}


def tiny():
    return Tiny().eval(), {"x": torch.randn(2, 5, 4)}
'''


@pytest.fixture
def fake_impl(pytester):
    """Write the ``fakeimpl`` package into the pytester directory; returns its module name."""
    pkg = pytester.mkpydir("fakeimpl")
    (pkg / "__init__.py").write_text(FAKEIMPL_INIT)
    (pkg / "runtime.py").write_text(FAKEIMPL_RUNTIME)
    (pkg / "models.py").write_text(FAKEIMPL_MODELS)
    pytester.syspathinsert()
    return "fakeimpl"


@pytest.fixture(autouse=True)
def _clean_fakeimpl(monkeypatch):
    """Every test starts with a well-behaved fake and no cached implementation."""
    import sys

    monkeypatch.delenv("FAKEIMPL", raising=False)
    monkeypatch.delenv("HFEXPORT_BACKEND", raising=False)
    yield
    for name in [m for m in sys.modules if m == "fakeimpl" or m.startswith("fakeimpl.")]:
        del sys.modules[name]


def rows_of(path):
    import json

    return json.loads(path.read_text())["rows"]
