"""Where an export diverges from eager: the first module whose output differs beyond tolerance.

A mismatch verdict names the output that differs; on a 30-layer model that leaves the user to bisect by hand,
per backend. The locator runs only after a mismatch. It records every module's output in eager (forward hooks,
removed after), takes the values each module computed inside the artifact (``pytest_hfexport.module_values``)
and walks the modules in the order eager finished them (a module finishes after its children): the first whose
output differs beyond the same tolerance rule as the verdict is the first divergence, and the last one before
it that matched is named too. A module whose values the artifact does not keep apart (fused, folded or
rewritten) is skipped, so the name is always the smallest module the locator could compare; where every
module it could compare matches, it says so instead of guessing.

Nothing here changes an artifact or the model: the eager run is on copies of the inputs and its hooks are
removed whatever happens; the ONNX graph is copied before outputs are added.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .compare import ToleranceSpec, compare, unobserved


@dataclass
class Divergence:
    """The locator's finding. ``module`` is None when it could not name one (``reason`` says why)."""

    backend: str
    module: str | None = None
    module_type: str = ""
    call: int = 0  # which call of the module (0 for the first) when it runs more than once
    calls: int = 1
    max_abs: float = 0.0
    max_rel: float = 0.0
    tolerance: str = ""
    last_match: str | None = None
    compared: int = 0  # modules compared
    invisible: int = 0  # modules whose values the artifact does not keep apart
    seconds: float = 0.0
    reason: str = ""

    def describe(self) -> str:
        if self.module is None:
            return f"first diverging module: not found ({self.reason})"
        call = f" (call {self.call + 1} of {self.calls})" if self.calls > 1 else ""
        last = f"; last matching module: {self.last_match}" if self.last_match else "; no module before it matches"
        return (
            f"first diverging module: {self.module}{call} ({self.module_type}), max abs error {self.max_abs:.3e}, "
            f"max rel error {self.max_rel:.3e}, tolerance {self.tolerance}{last} "
            f"[{self.compared} modules compared on {self.backend} in {self.seconds:.1f} s, "
            f"{self.invisible} not visible in the artifact]"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Record:
    """One call of one eager module: its float output tensors (a cache it returns is left to the verdict)."""

    name: str
    type_name: str
    call: int
    tensors: list[Any]
    calls: int = 1


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list, Mapping)):  # a ModelOutput is a Mapping
        items = value.values() if isinstance(value, Mapping) else value
        return [t for item in items for t in _tensors(item)]
    return []  # a cache object: its tensors are the artifact's cache outputs, compared by the verdict


def eager_module_outputs(model: Any, kwargs: Mapping[str, Any]) -> list[_Record]:
    """Every module's output tensors in the order eager finished the modules (children first), on a copy of
    ``kwargs``. The root's outputs are left out: the verdict compared them already."""
    import torch

    records: list[_Record] = []
    counts: dict[str, int] = {}
    handles = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            tensors = [t.detach().clone() for t in _tensors(output) if t.is_floating_point() and t.numel()]
            call = counts.get(name, 0)
            counts[name] = call + 1
            if tensors:
                records.append(_Record(name, type(module).__name__, call, tensors))

        return hook

    try:
        for name, module in model.named_modules():
            if name:
                handles.append(module.register_forward_hook(hook_for(name)))
        with torch.no_grad():
            model(**copy.deepcopy(dict(kwargs)))
    finally:
        for handle in handles:
            handle.remove()
    for record in records:
        record.calls = counts[record.name]
    return records


def _graph_names(graph_paths: list[str], eager_names: set[str]) -> dict[str, str]:
    """``{eager name: graph path}``: a graph traced through a wrapper module prefixes every path (``model.``),
    so a path not among eager's names is matched after dropping its leading components."""
    mapping: dict[str, str] = {}
    for path in graph_paths:
        parts = path.split(".")
        for start in range(min(len(parts), 4)):
            candidate = ".".join(parts[start:])
            if candidate in eager_names:
                mapping.setdefault(candidate, path)
                break
    return mapping


def align(
    records: list[_Record], values: Mapping[str, list[Any]], backend: str, tolerance: ToleranceSpec = None
) -> Divergence:
    """Walk eager's modules in finishing order against the artifact's module values (see the module doc)."""
    import torch

    found = Divergence(backend)
    by_name = _graph_names(list(values), {r.name for r in records})
    last_match: str | None = None
    for record in records:
        candidates = values.get(by_name.get(record.name, ""), [])
        if not candidates:
            found.invisible += 1
            continue
        worst = None
        for expected in record.tensors:
            same_shape = [c for c in candidates if tuple(c.shape) == tuple(expected.shape)]
            if not same_shape:
                same_shape = [c.reshape(expected.shape) for c in candidates if c.numel() == expected.numel()]
            if not same_shape:
                continue
            with unobserved():
                results = [
                    compare({"out": expected}, {"out": c.to(expected.dtype)}, backend, tolerance=tolerance)
                    for c in same_shape
                    if isinstance(c, torch.Tensor)
                ]
            best = min(results, key=lambda r: r.outputs["out"].ratio)
            if not best.ok and (worst is None or best.outputs["out"].ratio > worst.outputs["out"].ratio):
                worst = best
        found.compared += 1
        if worst is None:
            last_match = record.name
            continue
        diff = worst.outputs["out"]
        found.module, found.module_type, found.call = record.name, record.type_name, record.call
        found.calls = record.calls
        found.max_abs, found.max_rel, found.tolerance = diff.max_abs, diff.max_rel, str(diff.tolerance)
        found.last_match = last_match
        return found
    found.last_match = last_match
    found.reason = (
        f"every module the artifact keeps apart matches eager ({found.compared} compared, {found.invisible} not "
        "visible): the difference arises in a fused or rewritten region, in the backend's kernels, or in the "
        "model's last step"
    )
    return found


def artifact_values(
    backend: str, kwargs: Mapping[str, Any], *, artifact: str | Path | None = None, program: Any = None
) -> dict[str, list[Any]]:
    """The artifact's module values: the saved ``.pt2`` or ``.onnx`` at ``artifact``; for ExecuTorch the
    in-memory ExecuTorch program (``program``), since a ``.pte`` keeps no module names."""
    from . import module_values as mv

    if backend == "dynamo":
        if artifact is not None:
            from .exported_files import read_exported_program

            program = read_exported_program(artifact)
        return mv.exported_program_values(program, kwargs)
    if backend == "onnx":
        if artifact is None:
            raise mv.LocaliseError("the ONNX locator needs the saved .onnx file")
        return mv.onnx_module_values(artifact, kwargs)
    if backend == "executorch":
        if program is None:
            raise mv.LocaliseError(
                "a .pte keeps no module names and no ExecuTorch program was at hand; "
                "'hfexport explain MODEL ARTIFACT' exports the program again to locate it"
            )
        return mv.exported_program_values(mv.executorch_program(program), kwargs)
    raise mv.LocaliseError(f"no locator for backend {backend!r}")


@dataclass
class Artifact:
    """What the locator reads of one export: the saved file, and for ExecuTorch a way to get the in-memory
    ExecuTorch program (``program()``: kept, or exported again by the implementation under test, only on a
    mismatch)."""

    path: str | Path | None = None
    program: Callable[[], Any] | None = None


_OBSERVERS: contextvars.ContextVar[tuple[Callable[[Divergence], None], ...]] = contextvars.ContextVar(
    "hfexport_divergence_observers", default=()
)


@contextlib.contextmanager
def observing(callback: Callable[[Divergence], None]) -> Iterator[None]:
    """Call ``callback`` with every ``Divergence`` found inside the block: how a test's report row gets its
    ``first_divergence``."""
    token = _OBSERVERS.set((*_OBSERVERS.get(), callback))
    try:
        yield
    finally:
        _OBSERVERS.reset(token)


def locate(
    model: Any,
    kwargs: Mapping[str, Any],
    backend: str,
    artifact: Artifact,
    *,
    tolerance: ToleranceSpec = None,
) -> Divergence:
    """The first module of ``model`` whose output the artifact computes differently on ``kwargs`` (the eager
    call, tensors and cache objects as the verdict ran it). Never raises: a locator that cannot run says why in
    ``Divergence.reason``."""
    from .reference import RETURN_SHAPING, graph_kwargs

    start = time.perf_counter()
    try:
        call = {k: v for k, v in kwargs.items() if k not in RETURN_SHAPING}
        records = eager_module_outputs(model, call)
        wants_program = backend == "executorch" or (backend == "dynamo" and artifact.path is None)
        program = artifact.program() if wants_program and artifact.program is not None else None
        values = artifact_values(backend, copy.deepcopy(graph_kwargs(call)), artifact=artifact.path, program=program)
        found = align(records, values, backend, tolerance)
    except Exception as exc:  # the locator explains a verdict already given; it must not replace it
        found = Divergence(backend, reason=f"the locator could not run: {type(exc).__name__}: {str(exc)[:300]}")
    found.seconds = time.perf_counter() - start
    for observer in _OBSERVERS.get():
        observer(found)
    return found
