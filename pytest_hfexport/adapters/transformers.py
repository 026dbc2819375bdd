"""Adapter for ``transformers.exporters``, the peer implementation shipped with transformers.

Everything goes through the peer's own parts: its Auto classes and configs, its
``ExportedModel`` wrapper, ``save_pretrained`` folders (one file per component and an
``export.json`` manifest) and ``ExportedModel.from_pretrained`` runners. What it has no
counterpart for is declared in ``lacks``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .base import Adapter, callers_mapping, tolerant_logging

SUFFIXES = {"dynamo": ".pt2", "onnx": ".onnx", "executorch": ".pte"}


class TransformersAdapter(Adapter):
    name = "transformers"
    lacks = {
        "decode_loop": "transformers.exporters has no decode loop: its runners take a cache object per call (a fresh "
        "ONNX Runtime IOBinding each call, new cache tensors returned on ONNX and ExecuTorch)",
        "decode_loop_in_place": "transformers.exporters has no decode loop (see decode_loop)",
        "serve": "transformers.exporters has no helper that runs generate() with exported components",
        "quantization": "transformers.exporters configs take a `quantizer` object (OnnxRuntimeQuantizer, "
        "PT2EQuantizer, NNCF quantizers), not a named weight scheme; no mapping of int8/int4/8da4w onto them is "
        "written",
    }

    def __init__(self) -> None:
        self.module = importlib.import_module("transformers.exporters")
        self._owners: dict[int, Any] = {}  # id(program) -> (ExportedModel, component name)

    def version(self) -> str:
        import transformers

        return transformers.__version__

    def api(self) -> Any:
        return self.module

    # -- exporting ---------------------------------------------------------------------------------
    def config(self, backend: str, /, **fields: Any) -> Any:
        live = {k: fields.pop(k) for k in ("dynamic_shapes",) if k in fields}
        config = self.module.AutoExportConfig.from_dict({"export_format": backend, **fields})
        return dataclasses.replace(config, **live) if live else config

    def exporter(self, backend: str) -> Any:
        return self.module.AutoHfExporter.from_config(self.config(backend))

    def export(self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any) -> Any:
        wrapped = exporter.export(model, callers_mapping(inputs), config)
        return self._unwrap(wrapped)["model"]

    def export_for_generation(
        self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any, **options: Any
    ) -> dict[str, Any]:
        return self._unwrap(exporter.export_for_generation(model, callers_mapping(inputs), config, **options))

    def _unwrap(self, wrapped: Any) -> dict[str, Any]:
        """The peer returns one ExportedModel holding every component; remember where each program came from,
        so ``save`` can go through the wrapper's own ``save_pretrained``."""
        programs = {}
        for name, component in wrapped.components.items():
            self._owners[id(component.program)] = (wrapped, name)
            programs[name] = component.program
        return programs

    # -- artifacts ---------------------------------------------------------------------------------
    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        wrapped, component = self._owners[id(program)]
        folder = Path(directory) / f"transformers-export-{id(wrapped):x}"
        if not (folder / "export.json").exists():
            wrapped.save_pretrained(str(folder))
        return folder if list(wrapped.components) == ["model"] else Path(f"{folder}#{component}")

    def _exported_model(self, path: Path) -> tuple[Any, str]:
        folder, _, component = str(path).partition("#")
        with tolerant_logging():
            return self.module.ExportedModel.from_pretrained(folder), component or "model"

    def load(self, path: Path) -> Callable[..., Any]:
        exported, component = self._exported_model(path)
        return exported.runners[component]

    def raw_artifact(self, path: Path) -> Path:
        import json

        exported, component = self._exported_model(path)  # registers the cache pytrees its specs name
        folder = Path(str(path).partition("#")[0])
        manifest = json.loads((folder / "export.json").read_text())
        return folder / manifest["components"][component]["file"]

    # -- API ---------------------------------------------------------------------------------------
    def register_backend(self, name: str, exporter_cls: Any, config_cls: type) -> None:
        exporter_cls.export_format = name
        exporter_cls.config_class = config_cls
        self.module.register_backend(exporter_cls)

    def unregister_backend(self, name: str) -> None:
        from transformers.exporters import auto

        auto.EXPORT_BACKENDS.pop(name, None)
