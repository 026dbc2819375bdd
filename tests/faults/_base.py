"""hfexport's API with some classes swapped: what every fault module is built from."""

from __future__ import annotations

import types
from typing import Any, Mapping

import hfexport
import hfexport.runtime
import hfexport.runtime.components
import hfexport.runtime.decode


def with_faults(namespace: dict[str, Any], exporters: Mapping[str, type] | None = None,
                configs: Mapping[str, type] | None = None, runtime: Any = None) -> None:
    """Fill a fault module's namespace with hfexport's public API, dispatching ``exporters`` (backend -> class)
    and ``configs`` (backend -> class) through its own Auto classes, and ``runtime`` as its runtime."""
    exporters, configs = dict(exporters or {}), dict(configs or {})
    for name in hfexport.__all__:
        namespace.setdefault(name, getattr(hfexport, name))

    class AutoExportConfig(hfexport.AutoExportConfig):
        @classmethod
        def from_dict(cls, data: Mapping[str, Any]) -> Any:
            fmt = str(data.get("export_format"))
            if fmt in configs:
                return configs[fmt].from_dict(dict(data))
            return hfexport.AutoExportConfig.from_dict(data)

    class AutoHfExporter(hfexport.AutoHfExporter):
        @classmethod
        def from_config(cls, config: Any) -> Any:
            if isinstance(config, Mapping):
                config = AutoExportConfig.from_dict(config)
            fmt = str(getattr(config.export_format, "value", config.export_format))
            if fmt in exporters:
                return exporters[fmt]()
            return hfexport.AutoHfExporter.from_config(config)

    namespace["AutoExportConfig"] = AutoExportConfig
    namespace["AutoHfExporter"] = AutoHfExporter
    namespace["__version__"] = "0.0-fault"
    if runtime is not None:
        namespace["runtime"] = runtime


def runtime_with(**decode_overrides: Any) -> Any:
    """hfexport.runtime with some of its decode-loop entry points replaced."""
    decode = types.SimpleNamespace(**{**vars(hfexport.runtime.decode), **decode_overrides})
    return types.SimpleNamespace(load=hfexport.runtime.load, runner_for=hfexport.runtime.runner_for, decode=decode,
                                 components=hfexport.runtime.components)


def each_backend(mixin: type) -> dict[str, type]:
    """backend -> hfexport's exporter class for it with ``mixin`` in front."""
    return {name: type(f"{mixin.__name__}{cls.__name__}", (mixin, cls), {})
            for name, cls in (("dynamo", hfexport.DynamoExporter), ("onnx", hfexport.OnnxExporter),
                              ("executorch", hfexport.ExecutorchExporter))}
