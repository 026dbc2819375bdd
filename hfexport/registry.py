"""The two registries that let a backend be chosen at run time, by its ``export_format`` name.

A third party adds a backend with two decorators::

    @register_export_config("tflite")
    @dataclass(eq=False)
    class TfliteConfig(DynamoConfig):
        export_format: ClassVar[str] = "tflite"

    @register_exporter("tflite")
    class TfliteExporter(DynamoExporter): ...

This module imports nothing from hfexport at import time (a backend's descriptor, ``hfexport.backends``, is read
when a name has no registration here), so ``configs``, ``base`` and ``auto`` all import from it
and never from each other in a cycle. The class a registration must subclass is named by the module
that defines it: ``hfexport.base`` marks ``HfExporter`` with ``@exporter_base`` and
``hfexport.configs`` marks ``ExportConfigMixin`` with ``@config_base``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

AUTO_EXPORTER_MAPPING: dict[str, Any] = {}  # name -> exporter class
AUTO_CONFIG_MAPPING: dict[str, Any] = {}  # name -> config class

# The base class each registry accepts, set when hfexport.base and hfexport.configs load.
_BASES: dict[str, type] = {}


def exporter_base(cls: type) -> type:
    """Class decorator for the base every registered exporter must subclass (``HfExporter``)."""
    _BASES["exporter"] = cls
    return cls


def config_base(cls: type) -> type:
    """Class decorator for the base every registered export config must subclass (``ExportConfigMixin``)."""
    _BASES["config"] = cls
    return cls


def _key(name: Any) -> str:
    return str(getattr(name, "value", name))


def _check_subclass(kind: str, decorator: str, name: Any, cls: Any) -> None:
    base = _BASES.get(kind)
    if base is None:  # not reachable through `import hfexport`, which loads both bases first
        raise RuntimeError(
            f"{decorator}({name!r}) was called before hfexport defined the {kind} base class; import hfexport first"
        )
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{decorator}({name!r}) needs a subclass of {base.__name__}, got {cls!r}")


def _registrar(
    kind: str, decorator_name: str, mapping: dict[str, Any], doc: str
) -> Callable[[str], Callable[[type], type]]:
    """The class decorator factory that files a checked ``kind`` subclass under an export format in ``mapping``."""

    def register(name: str) -> Callable[[type], type]:
        def decorator(cls: type) -> type:
            _check_subclass(kind, decorator_name, name, cls)
            mapping[_key(name)] = cls
            return cls

        return decorator

    register.__name__ = register.__qualname__ = decorator_name
    register.__doc__ = doc
    return register


register_exporter = _registrar(
    "exporter",
    "register_exporter",
    AUTO_EXPORTER_MAPPING,
    "Class decorator: make ``AutoHfExporter`` pick this exporter for ``export_format == name``.",
)
register_export_config = _registrar(
    "config",
    "register_export_config",
    AUTO_CONFIG_MAPPING,
    "Class decorator: make ``AutoExportConfig`` build this class for ``export_format == name``.",
)


def _unknown(kind: str, name: Any, known: Mapping[str, Any]) -> ValueError:
    return ValueError(f"unknown export_format {_key(name)!r} for {kind}; known formats: {sorted(known)}")


def _described(kind: str, name: Any) -> Any:
    """The class a backend descriptor (``hfexport.backends``) names for ``kind``, or None."""
    from .backends import BACKENDS

    described = BACKENDS.get(_key(name))
    if described is None:
        return None
    return described.exporter_class() if kind == "exporter" else described.config_class()


def config_class_for(name: Any) -> Any:
    """The config class registered for the format ``name`` (with ``register_export_config`` or in its backend's
    descriptor); ValueError listing the known formats otherwise."""
    found = AUTO_CONFIG_MAPPING.get(_key(name)) or _described("config", name)
    if found is None:
        raise _unknown("AutoExportConfig", name, AUTO_CONFIG_MAPPING)
    return found


def exporter_class_for(name: Any) -> type:
    """The exporter class registered for the format ``name`` (with ``register_exporter`` or in its backend's
    descriptor); ValueError listing the known formats otherwise."""
    found = AUTO_EXPORTER_MAPPING.get(_key(name)) or _described("exporter", name)
    if found is None:
        raise _unknown("AutoHfExporter", name, AUTO_EXPORTER_MAPPING)
    return found
