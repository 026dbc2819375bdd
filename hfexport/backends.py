"""One descriptor per backend, registered once: what the library, the judge, the plugin and the CLI read.

A backend is its exporter and config classes, the suffix of the file it saves, the runner that loads that file
(or wraps an in-memory program), the decode loop over its static-cache decode graph, the packages it needs (and
the extra of hfexport that installs them), the float32 tolerance its runtime is measured to hold, and what it
lacks. ``register_backend`` files it under its name; ``AutoHfExporter``, ``hfexport.runtime.load`` /
``runner_for``, ``decode_loop``, ``hfexport export --format`` and the plugin's ``--hfexport-backend`` all find it
there, so a fourth backend is one registration::

    register_backend(Backend(
        name="tflite", exporter="my_pkg.tflite:TfliteExporter", config="my_pkg.tflite:TfliteConfig",
        suffix=".tflite", runner="my_pkg.tflite:TfliteRunner", packages=("torch", "ai_edge_torch"),
        tolerance=(1e-5, 1e-4)))

Classes are named as ``"module:Class"`` strings (or given as classes) and imported when first used: this module
imports nothing heavy, so the command line and the plugin read the table without importing torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Backend:
    """A backend, as every layer sees it.

    ``tolerance`` is the (atol, rtol) of float32 outputs its runtime holds against eager PyTorch, as measured; a
    judge with its own measurement of the backend uses that instead. ``lacks`` maps a capability of the judge's
    contract (``pytest_hfexport.adapters.CAPABILITIES``) to why this backend does not have it."""

    name: str
    exporter: str | type
    config: str | type
    suffix: str
    runner: str | type
    packages: tuple[str, ...] = ("torch",)
    extra: str | None = None
    decode_loop: str | type | None = None
    tolerance: tuple[float, float] = (1e-5, 1e-4)
    lacks: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"a backend's name is an identifier, got {self.name!r}")
        if not self.suffix.startswith("."):
            raise ValueError(f"backend {self.name!r}: the suffix starts with a dot, got {self.suffix!r}")

    def exporter_class(self) -> Any:
        return resolve(self.exporter)

    def config_class(self) -> Any:
        return resolve(self.config)

    def runner_class(self) -> Any:
        return resolve(self.runner)

    def decode_loop_class(self) -> Any:
        if self.decode_loop is None:
            raise ValueError(f"backend {self.name!r} has no static-cache decode loop")
        return resolve(self.decode_loop)


BACKENDS: dict[str, Backend] = {}


def resolve(spec: str | type) -> Any:
    """A ``"module:Class"`` spec, imported; a class as it is."""
    if not isinstance(spec, str):
        return spec
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def register_backend(backend: Backend, *, replace: bool = False) -> Backend:
    """File ``backend`` under its name. Its suffix must be its own: a saved file names its backend."""
    if backend.name in BACKENDS and not replace:
        raise ValueError(f"backend {backend.name!r} is registered already (replace=True to replace it)")
    owner = next((b.name for b in BACKENDS.values() if b.suffix == backend.suffix and b.name != backend.name), None)
    if owner is not None:
        raise ValueError(f"backend {backend.name!r}: the suffix {backend.suffix!r} is {owner!r}'s")
    BACKENDS[backend.name] = backend
    return backend


def unregister_backend(name: str) -> None:
    BACKENDS.pop(name, None)


def backend(name: Any) -> Backend:
    """The backend registered as ``name`` (an ``ExportFormat`` too); ValueError naming the registered ones."""
    key = str(getattr(name, "value", name))
    try:
        return BACKENDS[key]
    except KeyError:
        raise ValueError(f"unknown backend {key!r}; registered: {sorted(BACKENDS)}") from None


def backend_for_suffix(suffix: str) -> Backend:
    """The backend whose artifacts end in ``suffix``; ValueError naming the known suffixes."""
    for candidate in BACKENDS.values():
        if candidate.suffix == suffix:
            return candidate
    known = sorted(b.suffix for b in BACKENDS.values())
    raise ValueError(f"no backend saves {suffix!r} files; known artifact suffixes: {known}")


register_backend(
    Backend(
        name="dynamo",
        exporter="hfexport.dynamo:DynamoExporter",
        config="hfexport.configs:DynamoConfig",
        suffix=".pt2",
        runner="hfexport.runtime.dynamo:DynamoRunner",
        packages=("torch",),
        decode_loop="hfexport.runtime.decode:DynamoDecodeLoop",
        tolerance=(1.8e-6, 2.6e-5),
    )
)
register_backend(
    Backend(
        name="onnx",
        exporter="hfexport.onnx:OnnxExporter",
        config="hfexport.configs:OnnxConfig",
        suffix=".onnx",
        runner="hfexport.runtime.onnxruntime:OrtRunner",
        packages=("torch", "onnx", "onnxscript", "onnxruntime"),
        extra="onnx",
        decode_loop="hfexport.runtime.onnxruntime:OrtDecodeLoop",
        tolerance=(4.8e-6, 1.7e-4),
    )
)
register_backend(
    Backend(
        name="executorch",
        exporter="hfexport.executorch:ExecutorchExporter",
        config="hfexport.configs:ExecutorchConfig",
        suffix=".pte",
        runner="hfexport.executorch.runtime:ExecutorchRunner",
        packages=("torch", "executorch"),
        extra="executorch",
        decode_loop="hfexport.executorch.runtime:ExecutorchDecodeLoop",
        tolerance=(1.2e-5, 1.8e-4),
        lacks={
            "decode_loop_in_place": "the ExecuTorch Python runtime returns a mutated input as a new output "
            "(no set_output_data_ptr); the zero-copy loop is C++ (examples/cpp)",
        },
    )
)
