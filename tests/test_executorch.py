"""ExecutorchExporter and ExecutorchRunner: the zoo exported, saved, loaded and compared at several shapes, and the
exporter's own contract on small programs (bounds, names, alloc flags, failed saves and lowerings). The slowest
models are marked ``hfexport_slow``; exports are shared across workers (``executorch_artifacts``)."""

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
from executorch_artifacts import (  # noqa: E402,F401
    ATOL, MAX_CACHE_LEN, NEW_TOKENS, REPO, _ref, _tiny_sample, export_zoo, shared_artifact, shared_dir,
)


# -- the zoo: export, save, load, compare at the sample and other shapes ------------------------------
ZOO_MODELS = [
    "llama",
    "bert",
    "vit",
    pytest.param("qwen3_moe", marks=pytest.mark.hfexport_slow),
    pytest.param("gpt2", marks=pytest.mark.hfexport_slow),
    pytest.param("t5", marks=pytest.mark.hfexport_slow),
]


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_model_matches_eager_at_several_shapes(name, shared_dir):
    path, record = shared_artifact(shared_dir, name, lambda p: export_zoo(name, p))
    assert record["model_diff"] == [], record["model_diff"]
    entry = get(name)
    model = entry.model()
    run = runtime.load(path)
    assert isinstance(run, ExecutorchRunner)
    b, s = entry.sample
    shapes = [entry.sample, (entry.batch, entry.other_seq if entry.seq else s), (3, s + 3)]  # batch 1, 2 and 3
    for batch, seq in shapes:
        inputs = entry.sample_inputs(model, batch, seq)
        ref = _ref(model, inputs)
        got = run(inputs)
        assert list(got) == list(ref), f"output names {list(got)} != eager's {list(ref)}"
        result = compare(ref, got, "executorch", tolerance=ATOL, label=f"{name} at batch {batch}, seq {seq}")
        assert result.ok, result.message()


@pytest.mark.hfexport_slow
def test_moe_experts_swap_is_reverted_on_the_callers_model(shared_dir):
    _, record = shared_artifact(shared_dir, "qwen3_moe", lambda p: export_zoo("qwen3_moe", p))
    assert record["experts_before"] == record["experts_after"]
    assert record["mapping_restored"]
    assert record["model_diff"] == []
    assert not record["grouped_mm_in_program"]


# -- small programs for the exporter's own contract ----------------------------------------------------
class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": torch.relu(self.proj(x)), "z": x.sum(-1)}


class Counter(torch.nn.Module):
    """A module that mutates a buffer (mutable state the program owns)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.sum(0))
        return self.total * 1.0


@pytest.fixture(scope="module")
def tiny_program():
    torch.manual_seed(0)
    model = TinyMLP().eval()
    return model, ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic=True))


def test_cuda_backend_without_cuda_raises_before_any_work():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the backend='cuda' refusal only applies without it")
    with pytest.raises(RuntimeError, match="cuda"):
        # not even a model: the check must come first
        ExecutorchExporter().export(object(), {}, ExecutorchConfig(backend="cuda"))


def test_unbounded_dims_get_a_logged_bound(caplog):
    model = TinyMLP().eval()
    with caplog.at_level(logging.INFO, logger="hfexport.executorch"):
        program = ExecutorchExporter(max_batch=5, max_length=40).export(
            model, _tiny_sample(), ExecutorchConfig(dynamic=True)
        )
    text = caplog.text
    assert "max_batch=5" in text and "max_length=40" in text and "(batch)" in text
    bounds = sorted(hi for _, hi in program.hfexport_io["dynamic_dims"].values())
    assert bounds == [5, 40]
    meta = ExecutorchRunner(program).method.metadata
    assert list(meta.input_tensor_meta(0).sizes()) == [5, 40, 8]  # planned at the bounds


def test_runner_names_outputs_and_refuses_bad_inputs(tiny_program):
    model, program = tiny_program
    run = ExecutorchRunner(program)
    assert run.input_names == ["x"] and run.output_names == ["y", "z"]
    for batch, seq in ((2, 3), (1, 1), (7, 20)):
        inputs = _tiny_sample(batch, seq)
        result = compare(_ref(model, inputs), run(inputs), "executorch", tolerance=1e-5, label=f"{batch}x{seq}")
        assert result.ok, result.message()
    with pytest.raises(RunnerInputError, match="'x'.*dtype"):
        run({"x": torch.zeros(2, 3, 8, dtype=torch.float64)})
    with pytest.raises(RunnerInputError, match="'x'.*shape"):
        run({"x": torch.zeros(2, 3)})  # wrong rank
    with pytest.raises(RunnerInputError, match="'x'.*above"):
        run({"x": torch.zeros(9, 3, 8)})  # batch bound is 8


def test_explicit_dim_is_honoured():
    from torch.export import Dim

    model = TinyMLP().eval()
    shapes = {"x": {0: Dim("b", min=1, max=3), 1: Dim("s", min=2, max=6)}}
    program = ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic_shapes=shapes))
    assert sorted(map(tuple, program.hfexport_io["dynamic_dims"].values())) == [(1, 3), (2, 6)]
    run = ExecutorchRunner(program)
    assert list(run.method.metadata.input_tensor_meta(0).sizes()) == [3, 6, 8]
    result = compare(_ref(model, _tiny_sample(3, 6)), run(_tiny_sample(3, 6)), "executorch", tolerance=1e-5)
    assert result.ok, result.message()
    with pytest.raises(RunnerInputError, match="above the 3"):
        run(_tiny_sample(4, 3))


class MaskByBatch(torch.nn.Module):
    """gpt2's ``attention_mask.view(batch, -1)``: the mask's length axis is a product over the batch."""

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.view(input_ids.shape[0], -1)
        return input_ids.float().sum(-1, keepdim=True) + mask.float().cumsum(-1)


def test_a_padding_mask_longer_than_the_sample_runs(monkeypatch):
    """One batch symbol for ids and mask: with one each, the view's axis is (mask batch * length) // batch,
    which the memory planner bounds by the sample, and a batch-2 mask of 33 failed to run (error 0x1)."""
    from hfexport import shapes

    def export_and_run():
        def tokens(mask_len):
            return {"input_ids": torch.ones(2, 1, dtype=torch.long), "attention_mask": torch.ones(2, mask_len).long()}

        program = ExecutorchExporter(max_length=64).export(MaskByBatch(), tokens(8), ExecutorchConfig(dynamic=True))
        inputs = tokens(33)
        return compare(_ref(MaskByBatch(), inputs), ExecutorchRunner(program)(inputs), "executorch", tolerance=1e-5)

    assert export_and_run().ok
    monkeypatch.setattr(shapes, "tie_batch_axes", lambda spec, inputs, minimum=None: spec)  # the fault: one symbol per input
    with pytest.raises(HfExportError, match="0x1"):
        export_and_run()


@pytest.mark.parametrize("flag", ["alloc_graph_input", "alloc_graph_output", "alloc_mutable_buffers"])
def test_alloc_flags_reach_memory_planning(flag):
    model = Counter().eval()
    sample = {"x": torch.ones(2, 4)}
    program = ExecutorchExporter().export(model, sample, ExecutorchConfig(**{flag: False}))
    meta = ExecutorchRunner(program).method.metadata
    planned = {
        "alloc_graph_input": meta.input_tensor_meta(0).is_memory_planned(),
        "alloc_graph_output": meta.output_tensor_meta(0).is_memory_planned(),
        "alloc_mutable_buffers": meta.attribute_tensor_meta(0).is_memory_planned(),
    }
    assert planned == {k: k != flag for k in planned}


def test_failed_save_leaves_no_file(tmp_path, tiny_program):
    _, program = tiny_program
    target = tmp_path / "model.pte"

    class Broken:
        hfexport_io = program.hfexport_io

        def write_to_file(self, f):
            f.write(b"partial")
            raise OSError("disk full")

    with pytest.raises(HfExportError, match="disk full"):
        ExecutorchExporter.save(Broken(), str(target))
    assert list(tmp_path.iterdir()) == []
    written = ExecutorchExporter.save(program, str(target))
    assert sorted(Path(p).name for p in written) == ["model.pte", "model.pte.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte", "model.pte.json"]


def test_failed_lowering_leaves_model_and_patches_as_they_were(monkeypatch):
    from hfexport.patching import PATCHES
    from hfexport.patching.registry import resolve_owner

    model = TinyMLP().eval()
    before = snapshot_model(model)
    originals = {
        p.path: getattr(*resolve_owner(p.path))
        for b in ("executorch", "executorch_lowering")
        for p in PATCHES.get(b, [])
        if resolve_owner(p.path)
    }

    def boom(*args, **kwargs):
        raise RuntimeError("lowering exploded")

    import executorch.exir

    monkeypatch.setattr(executorch.exir, "to_edge_transform_and_lower", boom)
    with pytest.raises(HfExportError, match="lowering exploded"):
        ExecutorchExporter().export(model, _tiny_sample(), ExecutorchConfig(dynamic=True))
    assert diff_model_state(model, before) == []
    for path, original in originals.items():
        assert getattr(*resolve_owner(path)) is original, f"{path} still patched"
