"""HfExporter: the common base of every backend.

It owns what all backends share: the environment check against the pins, config
resolution (an exporter refuses a config of another backend), and
``export_for_generation`` on top of the backend's ``export``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from . import environment
from .configs import ExportConfigMixin, ExportFormat
from .quiet import quieted
from .registry import exporter_base

logger = logging.getLogger(__name__)

# Exporter classes that already logged a version drift in this process.
_DRIFT_WARNED: set[type] = set()


# What a user calls: each runs inside quiet.quiet(), so third-party noise that hfexport's own work causes stays off
# the user's terminal (and only for the duration of the call).
QUIET_ENTRY_POINTS = ("export", "export_for_generation", "save", "load")


def _quiet_entry_points(cls: type) -> None:
    for name in QUIET_ENTRY_POINTS:
        attr = cls.__dict__.get(name)
        if isinstance(attr, (classmethod, staticmethod)):
            setattr(cls, name, type(attr)(quieted(attr.__func__)))
        elif callable(attr) and not getattr(attr, "__isabstractmethod__", False):
            setattr(cls, name, quieted(attr))


@exporter_base
class HfExporter(abc.ABC):
    """Base class: subclasses set the class attributes and implement ``export``."""

    export_format: ClassVar[ExportFormat | str]
    config_class: ClassVar[type[ExportConfigMixin]]
    # export_for_generation widens a batch-1 sample to batch 2 and traces decode from a two-token step
    # before a dynamic export of the components where the backend re-traces (generation._samples_for_retrace).
    widen_batch1_components: ClassVar[bool] = False
    required_packages: ClassVar[list[str]] = ["torch"]
    min_versions: ClassVar[dict[str, str]] = {}
    # Filled from hfexport/pins by __init_subclass__ unless a subclass sets it: the pinned release of each
    # required package, and the tested window around it (hfexport/pins/window.toml). A release inside the
    # window is tested; only one outside it warns. A subclass that sets its own tested_versions has no window.
    tested_versions: ClassVar[dict[str, str]] = {}
    tested_windows: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _quiet_entry_points(cls)
        if "tested_versions" not in cls.__dict__:
            pins, window = environment.read_pins(), environment.read_window()["packages"]
            cls.tested_versions = {p: pins[p] for p in cls.required_packages if p in pins}
            cls.tested_windows = {p: tuple(window[p]["window"]) for p in cls.required_packages if p in window}
        elif "tested_windows" not in cls.__dict__:
            cls.tested_windows = {}

    def __init__(self) -> None:
        self.validate_environment()

    # -- environment ------------------------------------------------------------------
    @classmethod
    def validate_environment(cls) -> None:
        """Missing package -> ImportError with the pip command; too old -> ImportError; a release neither tested nor
        inside the tested window -> one warning that names the window (never an error)."""
        for package in cls.required_packages:
            if environment.installed_version(package) is None and not environment.is_importable(package):
                raise ImportError(
                    f"{cls.__name__} needs the package {package!r}, which is not installed. "
                    f"Install it with: {environment.install_hint(package)}"
                )
        for package, minimum in cls.min_versions.items():
            installed = environment.installed_version(package)
            if installed is not None and environment.version_tuple(installed) < environment.version_tuple(minimum):
                raise ImportError(
                    f"{cls.__name__} needs {package}>={minimum}, but {installed} is installed. "
                    f"Upgrade with: {environment.install_hint(package)}"
                )
        drift = []
        for package, tested in cls.tested_versions.items():
            installed = environment.installed_version(package)
            if installed is None or environment.strip_local(installed) == environment.strip_local(tested):
                continue
            window = cls.tested_windows.get(package)
            if window is None:
                drift.append(f"{package} {installed} (tested {tested})")
            elif (
                not environment.version_tuple(window[0])
                <= environment.version_tuple(installed)
                <= (environment.version_tuple(window[1]))
            ):
                drift.append(f"{package} {installed} (tested window {window[0]} to {window[1]})")
        if drift and cls not in _DRIFT_WARNED:
            _DRIFT_WARNED.add(cls)
            logger.warning(
                "%s was tested with other versions than installed: %s. Exports usually still work; "
                "the tested window is hfexport/pins/window.toml (docs/compatibility.md).",
                cls.__name__,
                ", ".join(drift),
            )

    # -- config ---------------------------------------------------------------------------
    def resolve_config(self, config: ExportConfigMixin | Mapping[str, Any] | None) -> ExportConfigMixin:
        """None -> default config; dict -> parsed; a config of another backend -> TypeError."""
        if config is None:
            return self.config_class()
        if isinstance(config, Mapping):
            data = dict(config)
            data.setdefault("export_format", str(self.config_class.export_format))
            config = ExportConfigMixin.from_dict(data)
        if not isinstance(config, ExportConfigMixin):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}")
        if str(config.export_format) != str(self.export_format):
            raise TypeError(
                f"{type(self).__name__} exports {str(self.export_format)!r} but got a {type(config).__name__} "
                f"for {str(config.export_format)!r}. Use the matching exporter, or "
                "AutoHfExporter.from_config(config) to pick it."
            )
        return config

    # -- export -----------------------------------------------------------------------------
    @abc.abstractmethod
    def export(self, model: Any, sample_inputs: Mapping[str, Any], config: ExportConfigMixin | None = None) -> Any:
        """Export ``model`` traced on ``sample_inputs``; returns the backend's program object."""

    # -- the trace stage (exporters built on torch.export) ------------------------------------------------
    # The exporter's trace stage (``tracing.Trace``): what its backend's trace does differently, as data.
    tracer: ClassVar[Any] = None
    # Whether the export's shape plan ties the token inputs' batch axes to one Dim (``shape_plan.ShapePlan``).
    ties_batch: bool = False

    def shape_plan(self, config: Any) -> Any:
        """The one dynamic-shape plan of an export with ``config`` (``shape_plan.ShapePlan``)."""
        from .shape_plan import ShapePlan

        return ShapePlan.of(config, tie_batch=self.ties_batch)

    def trace(self, model: Any, sample_inputs: Mapping[str, Any], config: Any, plan: Any = None) -> Any:
        """The trace stage: ``model`` on ``sample_inputs`` to an ExportedProgram (``tracing.Trace.run``), the model
        left as it was; ``plan`` defaults to the config's."""
        if self.tracer is None:
            raise NotImplementedError(f"{type(self).__name__} has no trace stage")
        import torch

        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{type(self).__name__}.export needs a torch.nn.Module, got {type(model).__name__}")
        return self.tracer.run(model, sample_inputs, config, self.shape_plan(config) if plan is None else plan)

    def export_for_generation(
        self,
        model: Any,
        inputs: Mapping[str, Any],
        config: ExportConfigMixin | Mapping[str, ExportConfigMixin] | None = None,
        generation_config: Any = None,
        multi_token_decode: bool = False,
    ) -> dict[str, Any]:
        """Split ``model`` into its generation components and export each: ``{name: program}``."""
        from .generation import export_components

        return export_components(self, model, inputs, config, generation_config, multi_token_decode)

    # -- artifacts ----------------------------------------------------------------------------
    file_suffix: ClassVar[str] = ""

    @classmethod
    def save(cls, program: Any, path: str) -> list[str]:
        """Write ``program`` to ``path`` atomically; returns every file written."""
        raise NotImplementedError(f"{cls.__name__} cannot save programs")
