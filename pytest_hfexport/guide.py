"""The guide's static-cache decode loop, written by the judge against each backend's own runtime.

One graph serves the whole generation: an empty fixed-length cache, the prompt in one
call, then one (or k) tokens per call. Every call passes exactly ``input_ids``, a bool
``attention_mask`` over the cache slots ``[batch, 1, query, max_cache_len]``,
``position_ids`` and the cache; where a token lands is tracked by the cache itself.

* ``.pt2``: ``torch.export.load(path).module()`` called with those keywords and a
  ``StaticCache`` rebuilt from the program's own example inputs (reset; resized on the
  batch axis for another batch); torch writes the cache in place.
* ``.onnx``: an ONNX Runtime session; every ``input.<name>``/``output.<name>`` pair is bound,
  by pointer, to one caller-owned buffer shaped from the graph's own input metadata (axis 0
  the batch, any other symbolic axis the cache length), the inputs by name.
* ``.pte``: the ExecuTorch Python runtime with the guide's positional layout
  ``[input_ids, attention_mask, position_ids, cache...]``; the Python runtime hands a
  mutated input back as a new output (the in-place path is C++), so the session reads the
  cache back from the outputs, as the guide says a Python caller must.

Each session reports the cache tensors the caller holds after a step and where the
runtime wrote each of them (from the runtime's own objects: the cache the torch module
mutated, the IOBinding's outputs, the method's outputs).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .exported_files import read_exported_program
from .naming import cache_entry, flat_named, map_tensors
from .worker_threads import ort_session_options


class GuideError(AssertionError):
    """The artifact cannot be driven the way the guide writes the loop."""


def _zeroed_for_batch(cache: Any, batch: int) -> Any:
    """A copy of an example cache, emptied, with ``batch`` rows (tensors of rank >= 2 resized on axis 0)."""
    import torch

    out = copy.deepcopy(cache)

    def resize(name: str, t: Any) -> Any:
        shape = list(t.shape)
        if t.dim() >= 2:
            shape[0] = batch
        return torch.zeros(shape, dtype=t.dtype)

    map_tensors(out, resize)
    for layer in getattr(out, "layers", []):
        for attr in ("cumulative_length_int", "batch_size"):
            if isinstance(getattr(layer, attr, None), int) and not isinstance(getattr(layer, attr), bool):
                setattr(layer, attr, 0 if attr != "batch_size" else batch)
    return out


class DynamoGuide:
    """``torch.export.load(...).module()``: the StaticCache passed in is written in place."""

    in_place = True

    def __init__(self, path: Path, batch: int = 1) -> None:
        program = read_exported_program(path)
        self.module = program.module()
        # The cache keyword is the model's own (past_key_values, or cache from transformers 5.25).
        name, example = cache_entry((program.example_inputs or ((), {}))[1])
        if name is None:
            raise GuideError(
                f"the program's example inputs hold no cache to rebuild (it takes "
                f"{sorted((program.example_inputs or ((), {}))[1])})"
            )
        self.cache_arg: str = name
        self.cache = _zeroed_for_batch(example, batch)
        lengths = [t.shape[2] for n, t in flat_named(self.cache).items() if t.dim() == 4]
        self.max_cache_len = max(lengths) if lengths else 0
        self._writes: dict[str, int] = {}

    def step(self, input_ids: Any, attention_mask: Any, position_ids: Any) -> Any:
        import torch

        with torch.no_grad():
            out = self.module(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                **{self.cache_arg: self.cache},
            )
        returned = out.get(self.cache_arg) if hasattr(out, "get") else getattr(out, self.cache_arg, None)
        self._writes = (
            {n: t.data_ptr() for n, t in flat_named(returned, self.cache_arg).items()} if returned is not None else {}
        )
        return out["logits"] if hasattr(out, "__getitem__") else out.logits

    def cache_tensors(self) -> dict[str, Any]:
        return flat_named(self.cache, self.cache_arg)

    def runtime_writes(self) -> dict[str, int]:
        return dict(self._writes)


class OnnxGuide:
    """ONNX Runtime with each cache ``input.X``/``output.X`` pair bound by pointer to one caller-owned buffer."""

    in_place = True

    def __init__(self, path: Path, max_cache_len: int, batch: int = 1) -> None:
        import onnxruntime as ort
        import torch

        from .runtime_types import ort_dtype

        self.session = ort.InferenceSession(
            str(path), sess_options=ort_session_options(), providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.max_cache_len = max_cache_len
        self.cache: dict[str, Any] = {}
        for name, info in self.inputs.items():
            if not name.startswith("input."):
                continue
            dims = [
                batch if axis == 0 and not isinstance(d, int) else d if isinstance(d, int) else max_cache_len
                for axis, d in enumerate(info.shape)
            ]
            self.cache[name[len("input.") :]] = torch.zeros(dims, dtype=ort_dtype(info.type))
        unpaired = sorted(n for n in self.cache if f"output.{n}" not in self.outputs)
        if not self.cache or unpaired:
            raise GuideError(
                "the graph exposes no input./output. cache pairs to bind to one buffer"
                + (f" (unpaired: {unpaired})" if unpaired else f"; its inputs: {sorted(self.inputs)}")
            )
        self._writes: dict[str, int] = {}

    def step(self, input_ids: Any, attention_mask: Any, position_ids: Any) -> Any:
        import numpy as np
        import onnxruntime as ort
        import torch

        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        lacking = [n for n in feed if n not in self.inputs]
        if lacking:
            raise GuideError(f"the decode graph takes no {lacking}: its inputs are {sorted(self.inputs)}")
        binding = self.session.io_binding()
        keep = []
        for name, tensor in feed.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(tensor.numpy()))
            keep.append(value)
            binding.bind_ortvalue_input(name, value)
        for name, buffer in self.cache.items():
            binding.bind_input(f"input.{name}", "cpu", 0, buffer.numpy().dtype, list(buffer.shape), buffer.data_ptr())
        for name in self.outputs:  # in the graph's order: get_outputs() answers in binding order
            if name.startswith("output."):
                buffer = self.cache[name[len("output.") :]]
                binding.bind_output(name, "cpu", 0, buffer.numpy().dtype, list(buffer.shape), buffer.data_ptr())
            else:
                binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        values = dict(zip(self.outputs, binding.get_outputs()))
        self._writes = {n[len("output.") :]: v.data_ptr() for n, v in values.items() if n.startswith("output.")}
        return torch.from_numpy(np.asarray(values["logits"].numpy()))

    def cache_tensors(self) -> dict[str, Any]:
        return dict(self.cache)

    def runtime_writes(self) -> dict[str, int]:
        return dict(self._writes)


class ExecutorchGuide:
    """The ExecuTorch Python runtime, positional ``[input_ids, attention_mask, position_ids, cache...]``; the
    mutated cache comes back as the first outputs and is fed to the next call."""

    in_place = False
    named_cache = False  # positional: the cache tensors have no names to match eager's by

    def __init__(self, path: Path, max_cache_len: int, batch: int = 1) -> None:
        import torch
        from executorch.runtime import Runtime

        from .runtime_types import executorch_dtype as dtype_of

        self.method = Runtime.get().load_program(Path(path)).load_method("forward")
        meta = self.method.metadata
        count = meta.num_inputs()
        if count < 4:
            raise GuideError(
                f"the decode method takes {count} inputs; the guide's layout is [input_ids, "
                "attention_mask, position_ids, cache...]"
            )
        kinds = [(dtype_of(meta.input_tensor_meta(i)), len(meta.input_tensor_meta(i).sizes())) for i in range(3)]
        if kinds != [(torch.int64, 2), (torch.bool, 4), (torch.int64, 2)]:
            raise GuideError(
                f"the decode method's first inputs are {kinds} (dtype, rank); the guide's layout is "
                "[input_ids int64 2D, attention_mask bool 4D, position_ids int64 2D, cache...]"
            )
        self.cache = []
        for i in range(3, count):
            info = meta.input_tensor_meta(i)
            sizes = list(info.sizes())
            if len(sizes) >= 2:
                sizes[0] = batch
            self.cache.append(torch.zeros(sizes, dtype=dtype_of(info)))
        self.max_cache_len = max_cache_len
        self._writes: dict[str, int] = {}

    def step(self, input_ids: Any, attention_mask: Any, position_ids: Any) -> Any:
        # The Python runtime takes contiguous (or channels-last) tensors only ("Input 0 for method forward should
        # be contiguous or channels-last"), whatever the program; a block of tokens sliced from a batch is a view.
        feed = [t.contiguous() for t in (input_ids, attention_mask, position_ids)]
        outputs = list(self.method.execute([*feed, *self.cache]))
        n = len(self.cache)
        if len(outputs) <= n:
            raise GuideError(f"the decode method returned {len(outputs)} outputs for {n} cache inputs")
        self.cache = [t.clone() for t in outputs[:n]]
        self._writes = {f"cache.{i}": t.data_ptr() for i, t in enumerate(outputs[:n])}
        logits = [t for t in outputs[n:] if t.dim() == 3 and t.is_floating_point()]
        if not logits:
            raise GuideError("the decode method returned no [batch, query, vocab] logits")
        return logits[0]

    def cache_tensors(self) -> dict[str, Any]:
        return {f"cache.{i}": t for i, t in enumerate(self.cache)}

    def runtime_writes(self) -> dict[str, int]:
        return dict(self._writes)


def open_guide(path: Path, backend: str, max_cache_len: int, batch: int = 1) -> Any:
    """The guide's session over a saved decode artifact of ``backend``."""
    if backend == "dynamo":
        session: Any = DynamoGuide(path, batch)
        if session.max_cache_len != max_cache_len:
            raise GuideError(
                f"the program's example cache holds {session.max_cache_len} slots, the export asked for "
                f"max_cache_len={max_cache_len}"
            )
        return session
    if backend == "onnx":
        return OnnxGuide(path, max_cache_len, batch)
    if backend == "executorch":
        return ExecutorchGuide(path, max_cache_len, batch)
    raise ValueError(f"no guide loop for backend {backend!r}")
