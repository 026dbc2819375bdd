"""hfexport: export transformers models to torch.export, ONNX Runtime and ExecuTorch.

The public API. Backends whose packages are missing still import:
their exporters raise a clear ImportError when instantiated.
"""

from . import caches as _caches
from .auto import AutoExportConfig, AutoHfExporter
from .base import HfExporter
from .configs import DynamoConfig, ExecutorchConfig, ExportConfigMixin, ExportFormat, OnnxConfig
from .dynamo import DynamoExporter
from .errors import HfExportError
from .executorch import ExecutorchExporter
from .onnx import OnnxExporter
from .patching import register_fx_node_fix, register_fx_program_fix, register_patch
from .registry import AUTO_CONFIG_MAPPING, AUTO_EXPORTER_MAPPING, register_export_config, register_exporter

for _name, _cls in (("dynamo", DynamoConfig), ("onnx", OnnxConfig), ("executorch", ExecutorchConfig)):
    register_export_config(_name)(_cls)

# So that `import hfexport; torch.export.load(path)` rebuilds Cache inputs and ModelOutput
# results in a fresh process (ModelOutput classes register themselves when their module loads).
import transformers.modeling_outputs  # noqa: E402,F401

_caches.register_cache_pytrees()

__version__ = "0.1.0"

__all__ = [
    "ExportFormat",
    "ExportConfigMixin",
    "DynamoConfig",
    "OnnxConfig",
    "ExecutorchConfig",
    "HfExporter",
    "DynamoExporter",
    "OnnxExporter",
    "ExecutorchExporter",
    "AutoExportConfig",
    "AutoHfExporter",
    "AUTO_EXPORTER_MAPPING",
    "AUTO_CONFIG_MAPPING",
    "register_exporter",
    "register_export_config",
    "register_patch",
    "register_fx_node_fix",
    "register_fx_program_fix",
    "HfExportError",
]
