"""hfexport: export transformers models to torch.export, ONNX Runtime and ExecuTorch.

The public API. Backends whose packages are missing still import:
their exporters raise a clear ImportError when instantiated.
"""

import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names _load_api puts in this namespace, for type checkers
    from .auto import AutoExportConfig, AutoHfExporter
    from .base import HfExporter
    from .configs import DynamoConfig, ExecutorchConfig, ExportConfigMixin, ExportFormat, OnnxConfig
    from .dynamo import DynamoExporter
    from .errors import HfExportError
    from .executorch import ExecutorchExporter
    from .onnx import OnnxExporter
    from .patching import register_fx_node_fix, register_fx_program_fix, register_patch
    from .registry import AUTO_CONFIG_MAPPING, AUTO_EXPORTER_MAPPING, register_export_config, register_exporter

__version__ = "0.1.0"


# Where each public name lives (one table: the eager import, the deferred one and __all__ read it).
_API: dict[str, str] = {
    "ExportFormat": "configs",
    "ExportConfigMixin": "configs",
    "DynamoConfig": "configs",
    "OnnxConfig": "configs",
    "ExecutorchConfig": "configs",
    "HfExporter": "base",
    "DynamoExporter": "dynamo",
    "OnnxExporter": "onnx",
    "ExecutorchExporter": "executorch",
    "AutoExportConfig": "auto",
    "AutoHfExporter": "auto",
    "AUTO_EXPORTER_MAPPING": "registry",
    "AUTO_CONFIG_MAPPING": "registry",
    "register_exporter": "registry",
    "register_export_config": "registry",
    "register_patch": "patching",
    "register_fx_node_fix": "patching",
    "register_fx_program_fix": "patching",
    "HfExportError": "errors",
}


def _load_api() -> None:
    """Import the public API into this namespace and register the cache pytrees (torch, transformers)."""
    import importlib

    namespace = globals()
    for name, module in _API.items():
        namespace[name] = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    configs = {"dynamo": namespace["DynamoConfig"], "onnx": namespace["OnnxConfig"]}
    configs["executorch"] = namespace["ExecutorchConfig"]
    for backend, cls in configs.items():
        if namespace["AUTO_CONFIG_MAPPING"].get(backend) is not cls:
            namespace["register_export_config"](backend)(cls)
    # So that `import hfexport; torch.export.load(path)` rebuilds Cache inputs and ModelOutput
    # results in a fresh process (ModelOutput classes register themselves when their module loads).
    import transformers.modeling_outputs  # noqa: F401

    from . import caches

    caches.register_cache_pytrees()


def __getattr__(name: str) -> object:
    """A deferred launch (the console script) imports the API when a command first uses a name of it."""
    if name in __all__:
        _load_api()
        return globals()[name]
    raise AttributeError(f"module 'hfexport' has no attribute {name!r}")


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
]  # the keys of _API

if not getattr(_sys.modules.get("hfexport_launcher"), "DEFER_API", False):
    _load_api()
