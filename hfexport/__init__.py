"""hfexport: export transformers models to torch.export, ONNX Runtime and ExecuTorch.

The public API. Backends whose packages are missing still import:
their exporters raise a clear ImportError when instantiated.
"""

import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names _load_api puts in this namespace, for type checkers (explicit re-exports)
    from .auto import AutoExportConfig as AutoExportConfig
    from .auto import AutoHfExporter as AutoHfExporter
    from .backends import Backend as Backend
    from .backends import register_backend as register_backend
    from .base import HfExporter as HfExporter
    from .configs import DynamoConfig as DynamoConfig
    from .configs import ExecutorchConfig as ExecutorchConfig
    from .configs import ExportConfigMixin as ExportConfigMixin
    from .configs import ExportFormat as ExportFormat
    from .configs import OnnxConfig as OnnxConfig
    from .dynamo import DynamoExporter as DynamoExporter
    from .errors import HfExportError as HfExportError
    from .executorch import ExecutorchExporter as ExecutorchExporter
    from .onnx import OnnxExporter as OnnxExporter
    from .patching import register_fx_node_fix as register_fx_node_fix
    from .patching import register_fx_program_fix as register_fx_program_fix
    from .patching import register_patch as register_patch
    from .registry import AUTO_CONFIG_MAPPING as AUTO_CONFIG_MAPPING
    from .registry import AUTO_EXPORTER_MAPPING as AUTO_EXPORTER_MAPPING
    from .registry import register_export_config as register_export_config
    from .registry import register_exporter as register_exporter
    from .speedups import speedups_off as speedups_off

__version__ = "0.1.0"


# Where each public name lives (one table: the eager import, the deferred one and __all__ read it).
_API: dict[str, tuple[str, ...]] = {
    "configs": ("ExportFormat", "ExportConfigMixin", "DynamoConfig", "OnnxConfig", "ExecutorchConfig"),
    "base": ("HfExporter",),
    "dynamo": ("DynamoExporter",),
    "onnx": ("OnnxExporter",),
    "executorch": ("ExecutorchExporter",),
    "auto": ("AutoExportConfig", "AutoHfExporter"),
    "registry": ("AUTO_EXPORTER_MAPPING", "AUTO_CONFIG_MAPPING", "register_exporter", "register_export_config"),
    "backends": ("Backend", "register_backend"),
    "speedups": ("speedups_off",),
    "patching": ("register_patch", "register_fx_node_fix", "register_fx_program_fix"),
    "errors": ("HfExportError",),
}


def _load_api() -> None:
    """Import the public API into this namespace and register the cache pytrees (torch, transformers)."""
    import importlib

    namespace = globals()
    for module_name, names in _API.items():
        module = importlib.import_module(f"{__name__}.{module_name}")
        namespace.update((name, getattr(module, name)) for name in names)
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


__all__ = [name for names in _API.values() for name in names]

if not getattr(_sys.modules.get("hfexport_launcher"), "DEFER_API", False):
    _load_api()
