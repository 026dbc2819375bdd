"""OnnxExporter: placeholder until the ONNX stages land (issue 3)."""

from __future__ import annotations

from typing import ClassVar

from .auto import register_exporter
from .configs import ExportFormat, OnnxConfig
from .dynamo import DynamoExporter


@register_exporter("onnx")
class OnnxExporter(DynamoExporter):
    export_format = ExportFormat.ONNX
    config_class = OnnxConfig
    required_packages = ["torch", "transformers", "onnx", "onnxscript", "onnxruntime"]
    patch_backends: ClassVar[tuple[str, ...]] = ("dynamo", "onnx")
    file_suffix = ".onnx"

    def export(self, model, sample_inputs, config=None):
        raise NotImplementedError("OnnxExporter lands with issue 3")
