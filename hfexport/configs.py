"""Export configurations: one dataclass per backend, serialisable without loss.

A config is the whole recipe of an export, so it must survive a trip through a
dict or a JSON file (a CI job writes it, another machine replays it). The
``export_format`` field says which class to rebuild; explicit ``dynamic_shapes``
built from ``torch.export.Dim`` are encoded as small tagged dicts, and anything
that cannot be encoded faithfully is refused with a message instead of being
silently dropped.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, ClassVar

from .registry import config_base, config_class_for

__all__ = [
    "ExportFormat",
    "ExportConfigMixin",
    "DynamoConfig",
    "OnnxConfig",
    "ExecutorchConfig",
    "EXECUTORCH_BACKENDS",
]


class ExportFormat(str, enum.Enum):
    """The three built-in artifact kinds; third parties may register more names."""

    EXECUTORCH = "executorch"
    DYNAMO = "dynamo"
    ONNX = "onnx"

    def __str__(self) -> str:
        return self.value


# Backends an ExecuTorch program can be lowered to. "portable" means no delegate.
EXECUTORCH_BACKENDS = ("xnnpack", "cuda", "portable")

_DIM_TAG = "__dim__"


def _encode_dim(value: Any) -> Any:
    """Encode one leaf of a dynamic_shapes spec as JSON-safe data."""
    import torch

    Dim = torch.export.Dim
    if value is None or isinstance(value, (int, bool, str)):
        return value
    for special in ("AUTO", "STATIC", "DYNAMIC"):
        if value is getattr(Dim, special):
            return {_DIM_TAG: special}
    # Named dims are classes built by torch.export.Dim(name, min=, max=).
    name = getattr(value, "__name__", None)
    if name is not None and hasattr(value, "min") and hasattr(value, "max"):
        if type(value).__name__ != "_Dim" and "Derived" in type(value).__name__:
            raise ValueError(
                f"dynamic_shapes holds the derived dimension {name!r}; derived dims (e.g. 2*batch) cannot be "
                "serialised. Keep the config in memory, or use independent Dim(name, min=, max=) per axis."
            )
        return {_DIM_TAG: "named", "name": name, "min": int(value.min), "max": int(value.max)}
    raise ValueError(
        f"dynamic_shapes holds {value!r} ({type(value).__name__}), which has no lossless dict/JSON form. "
        "Use torch.export.Dim(name, min=, max=), Dim.AUTO, Dim.STATIC, Dim.DYNAMIC, an int or None per axis."
    )


def _decode_dim(value: Any) -> Any:
    import torch

    Dim = torch.export.Dim
    kind = value[_DIM_TAG]
    if kind in ("AUTO", "STATIC", "DYNAMIC"):
        return getattr(Dim, kind)
    if kind == "named":
        return Dim(value["name"], min=value["min"], max=value["max"])
    raise ValueError(f"unknown dimension tag {kind!r} in a serialised dynamic_shapes")


def _map_spec(spec: Any, leaf_fn) -> Any:
    """Walk a dynamic_shapes spec (dicts, lists, tuples) applying leaf_fn to each axis entry."""
    if isinstance(spec, dict) and _DIM_TAG not in spec:
        return {k: _map_spec(v, leaf_fn) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_map_spec(v, leaf_fn) for v in spec)
    return leaf_fn(spec)


def _spec_to_data(spec: Any) -> Any:
    """dynamic_shapes -> JSON-safe data; tuples are tagged so they come back as tuples."""
    if isinstance(spec, dict):
        out = {}
        for k, v in spec.items():
            if not isinstance(k, (str, int)):
                raise ValueError(f"dynamic_shapes key {k!r} must be a str (input name) or an int (axis)")
            out[str(k) if isinstance(k, str) else f"__axis__{k}"] = _spec_to_data(v)
        return out
    if isinstance(spec, tuple):
        return {"__tuple__": [_spec_to_data(v) for v in spec]}
    if isinstance(spec, list):
        return [_spec_to_data(v) for v in spec]
    return _encode_dim(spec)


def _spec_from_data(data: Any) -> Any:
    """Inverse of _spec_to_data; a live spec (Dim objects, int axis keys) passes through unchanged."""
    if isinstance(data, dict) and any(not isinstance(k, str) for k in data):
        return {k: _spec_from_data(v) for k, v in data.items()}
    if isinstance(data, dict):
        if _DIM_TAG in data:
            return _decode_dim(data)
        if "__tuple__" in data:
            return tuple(_spec_from_data(v) for v in data["__tuple__"])
        out = {}
        for k, v in data.items():
            key: Any = int(k[len("__axis__") :]) if k.startswith("__axis__") else k
            out[key] = _spec_from_data(v)
        return out
    if isinstance(data, (list, tuple)):
        return type(data)(_spec_from_data(v) for v in data)
    return data


def _dims_equal(a: Any, b: Any) -> bool:
    return _spec_to_data(a) == _spec_to_data(b)


@config_base
@dataclasses.dataclass(eq=False)
class ExportConfigMixin:
    """Base of every export config: validation, dict/JSON round trips, equality by content."""

    export_format: ClassVar[ExportFormat | str]

    def __init_subclass__(cls, export_format: ExportFormat | str | None = None, **kwargs: Any) -> None:
        """``class MyConfig(ExportConfigMixin, export_format="mine")`` sets the format (a class attribute works too)."""
        super().__init_subclass__(**kwargs)
        if export_format is not None:
            cls.export_format = export_format

    # -- validation -----------------------------------------------------------------
    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field and the accepted values."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(
                    f"{type(self).__name__}.{f.name} must be True or False, got {value!r} ({type(value).__name__})"
                )

    # -- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict with ``export_format`` first; ``from_dict`` rebuilds an equal config."""
        data: dict[str, Any] = {
            "export_format": str(ExportFormat(self.export_format).value)
            if isinstance(self.export_format, ExportFormat)
            else str(self.export_format)
        }
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "dynamic_shapes" and value is not None:
                value = _spec_to_data(value)
            data[f.name] = value
        return data

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any]) -> ExportConfigMixin:
        """Rebuild a config; on the mixin itself, dispatch on ``export_format`` through the registry."""
        if not isinstance(config_dict, dict):
            raise TypeError(f"from_dict expects a dict, got {type(config_dict).__name__}")
        data = dict(config_dict)
        fmt = data.pop("export_format", None)
        target = cls
        if cls is ExportConfigMixin or not hasattr(cls, "export_format"):
            if fmt is None:
                raise ValueError("the dict has no 'export_format'; say which backend it is for (e.g. 'onnx')")
            target = config_class_for(fmt)
        elif fmt is not None and str(fmt) != str(cls.export_format):
            raise ValueError(
                f"{cls.__name__} is for export_format={str(cls.export_format)!r}, but the dict says {str(fmt)!r}; "
                "use AutoExportConfig.from_dict to pick the class from the dict"
            )
        known = {f.name for f in dataclasses.fields(target)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{target.__name__} has no field(s) {unknown}; its fields are {sorted(known)}")
        if data.get("dynamic_shapes") is not None:
            data["dynamic_shapes"] = _spec_from_data(data["dynamic_shapes"])
        return target(**data)

    @classmethod
    def from_json_string(cls, text: str) -> ExportConfigMixin:
        return cls.from_dict(json.loads(text))

    def __iter__(self):
        yield from self.to_dict().items()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_dict() == other.to_dict()  # Dims compare by name and range, not identity

    def __hash__(self) -> int:
        return hash(self.to_json_string())

    def replace(self, **changes: Any) -> ExportConfigMixin:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(eq=False)
class DynamoConfig(ExportConfigMixin, export_format=ExportFormat.DYNAMO):
    """torch.export options (the ONNX and ExecuTorch configs add theirs on top)."""

    # Every axis of every tensor and cache input symbolic (batch, sequence, cache length, image patches).
    dynamic: bool = False
    # torch.export's strict (TorchDynamo) tracing instead of the non-strict Python-level trace.
    strict: bool = False
    # Passed to torch.export.export unchanged; overrides ``dynamic``.
    dynamic_shapes: Any = None
    # Data-dependent checks become runtime asserts in the graph rather than guards that specialise it.
    prefer_deferred_runtime_asserts_over_guards: bool = False
    # Record each graph node's Python source lines (``node.meta["stack_trace"]``, which ONNX node metadata and
    # ExecuTorch's debug tools read). Off by default: capturing them is a measurable part of an export's time
    # (docs/performance.md), and export errors name the failing source line without them.
    stack_traces: bool = False
    # Weight quantization: a scheme of hfexport.quantization.SCHEMES ("int8" on every backend, "int4" for ONNX
    # Runtime, "8da4w" and "8da8w" for ExecuTorch XNNPACK), and its group size (None: the scheme's default).
    quantization: str | None = None
    quantization_group_size: int | None = None

    def validate(self) -> None:
        super().validate()
        from .quantization import check_config

        check_config(self)
        if self.dynamic_shapes is not None and not isinstance(self.dynamic_shapes, (dict, list, tuple)):
            raise ValueError(
                "dynamic_shapes must be a dict keyed by input name (or a tuple/list by position), "
                f"got {type(self.dynamic_shapes).__name__}"
            )


@dataclasses.dataclass(eq=False)
class OnnxConfig(DynamoConfig, export_format=ExportFormat.ONNX):
    """ONNX options on top of the torch.export ones."""

    output_path: str | None = None
    opset_version: int | None = None
    external_data: bool = True
    optimize: bool = True
    export_params: bool = True
    keep_initializers_as_inputs: bool = False

    def validate(self) -> None:
        if self.output_path is not None:
            import os

            if not isinstance(self.output_path, (str, os.PathLike)):
                raise ValueError(f"OnnxConfig.output_path must be a path or None, got {self.output_path!r}")
            self.output_path = os.fspath(self.output_path)
        if self.opset_version is not None:
            if isinstance(self.opset_version, bool) or not isinstance(self.opset_version, int):
                raise ValueError(f"OnnxConfig.opset_version must be an int or None, got {self.opset_version!r}")
            if self.opset_version < 18:
                raise ValueError(
                    f"OnnxConfig.opset_version={self.opset_version}: the torch.export-based ONNX exporter emits "
                    "opset 18 or newer; pass None for the newest the installed onnxscript supports"
                )
        super().validate()  # the shared checks (booleans, ...) after this backend's own


@dataclasses.dataclass(eq=False)
class ExecutorchConfig(DynamoConfig, export_format=ExportFormat.EXECUTORCH):
    """ExecuTorch options: the delegate, and the three memory-planning switches.

    The alloc_* flags set to False leave graph inputs, outputs and mutable buffers
    to the caller, which is what in-place static-cache updates need.
    """

    backend: str = "xnnpack"
    alloc_graph_input: bool = True
    alloc_graph_output: bool = True
    alloc_mutable_buffers: bool = True

    def validate(self) -> None:
        if self.backend not in EXECUTORCH_BACKENDS:
            raise ValueError(
                f"ExecutorchConfig.backend={self.backend!r} is not known; choose one of {list(EXECUTORCH_BACKENDS)}"
            )
        super().validate()  # the shared checks (booleans, ...) after this backend's own
