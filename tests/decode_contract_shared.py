"""What the decode-contract test modules share: the exports (once per process and key), the guide's loop per
backend and the eager references. The contract itself is in ``test_decode_contract.py``'s docstring."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import transformers

from conformance.zoo import get
from hfexport import (DynamoConfig, DynamoExporter, ExecutorchConfig, ExecutorchExporter, OnnxConfig,
                      OnnxExporter)
from hfexport.outputs import flatten_named
DECODERS = ["llama", "qwen3", "qwen2", "mistral", "phi3", "gemma3", "qwen3_moe", "mixtral", "gpt2"]
BACKENDS = ["dynamo", "onnx"]
MAX_CACHE_LEN = 48
NEW_TOKENS = 32
ATOL = 1e-4
PAD = 0
DECODE_INPUTS = {"input_ids", "attention_mask", "position_ids"}
# Dynamic-cache checks in the default tier (one per distinct mask / cache layout); the rest run with -m "".
DYNAMIC_FAST = ("llama", "gemma3", "phi3", "gpt2")
EXPORTERS = {"dynamo": (DynamoExporter, DynamoConfig), "onnx": (OnnxExporter, OnnxConfig),
             "executorch": (ExecutorchExporter, ExecutorchConfig)}


# -- exports (once per process and key) -------------------------------------------------------------------------

_EXPORTS: dict[tuple[str, str, str], Any] = {}


def exported_decode(name: str, backend: str, kind: str, directory: Path) -> tuple[Any, Any, Path]:
    """(zoo entry, model, saved decode artifact) for ``kind`` "static" or "dynamic"; failures are cached too."""
    key = (name, backend, kind)
    if key not in _EXPORTS:
        entry = get(name)
        model = entry.model()
        exporter_cls, config_cls = EXPORTERS[backend]
        generation_config = (transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
                             if kind == "static" else None)
        try:
            exporter = exporter_cls()
            program = exporter.export_for_generation(model, entry.sample_inputs(model),
                                                     config=config_cls(dynamic=True),
                                                     generation_config=generation_config,
                                                     multi_token_decode=True)["decode"]
            path = directory / f"{name}-{kind}-decode{exporter.file_suffix}"
            exporter.save(program, str(path))
            _EXPORTS[key] = (entry, model, path)
        except Exception as exc:  # noqa: BLE001 - reported by every test of the key
            _EXPORTS[key] = exc
    result = _EXPORTS[key]
    if isinstance(result, Exception):
        raise AssertionError(f"export of the {kind}-cache decode graph failed: {type(result).__name__}: "
                             f"{str(result)[:1500]}") from result
    return result


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("decode_contract")


class Checks:
    """Soft assertions: every check runs, the test fails once with all the messages."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def run(self, label: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            text = str(exc).strip().splitlines()
            head = " | ".join(text[:3])[:600]
            self.failures.append(f"{label}: {type(exc).__name__}: {head}")

    def done(self) -> None:
        if self.failures:
            pytest.fail("\n".join(self.failures), pytrace=False)


# -- the guide's loop, per backend ------------------------------------------------------------------------------

def causal_mask(positions: torch.Tensor, cache_len: int) -> torch.Tensor:
    """bool [1, 1, len(positions), cache_len]: slot j is visible from the query in slot p iff j <= p."""
    return (torch.arange(cache_len)[None, :] <= positions[:, None])[None, None]


def resized(value: torch.Tensor, batch: int) -> torch.Tensor:
    return value.new_zeros((batch, *value.shape[1:])) if value.dim() else value


class DynamoGuide:
    """``torch.export.load`` + ``module()``; the cache is a copy of the example cache, reset, resized on axis 0."""

    def __init__(self, path: Path) -> None:
        program = torch.export.load(str(path))
        self.decode = program.module()
        _, self.example = program.example_inputs
        self.input_names = set(self.example)
        self.cache: Any = None

    def mask_meta(self) -> tuple[int, torch.dtype]:
        mask = self.example.get("attention_mask")
        return (mask.dim(), mask.dtype) if isinstance(mask, torch.Tensor) else (0, None)

    def new_cache(self, batch: int) -> None:
        cache = copy.deepcopy(self.example["past_key_values"])
        cache.reset()
        for layer in cache.layers:
            for attr, value in list(vars(layer).items()):
                if isinstance(value, torch.Tensor) and value.dim():
                    setattr(layer, attr, resized(value, batch))
        self.cache = cache

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in flatten_named(self.cache, "past_key_values").items()}

    def __call__(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        with torch.no_grad():
            return self.decode(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               past_key_values=self.cache).logits


class OrtGuide:
    """ONNX Runtime with IOBinding: each ``input.X``/``output.X`` pair bound to one OrtValue over a torch tensor."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        self.ort = ort
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        self.pairs = [n[len("input."):] for n in self.inputs
                      if n.startswith("input.") and f"output.{n[len('input.'):]}" in outputs]
        self.input_names = {n for n in self.inputs if not n.startswith("input.")}
        if self.pairs:
            self.input_names.add("past_key_values")
        self.buffers: dict[str, torch.Tensor] = {}

    def mask_meta(self) -> tuple[int, Any]:
        info = self.inputs.get("attention_mask")
        return (len(info.shape), info.type) if info is not None else (0, None)

    def new_cache(self, batch: int) -> None:
        from pytest_hfexport.runtime_types import ort_dtype

        self.buffers = {}
        for name in self.pairs:
            info = self.inputs[f"input.{name}"]
            dims = [batch if axis == 0 else (d if isinstance(d, int) else MAX_CACHE_LEN)
                    for axis, d in enumerate(info.shape)]
            self.buffers[name] = torch.zeros(dims, dtype=ort_dtype(info.type))

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        return self.buffers

    def __call__(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        binding = self.session.io_binding()
        for name, value in (("input_ids", input_ids), ("attention_mask", attention_mask),
                            ("position_ids", position_ids)):
            if name in self.inputs:
                binding.bind_cpu_input(name, np.ascontiguousarray(value.numpy()))
        binding.bind_output("logits", "cpu")
        keep = []
        for name, buffer in self.buffers.items():
            value = self.ort.OrtValue.ortvalue_from_numpy(buffer.numpy())  # the tensor's own memory
            keep.append(value)
            binding.bind_ortvalue_input(f"input.{name}", value)
            binding.bind_ortvalue_output(f"output.{name}", value)
        self.session.run_with_iobinding(binding)
        return torch.from_numpy(binding.get_outputs()[0].numpy())


class ExecutorchGuide:
    """The ``.pte`` through ExecuTorch's Python runtime (positional inputs named by the side file). That runtime
    copies inputs in and returns mutated inputs as outputs, so the cache is fed back from the outputs: the
    in-place check does not apply (the C++ runtime binds caller memory, examples/cpp)."""

    in_place = False

    def __init__(self, path: Path) -> None:
        from hfexport.executorch.runtime import ExecutorchRunner

        self.runner = ExecutorchRunner(path)
        self.names = self.runner.positional_names
        self.cache_names = [n for n in self.names if n.startswith("past_key_values.")]
        self.input_names = {n for n in self.names if n not in self.cache_names} | {"past_key_values"}
        self.expected = self.runner.expected_inputs()
        self.sample = self.runner.io.get("sample_shapes", {})
        outputs = self.runner.output_names
        self.returned = {n: outputs.index(n) for n in self.cache_names if n in outputs}
        self.logits = outputs.index("logits")
        self.buffers: dict[str, torch.Tensor] = {}

    def mask_meta(self) -> tuple[int, Any]:
        shape, dtype = self.expected.get("attention_mask", ((), None))
        return len(shape), dtype

    def new_cache(self, batch: int) -> None:
        self.buffers = {}
        for name in self.cache_names:
            sizes = list(self.sample[name])
            if sizes:
                sizes[0] = batch
            self.buffers[name] = torch.zeros(sizes, dtype=self.expected[name][1] or torch.float32)

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        return self.buffers

    def __call__(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
                **self.buffers}
        outputs = self.runner.run_positional([feed[n] for n in self.names])
        for name, index in self.returned.items():
            self.buffers[name].copy_(outputs[index])
        return outputs[self.logits].clone()


GUIDES = {"dynamo": DynamoGuide, "onnx": OrtGuide, "executorch": ExecutorchGuide}


def greedy(logits: torch.Tensor, eos: int) -> torch.Tensor:
    """argmax with EOS suppressed, as ``min_new_tokens`` does in generate()."""
    scores = logits.clone()
    scores[..., eos] = float("-inf")
    return scores.argmax(-1)


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    err = (got.double() - want.double()).abs().max().item()
    assert err <= ATOL, f"{what}: max |exported - eager| = {err:.3g} > {ATOL}"


# -- eager references --------------------------------------------------------------------------------------------

def eager_generate(model, input_ids, attention_mask) -> Any:
    config = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN,
                                           do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                           output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)


def prompt_ids(model, length: int, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (1, length))
