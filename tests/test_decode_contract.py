"""The decode contract: what an exported decode graph of every decoder-only zoo model must serve.

A. Static cache (``cache_implementation="static"``, ``multi_token_decode=True``): the saved ``decode`` graph
   is driven by the guide's loop, written out here with no help from ``hfexport.runtime``:

   * its inputs are exactly ``input_ids``, ``attention_mask`` (a 4D bool mask over the cache slots),
     ``position_ids`` and the cache;
   * ONE graph serves the prompt on an empty cache, one token per call and blocks of 3 tokens, at batch 1
     and at batch 2 with left padding (the caller resizes the example cache on axis 0 and hides each row's
     padding in the mask; a row that would be fully masked attends to its own slot);
   * greedy tokens equal eager ``generate()`` with a StaticCache, logits within 1e-4 at every step;
   * the caller's cache is written in place (Dynamo: the module writes into the tensors passed in; ONNX
     Runtime: ``input.X``/``output.X`` bound to one buffer) and holds what eager's StaticCache holds.

B. Dynamic cache (``multi_token_decode=True``, no static cache): the decode graph takes ``input_ids``
   [B, q], a 2D padding mask [B, past + q], the position ids and a DynamicCache, and serves q = 1 and 3 at
   batch 1 and 2 (left padded), with any past length (shorter than a sliding window too).

One test per model, backend and contract runs every check on one export and reports all failures at once.
Default tier: dynamo and onnx, static for every decoder, dynamic for ``DYNAMIC_FAST``; ``-m ""`` adds the
other dynamic ones and ExecuTorch (xnnpack, whose Python runtime returns the cache as outputs: the
in-place check does not apply there).
"""

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


# -- A. static cache -----------------------------------------------------------------------------------------------

def check_static_inputs(guide) -> None:
    assert guide.input_names == DECODE_INPUTS | {"past_key_values"}, (
        f"graph inputs {sorted(guide.input_names)}; the contract is {sorted(DECODE_INPUTS)} + past_key_values")
    dims, dtype = guide.mask_meta()
    assert dims == 4 and dtype in (torch.bool, "tensor(bool)"), f"attention_mask is {dims}D {dtype}, not 4D bool"


def check_static_batch1(guide, model, eos: int) -> None:
    """Prompt on an empty cache, then one token per call: eager generate()'s tokens and logits."""
    prompt = prompt_ids(model, 6, seed=11)
    eager = eager_generate(model, prompt, torch.ones_like(prompt))
    want = eager.sequences[0, prompt.shape[1]:].tolist()
    guide.new_cache(1)
    storage = {k: v.data_ptr() for k, v in guide.cache_tensors().items()}
    positions = torch.arange(prompt.shape[1])
    logits = guide(prompt, causal_mask(positions, MAX_CACHE_LEN), positions[None])
    close(logits[:, -1], eager.logits[0], "prompt logits")
    tokens = [int(greedy(logits[0, -1], eos))]
    for step, position in enumerate(range(prompt.shape[1], prompt.shape[1] + NEW_TOKENS - 1), start=1):
        ids = torch.tensor([[tokens[-1]]])
        logits = guide(ids, causal_mask(torch.tensor([position]), MAX_CACHE_LEN), torch.tensor([[position]]))
        close(logits[:, -1], eager.logits[step], f"step {step} logits")
        tokens.append(int(greedy(logits[0, -1], eos)))
    assert tokens == want, f"greedy tokens {tokens} != eager {want}"
    check_cache_in_place(guide, storage, eager.past_key_values, prompt.shape[1] + NEW_TOKENS - 1)


def check_cache_in_place(guide, storage: dict[str, int], eager_cache, filled: int) -> None:
    """The caller's cache tensors are the ones written, and hold eager's full-attention keys and values."""
    tensors = guide.cache_tensors()
    if getattr(guide, "in_place", True):
        assert {k: v.data_ptr() for k, v in tensors.items()} == storage, "the cache tensors were replaced"
    compared = 0
    for index, layer in enumerate(eager_cache.layers):
        if getattr(layer, "is_sliding", False):
            continue
        for kind in ("keys", "values"):
            got = tensors[f"past_key_values.layers.{index}.{kind}"][:, :, :filled]
            close(got, getattr(layer, kind)[:, :, :filled], f"cache layer {index} {kind} after {filled} tokens")
            compared += 1
    assert compared, "no full-attention layer to compare"


def check_static_blocks(guide, model) -> None:
    """Blocks of 3 accepted tokens (and single tokens) on top of a filled cache, teacher-forced with eager's tokens."""
    prompt = prompt_ids(model, 6, seed=12)
    eager = eager_generate(model, prompt, torch.ones_like(prompt))
    tokens = eager.sequences[0, prompt.shape[1]:]
    guide.new_cache(1)
    length = prompt.shape[1]
    positions = torch.arange(length)
    close(guide(prompt, causal_mask(positions, MAX_CACHE_LEN), positions[None])[:, -1], eager.logits[0], "prompt")
    fed = 0
    for k in itertools.cycle([3, 1]):
        if fed + k >= NEW_TOKENS:
            break
        positions = torch.arange(length + fed, length + fed + k)
        logits = guide(tokens[None, fed:fed + k], causal_mask(positions, MAX_CACHE_LEN), positions[None])
        for row in range(k):
            close(logits[:, row], eager.logits[fed + row + 1], f"block of {k} at token {fed}, row {row}")
        fed += k


def check_static_batch2(guide, model, eos: int) -> None:
    """Batch 2, the second row left-padded by 2: a 4D mask that hides each row's padding; per-row eager tokens."""
    long = prompt_ids(model, 6, seed=13)
    short = prompt_ids(model, 4, seed=14)
    ids = torch.cat([long, torch.cat([torch.full((1, 2), PAD), short], dim=1)])
    mask2d = torch.ones_like(ids)
    mask2d[1, :2] = 0
    eager = eager_generate(model, ids, mask2d)
    length = ids.shape[1]
    valid = torch.ones(2, MAX_CACHE_LEN, dtype=torch.bool)
    valid[:, :length] = mask2d.bool()
    slots = torch.arange(MAX_CACHE_LEN)

    def mask(query_slots: torch.Tensor) -> torch.Tensor:
        visible = (slots[None, :] <= query_slots[:, None])[None, None] & valid[:, None, None, :]
        own = (slots[None, :] == query_slots[:, None])[None, None]
        return visible | (own & ~visible.any(-1, keepdim=True))

    positions = (mask2d.cumsum(-1) - 1).masked_fill(mask2d == 0, 0)
    guide.new_cache(2)
    logits = guide(ids, mask(torch.arange(length)), positions)
    close(logits[:, -1], eager.logits[0], "padded prompt logits")
    tokens = [greedy(logits[:, -1], eos)]
    for step in range(1, NEW_TOKENS):
        logits = guide(tokens[-1][:, None], mask(torch.tensor([length + step - 1])), positions[:, -1:] + step)
        close(logits[:, -1], eager.logits[step], f"padded step {step} logits")
        tokens.append(greedy(logits[:, -1], eos))
    got = torch.stack(tokens, dim=1)
    want = eager.sequences[:, length:]
    for row in range(2):
        assert got[row].tolist() == want[row].tolist(), f"row {row}: {got[row].tolist()} != eager {want[row].tolist()}"


@pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("executorch", marks=pytest.mark.hfexport_slow)])
@pytest.mark.parametrize("name", DECODERS)
def test_static_decode_graph_serves_the_guide_loop(name, backend, artifacts):
    entry, model, path = exported_decode(name, backend, "static", artifacts)
    guide = GUIDES[backend](path)
    eos = model.config.eos_token_id
    checks = Checks()
    checks.run("graph inputs", lambda: check_static_inputs(guide))
    checks.run("batch 1, 1 token per call", lambda: check_static_batch1(guide, model, eos))
    checks.run("batch 1, blocks of 3 tokens", lambda: check_static_blocks(guide, model))
    checks.run("batch 2, left padded", lambda: check_static_batch2(guide, model, eos))
    checks.done()


# -- B. dynamic cache ----------------------------------------------------------------------------------------------

def padded_prompt(model, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(21 + batch * 10 + length)
    ids = torch.randint(3, model.config.vocab_size, (batch, length))
    mask = torch.ones_like(ids)
    if batch > 1:
        ids[1, :1] = PAD
        mask[1, :1] = 0
    return ids, mask


def dynamic_step(model, batch: int, past: int, q: int) -> tuple[dict[str, Any], Any]:
    """(decode kwargs on an eager DynamicCache filled with a ``past``-token prompt, eager output of ``q`` tokens;
    its cache is the eager cache after the call)."""
    ids, mask = padded_prompt(model, batch, past)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
    kwargs = {"input_ids": torch.randint(3, model.config.vocab_size, (batch, q)),
              "attention_mask": torch.cat([mask, torch.ones(batch, q, dtype=mask.dtype)], dim=1),
              "position_ids": positions[:, -1:] + 1 + torch.arange(q)[None],
              "past_key_values": cache}
    with torch.no_grad():
        want = model(**copy.deepcopy(kwargs), use_cache=True)
    return kwargs, want


class DynamoDynamic:
    """The loaded program's module, called with the eager kwargs it takes."""

    def __init__(self, path: Path) -> None:
        program = torch.export.load(str(path))
        self.module = program.module()
        self.example = program.example_inputs[1]

    def input_names(self) -> tuple[set[str], int]:
        mask = self.example.get("attention_mask")
        return set(self.example), mask.dim() if isinstance(mask, torch.Tensor) else 0

    def __call__(self, kwargs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        with torch.no_grad():
            out = self.module(**{k: v for k, v in copy.deepcopy(kwargs).items() if k in self.example})
        cache = out.past_key_values
        flat = flatten_named(cache, "past_key_values")
        for index, layer in enumerate(cache.layers):
            if isinstance(getattr(layer, "cumulative_length", None), int):
                flat[f"past_key_values.layers.{index}.cumulative_length"] = int(layer.cumulative_length)
        return out.logits, flat


class OrtDynamic:
    """An InferenceSession fed the flat names of the eager kwargs (``input.`` where a name is also an output)."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]

    def input_names(self) -> tuple[set[str], int]:
        names = {n.removeprefix("input.").split(".")[0] for n in self.inputs}
        mask = self.inputs.get("attention_mask")
        return names, len(mask.shape) if mask is not None else 0

    def __call__(self, kwargs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        feed = {}
        for key, value in kwargs.items():
            for flat, tensor in flatten_named(value, key).items():
                name = flat if flat in self.inputs else f"input.{flat}"
                if name in self.inputs:
                    feed[name] = np.ascontiguousarray(tensor.numpy())
        missing = set(self.inputs) - set(feed)
        assert not missing, f"the ONNX graph needs {sorted(missing)}, the contract gives {sorted(feed)}"
        results = dict(zip(self.outputs, self.session.run(None, feed)))
        flat = {n.removeprefix("output."): torch.from_numpy(np.asarray(v)) for n, v in results.items()}
        flat = {n: (int(v) if n.endswith("cumulative_length") and v.dim() == 0 else v) for n, v in flat.items()}
        return flat.pop("logits"), flat


class ExecutorchDynamic:
    """hfexport's ExecuTorch runner (flat names from the side file); the updated cache comes back as outputs."""

    def __init__(self, path: Path) -> None:
        from hfexport.executorch.runtime import ExecutorchRunner

        self.runner = ExecutorchRunner(path)
        self.names = {n.split(".")[0] for n in self.runner.positional_names}

    def input_names(self) -> tuple[set[str], int]:
        shape, _ = self.runner.expected_inputs().get("attention_mask", ((), None))
        return self.names, len(shape)

    def __call__(self, kwargs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        out = self.runner({k: v for k, v in copy.deepcopy(kwargs).items() if k in self.names})
        flat = {n: (int(v) if n.endswith("cumulative_length") and v.dim() == 0 else v) for n, v in out.items()
                if isinstance(v, torch.Tensor)}
        return flat.pop("logits"), flat


DYNAMIC_RUNNERS = {"dynamo": DynamoDynamic, "onnx": OrtDynamic, "executorch": ExecutorchDynamic}


def check_dynamic_inputs(runner) -> None:
    names, dims = runner.input_names()
    assert {"input_ids", "attention_mask", "past_key_values"} <= names, f"graph inputs {sorted(names)}"
    assert names <= DECODE_INPUTS | {"past_key_values", "cache_position"}, f"graph inputs {sorted(names)}"
    assert dims == 2, f"attention_mask is {dims}D, the contract is the 2D padding mask [B, past + q]"


def check_dynamic_step(runner, model, batch: int, past: int, q: int) -> None:
    """Logits, and the returned cache (keys, values and any sliding layer's token count) equal eager's."""
    kwargs, want = dynamic_step(model, batch, past, q)
    logits, cache = runner(kwargs)
    close(logits, want.logits, "logits")
    for index, layer in enumerate(want.past_key_values.layers):
        for kind in ("keys", "values"):
            name = f"past_key_values.layers.{index}.{kind}"
            assert name in cache, f"the graph returns no {name} (it returns {sorted(cache)[:6]}...)"
            close(cache[name], getattr(layer, kind), f"returned {name}")
        counter = f"past_key_values.layers.{index}.cumulative_length"
        if isinstance(getattr(layer, "cumulative_length", None), int) and counter in cache:
            assert cache[counter] == layer.cumulative_length, (
                f"returned {counter} = {cache[counter]}, eager {layer.cumulative_length}")


@pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("executorch", marks=pytest.mark.hfexport_slow)])
@pytest.mark.parametrize("name", [n if n in DYNAMIC_FAST else pytest.param(n, marks=pytest.mark.hfexport_slow)
                                  for n in DECODERS])
def test_dynamic_cache_decode_graph_serves_q_tokens(name, backend, artifacts):
    entry, model, path = exported_decode(name, backend, "dynamic", artifacts)
    runner = DYNAMIC_RUNNERS[backend](path)
    checks = Checks()
    checks.run("graph inputs", lambda: check_dynamic_inputs(runner))
    for batch, past, q in itertools.product((1, 2), (6, 2), (1, 3)):
        checks.run(f"batch {batch}, past {past}, q={q}",
                   lambda batch=batch, past=past, q=q: check_dynamic_step(runner, model, batch, past, q))
    checks.done()


# -- the mechanisms behind the contract ------------------------------------------------------------------------

def test_sliding_layer_token_count_is_not_in_the_cache_spec():
    """Eager DynamicCaches of gemma3 after 2 and after 6 prompt tokens flatten to the same spec (one decode graph
    serves both); the count comes back on unflatten from the stored length, exact before the window fills."""
    import torch.utils._pytree as pytree

    model = get("gemma3").model()
    specs, caches = [], []
    for past in (2, 6):
        cache = transformers.DynamicCache(config=model.config)
        with torch.no_grad():
            model(input_ids=prompt_ids(model, past, seed=3), past_key_values=cache, use_cache=True)
        leaves, spec = pytree.tree_flatten(cache)
        specs.append(spec)
        caches.append(pytree.tree_unflatten(leaves, spec))
    assert specs[0] == specs[1]
    assert caches[0].layers[0].cumulative_length == 2  # below the window of 4: exact


@pytest.mark.parametrize("where", ["generate", "trace"])
def test_a_failed_generation_export_leaves_every_patch_as_before(where, monkeypatch):
    """The capture-time layer mapping and the trace-time mask patches come back after a failure in either phase."""
    import transformers.cache_utils as cache_utils
    import transformers.masking_utils as masking_utils
    from hfexport import HfExportError

    entry = get("gemma3")
    model = entry.model()
    before = (cache_utils.STATIC_LAYER_TYPE_MAPPING, masking_utils._preprocess_mask_arguments,
              masking_utils._ignore_causal_mask_sdpa)
    mlp = type(model.model.layers[0].mlp)
    original = mlp.forward

    def failing(self, x):
        if where == "generate" or torch.compiler.is_exporting():
            raise RuntimeError(f"injected failure in {where}")
        return original(self, x)

    monkeypatch.setattr(mlp, "forward", failing)
    generation_config = transformers.GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)
    with pytest.raises(HfExportError, match="injected failure"):
        DynamoExporter().export_for_generation(model, entry.sample_inputs(model), config=DynamoConfig(dynamic=True),
                                               generation_config=generation_config, multi_token_decode=True)
    after = (cache_utils.STATIC_LAYER_TYPE_MAPPING, masking_utils._preprocess_mask_arguments,
             masking_utils._ignore_causal_mask_sdpa)
    assert all(a is b for a, b in zip(after, before))
    assert cache_utils.STATIC_LAYER_TYPE_MAPPING["sliding_attention"] is cache_utils.StaticSlidingWindowLayer
