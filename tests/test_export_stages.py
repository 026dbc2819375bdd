"""Exporters are composed of stages (a trace stage, then their backend's lowering and save), not subclasses that
override Dynamo's internals; and an export has one dynamic-shape plan, which every trace of it reads.

Before, ``dynamic=True`` was read in five places (Dynamo's shapes, its tracing mode, its batch retrace, ExecuTorch's
tied shapes, ``export_for_generation``'s widening), and ONNX and ExecuTorch subclassed ``DynamoExporter`` to override
``trace_call``, ``_export`` and ``dynamic_shapes_for``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from hfexport import DynamoConfig, DynamoExporter, OnnxConfig, OnnxExporter
from hfexport.shape_plan import ShapePlan
from hfexport.tracing import Trace

ROOT = Path(__file__).resolve().parent.parent
# Where the meaning of the config's shape fields may be read: the plan, the config's own definition (validation,
# serialisation) and the command line that builds a config from its flags.
READERS = {"hfexport/shape_plan.py", "hfexport/configs.py", "hfexport/cli/export.py"}
SHAPE_FIELDS = ("dynamic", "dynamic_shapes")


def shape_field_reads(root: Path) -> list[str]:
    """Every read of a config's ``dynamic`` / ``dynamic_shapes`` in the library outside ``READERS`` (attribute,
    ``getattr`` or mapping ``get``); the plan's own method ``plan.dynamic_shapes(...)`` is not one."""
    found = []
    for path in sorted((root / "hfexport").rglob("*.py")):
        name = str(path.relative_to(root))
        if name in READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            attribute = (
                isinstance(node, ast.Attribute)
                and node.attr in SHAPE_FIELDS
                and not (isinstance(node.value, ast.Name) and node.value.id == "plan")
            )
            by_name = (
                isinstance(node, ast.Call)
                and (getattr(node.func, "id", "") == "getattr" or getattr(node.func, "attr", "") == "get")
                and any(isinstance(a, ast.Constant) and a.value in SHAPE_FIELDS for a in node.args)
            )
            if attribute or by_name:
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_shape_plan_reads_what_dynamic_means():
    assert shape_field_reads(ROOT) == []


def test_the_reader_scan_sees_a_scattered_read(tmp_path):
    """The rule above could not fail if the scan missed the ways a config's field is read."""
    (tmp_path / "hfexport").mkdir()
    (tmp_path / "hfexport" / "x.py").write_text(
        "def f(config, c, plan):\n"
        "    plan.dynamic_shapes({})\n"
        "    return config.dynamic or getattr(c, 'dynamic_shapes', None) or c.get('dynamic')\n"
    )
    assert len(shape_field_reads(tmp_path)) == 3


@pytest.mark.parametrize("name", ["onnx", "executorch"])
def test_exporters_are_composed_of_a_trace_stage_not_subclasses_of_dynamo(name):
    from hfexport.backends import backend

    exporter = backend(name).exporter_class()
    assert DynamoExporter not in exporter.__mro__
    assert isinstance(exporter.tracer, Trace)
    assert exporter.tracer.patch_backends[0] == "dynamo"


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).softmax(-1)


@pytest.mark.parametrize("exporter, config", [(DynamoExporter, DynamoConfig), (OnnxExporter, OnnxConfig)])
def test_one_export_makes_one_shape_plan(monkeypatch, exporter, config):
    made = []
    original = ShapePlan.of.__func__

    def counted(cls, *args, **kwargs):
        made.append(args)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(ShapePlan, "of", classmethod(counted))
    exporter().export(_Tiny().eval(), {"x": torch.randn(1, 5, 4)}, config(dynamic=True))
    assert len(made) == 1


def test_the_plan_says_what_dynamic_means():
    static, auto = ShapePlan.of(DynamoConfig()), ShapePlan.of(DynamoConfig(dynamic=True))
    explicit = ShapePlan.of(DynamoConfig(dynamic_shapes={"x": {0: torch.export.Dim("b")}}))
    assert (static.symbolic, auto.symbolic, explicit.symbolic) == (False, True, True)
    assert (static.automatic, auto.automatic, explicit.automatic) == (False, True, False)
    inputs = {"input_ids": torch.ones(1, 3, dtype=torch.long), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    assert static.dynamic_shapes(inputs) is None
    tied = ShapePlan.of(DynamoConfig(dynamic=True), tie_batch=True).dynamic_shapes(inputs)
    assert tied["input_ids"][0] is tied["attention_mask"][0]
    assert auto.free(inputs)["input_ids"][0] is not tied["input_ids"][0]
