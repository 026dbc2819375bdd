"""The API contract, through the adapter: configs, refusal of another backend's config, registration,
environment validation. Every field of a config is set to a value other than its default before it
round-trips, so a config that drops fields at their defaults (or everywhere) fails."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import logging
from typing import Any

import pytest

from conformance.conftest import case

BACKENDS = ("dynamo", "onnx", "executorch")
# A value other than each known field's default (by field name); an unknown field gets one from its type.
NON_DEFAULT = {
    "dynamic": True,
    "strict": True,
    "prefer_deferred_runtime_asserts_over_guards": True,
    "output_path": "model.onnx",
    "opset_version": 20,
    "external_data": False,
    "optimize": False,
    "export_params": False,
    "keep_initializers_as_inputs": True,
    "backend": "cuda",
    "alloc_graph_input": False,
    "alloc_graph_output": False,
    "alloc_mutable_buffers": False,
    # int8 goes with every backend and every value above (int4 needs optimize=True, 8da4w the XNNPACK delegate).
    "quantization": "int8",
}
# Fields no value of which goes with the rest: int8 has one scale per output channel, so no group size.
LEFT_AT_DEFAULT = {"quantization_group_size"}


def api_case(subject: str) -> Any:
    return case(subject, "api", id=subject, values=(subject,))


def _non_default(field: dataclasses.Field, current: Any) -> Any:
    if field.name in LEFT_AT_DEFAULT:
        return None
    if field.name in NON_DEFAULT and NON_DEFAULT[field.name] != current:
        return NON_DEFAULT[field.name]
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        return current + 1
    if current is None and "int" in str(field.type):
        return 7
    return None  # unknown: left at its default (listed in the failure message if it does not round-trip)


def _dynamic_shapes() -> dict[str, Any]:
    from torch.export import Dim

    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=64)
    return {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}


def _fields(config: Any) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "export_format"}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "min") and hasattr(a, "max") and hasattr(a, "__name__"):
        return (getattr(b, "__name__", None), getattr(b, "min", None), getattr(b, "max", None)) == (
            a.__name__,
            a.min,
            a.max,
        )
    return a == b


def _full_config(adapter: Any, backend: str) -> Any:
    base = adapter.config(backend)
    values = {}
    for field in dataclasses.fields(base):
        if field.name in ("export_format", "dynamic_shapes"):
            continue
        value = _non_default(field, getattr(base, field.name))
        if value is not None:
            values[field.name] = value
    if backend == "executorch":
        values["dynamic"] = True
    return adapter.config(backend, **values, dynamic_shapes=_dynamic_shapes())


@pytest.mark.parametrize("subject", [api_case("config_round_trip")])
def test_config_round_trips_every_field(subject, hfexport_implementation, hfexport_backend):
    adapter = hfexport_implementation
    adapter.require("config_dict", hfexport_backend)
    config = _full_config(adapter, hfexport_backend)
    defaults = _fields(adapter.config(hfexport_backend))
    unchanged = sorted(k for k, v in _fields(config).items() if k != "dynamic_shapes" and v == defaults.get(k))
    data = adapter.config_to_dict(config)
    via_dict = adapter.config_from_dict(data)
    via_json = adapter.config_from_dict(json.loads(json.dumps(data, default=str)))
    for label, back in (("to_dict/from_dict", via_dict), ("to_dict/JSON/from_dict", via_json)):
        assert type(back) is type(config), f"{label} gave a {type(back).__name__}, not a {type(config).__name__}"
        lost = sorted(k for k, v in _fields(config).items() if not _same(v, getattr(back, k, None)))
        assert not lost, f"{label} lost {lost}: {[(k, getattr(config, k), getattr(back, k, None)) for k in lost]}" + (
            f" (fields left at their defaults: {unchanged})" if unchanged else ""
        )
        fmt = getattr(back.export_format, "value", back.export_format)
        assert str(fmt) == hfexport_backend


@pytest.mark.parametrize("subject", [api_case("config_refuses_unknown_field")])
def test_config_refuses_an_unknown_field(subject, hfexport_implementation, hfexport_backend):
    """A misspelt field (``dynamik``) is an error naming it, not a config silently left at its defaults."""
    adapter = hfexport_implementation
    adapter.require("config_dict", hfexport_backend)
    with pytest.raises((TypeError, ValueError)) as raised:
        adapter.config_from_dict({"export_format": hfexport_backend, "dynamik": True})
    assert "dynamik" in str(raised.value), f"the error does not name the unknown field 'dynamik': {raised.value}"


@pytest.mark.parametrize("subject", [api_case("auto_dispatch")])
def test_auto_classes_pick_the_backend(subject, hfexport_implementation, hfexport_backend):
    api = hfexport_implementation.api()
    config = api.AutoExportConfig.from_dict({"export_format": hfexport_backend, "dynamic": True})
    assert config.dynamic is True
    exporter = api.AutoHfExporter.from_config(config)
    assert isinstance(exporter, api.HfExporter)
    assert str(getattr(type(exporter).export_format, "value", type(exporter).export_format)) == hfexport_backend


@pytest.mark.parametrize("subject", [api_case("refuses_other_backend_config")])
def test_exporter_refuses_another_backends_config(subject, hfexport_implementation, hfexport_backend):
    """An exporter given another backend's config raises before any work, naming both backends."""
    import torch

    adapter = hfexport_implementation
    exporter = adapter.exporter(hfexport_backend)
    model = torch.nn.Linear(2, 2)
    for other in (b for b in BACKENDS if b != hfexport_backend):
        with pytest.raises((TypeError, ValueError)) as raised:
            adapter.export(exporter, model, {"input": torch.randn(1, 2)}, adapter.config(other))
        text = str(raised.value)
        assert hfexport_backend in text.lower() and other in text.lower(), (
            f"the error does not name both backends ({hfexport_backend!r}, {other!r}): {text}"
        )


@pytest.mark.parametrize("subject", [api_case("registration")])
def test_registered_backend_round_trips_through_the_auto_classes(subject, hfexport_implementation, hfexport_backend):
    adapter = hfexport_implementation
    adapter.require("registration")
    api = adapter.api()
    name = f"conformance_{hfexport_backend}"
    base_config = type(adapter.config(hfexport_backend))
    base_exporter = type(adapter.exporter(hfexport_backend))
    config_cls = dataclasses.make_dataclass(f"Conformance{base_config.__name__}", [], bases=(base_config,), eq=False)
    config_cls.export_format = name  # type: ignore[attr-defined]
    exporter_cls = type(
        f"Conformance{base_exporter.__name__}", (base_exporter,), {"export_format": name, "config_class": config_cls}
    )
    adapter.register_backend(name, exporter_cls, config_cls)
    try:
        config = api.AutoExportConfig.from_dict({"export_format": name, "dynamic": True})
        assert type(config) is config_cls and config.dynamic is True
        assert type(api.AutoHfExporter.from_config(config)) is exporter_cls
    finally:
        adapter.unregister_backend(name)
    with pytest.raises((TypeError, ValueError)):
        adapter.register_backend(
            f"{name}_bad",
            type("NotAnExporter", (), {"export_format": f"{name}_bad", "config_class": config_cls}),
            config_cls,
        )
    adapter.unregister_backend(f"{name}_bad")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def _fake_versions(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str | None]) -> None:
    """importlib.metadata and find_spec report ``versions`` (None: not installed) for these distributions."""
    real_version, real_find = importlib.metadata.version, importlib.util.find_spec

    def version(name: str) -> str:
        if name.lower() in versions:
            if versions[name.lower()] is None:
                raise importlib.metadata.PackageNotFoundError(name)
            return versions[name.lower()]  # type: ignore[return-value]
        return real_version(name)

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if versions.get(name.split(".")[0].lower(), "") is None:
            return None
        return real_find(name, *args, **kwargs)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


REQUIRED = {"dynamo": "torch", "onnx": "onnxscript", "executorch": "executorch"}


@pytest.mark.parametrize("subject", [api_case("environment_drift")])
def test_version_drift_warns_once_per_class(subject, hfexport_implementation, hfexport_backend, monkeypatch):
    adapter = hfexport_implementation
    adapter.require("environment")
    check, other = adapter.environment_checker(hfexport_backend), adapter.environment_checker(hfexport_backend)
    _fake_versions(monkeypatch, {"torch": "2.99.0"})
    with _collect() as seen:
        check()
        check()
    drift = [m for m in seen if "2.99" in m]
    assert len(drift) == 1, f"a faked torch 2.99.0 should warn exactly once per exporter class; warnings: {seen}"
    with _collect() as seen:
        other()
    assert len([m for m in seen if "2.99" in m]) == 1, f"another exporter class should warn once too: {seen}"


@pytest.mark.parametrize("subject", [api_case("environment_missing_package")])
def test_missing_package_names_the_install_command(subject, hfexport_implementation, hfexport_backend, monkeypatch):
    adapter = hfexport_implementation
    adapter.require("environment")
    check = adapter.environment_checker(hfexport_backend)
    package = REQUIRED[hfexport_backend]
    _fake_versions(monkeypatch, {package: None})
    with pytest.raises(ImportError) as raised:
        check()
    text = str(raised.value)
    assert "pip install" in text and package in text, f"the error should name `pip install ...{package}...`: {text}"


class _collect:
    """Context: the warning messages emitted inside (logging at WARNING+ on any logger, and warnings.warn)."""

    def __enter__(self) -> list[str]:
        import warnings

        self.handler = _Records()
        self.loggers = [logging.getLogger()] + [
            lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger) and not lg.propagate
        ]
        for logger in self.loggers:
            logger.addHandler(self.handler)
        self.catcher = warnings.catch_warnings(record=True)
        self.caught = self.catcher.__enter__()
        warnings.simplefilter("always")
        self.seen: list[str] = []
        return self.seen

    def __exit__(self, *exc: Any) -> None:
        self.catcher.__exit__(*exc)
        for logger in self.loggers:
            logger.removeHandler(self.handler)
        self.seen.extend(self.handler.records + [str(w.message) for w in self.caught])
