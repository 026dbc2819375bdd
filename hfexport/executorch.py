"""ExecutorchExporter: placeholder until the ExecuTorch stages land (issue 3)."""

from __future__ import annotations

from typing import ClassVar

from .auto import register_exporter
from .configs import ExecutorchConfig, ExportFormat
from .dynamo import DynamoExporter


@register_exporter("executorch")
class ExecutorchExporter(DynamoExporter):
    export_format = ExportFormat.EXECUTORCH
    config_class = ExecutorchConfig
    required_packages = ["torch", "transformers", "executorch"]
    patch_backends: ClassVar[tuple[str, ...]] = ("dynamo", "executorch")
    file_suffix = ".pte"

    def export(self, model, sample_inputs, config=None):
        raise NotImplementedError("ExecutorchExporter lands with issue 3")
