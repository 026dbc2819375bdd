"""After every export, successful or failed at any stage, the caller's world is exactly as it was.

The snapshot (``pytest_hfexport.hygiene``) is taken by value before the export and compared after: the
model (classes, instance attributes and forwards, hooks of every kind, train/eval flags, parameters,
buffers, configs), the caller's inputs (keys, identity, values, dtypes), global torch state and every
attribute of the transformers and torch modules an export could patch. Failures are injected at each
stage an implementation passes through: in a submodule's forward while tracing, right after
``torch.export.export`` returns, inside the backend's lowering (ONNX translation, ExecuTorch emission)
and inside the writer that saves the artifact (which must then leave no partial file). A failure of
``export_for_generation`` half-way through its components is injected too.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.conftest import case
from conformance.zoo import get
from pytest_hfexport.hygiene import diff, snapshot

MARK = "injected by the conformance suite"

# Where a failure is injected, per stage and backend: the (owner path, attribute) points, one count over all of
# them. Each is a point every implementation of the API must pass through (torch's own functions, the backend's own
# classes). A trace is torch.export's non-strict or strict trace function, which every way into torch.export calls:
# ``torch.export.export`` (a training-IR program) and the post-dispatch ``torch.export._trace._export`` (a program
# decomposed while it is traced) alike; the decomposition retraces of a program do not.
TRACE_POINTS = (("torch.export._trace", "_non_strict_export"), ("torch.export._trace", "_strict_export"))
INJECTION_POINTS: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "after-trace": {b: TRACE_POINTS for b in ("dynamo", "onnx", "executorch")},
    "lowering": {
        "onnx": (("torch.onnx._internal.exporter._core", "_exported_program_to_onnx_program"),),
        "executorch": (("executorch.exir.program._program.EdgeProgramManager", "to_executorch"),),
    },
    "save": {
        "dynamo": (("torch.export", "save"),),
        "onnx": (("onnx_ir", "save"),),
        "executorch": (("executorch.exir.program._program.ExecutorchProgramManager", "write_to_file"),),
    },
}


class Injected(RuntimeError):
    pass


def _owner(path: str) -> Any:
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


@contextlib.contextmanager
def inject(monkeypatch: pytest.MonkeyPatch, stage: str, backend: str, after_calls: int = 0) -> Iterator[dict]:
    """Make the stage's entry point raise (after running it, for ``after-trace``; after ``after_calls`` good calls
    otherwise); yields a record of whether it fired.

    Only inside the block: a module first imported inside it may bind the failing entry point by name
    (``from torch.export import export``, as ExecuTorch's XNNPACK passes do) and keep it after ``undo()``, so
    the replacement turns into the original once the block ends."""
    fired = {"count": 0, "fired": False, "active": True}

    def failing_version(original: Any) -> Any:
        def failing(*args: Any, **kwargs: Any) -> Any:
            if not fired["active"]:  # a reference kept past the block
                return original(*args, **kwargs)
            fired["count"] += 1
            if fired["count"] <= after_calls:
                return original(*args, **kwargs)
            if stage == "after-trace":
                original(*args, **kwargs)
            elif stage == "save":  # a writer that dies half-way: a partial file on disk
                target = next((a for a in args if isinstance(a, (str, Path))), kwargs.get("f") or kwargs.get("path"))
                if isinstance(target, (str, Path)):
                    Path(target).write_bytes(b"partial")
            fired["fired"] = True
            raise Injected(f"{MARK} ({stage})")

        return failing

    for owner_path, name in INJECTION_POINTS[stage][backend]:
        owner = _owner(owner_path)
        monkeypatch.setattr(owner, name, failing_version(getattr(owner, name)))
    try:
        yield fired
    finally:
        fired["active"] = False
        monkeypatch.undo()


def _mentions_mark(exc: BaseException | None) -> bool:
    while exc is not None:
        if MARK in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def assert_clean(before: Any, model: Any, inputs: Any, what: str) -> None:
    problems = diff(before, model, inputs)
    if Path.cwd().name != WORKDIR:
        problems.append(f"the working directory changed to {Path.cwd()}")
    else:
        problems += [f"file left in the working directory: {name}" for name in _files(Path.cwd())[:10]]
    assert not problems, f"after {what}, the caller's world changed:\n  " + "\n  ".join(problems[:30])


WORKDIR = "caller-working-directory"


@pytest.fixture(autouse=True)
def empty_working_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every export here runs from an empty working directory, which must stay empty: an export writes its
    artifact where it is told to, and no report, dump or scratch file anywhere else in the caller's tree.
    (Not through ``monkeypatch``: the failure injections undo theirs mid-test.)"""
    directory = tmp_path_factory.mktemp("cwd") / WORKDIR
    directory.mkdir()
    previous = os.getcwd()
    os.chdir(directory)
    try:
        yield directory
    finally:
        os.chdir(previous)


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


# -- successful (or naturally failing) exports ------------------------------------------------------------

HYGIENE_ENTRIES = ("llama", "qwen3_moe", "t5", "qwen2_vl")  # dense, MoE, encoder-decoder, a VLM


@pytest.mark.parametrize("entry", [case(get(n), "hygiene", id=n) for n in HYGIENE_ENTRIES])
def test_export_leaves_everything_as_it_was(entry, hfexport_implementation, hfexport_backend, tmp_path):
    adapter = hfexport_implementation
    model = entry.model()
    inputs = entry.sample_inputs(model)
    before = snapshot(model, inputs)
    exporter = adapter.exporter(hfexport_backend)
    try:
        program = adapter.export(exporter, model, inputs, adapter.config(hfexport_backend, dynamic=True))
        adapter.save(exporter, program, tmp_path, "model")
    except Exception:
        pass  # a failing export (qwen2_vl's top level on some backends) must be as clean as a successful one
    assert_clean(before, model, inputs, f"exporting {entry.name}")


@pytest.mark.parametrize("entry", [case(get(n), "hygiene", id=f"{n}-generation") for n in ("llama", "t5")])
def test_export_for_generation_leaves_everything_as_it_was(entry, hfexport_implementation, hfexport_backend):
    adapter = hfexport_implementation
    adapter.require("export_for_generation", hfexport_backend)
    model = entry.model()
    inputs = entry.sample_inputs(model)
    before = snapshot(model, inputs)
    adapter.export_for_generation(
        adapter.exporter(hfexport_backend), model, inputs, adapter.config(hfexport_backend, dynamic=True)
    )
    assert_clean(before, model, inputs, f"export_for_generation of {entry.name}")


# -- failures injected at each stage -------------------------------------------------------------------------


def _export_failing_at(stage: str, adapter: Any, backend: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Export llama with a failure injected at ``stage``, then check nothing was left behind."""
    entry = get("llama")
    model = entry.model()
    inputs = entry.sample_inputs(model)
    exporter = adapter.exporter(backend)
    config = adapter.config(backend, dynamic=True)
    before = snapshot(model, inputs)
    if stage == "save":
        program = adapter.export(exporter, model, inputs, config)
        directory = tmp_path / "artifacts"
        directory.mkdir()
        with inject(monkeypatch, stage, backend) as fired, pytest.raises(Exception) as raised:
            adapter.save(exporter, program, directory, "model")
        assert fired["fired"] and _mentions_mark(raised.value), f"the save never reached the writer: {raised.value}"
        assert _files(directory) == [], f"a failed save left files behind: {_files(directory)}"
    elif stage == "trace":

        def boom(self: Any, *args: Any, **kwargs: Any) -> Any:
            raise Injected(f"{MARK} (trace)")

        monkeypatch.setattr(type(model.model.layers[0].mlp), "forward", boom)
        with pytest.raises(Exception) as raised:
            adapter.export(exporter, model, inputs, config)
        monkeypatch.undo()
        assert _mentions_mark(raised.value), f"the export failed, but not with the injected failure: {raised.value}"
    else:
        with inject(monkeypatch, stage, backend) as fired, pytest.raises(Exception) as raised:
            adapter.export(exporter, model, inputs, config)
        assert fired["fired"] and _mentions_mark(raised.value), (
            f"the export never reached the {stage} stage's entry point, or failed otherwise: {raised.value}"
        )
    assert_clean(before, model, inputs, f"an export that failed at {stage}")


@pytest.mark.parametrize(
    "stage",
    [
        case(f"llama/{s}-failure", "hygiene", id=f"llama-{s}-failure", values=(s,))
        for s in ("trace", "after-trace", "save")
    ],
)
def test_failed_export_leaves_everything_as_it_was(
    stage, hfexport_implementation, hfexport_backend, monkeypatch, tmp_path
):
    _export_failing_at(stage, hfexport_implementation, hfexport_backend, monkeypatch, tmp_path)


@pytest.mark.hfexport_backend("onnx", "executorch")  # dynamo has no lowering after the trace
@pytest.mark.parametrize(
    "stage", [case("llama/lowering-failure", "hygiene", id="llama-lowering-failure", values=("lowering",))]
)
def test_failed_lowering_leaves_everything_as_it_was(
    stage, hfexport_implementation, hfexport_backend, monkeypatch, tmp_path
):
    _export_failing_at(stage, hfexport_implementation, hfexport_backend, monkeypatch, tmp_path)


@pytest.mark.parametrize("entry", [case(get("llama"), "hygiene", id="llama-generation-failure")])
def test_failed_export_for_generation_leaves_everything_as_it_was(
    entry, hfexport_implementation, hfexport_backend, monkeypatch
):
    adapter = hfexport_implementation
    adapter.require("export_for_generation", hfexport_backend)
    model = entry.model()
    inputs = entry.sample_inputs(model)
    exporter = adapter.exporter(hfexport_backend)
    before = snapshot(model, inputs)
    with (
        inject(monkeypatch, "after-trace", hfexport_backend, after_calls=1) as fired,
        pytest.raises(Exception) as raised,
    ):
        adapter.export_for_generation(exporter, model, inputs, adapter.config(hfexport_backend, dynamic=True))
    assert fired["fired"] and _mentions_mark(raised.value), f"the second component's trace never failed: {raised.value}"
    assert_clean(before, model, inputs, "an export_for_generation that failed at its second component")
