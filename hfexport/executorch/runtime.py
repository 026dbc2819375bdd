"""ExecuTorch runners: named inputs in, named outputs out, and the static-cache decode loop.

A ``.pte`` knows only positional inputs and outputs; the names come from the record
``ExecutorchExporter`` keeps on the program manager (``hfexport_io``) and writes next to a
saved program (``<name>.pte.json``). Without it, names are positional
(``input_0``..., ``output_0``...).

The Python runtime copies inputs in and outputs out on every call, and never writes
into the caller's tensors. A cache passed as a graph input therefore comes back as
outputs (mutated inputs first), and the decode loop reads it back each step. A program
that owns its cache as mutable buffers keeps it across ``execute()`` calls instead (the
attributes ``emit_mutable_buffer_names`` exposes): ``ExecutorchDecodeLoop`` uses that form
when the program has it, since it avoids the per-step copies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..errors import HfExportError, RunnerInputError
from ..patching.renames import KV_CACHE_NAMES
from ..runtime import dtypes
from ..runtime.base import Runner
from ..runtime.decode import DecodeLoop

logger = logging.getLogger(__name__)

# What ExecuTorch's thread pool prints from native code when a method with an XNNPACK delegate is first
# loaded in a process, on every machine whose /sys has no ARM CPU-id files: probe chatter, not errors.
NATIVE_PROBE_LINE = re.compile(r"^\[cpuinfo_utils\.cpp:\d+\] ")


@contextlib.contextmanager
def _native_probe_lines_dropped() -> Iterator[None]:
    """Run with file descriptor 2 captured, then write back every captured line but the CPU-probe chatter.

    Native code writes to the descriptor, not to ``sys.stderr``, so a Python-level filter cannot see it.
    Whatever else was written meanwhile (a runtime error, another thread's message) still reaches stderr.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable descriptor 2: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if not NATIVE_PROBE_LINE.match(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _load_method(program: Any, name: str) -> Any:
    with _native_probe_lines_dropped():
        return program.load_method(name)


def _dtype(info: Any) -> torch.dtype | None:
    """A method input's ExecuTorch scalar type -> torch dtype (None for a type torch has no dtype for)."""
    return dtypes.from_executorch(info)


def _load(program: Any) -> tuple[Any, dict[str, Any] | None]:
    """(runtime Program, io record) from a path, bytes or an ExecutorchProgramManager."""
    from executorch.runtime import Runtime

    runtime = Runtime.get()
    if isinstance(program, (str, Path)):
        path = Path(program)
        side = path.with_name(path.name + ".json")
        io = json.loads(side.read_text()) if side.exists() else None
        if io is None:
            logger.warning("%s has no side file %s: inputs and outputs get positional names", path.name, side.name)
        return runtime.load_program(path), io
    if isinstance(program, (bytes, bytearray)):
        return runtime.load_program(bytes(program)), None
    io = getattr(program, "hfexport_io", None)
    return runtime.load_program(program.buffer), io


def _recorded_names(io: dict[str, Any], kind: str, count: int) -> list[str]:
    """The input or output names saved next to the program, or positional names where they do not fit.

    A .pte written by another tool (or by hand) has no names file; a stale names file would mislabel
    every tensor, so a count mismatch falls back to ``input_0``/``output_0``... with a warning.
    """
    names = list(io.get(kind, []))
    if len(names) == count:
        return names
    if names:
        logger.warning(
            "the recorded %s names (%d) do not match the method's %d %s; using positional names",
            kind[:-1],
            len(names),
            count,
            kind,
        )
    return [f"{kind[:-1]}_{i}" for i in range(count)]


class ExecutorchRunner(Runner):
    """Runs the ``forward`` method of a ``.pte`` (path) or an in-memory ExecutorchProgramManager."""

    backend = "executorch"

    def __init__(self, program: Any, method: str = "forward") -> None:
        self._source = program
        self.program, io = _load(program)
        if method not in self.program.method_names:
            raise ValueError(f"the program has no method {method!r}; it has {sorted(self.program.method_names)}")
        self.method_name = method
        self.method = _load_method(self.program, method)
        meta = self.method.metadata
        self._meta = meta
        n_in, n_out = meta.num_inputs(), meta.num_outputs()
        self.io = io or {}
        self._inputs = _recorded_names(self.io, "inputs", n_in)
        self._outputs = _recorded_names(self.io, "outputs", n_out)
        # Cache tensors the program owns as mutable buffers: {flat name: attribute name}.
        self.owned: dict[str, str] = dict(self.io.get("owned_inputs", {}))

    @property
    def input_names(self) -> list[str]:
        return self._inputs + list(self.owned)

    @property
    def positional_names(self) -> list[str]:
        """The method's own inputs, in order (owned state excluded)."""
        return self._inputs

    @property
    def output_names(self) -> list[str]:
        return self._outputs + [n for n in self.owned if n not in self._outputs]

    def reload(self) -> None:
        """A freshly loaded program and method: all runtime-side state (owned buffers, the storage the runtime
        bound for unplanned inputs) back to its start. The Python runtime caches loaded methods per program,
        so reloading the method alone keeps that state."""
        self.program, _ = _load(self._source)
        self.method = _load_method(self.program, self.method_name)

    def attribute(self, name: str) -> torch.Tensor:
        """A live view of program-owned state (flat name or attribute name): writes change the program's state."""
        attr = self.owned.get(name, name)
        try:
            return self.method._method.get_attribute(attr)
        except Exception as exc:
            raise KeyError(
                f"the program has no mutable buffer {attr!r} (export with emit_mutable_buffer_names; "
                f"owned: {sorted(self.owned)})"
            ) from exc

    def expected_inputs(self) -> dict[str, tuple[tuple[Any, ...], Any]]:
        """name -> (shape, dtype); dynamic axes (per the export record) are strings like ``'<=8'``."""
        dynamic = self.io.get("input_dynamic_axes", {})
        out = {}
        for i, name in enumerate(self._inputs):
            try:
                info = self._meta.input_tensor_meta(i)
            except Exception:  # a non-tensor input (int)
                continue
            sizes = list(info.sizes())
            axes = dynamic.get(name, None)
            shape = tuple(f"<={s}" if (axes is None or a in axes) else s for a, s in enumerate(sizes))
            out[name] = (shape, _dtype(info))
        return out

    def check_inputs(self, flat: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        checked = super().check_inputs(flat)
        for name, (shape, _) in self.expected_inputs().items():
            got = checked[name]
            for axis, (want, have) in enumerate(zip(shape, got.shape)):
                if isinstance(want, str) and have > int(want[2:]):
                    raise RunnerInputError(
                        f"ExecutorchRunner: input {name!r} has size {have} on axis {axis}, above the {int(want[2:])} "
                        "the program was planned for. Export with a larger bound (Dim(max=...) or "
                        "ExecutorchExporter(max_batch=, max_length=))."
                    )
        return checked

    def run_positional(self, values: list[torch.Tensor]) -> list[torch.Tensor]:
        try:
            return list(self.method.execute([v.contiguous() for v in values]))
        except Exception as exc:
            raise HfExportError(
                f"ExecuTorch failed to run the program: {type(exc).__name__}: {exc}", stage="run"
            ) from exc

    def run_flat(self, flat_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for name in self.owned:  # a cache the program owns: load the given state into it
            with torch.no_grad():
                self.attribute(name).copy_(flat_inputs[name])
        outputs = self.run_positional([flat_inputs[n] for n in self._inputs])
        named = dict(zip(self._outputs, outputs))
        for name in self.owned:  # and hand back its new state, as a cache input's write-back would
            named.setdefault(name, self.attribute(name).clone())
        return named


class ExecutorchDecodeLoop(DecodeLoop):
    """Greedy decode over a static-cache ``decode`` program: prefill the prompt, then one token per call.

    Two program forms, told apart by the export record:

    * cache owned by the program (``ExecutorchExporter(cache_as_buffers=True)``): the cache stays inside
      the method between calls; ``reset`` zeroes it through the named attributes, ``step`` passes only
      tokens, mask and positions. No cache copy per step.
    * cache as graph inputs: the runtime copies the cache in, and returns its new values first among the
      outputs; the loop feeds them back on the next call (two cache copies per step).
    """

    backend = "executorch"

    def __init__(self, program: Any, max_cache_len: int | None = None) -> None:
        self.runner = ExecutorchRunner(program)
        names = self.runner.positional_names
        expected = self.runner.expected_inputs()
        recorded = self.runner.io.get("sample_shapes", {})
        self.owned = dict(self.runner.owned)
        self.cache_names = [n for n in names if "." in n and n.split(".", 1)[0] in KV_CACHE_NAMES]
        if not self.cache_names and not self.owned:
            raise ValueError(
                "the decode program takes no cache input; export it with a StaticCache "
                "(GenerationConfig(cache_implementation='static'), multi_token_decode=True)"
            )
        self.cache: dict[str, torch.Tensor] = {}
        lengths = []
        for name in self.owned:
            t = self.runner.attribute(name)
            if t.dim() == 4:
                lengths.append(t.shape[2])
        if self.owned and max_cache_len not in (None, *lengths):
            raise ValueError(
                f"this program owns a cache of {max(lengths)} slots; it cannot be resized "
                f"(max_cache_len={max_cache_len}). Export with that max_cache_len instead."
            )
        for name in self.cache_names:
            shape, dtype = expected[name]
            sizes = [int(str(s).lstrip("<=")) for s in shape]
            if name in recorded:
                sizes = list(recorded[name])
            if name.endswith(".keys") or name.endswith(".values"):
                planned = int(str(shape[2]).lstrip("<="))
                if max_cache_len is not None and max_cache_len > planned:
                    raise ValueError(
                        f"this program's memory was planned for at most {planned} cache slots ({name}); "
                        f"max_cache_len={max_cache_len} cannot run. Pass max_cache_len<={planned}, or export "
                        "with GenerationConfig(max_cache_len=...) as large as you need."
                    )
                if max_cache_len is not None:
                    sizes[2] = max_cache_len
                lengths.append(sizes[2])
                sizes[0] = 1
            self.cache[name] = torch.zeros(sizes, dtype=dtype or torch.float32)
        self.max_cache_len = max(lengths)
        self._takes_mask = "attention_mask" in names
        if self._takes_mask:
            self.mask_dtype = expected["attention_mask"][1] or torch.bool
        out = self.runner.output_names
        self._logits_index = out.index("logits") if "logits" in out else len(self.runner.io.get("mutated_inputs", []))
        self._returned = {name: out.index(name) for name in self.cache_names if name in out}
        self._writes: dict[str, int] = {}
        self._stepped = False

    def reset(self) -> None:
        if not self.runner.io.get("alloc", {}).get("graph_input", True):
            # Unplanned inputs: the runtime binds the storage of the tensors it was given and keeps using
            # it, so zeroing in place is not seen; fresh tensors and a fresh method start from nothing.
            self.cache = {name: torch.zeros_like(t) for name, t in self.cache.items()}
            self.runner.reload()
        else:
            for t in self.cache.values():
                t.zero_()
        for name in self.owned:
            self.runner.attribute(name).zero_()

    def cache_storage(self) -> list[torch.Tensor]:
        # Only a program-owned cache is written in place; a user-input cache comes back as outputs.
        return [self.runner.attribute(name) for name in self.owned]

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        return {**self.cache, **{name: self.runner.attribute(name) for name in self.owned}}

    def runtime_writes(self) -> dict[str, int]:
        # Where the last step wrote each cache tensor: the program's own buffer (read here, not on every step:
        # 90 attribute reads cost a 30-layer model 0.3 ms a step), or a new output it handed back.
        if not self._stepped:
            return {}
        return {**{name: self.runner.attribute(name).data_ptr() for name in self.owned}, **self._writes}

    def step(self, input_ids, attention_mask, position_ids):
        feed = {"input_ids": input_ids, "position_ids": position_ids, **self.cache}
        if self._takes_mask:
            feed["attention_mask"] = attention_mask
        outputs = self.runner.run_positional([feed[n] for n in self.runner.positional_names])
        self._stepped = True
        for name, index in self._returned.items():
            self.cache[name] = outputs[index]
            self._writes[name] = outputs[index].data_ptr()
        return outputs[self._logits_index]
