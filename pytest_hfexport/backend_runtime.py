"""A saved artifact run by its backend's own runtime, not by the implementation's runner.

An implementation's runner is code under test: one that pads, slices, re-traces or falls back to the eager
model when its artifact refuses an input makes a static or wrong artifact look right. The judge therefore
also runs the backend file itself (``Adapter.raw_artifact``) the plain way a deployment would:

* ``.pt2``: ``torch.export.load(path).module()`` called with the eager keyword arguments;
* ``.onnx``: an ONNX Runtime session fed by graph input name (``name`` or ``input.name``), outputs named by
  the graph (an ``output.`` prefix dropped);
* ``.pte``: the ExecuTorch Python runtime's ``forward``, the flat tensor arguments in the caller's order; its
  outputs carry no names and come back as a list, in order.

Each file is loaded once (``backend_runner``) and then run on any number of calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .exported_files import read_exported_program
from .naming import flat_named
from .worker_threads import ort_session_options

INPUT_PREFIX, OUTPUT_PREFIX = "input.", "output."


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


def _dynamo(path: Path) -> Callable[..., dict[str, Any]]:
    import torch

    module = read_exported_program(path).module()

    def run(**kwargs: Any) -> dict[str, Any]:
        with torch.no_grad():
            return flat_named(module(**kwargs))

    return run


def _onnx(path: Path) -> Callable[..., dict[str, Any]]:
    import numpy as np
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(path), sess_options=ort_session_options(), providers=["CPUExecutionProvider"])
    graph_inputs = {_strip(i.name, INPUT_PREFIX): i.name for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]

    def run(**kwargs: Any) -> dict[str, Any]:
        flat = flat_named(kwargs)
        feed = {graph_inputs[n]: np.ascontiguousarray(t.numpy()) for n, t in flat.items() if n in graph_inputs}
        unfed = sorted(set(graph_inputs.values()) - set(feed))
        if unfed:
            raise AssertionError(
                f"the ONNX graph needs inputs the eager call has no tensor for: {unfed} (the call has {sorted(flat)})"
            )
        results = session.run(None, feed)
        return {_strip(n, OUTPUT_PREFIX): torch.from_numpy(np.asarray(r)) for n, r in zip(outputs, results)}

    return run


def _executorch(path: Path) -> Callable[..., list[Any]]:
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(Path(path)).load_method("forward")

    def run(**kwargs: Any) -> list[Any]:
        return list(method.execute([t.contiguous() for t in flat_named(kwargs).values()]))

    return run


def backend_runner(path: Path, backend: str) -> Callable[..., dict[str, Any] | list[Any]]:
    """``run(**eager_kwargs)`` over the backend file at ``path``: ``{flat name: tensor}``, or the outputs in order
    where the format names none (ExecuTorch)."""
    if backend == "dynamo":
        return _dynamo(path)
    if backend == "onnx":
        return _onnx(path)
    if backend == "executorch":
        return _executorch(path)
    raise ValueError(f"no backend runtime for {backend!r}; backends: dynamo, onnx, executorch")
