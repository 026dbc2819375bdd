"""Auto classes and the two registries that let a backend be chosen at run time.

A third party adds a backend with two decorators::

    @register_export_config("tflite")
    @dataclass(eq=False)
    class TfliteConfig(DynamoConfig):
        export_format: ClassVar[str] = "tflite"

    @register_exporter("tflite")
    class TfliteExporter(DynamoExporter): ...
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .base import HfExporter
from .configs import ExportConfigMixin

AUTO_EXPORTER_MAPPING: dict[str, type[HfExporter]] = {}
AUTO_CONFIG_MAPPING: dict[str, type[ExportConfigMixin]] = {}


def _key(name: Any) -> str:
    return str(getattr(name, "value", name))


def register_exporter(name: str) -> Callable[[type], type]:
    """Class decorator: make ``AutoHfExporter`` pick this exporter for ``export_format == name``."""

    def decorator(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, HfExporter)):
            raise TypeError(f"register_exporter({name!r}) needs a subclass of HfExporter, got {cls!r}")
        AUTO_EXPORTER_MAPPING[_key(name)] = cls
        return cls

    return decorator


def register_export_config(name: str) -> Callable[[type], type]:
    """Class decorator: make ``AutoExportConfig`` build this class for ``export_format == name``."""

    def decorator(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, ExportConfigMixin)):
            raise TypeError(f"register_export_config({name!r}) needs a subclass of ExportConfigMixin, got {cls!r}")
        AUTO_CONFIG_MAPPING[_key(name)] = cls
        return cls

    return decorator


def _unknown(kind: str, name: Any, known: Mapping[str, Any]) -> ValueError:
    return ValueError(f"unknown export_format {_key(name)!r} for {kind}; known formats: {sorted(known)}")


def config_class_for(name: Any) -> type[ExportConfigMixin]:
    try:
        return AUTO_CONFIG_MAPPING[_key(name)]
    except KeyError:
        raise _unknown("AutoExportConfig", name, AUTO_CONFIG_MAPPING) from None


def exporter_class_for(name: Any) -> type[HfExporter]:
    try:
        return AUTO_EXPORTER_MAPPING[_key(name)]
    except KeyError:
        raise _unknown("AutoHfExporter", name, AUTO_EXPORTER_MAPPING) from None


class AutoExportConfig:
    """Build the config class that a dict's ``export_format`` names."""

    def __init__(self) -> None:
        raise EnvironmentError("AutoExportConfig is not instantiated; use AutoExportConfig.from_dict(...)")

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any]) -> ExportConfigMixin:
        if "export_format" not in config_dict:
            raise ValueError(f"the dict needs an 'export_format'; known formats: {sorted(AUTO_CONFIG_MAPPING)}")
        return config_class_for(config_dict["export_format"]).from_dict(dict(config_dict))

    @classmethod
    def from_json_string(cls, text: str) -> ExportConfigMixin:
        import json

        return cls.from_dict(json.loads(text))


class AutoHfExporter:
    """Build the exporter for a config (or a config dict, or a format name)."""

    def __init__(self) -> None:
        raise EnvironmentError("AutoHfExporter is not instantiated; use AutoHfExporter.from_config(config)")

    @classmethod
    def from_config(cls, config: ExportConfigMixin | Mapping[str, Any] | str) -> HfExporter:
        if isinstance(config, Mapping):
            config = AutoExportConfig.from_dict(config)
        fmt = config if isinstance(config, str) else getattr(config, "export_format", None)
        if fmt is None:
            raise TypeError(f"AutoHfExporter.from_config needs an export config, got {type(config).__name__}")
        return exporter_class_for(fmt)()
