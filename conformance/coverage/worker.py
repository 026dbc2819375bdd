"""The worker process: build one architecture, then measure its cells one backend at a time.

It reports through a file of JSON lines (``build_start``, ``built`` or ``not_buildable``, then per
backend ``start`` and ``cell``), written and flushed as each step happens, so the parent knows which
cell was running when a worker hangs or dies in native code, keeps every cell finished before it,
and records only that one as ``timeout`` or ``crash``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from .enumerate import Architecture
from .quiet import redirect_output


class Events:
    """Append-only JSON lines, flushed per event."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the worker's lifetime)

    def emit(self, event: str, **fields: Any) -> None:
        self.file.write(json.dumps({"event": event, "t": time.time(), **fields}, default=str) + "\n")
        self.file.flush()


def run_task(task: dict[str, Any], events_path: str, log_path: str) -> None:
    """Entry point of a worker (``task``: impl, arch, backends, generation)."""
    redirect_output(log_path)
    events = Events(events_path)
    import torch

    torch.set_num_threads(1)
    from pytest_hfexport.adapters import resolve

    from .build import NotBuildable, build
    from .cells import run_cell

    arch = Architecture.from_dict(task["arch"])
    adapter = resolve(task["impl"])
    events.emit("build_start")
    started = time.perf_counter()
    try:
        built = build(arch)
    except NotBuildable as exc:
        events.emit("not_buildable", stage=exc.stage, reason=exc.reason, seconds=time.perf_counter() - started)
        return
    events.emit("built", info=built.info(), seconds=time.perf_counter() - started)
    workdir = Path(tempfile.mkdtemp(prefix=f"coverage-{arch.name}-", dir=task.get("tmpdir")))
    try:
        for backend in task["backends"]:
            events.emit("start", backend=backend)
            began = time.perf_counter()
            try:
                result = run_cell(adapter, built, backend, workdir, generation=task.get("generation", True))
            except Exception as exc:  # a bug outside the checks' own stages: still one failed cell
                from .build import describe

                result = {"status": "fail", "stage": "harness", "message": describe(exc), "checks": {}}
            events.emit("cell", backend=backend, result=result, seconds=time.perf_counter() - began)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
