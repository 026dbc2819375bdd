"""Runners: load an exported artifact of any backend and run it with one call shape.

``load(path)`` picks the runner from the file suffix; ``runner_for(program)``
wraps an in-memory program. Every runner takes the eager model's inputs (or
their flat names) and returns flat named outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..quiet import quieted
from .base import Runner
from .dynamo import DynamoRunner

RUNNERS_BY_SUFFIX: dict[str, str] = {
    ".pt2": "hfexport.runtime.dynamo:DynamoRunner",
    ".onnx": "hfexport.runtime.onnxruntime:OrtRunner",
    ".pte": "hfexport.runtime.executorch:ExecutorchRunner",
}
RUNNERS_BY_BACKEND: dict[str, str] = {
    "dynamo": RUNNERS_BY_SUFFIX[".pt2"],
    "onnx": RUNNERS_BY_SUFFIX[".onnx"],
    "executorch": RUNNERS_BY_SUFFIX[".pte"],
}


def _import(spec: str) -> Any:  # a Runner subclass
    import importlib

    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


@quieted
def load(path: str | Path, **options: Any) -> Runner:
    suffix = Path(path).suffix
    if suffix not in RUNNERS_BY_SUFFIX:
        raise ValueError(f"no runner for {Path(path).name!r}; known artifact suffixes: {sorted(RUNNERS_BY_SUFFIX)}")
    if not Path(path).exists():
        raise FileNotFoundError(f"no artifact at {path}")
    return _import(RUNNERS_BY_SUFFIX[suffix])(str(path), **options)


@quieted
def runner_for(program: Any, backend: str, **options: Any) -> Runner:
    if backend not in RUNNERS_BY_BACKEND:
        raise ValueError(f"unknown backend {backend!r}; known: {sorted(RUNNERS_BY_BACKEND)}")
    return _import(RUNNERS_BY_BACKEND[backend])(program, **options)


__all__ = ["Runner", "DynamoRunner", "load", "runner_for", "RUNNERS_BY_SUFFIX"]
