"""AutoExportConfig and AutoHfExporter: pick a backend's config or exporter by its ``export_format``.

The registries they read, and the decorators that fill them, live in ``hfexport.registry``; the
names are re-exported here for code that imports them from this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .registry import (
    AUTO_CONFIG_MAPPING,
    AUTO_EXPORTER_MAPPING,
    config_class_for,
    exporter_class_for,
    register_export_config,
    register_exporter,
)

if TYPE_CHECKING:
    from .base import HfExporter
    from .configs import ExportConfigMixin

__all__ = [
    "AutoExportConfig",
    "AutoHfExporter",
    "AUTO_CONFIG_MAPPING",
    "AUTO_EXPORTER_MAPPING",
    "config_class_for",
    "exporter_class_for",
    "register_export_config",
    "register_exporter",
]


class AutoExportConfig:
    """Build the config class that a dict's ``export_format`` names."""

    def __init__(self) -> None:
        raise OSError("AutoExportConfig is not instantiated; use AutoExportConfig.from_dict(...)")

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
        raise OSError("AutoHfExporter is not instantiated; use AutoHfExporter.from_config(config)")

    @classmethod
    def from_config(cls, config: ExportConfigMixin | Mapping[str, Any] | str) -> HfExporter:
        if isinstance(config, Mapping):
            config = AutoExportConfig.from_dict(config)
        fmt = config if isinstance(config, str) else getattr(config, "export_format", None)
        if fmt is None:
            raise TypeError(f"AutoHfExporter.from_config needs an export config, got {type(config).__name__}")
        return exporter_class_for(fmt)()
