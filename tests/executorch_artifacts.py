"""What the ExecuTorch test modules share: lowering takes 30-200 s per model on two cores, so every export is done
once per session and saved into a folder shared by all pytest-xdist workers (``shared_artifact``: a file lock, then
build-or-reuse). Tests then work on the saved ``.pte`` (+ ``.pte.json``), which also covers save and load."""

from __future__ import annotations

import dataclasses
import functools

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

pytest.importorskip("executorch")

from conformance.zoo import get  # noqa: E402
from hfexport import ExecutorchConfig, ExecutorchExporter  # noqa: E402
from hfexport.errors import HfExportError, RunnerInputError  # noqa: E402
from hfexport.tracing import Trace  # noqa: E402
from hfexport.model_state import diff_model_state, snapshot_model  # noqa: E402
from hfexport.outputs import flatten_named  # noqa: E402
from hfexport import dim_bounds  # noqa: E402
from hfexport import runtime  # noqa: E402
from hfexport.executorch.runtime import ExecutorchDecodeLoop, ExecutorchRunner  # noqa: E402
from pytest_hfexport.compare import compare  # noqa: E402

ATOL = 1e-3
REPO = Path(__file__).resolve().parents[1]
MAX_CACHE_LEN = 32
NEW_TOKENS = 16


# -- shared artifacts ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session sees (the parent of the per-worker base temp)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "hfexport_executorch"
    path.mkdir(exist_ok=True)
    return path


def shared_artifact(shared_dir: Path, name: str, build: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict]:
    """Build ``name`` once per session (under a lock), return (path, the record build returned)."""
    from filelock import FileLock

    path = shared_dir / f"{name}.pte"
    record = shared_dir / f"{name}.record.json"
    with FileLock(str(shared_dir / f"{name}.lock")):
        if not record.exists():
            data = build(path)
            record.write_text(json.dumps(data))
    return path, json.loads(record.read_text())


def export_zoo(name: str, path: Path) -> dict[str, Any]:
    """Export a zoo model with dynamic=True and save it; record what the export left on the model."""
    import time

    from transformers.integrations.moe import ExpertsInterface

    entry = get(name)
    model = entry.model()
    before = snapshot_model(model)
    experts_before = model.get_experts_implementation() if hasattr(model, "get_experts_implementation") else None
    mapping_before = dict(ExpertsInterface._global_mapping)
    start = time.perf_counter()
    program = ExecutorchExporter().export(model, entry.sample_inputs(model), ExecutorchConfig(dynamic=True))
    seconds = time.perf_counter() - start
    ExecutorchExporter.save(program, str(path))
    experts_after = model.get_experts_implementation() if hasattr(model, "get_experts_implementation") else None
    return {
        "seconds": seconds,
        "model_diff": diff_model_state(model, before),
        "experts_before": experts_before,
        "experts_after": experts_after,
        "mapping_restored": all(ExpertsInterface._global_mapping.get(k) is v for k, v in mapping_before.items()),
        "grouped_mm_in_program": any(
            "grouped_mm" in str(op)
            for op in program.exported_program().graph.nodes
            if hasattr(op, "target") and op.op == "call_function"
            for op in [op]
            if "grouped_mm" in str(op.target)
        ),
    }


def _ref(model: Any, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return flatten_named(model(**inputs))


def _tiny_sample(batch: int = 2, seq: int = 3) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"x": torch.randn(batch, seq, 8)}
