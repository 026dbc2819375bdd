"""The decode contract, B (dynamic cache) and the mechanisms behind it; A and the whole contract are in
``test_decode_contract.py``."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from conformance.zoo import get
from hfexport import (DynamoConfig, DynamoExporter)
from hfexport.outputs import flatten_named
from decode_contract_shared import artifacts  # noqa: F401 (the fixture)
from decode_contract_shared import (
    BACKENDS,
    Checks,
    DECODERS,
    DECODE_INPUTS,
    DYNAMIC_FAST,
    MAX_CACHE_LEN,
    PAD,
    close,
    exported_decode,
    prompt_ids,
)


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
