"""Adapter for hfexport, and for any module that exposes hfexport's public API.

``ModuleAdapter("hfexport")`` is the default implementation under test. A dotted module
(``--hfexport-impl=pkg.impl``) is judged the same way: its ``AutoExportConfig``,
``AutoHfExporter``, ``HfExporter``, ``ExportConfigMixin``, ``register_exporter`` and
``register_export_config``; its ``runtime`` (a submodule or attribute with ``load``, ``runner_for``,
``decode.decode_loop``, ``components.ExportedGenerate``) and ``utils.decompose_for_generation`` where it
has them, else hfexport's (one provider of the artifact contract). What it lacks it declares in a module
attribute ``HFEXPORT_LACKS = {capability: reason}``. A module that
defines ``hfexport_adapter`` (an ``Adapter`` subclass) is judged through that instead.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .base import Adapter, DecodeLoop


def _optional(module_name: str, fallback: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module exists but something it imports is missing: a real error
        return importlib.import_module(fallback)


class ModuleAdapter(Adapter):
    """hfexport's public API in a module; hfexport.runtime provides the artifact contract where it has none."""

    def __init__(self, module_name: str = "hfexport") -> None:
        self.name = module_name
        self.module = importlib.import_module(module_name)
        # The module's own runtime (a submodule, or a ``runtime`` attribute), else hfexport's.
        self.runtime = getattr(self.module, "runtime", None) or _optional(f"{module_name}.runtime", "hfexport.runtime")
        runtime_name = getattr(self.runtime, "__name__", "hfexport.runtime")
        self.decode = getattr(self.runtime, "decode", None) or _optional(
            f"{runtime_name}.decode", "hfexport.runtime.decode"
        )
        self.components = getattr(self.runtime, "components", None) or _optional(
            f"{runtime_name}.components", "hfexport.runtime.components"
        )
        self.utils = getattr(self.module, "utils", None) or _optional(f"{module_name}.utils", "hfexport.utils")
        declared = getattr(self.module, "HFEXPORT_LACKS", None)
        # What a backend lacks, from its descriptor (``lacks`` of hfexport.backends.Backend), for hfexport and any
        # module that registers backends there; a module's own HFEXPORT_LACKS is added to it.
        self.lacks = {
            f"{capability}/{name}": why
            for name, backend in self._descriptors().items()
            for capability, why in getattr(backend, "lacks", {}).items()
        }
        self.lacks.update(declared or {})

    def _descriptors(self) -> dict[str, Any]:
        table = getattr(getattr(self.module, "backends", None), "BACKENDS", None)
        if table is None:
            table = importlib.import_module("hfexport.backends").BACKENDS if self.name == "hfexport" else {}
        return dict(table)

    def backends(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"packages": tuple(b.packages), "suffix": b.suffix, "tolerance": tuple(b.tolerance)}
            for name, b in self._descriptors().items()
        }

    def version(self) -> str:
        version = getattr(self.module, "__version__", None)
        if version is None:
            from ..versions import installed

            version = installed(self.name.split(".")[0]) or "unknown"
        return str(version)

    def api(self) -> Any:
        return self.module

    # -- exporting ---------------------------------------------------------------------------------
    def config(self, backend: str, /, **fields: Any) -> Any:
        # from_dict takes serialisable data; live torch.export.Dim specs are set on the built config.
        live = {k: fields.pop(k) for k in ("dynamic_shapes",) if k in fields}
        config = self.module.AutoExportConfig.from_dict({"export_format": backend, **fields})
        if live:
            if dataclasses.is_dataclass(config) and not isinstance(config, type):
                config = dataclasses.replace(config, **live)
            for key, value in live.items():
                if getattr(config, key, None) is not value:
                    setattr(config, key, value)
        return config

    def exporter(self, backend: str) -> Any:
        return self.module.AutoHfExporter.from_config(self.config(backend))

    # -- artifacts ---------------------------------------------------------------------------------
    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        path = Path(directory) / f"{stem}{getattr(exporter, 'file_suffix', '')}"
        exporter.save(program, str(path))
        return path

    def load(self, path: Path) -> Callable[..., Any]:
        return self.runtime.load(path)

    def runner_for(self, program: Any, backend: str) -> Callable[..., Any]:
        return self.runtime.runner_for(program, backend)

    def decode_loop(self, path: Path, backend: str, max_cache_len: int) -> DecodeLoop:
        return self.decode.decode_loop(str(path), backend, max_cache_len=max_cache_len)

    def serve(
        self,
        model: Any,
        paths: Mapping[str, Path],
        inputs: Mapping[str, Any],
        new_tokens: int,
        generation_config: Any = None,
        multi_token_decode: bool = False,
    ) -> Any:
        components = self.utils.decompose_for_generation(model, dict(inputs), generation_config, multi_token_decode)
        runners = {name: self.load(path) for name, path in paths.items()}
        served = self.components.ExportedGenerate(model, components, runners)
        return served.generate(dict(inputs), new_tokens, generation_config)

    # -- API ---------------------------------------------------------------------------------------
    def register_backend(self, name: str, exporter_cls: type, config_cls: type) -> None:
        self.module.register_export_config(name)(config_cls)
        self.module.register_exporter(name)(exporter_cls)

    def unregister_backend(self, name: str) -> None:
        for mapping in ("AUTO_EXPORTER_MAPPING", "AUTO_CONFIG_MAPPING"):
            getattr(self.module, mapping).pop(name, None)
