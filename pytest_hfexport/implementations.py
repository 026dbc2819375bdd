"""Which implementation of the export API is under test, behind one small interface.

``hfexport`` (default), ``transformers`` (the peer, ``transformers.exporters``), or the dotted
name of any module that exposes the same API: ``AutoExportConfig.from_dict``,
``AutoHfExporter.from_config`` whose exporters have ``export(model, inputs, config=)``,
``save(program, path)`` and ``file_suffix``; and optionally a ``runtime`` submodule with
``load(path)`` (else ``hfexport.runtime.load`` runs the artifact).

Everything the plugin does with an implementation goes through ``Implementation``; where the
implementation lacks a feature it raises ``Unsupported`` (a skip that the report counts as
``unsupported``, not as a pass).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

UNSUPPORTED_PREFIX = "unsupported: "


class Unsupported(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """The implementation under test lacks this backend or feature."""

    def __init__(self, reason: str) -> None:
        super().__init__(UNSUPPORTED_PREFIX + reason, allow_module_level=False)


def exists(name: str) -> bool:
    """Whether ``--hfexport-impl`` names something importable (found, not imported)."""
    if name in ("hfexport", "transformers"):
        name = "hfexport" if name == "hfexport" else "transformers.exporters"
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


Runner = Callable[[Mapping[str, Any]], "dict[str, Any]"]


class Implementation:
    """The API under test, for one backend at a time."""

    name: str = ""

    def version(self) -> str:
        raise NotImplementedError

    def config(self, backend: str, **overrides: Any) -> Any:
        raise NotImplementedError

    def exporter(self, backend: str) -> Any:
        raise NotImplementedError

    def export(self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any) -> Any:
        return exporter.export(model, inputs, config=config)

    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        raise NotImplementedError

    def load(self, path: Path) -> Runner:
        raise NotImplementedError

    def decompose_for_generation(self, model: Any, inputs: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise Unsupported(f"{self.name} has no decompose_for_generation")

    def export_for_generation(self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any,
                              **kwargs: Any) -> dict[str, Any]:
        """{component: program}; Unsupported where the exporter has no export_for_generation."""
        if not hasattr(exporter, "export_for_generation"):
            raise Unsupported(f"{self.name}'s {type(exporter).__name__} has no export_for_generation")
        return dict(exporter.export_for_generation(model, dict(inputs), config, **kwargs))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ModuleImplementation(Implementation):
    """Any module with hfexport's public API (hfexport itself is this with ``"hfexport"``)."""

    def __init__(self, module_name: str) -> None:
        self.name = module_name
        self.module = importlib.import_module(module_name)

    def version(self) -> str:
        version = getattr(self.module, "__version__", None)
        if version is None:
            from .versions import installed

            version = installed(self.name.split(".")[0]) or "unknown"
        return str(version)

    def config(self, backend: str, **overrides: Any) -> Any:
        # from_dict takes serialised data; live torch.export.Dim specs are set on the built config instead.
        live = {k: overrides.pop(k) for k in ("dynamic_shapes",) if k in overrides}
        data = {"export_format": backend, **overrides}
        try:
            config = self.module.AutoExportConfig.from_dict(data)
        except (KeyError, ValueError) as exc:
            if "unknown export_format" in str(exc) or "known formats" in str(exc):
                raise Unsupported(f"{self.name} has no backend {backend!r}: {exc}") from exc
            raise
        if live:
            if dataclasses.is_dataclass(config):
                config = dataclasses.replace(config, **live)
            else:
                for key, value in live.items():
                    setattr(config, key, value)
        return config

    def exporter(self, backend: str) -> Any:
        return self.module.AutoHfExporter.from_config(self.config(backend))

    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        suffix = getattr(exporter, "file_suffix", "")
        path = Path(directory) / f"{stem}{suffix}"
        exporter.save(program, str(path))
        return path

    def load(self, path: Path) -> Runner:
        try:
            runtime = importlib.import_module(f"{self.name}.runtime")
        except ImportError:
            runtime = importlib.import_module("hfexport.runtime")
        return runtime.load(path)

    def decompose_for_generation(self, model: Any, inputs: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        try:
            utils = importlib.import_module(f"{self.name}.utils")
            fn = utils.decompose_for_generation
        except (ImportError, AttributeError):
            return super().decompose_for_generation(model, inputs, **kwargs)
        return fn(model, inputs, **kwargs)


class TransformersImplementation(Implementation):
    """``transformers.exporters``, the peer implementation. Its ``export`` returns an ``ExportedModel``
    wrapper: the adapter unwraps ``.program`` and keeps the wrapper to save and reload it."""

    name = "transformers"

    def __init__(self) -> None:
        self.module = importlib.import_module("transformers.exporters")
        self._wrappers: dict[int, Any] = {}

    def version(self) -> str:
        import transformers

        return transformers.__version__

    def config(self, backend: str, **overrides: Any) -> Any:
        from transformers.exporters import auto

        if backend not in auto.EXPORT_BACKENDS:
            raise Unsupported(f"transformers.exporters has no backend {backend!r}")
        config_cls = auto.EXPORT_BACKENDS[backend].config
        known = {f.name for f in dataclasses.fields(config_cls)}
        lacking = sorted(set(overrides) - known)
        if lacking:
            raise Unsupported(f"transformers.exporters' {config_cls.__name__} has no option(s) {lacking}")
        return config_cls(**overrides)

    def exporter(self, backend: str) -> Any:
        return self.module.AutoHfExporter.from_config(self.config(backend))

    def export(self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any) -> Any:
        wrapped = exporter.export(model, dict(inputs), config)
        program = getattr(wrapped, "program", wrapped)
        self._wrappers[id(program)] = wrapped
        return program

    def export_for_generation(self, exporter: Any, model: Any, inputs: Mapping[str, Any], config: Any,
                              **kwargs: Any) -> dict[str, Any]:
        """The peer returns one ExportedModel holding every component: unwrap each component's program
        and remember which model and name it came from, so ``save``/``load`` can go through the wrapper."""
        if not hasattr(exporter, "export_for_generation"):
            raise Unsupported(f"{self.name}'s {type(exporter).__name__} has no export_for_generation")
        wrapped = exporter.export_for_generation(model, dict(inputs), config, **kwargs)
        programs = {}
        for name, component in wrapped.components.items():
            program = getattr(component, "program", component)
            self._wrappers[id(program)] = (wrapped, name)
            programs[name] = program
        return programs

    def save(self, exporter: Any, program: Any, directory: Path, stem: str = "model") -> Path:
        wrapped = self._wrappers.get(id(program))
        if wrapped is None:
            raise Unsupported("transformers.exporters can only save what its own export() returned")
        if isinstance(wrapped, tuple):  # one component of an export_for_generation result
            model, component = wrapped
            path = Path(directory) / f"{stem}.transformers"
            model.save_pretrained(str(path))
            return Path(f"{path}#{component}")
        if not hasattr(wrapped, "save_pretrained"):
            raise Unsupported("transformers.exporters can only save what its own export() returned")
        path = Path(directory) / f"{stem}.transformers"
        wrapped.save_pretrained(str(path))
        return path

    def load(self, path: Path) -> Runner:
        from transformers.exporters import ExportedModel

        from hfexport.outputs import flatten_named

        folder, _, component = str(path).partition("#")
        exported = ExportedModel.from_pretrained(folder)
        call = exported.runners[component] if component else exported

        def run(inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
            merged = {**dict(inputs or {}), **kwargs}
            return flatten_named(call(**merged))

        return run

    def decompose_for_generation(self, model: Any, inputs: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        from transformers.exporters.utils import decompose_for_generation

        return decompose_for_generation(model, inputs, **kwargs)


def resolve(name: str) -> Implementation:
    """The implementation for ``--hfexport-impl`` (imported now; the plugin keeps one per session)."""
    return TransformersImplementation() if name == "transformers" else ModuleImplementation(name)
