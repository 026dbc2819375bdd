"""Runners: load an exported artifact of any backend and run it with one call shape.

``load(path)`` picks the runner of the backend that saves files with that suffix; ``runner_for(program)``
wraps an in-memory program (both read ``hfexport.backends``). Every runner takes the eager model's inputs (or
their flat names) and returns flat named outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..backends import backend as backend_named
from ..backends import backend_for_suffix
from ..quiet import quieted
from .base import Runner
from .dynamo import DynamoRunner


@quieted
def load(path: str | Path, **options: Any) -> Runner:
    """The runner of the backend that saves files with ``path``'s suffix (``hfexport.backends``), over that file."""
    found = backend_for_suffix(Path(path).suffix)
    if not Path(path).exists():
        raise FileNotFoundError(f"no artifact at {path}")
    return found.runner_class()(str(path), **options)


@quieted
def runner_for(program: Any, backend: str, **options: Any) -> Runner:
    """The runner of ``backend`` over an in-memory program."""
    return backend_named(backend).runner_class()(program, **options)


__all__ = ["Runner", "DynamoRunner", "load", "runner_for"]
