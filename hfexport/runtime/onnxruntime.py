"""Runner for ONNX models (.onnx files or in-memory ``torch.onnx.ONNXProgram``) on ONNX Runtime.

Graph names follow ``hfexport.outputs.flatten_named``; where an input and an output
share a name the graph calls them ``input.<name>`` / ``output.<name>``. The runner
hides those prefixes: callers pass the eager model's inputs (or their flat names)
and get outputs under their flat names. ``run_with_shared_buffers`` binds each
``input.X``/``output.X`` pair to one caller-owned tensor, so a static cache is
updated in place with no copy (what a decode loop wants).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import speedups
from ..errors import RunnerInputError
from . import dtypes
from .base import Runner
from .decode import DecodeLoop

logger = logging.getLogger(__name__)

INPUT_PREFIX = "input."
OUTPUT_PREFIX = "output."


def _torch_dtype(type_string: str) -> torch.dtype | None:
    """ONNX Runtime's ``tensor(float)``-style type -> torch dtype (None for a type torch has no dtype for)."""
    return dtypes.from_ort(type_string)


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous().numpy()


def default_session_options() -> Any:
    """ONNX Runtime's default session, with its intra-op thread pool as large as torch's.

    Both default to a thread per core. A process that shares the cores with others sets torch's count once (the
    pytest plugin does it per xdist worker); a session of ONNX Runtime's own default size would take every core
    again beside it, its threads spinning while they wait (docs/performance.md, "Threads per test worker")."""
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return options


class OrtRunner(Runner):
    """An ``onnxruntime.InferenceSession`` with hfexport's call shape (CPU unless ``providers`` says otherwise;
    ``session_options`` default: ``default_session_options()``)."""

    backend = "onnx"

    def __init__(self, model: Any, providers: Sequence[str] | None = None, session_options: Any = None) -> None:
        import onnxruntime as ort

        self.providers = list(providers) if providers else ["CPUExecutionProvider"]
        if isinstance(model, (str, Path)):
            source: Any = str(model)
            self.path: str | None = str(model)
        else:  # an ONNXProgram (or anything with .model_proto), or a ModelProto
            proto = getattr(model, "model_proto", model)
            source = proto.SerializeToString()
            self.path = None
        try:
            options = session_options if session_options is not None else default_session_options()
            self.session = ort.InferenceSession(source, sess_options=options, providers=self.providers)
        except Exception as exc:
            from ..errors import HfExportError

            raise HfExportError(
                f"ONNX Runtime could not load the model ({self.path or 'in memory'}): {type(exc).__name__}: {exc}",
                stage="load",
            ) from exc
        # get_inputs() lists the required inputs; weights kept as inputs (keep_initializers_as_inputs) are
        # overridable initializers: accepted, never required.
        overridable = self.session.get_overridable_initializers()
        self._graph_inputs = {_strip(i.name, INPUT_PREFIX): i for i in self.session.get_inputs()}
        self._optional = {_strip(i.name, INPUT_PREFIX): i for i in overridable}
        self._graph_outputs = {_strip(o.name, OUTPUT_PREFIX): o for o in self.session.get_outputs()}
        # name -> address ORT wrote each shared (cache) output to in the last run_with_shared_buffers.
        self.last_shared_writes: dict[str, int] = {}

    # -- names and shapes -------------------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return list(self._graph_inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self._graph_outputs)

    @property
    def shared_names(self) -> list[str]:
        """Flat names that are both an input and an output (``input.X``/``output.X``): bindable in place."""
        return [
            n
            for n, i in self._graph_inputs.items()
            if i.name.startswith(INPUT_PREFIX) and OUTPUT_PREFIX + n in {o.name for o in self._graph_outputs.values()}
        ]

    def expected_inputs(self) -> dict[str, tuple[tuple[Any, ...], Any]]:
        """name -> (shape, torch dtype); symbolic axes are strings (or '?' when unnamed)."""
        out = {}
        for name, info in self._graph_inputs.items():
            shape = tuple(d if isinstance(d, int) else (d if d else "?") for d in (info.shape or ()))
            out[name] = (shape, _torch_dtype(info.type))
        return out

    def check_inputs(self, flat: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # Overridable weights (keep_initializers_as_inputs) may be passed, but need not be.
        extra = {n: flat.pop(n) for n in list(flat) if n in self._optional}
        checked = super().check_inputs(flat)
        checked.update(extra)
        return checked

    # -- running ----------------------------------------------------------------------------------------
    def _graph_input_name(self, name: str) -> str:
        info = self._graph_inputs.get(name) or self._optional.get(name)
        return info.name if info is not None else name

    def run_flat(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        feed = {self._graph_input_name(n): _to_numpy(t) for n, t in flat_inputs.items()}
        try:
            results = self.session.run(None, feed)
        except Exception as exc:
            from ..errors import HfExportError

            raise HfExportError(
                f"ONNX Runtime failed to run the model: {type(exc).__name__}: {exc}", stage="run"
            ) from exc
        return {name: torch.from_numpy(np.asarray(r)) for name, r in zip(self._graph_outputs, results)}

    def run_with_shared_buffers(
        self, inputs: Mapping[str, Any], buffers: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Run once, binding ``input.X`` and ``output.X`` to the same caller-owned CPU tensor ``buffers[X]``.

        ORT then reads the cache from, and writes the updated cache into, that memory: a static-cache
        decode loop needs no copy per step. ``inputs`` holds every other input (eager kwargs or flat
        names). Returns the other outputs; the shared ones are updated in ``buffers``.
        """
        return self.bind_shared(inputs, buffers).run()

    def bind_shared(self, inputs: Mapping[str, Any], buffers: Mapping[str, torch.Tensor]) -> SharedBinding:
        """The binding ``run_with_shared_buffers`` runs, kept for more runs: every input is bound by its
        memory, so a caller that writes new values into the same tensors (a decode loop's ids, mask and
        positions) runs it again without checking and binding anything (see ``SharedBinding.key``)."""
        import onnxruntime as ort

        shared = set(self.shared_names)
        unknown = [n for n in buffers if n not in shared]
        if unknown:
            raise RunnerInputError(
                f"OrtRunner: {unknown} are not input/output pairs of this graph; shared pairs are {sorted(shared)}"
            )
        flat = self.flatten_inputs(inputs)
        flat.update(buffers)
        checked = self.check_inputs(flat)
        for name, t in buffers.items():
            if t.device.type != "cpu" or not t.is_contiguous():
                raise RunnerInputError(f"OrtRunner: shared buffer {name!r} must be a contiguous CPU tensor")
        binding = self.session.io_binding()
        keep = []  # keeps fed arrays alive as long as the binding
        in_callers_memory = True
        for name, t in checked.items():
            if name in buffers:
                continue
            array = _to_numpy(t)
            in_callers_memory &= (
                isinstance(inputs.get(name), torch.Tensor) and array.ctypes.data == inputs[name].data_ptr()
            )
            value = ort.OrtValue.ortvalue_from_numpy(array)
            keep.append(value)
            binding.bind_ortvalue_input(self._graph_input_name(name), value)
        # Plain outputs first: get_outputs() returns them in binding order.
        plain = [
            n
            for n in self._graph_outputs
            if n not in buffers or not self._graph_outputs[n].name.startswith(OUTPUT_PREFIX)
        ]
        for name in plain:
            binding.bind_output(self._graph_outputs[name].name, "cpu")
        for name, t in buffers.items():
            value = ort.OrtValue.ortvalue_from_numpy(t.numpy())  # a view of the tensor's memory on CPU
            keep.append(value)
            binding.bind_ortvalue_input(INPUT_PREFIX + name, value)
            binding.bind_ortvalue_output(OUTPUT_PREFIX + name, value)
        key = _memory_key(inputs) if in_callers_memory else None
        return SharedBinding(self, binding, keep, plain, list(buffers), key)

    # The name the decode-loop issue uses for the same operation.
    bind_cache_in_place = run_with_shared_buffers


def _memory_key(inputs: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a binding by memory depends on: each input's name, address, shape and dtype."""
    return tuple(
        (name, t.data_ptr(), tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else (name, t)
        for name, t in inputs.items()
    )


class SharedBinding:
    """One ONNX Runtime IO binding over caller-owned memory (inputs and shared cache buffers).

    ``key`` is the inputs' names, addresses, shapes and dtypes when every input was bound in the caller's own
    memory, else None: a caller may run the binding again for inputs with the same key (new values written
    into the same tensors), since the checks made when binding depend on nothing else."""

    def __init__(
        self, runner: OrtRunner, binding: Any, keep: list[Any], plain: list[str], shared: list[str], key: Any
    ) -> None:
        self.runner = runner
        self.binding = binding
        self._keep = keep
        self.plain = plain
        self.shared = shared
        self.key = key

    def run(self) -> dict[str, torch.Tensor]:
        """Run; return the plain outputs by flat name (the shared ones are written into the caller's buffers)."""
        try:
            self.runner.session.run_with_iobinding(self.binding)
        except Exception as exc:
            from ..errors import HfExportError

            raise HfExportError(
                f"ONNX Runtime failed to run the model: {type(exc).__name__}: {exc}", stage="run"
            ) from exc
        results = self.binding.get_outputs()  # in binding order: the plain outputs, then the shared ones
        n = len(self.plain)
        self.runner.last_shared_writes = {name: results[n + i].data_ptr() for i, name in enumerate(self.shared)}
        return {name: torch.from_numpy(np.asarray(results[i].numpy())) for i, name in enumerate(self.plain)}


class OrtDecodeLoop(DecodeLoop):
    """The static-cache greedy loop on ONNX Runtime, each cache input/output pair bound to one buffer.

    The cache buffers are built from the graph's own input metadata (shape and type): the batch
    axis is 1 and any other symbolic axis is the cache length, ``max_cache_len`` (required when
    the graph's cache axis is symbolic). On CPU each ``input.X``/``output.X`` pair is bound to the
    same OrtValue, so the scatter writes land in place and no cache bytes are copied per step.
    """

    backend = "onnx"

    def __init__(
        self,
        model: Any,
        max_cache_len: int | None = None,
        providers: Sequence[str] | None = None,
        session_options: Any = None,
    ) -> None:
        """``session_options``: an ``onnxruntime.SessionOptions`` for the session (threads, spinning, graph
        optimisation level), used when ``model`` is a path or proto rather than an ``OrtRunner``."""
        self.runner = (
            model
            if isinstance(model, OrtRunner)
            else OrtRunner(model, providers=providers, session_options=session_options)
        )
        expected = self.runner.expected_inputs()
        shared = self.runner.shared_names
        if not shared:
            raise RunnerInputError(
                "this ONNX graph has no input./output. cache pairs; export the decode component "
                "with a static cache (GenerationConfig(cache_implementation='static'))"
            )
        self.buffers: dict[str, torch.Tensor] = {}
        for name in shared:
            shape, dtype = expected[name]
            dims = []
            for axis, d in enumerate(shape):
                if isinstance(d, int):
                    dims.append(d)
                elif axis == 0:
                    dims.append(1)
                elif max_cache_len is None:
                    raise RunnerInputError(
                        f"cache input {name!r} has a symbolic axis {axis} ({d!r}); pass max_cache_len="
                    )
                else:
                    dims.append(max_cache_len)
            self.buffers[name] = torch.zeros(dims, dtype=dtype or torch.float32)
        lengths = [b.shape[2] for b in self.buffers.values() if b.dim() == 4]
        self.max_cache_len = max_cache_len or max(lengths)
        mask = expected.get("attention_mask")
        self.mask_dtype = mask[1] if mask and mask[1] is not None else torch.bool
        self._takes_mask = mask is not None
        self._binding: SharedBinding | None = None

    def reset(self) -> None:
        for buffer in self.buffers.values():
            buffer.zero_()

    def cache_storage(self) -> list[torch.Tensor]:
        return list(self.buffers.values())

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        return dict(self.buffers)

    def runtime_writes(self) -> dict[str, int]:
        return dict(self.runner.last_shared_writes)

    def step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "position_ids": position_ids}
        if self._takes_mask:
            inputs["attention_mask"] = attention_mask
        # A step over the same tensors as the last one (new values written into them) reuses its binding.
        if (
            self._binding is None
            or self._binding.key is None
            or self._binding.key != _memory_key(inputs)
            or not speedups.enabled()
        ):
            self._binding = self.runner.bind_shared(inputs, self.buffers)
        return self._binding.run()["logits"]
